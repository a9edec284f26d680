//! An overlayfs upper directory written as an OCI layer (an uncompressed
//! tar): what the sandbox changed over its image.
//!
//! overlayfs marks a deleted lower file with a whiteout (a character device
//! 0:0) and a directory that hides the whole lower one with the `opaque`
//! extended attribute; OCI layers say the same with `.wh.NAME` and
//! `.wh..wh..opq` entries, which is what is written for them. Owners are
//! written as the guest sees them: the host ids of a sandbox's user
//! namespace (`base..base+65536`) less `base`. Entries come in name order,
//! so the same tree always gives the same layer (and digest).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::MAP_SIZE;

/// The ids a sandbox's writable layer is owned by on the host: `shift` is
/// the host id of guest root (0 where the writer runs in the sandbox's own
/// user namespace, as a rootless supervisor does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owners {
    /// The host id of the guest's root.
    pub shift: u32,
}

impl Owners {
    fn guest(self, host: u32) -> u64 {
        // An id outside the sandbox's range (a file the host put there)
        // is shown as the guest's root, which is what the guest sees of it.
        u64::from(
            host.checked_sub(self.shift)
                .filter(|id| *id < MAP_SIZE)
                .unwrap_or(0),
        )
    }
}

pub(crate) const WHITEOUT_PREFIX: &str = ".wh.";
pub(crate) const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// overlayfs' opaque-directory attribute, as root's overlay and a user
/// namespace's (`userxattr`) overlay name it.
const OPAQUE_XATTRS: [&str; 2] = ["trusted.overlay.opaque", "user.overlay.opaque"];

/// What a written layer holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LayerStats {
    /// Entries written (whiteouts included).
    pub entries: u64,
    /// Bytes of regular-file content.
    pub content_bytes: u64,
}

/// Writes the tree under `upper` as a layer to `out`. A missing `upper`
/// (a sandbox never started) is an empty layer.
pub fn write_layer(upper: &Path, owners: Owners, out: impl Write) -> io::Result<LayerStats> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut walk = Walk {
        builder,
        owners,
        links: HashMap::new(),
        stats: LayerStats::default(),
    };
    // The top directory may be a symlink to one (an image named by a link
    // under `images/named`); nothing below it is followed.
    match fs::metadata(upper) {
        Ok(m) if m.is_dir() => walk.dir(upper, Path::new(""))?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", upper.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let stats = walk.stats;
    walk.builder.into_inner()?.flush()?;
    Ok(stats)
}

struct Walk<W: Write> {
    builder: tar::Builder<W>,
    owners: Owners,
    /// Files with more than one link already written: (dev, ino) -> path.
    links: HashMap<(u64, u64), PathBuf>,
    stats: LayerStats,
}

impl<W: Write> Walk<W> {
    /// Writes the entries of directory `dir` (at `rel` in the layer).
    fn dir(&mut self, dir: &Path, rel: &Path) -> io::Result<()> {
        let mut names: Vec<_> = fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let rel = rel.join(&name);
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                // Gone since the listing (a sandbox that is not frozen).
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            self.entry(&path, &rel, &meta)?;
        }
        Ok(())
    }

    fn header(&self, meta: &fs::Metadata, kind: tar::EntryType) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(meta.mode() & 0o7777);
        h.set_uid(self.owners.guest(meta.uid()));
        h.set_gid(self.owners.guest(meta.gid()));
        h.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
        h.set_size(0);
        h
    }

    fn empty(&mut self, rel: &Path) -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(0);
        self.builder.append_data(&mut h, rel, io::empty())?;
        self.stats.entries += 1;
        Ok(())
    }

    fn entry(&mut self, path: &Path, rel: &Path, meta: &fs::Metadata) -> io::Result<()> {
        let ft = meta.file_type();
        if ft.is_char_device() && meta.rdev() == 0 {
            let name = rel.file_name().unwrap_or_default().to_string_lossy();
            let whiteout = rel.with_file_name(format!("{WHITEOUT_PREFIX}{name}"));
            return self.empty(&whiteout);
        }
        if ft.is_dir() {
            let mut h = self.header(meta, tar::EntryType::Directory);
            self.builder.append_data(&mut h, rel, io::empty())?;
            self.stats.entries += 1;
            if is_opaque(path) {
                self.empty(&rel.join(OPAQUE_MARKER))?;
            }
            return self.dir(path, rel);
        }
        if ft.is_symlink() {
            let target = fs::read_link(path)?;
            let mut h = self.header(meta, tar::EntryType::Symlink);
            self.builder.append_link(&mut h, rel, target)?;
            self.stats.entries += 1;
            return Ok(());
        }
        if ft.is_socket() {
            // Not content: a socket is recreated by whoever listens on it.
            return Ok(());
        }
        if ft.is_file() && meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = self.links.get(&key) {
                let mut h = self.header(meta, tar::EntryType::Link);
                let first = first.clone();
                self.builder.append_link(&mut h, rel, first)?;
                self.stats.entries += 1;
                return Ok(());
            }
            self.links.insert(key, rel.to_path_buf());
        }
        if ft.is_file() {
            let file = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            // The size read now, and exactly that many bytes written: a
            // file still growing (a sandbox that is not frozen) is cut where
            // it was when looked at, never a corrupt tar.
            let size = file.metadata()?.len();
            let mut h = self.header(meta, tar::EntryType::Regular);
            h.set_size(size);
            self.builder
                .append_data(&mut h, rel, PaddedReader::new(file, size))?;
            self.stats.entries += 1;
            self.stats.content_bytes += size;
            return Ok(());
        }
        let kind = if ft.is_fifo() {
            tar::EntryType::Fifo
        } else if ft.is_char_device() {
            tar::EntryType::Char
        } else {
            tar::EntryType::Block
        };
        let mut h = self.header(meta, kind);
        let rdev = meta.rdev();
        if kind != tar::EntryType::Fifo {
            h.set_device_major(libc::major(rdev))?;
            h.set_device_minor(libc::minor(rdev))?;
        }
        self.builder.append_data(&mut h, rel, io::empty())?;
        self.stats.entries += 1;
        Ok(())
    }
}

