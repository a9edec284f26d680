//! A sandbox's writable layer written to a layer file, hashed on the way
//! (the tar itself is `burrow_layer`'s, shared with the guest agent).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub(crate) use burrow_layer::{write_layer, LayerStats, Owners};

/// A layer file written: what is in it, its digest and size.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) stats: LayerStats,
    pub(crate) digest: crate::engine::image::digest::Digest,
    pub(crate) size: u64,
}

/// Writes the layer of `upper` to the new file `out` (created 0600,
/// synced), off the async runtime, hashing it on the way.
pub(crate) async fn write_layer_file(
    upper: PathBuf,
    owners: Owners,
    out: PathBuf,
) -> crate::error::Result<Written> {
    tokio::task::spawn_blocking(move || {
        write_layer_file_blocking(&upper, owners, &out)
            .map_err(|e| crate::error::Error::io("writing the snapshot layer", Some(&out), e))
    })
    .await
    .map_err(|e| {
        crate::error::Error::io(
            "writing the snapshot layer",
            None,
            io::Error::other(e.to_string()),
        )
    })?
}

/// [`write_layer_file`], on the calling thread.
pub(crate) fn write_layer_file_blocking(
    upper: &Path,
    owners: Owners,
    out: &Path,
) -> io::Result<Written> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)?;
    let mut writer = FaultAfter::new(crate::engine::image::digest::HashingWriter::new(
        io::BufWriter::with_capacity(1 << 20, file),
    ));
    use crate::engine::fault::{hold_blocking, Fault, LAYER_BAIT};
    let mut listed = |rel: &Path| {
        if rel.file_name().is_some_and(|n| n == LAYER_BAIT) {
            hold_blocking(Fault::LayerWalkListed);
        }
    };
    let stats = burrow_layer::write_layer_watched(upper, owners, &mut writer, &mut listed)?;
    writer.flush()?;
    let (digest, size, buf) = writer.inner.finish();
    buf.into_inner()
        .map_err(io::IntoInnerError::into_error)?
        .sync_all()?;
    Ok(Written {
        stats,
        digest,
        size,
    })
}

/// Passes writes through; with the `snapshot.mid_layer` fault point set,
/// hangs once 64 KiB have gone through, flushed (a crash test's window).
pub(crate) struct FaultAfter<W: Write> {
    inner: W,
    written: u64,
}

impl<W: Write> FaultAfter<W> {
    pub(crate) fn new(inner: W) -> Self {
        FaultAfter { inner, written: 0 }
    }
}

impl<W: Write> Write for FaultAfter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let before = self.written;
        self.written += n as u64;
        if before < 64 << 10 && self.written >= 64 << 10 {
            let fault = crate::engine::fault::Fault::SnapshotMidLayer;
            if crate::engine::fault::enabled(fault) {
                self.inner.flush()?;
                crate::engine::fault::point(fault);
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
