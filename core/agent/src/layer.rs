//! `WriteLayer`: a VM's own writable layer (the overlay upper on its data
//! disk) streamed to the host as an OCI layer tar.
//!
//! After the switch into the overlay root the data disk is out of every
//! path's reach, so the agent keeps a descriptor of the upper directory,
//! opened when the disk is mounted (by a template of first starts, before
//! its snapshot: every guest restored from it has the descriptor too), and
//! walks it through `/proc/self/fd`.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;

use burrow_protocol::{GuestError, GuestErrorCode, Response};

use crate::agent::{cancelled, Ctx};

static UPPER: OnceLock<File> = OnceLock::new();

/// Keeps the overlay's upper directory at `upper` reachable (a VM's, when
/// its data disk is mounted).
pub fn remember_upper(upper: &Path) -> std::io::Result<()> {
    let dir = File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(upper)?;
    let _ = UPPER.set(dir);
    Ok(())
}

/// Streams the upper directory as a layer in `Stdout` frames.
pub fn write(ctx: &Ctx) -> Result<Response, GuestError> {
    let Some(upper) = UPPER.get() else {
        return Err(GuestError::new(
            GuestErrorCode::Unsupported,
            "this guest's writable layer is not its own (a container's is written by the host)",
        ));
    };
    let root = format!("/proc/self/fd/{}", upper.as_raw_fd());
    let mut out = crate::archive::ChunkWriter::new(ctx);
    let written = burrow_layer::write_layer(
        Path::new(&root),
        burrow_layer::Owners { shift: 0 },
        &mut out,
    )
    .and_then(|_| out.flush());
    if out.cancelled() {
        return Err(cancelled());
    }
    written.map_err(|e| GuestError::from_io(&e, "writing the writable layer"))?;
    Ok(Response::Done)
}