/// Exactly `size` bytes of `inner`: its bytes, then zeros if it shrank.
struct PaddedReader<R> {
    inner: io::Take<R>,
    left: u64,
}

impl<R: io::Read> PaddedReader<R> {
    fn new(inner: R, size: u64) -> Self {
        PaddedReader {
            inner: inner.take(size),
            left: size,
        }
    }
}

impl<R: io::Read> io::Read for PaddedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..want])? {
            0 => {
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.left -= n as u64;
        Ok(n)
    }
}

fn is_opaque(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    OPAQUE_XATTRS.iter().any(|attr| {
        let Ok(attr) = CString::new(*attr) else {
            return false;
        };
        let mut value = [0u8; 4];
        // SAFETY: both strings are NUL-terminated and live across the call;
        // the buffer is writable for its length.
        let n = unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                attr.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n == 1 && value[0] == b'y'
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entries(layer: &[u8]) -> Vec<(String, tar::EntryType, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(layer);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let kind = e.header().entry_type();
                let uid = e.header().uid().unwrap();
                let mut data = Vec::new();
                io::Read::read_to_end(&mut e, &mut data).unwrap();
                (path, kind, uid, data)
            })
            .collect()
    }

    #[test]
    fn files_links_and_whiteouts_become_layer_entries_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        fs::create_dir_all(upper.join("etc/app")).unwrap();
        fs::write(upper.join("etc/app/conf"), b"v=1").unwrap();
        fs::hard_link(upper.join("etc/app/conf"), upper.join("etc/app/alias")).unwrap();
        std::os::unix::fs::symlink("app/conf", upper.join("etc/link")).unwrap();
        let mut layer = Vec::new();
        let stats = write_layer(&upper, Owners { shift: 0 }, &mut layer).unwrap();
        let got: Vec<_> = entries(&layer)
            .into_iter()
            .map(|(p, k, _, d)| (p, k, d))
            .collect();
        assert_eq!(
            got,
            vec![
                ("etc".into(), tar::EntryType::Directory, vec![]),
                ("etc/app".into(), tar::EntryType::Directory, vec![]),
                (
                    "etc/app/alias".into(),
                    tar::EntryType::Regular,
                    b"v=1".to_vec()
                ),
                ("etc/app/conf".into(), tar::EntryType::Link, vec![]),
                ("etc/link".into(), tar::EntryType::Symlink, vec![]),
            ]
        );
        assert_eq!(stats.content_bytes, 3);
        // The same tree, the same bytes.
        let mut again = Vec::new();
        write_layer(&upper, Owners { shift: 0 }, &mut again).unwrap();
        assert_eq!(layer, again);
    }

    #[test]
    fn a_missing_upper_is_an_empty_layer() {
        let dir = tempfile::tempdir().unwrap();
        let mut layer = Vec::new();
        let stats = write_layer(&dir.path().join("none"), Owners { shift: 0 }, &mut layer).unwrap();
        assert_eq!(stats, LayerStats::default());
        assert!(entries(&layer).is_empty());
    }

    #[test]
    fn owners_are_shifted_back_into_the_guest_range() {
        let o = Owners { shift: 100_000 };
        assert_eq!(o.guest(100_000), 0);
        assert_eq!(o.guest(101_000), 1000);
        assert_eq!(o.guest(5), 0);
        assert_eq!(o.guest(100_000 + 70_000), 0);
    }

    #[test]
    fn a_file_that_shrinks_while_read_keeps_the_tar_whole() {
        let mut r = PaddedReader::new(&b"abc"[..], 5);
        let mut out = Vec::new();
        io::Read::read_to_end(&mut r, &mut out).unwrap();
        assert_eq!(out, b"abc\0\0");
    }
}
