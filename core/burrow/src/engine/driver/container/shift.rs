//! The fallback lower layer: a copy of the image rootfs with every owner
//! shifted into the container's id range, for filesystems or kernels where
//! an idmapped mount (see [`super::idmap`]) is not possible.
//!
//! One copy per image rootfs and mapping base lives in
//! `images/shifted/<key>`; it is built once, into a temporary directory
//! under an exclusive file lock, and published by rename, so concurrent
//! supervisors never see a half-built tree.

use std::collections::HashMap;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::engine::paths::short_hash;
use crate::error::{Error, Result};

use super::rootfs::{cstr, MAP_SIZE};

/// Who owns the copy's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owners {
    /// Each id shifted by a base (root: the container's host range).
    Shift(u32),
    /// Rootless, in the supervisor's namespace of `mapped` ids: ids it maps
    /// kept, others (the host's root, seen as the overflow id) made root.
    Rootless { mapped: u32 },
}

/// The overflow id: what an id the namespace does not map reads as.
const OVERFLOW_ID: u32 = 65534;

/// The shifted copy of `source` for `owners`, built on first use.
///
/// Blocking: call from a blocking thread.
pub(super) fn shifted_lower(source: &Path, images_dir: &Path, owners: Owners) -> Result<PathBuf> {
    let source = fs::canonicalize(source)
        .map_err(|e| Error::io("resolving the image rootfs", Some(source), e))?;
    let meta = fs::metadata(&source)
        .map_err(|e| Error::io("reading the image rootfs", Some(&source), e))?;
    // The key changes when the root directory is replaced or its entries
    // change; deeper edits of a plain rootfs directory are not detected.
    let key = short_hash(&format!(
        "{}\0{owners:?}\0{}:{}\0{}.{}\0{}.{}",
        source.display(),
        meta.dev(),
        meta.ino(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    ));
    let dir = images_dir.join("shifted");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::io("creating the shifted image cache", Some(&dir), e))?;
    let target = dir.join(&key);
    // A finished copy only ever appears through the rename below.
    if target.is_dir() {
        return Ok(target);
    }
    let lock_path = dir.join(format!("{key}.lock"));
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io("opening the shifted image lock", Some(&lock_path), e))?;
    // SAFETY: flock on a descriptor we own; it stays open until `lock` drops.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::io(
            "locking the shifted image",
            Some(&lock_path),
            io::Error::last_os_error(),
        ));
    }
    // Re-check under the lock: another process may have finished meanwhile.
    if target.is_dir() {
        return Ok(target);
    }
    // Under the lock nobody else builds this key: leftovers are from a
    // builder that died.
    let tmp = dir.join(format!("{key}.tmp"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp)
            .map_err(|e| Error::io("removing an unfinished shifted image", Some(&tmp), e))?;
    }
    let started = std::time::Instant::now();
    let mut copier = Copier {
        owners,
        links: HashMap::new(),
        skipped: 0,
    };
    if let Err(e) = copier.copy(&source, &tmp, &meta) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(Error::io(
            format!("copying the image rootfs with owners {owners:?}"),
            Some(&source),
            e,
        ));
    }
    fs::rename(&tmp, &target)
        .map_err(|e| Error::io("publishing the shifted image", Some(&target), e))?;
    tracing::info!(source = %source.display(), lower = %target.display(), ?owners, skipped_special_files = copier.skipped,
        elapsed_ms = started.elapsed().as_millis() as u64, "built shifted image rootfs");
    Ok(target)
}

/// Copies a tree with every owner shifted into the container's id range.
struct Copier {
    owners: Owners,
    /// First copy of each multiply-linked source inode, to link again.
    links: HashMap<(u64, u64), PathBuf>,
    /// Device nodes and sockets left out (unusable in a user namespace).
    skipped: usize,
}

impl Copier {
    fn shift(&self, id: u32) -> u32 {
        match self.owners {
            // Ids outside the mapped range cannot be represented; they
            // become the overflow id (nobody) inside.
            Owners::Shift(base) => base + if id < MAP_SIZE { id } else { MAP_SIZE - 2 },
            Owners::Rootless { mapped } if id == OVERFLOW_ID || id >= mapped => 0,
            Owners::Rootless { .. } => id,
        }
    }

    fn copy(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        let ft = meta.file_type();
        if ft.is_dir() {
            fs::create_dir(dst)?;
            for entry in fs::read_dir(src)? {
                let entry = entry?;
                // DirEntry::metadata does not follow symlinks.
                let m = entry.metadata()?;
                self.copy(&entry.path(), &dst.join(entry.file_name()), &m)?;
            }
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(src)?, dst)?;
        } else if ft.is_file() {
            let inode = (meta.dev(), meta.ino());
            if meta.nlink() > 1 {
                if let Some(first) = self.links.get(&inode) {
                    return fs::hard_link(first, dst);
                }
                self.links.insert(inode, dst.to_path_buf());
            }
            fs::copy(src, dst)?;
        } else if ft.is_fifo() {
            let c = cstr(dst)?;
            // SAFETY: `c` is a valid NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(io::Error::last_os_error());
            }
        } else {
            self.skipped += 1;
            return Ok(());
        }
        self.finish(dst, meta)
    }

    /// Owner, mode (after chown, which clears set-id bits) and times.
    fn finish(&self, dst: &Path, meta: &Metadata) -> io::Result<()> {
        std::os::unix::fs::lchown(
            dst,
            Some(self.shift(meta.uid())),
            Some(self.shift(meta.gid())),
        )?;
        if !meta.file_type().is_symlink() {
            fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        let times = [
            libc::timespec {
                tv_sec: meta.atime(),
                tv_nsec: meta.atime_nsec(),
            },
            libc::timespec {
                tv_sec: meta.mtime(),
                tv_nsec: meta.mtime_nsec(),
            },
        ];
        let c = cstr(dst)?;
        // SAFETY: valid path and a two-element timespec array.
        if unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shifted_copy_shifts_owners_and_keeps_links() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("bin")).unwrap();
        fs::write(src.join("bin/tool"), b"x").unwrap();
        fs::hard_link(src.join("bin/tool"), src.join("bin/tool2")).unwrap();
        std::os::unix::fs::symlink("tool", src.join("bin/link")).unwrap();
        std::os::unix::fs::chown(src.join("bin/tool"), Some(1000), Some(70000)).unwrap();
        fs::set_permissions(src.join("bin/tool"), fs::Permissions::from_mode(0o4755)).unwrap();
        let images = t.path().join("images");
        let lower = shifted_lower(&src, &images, Owners::Shift(100000)).unwrap();
        let m = fs::metadata(lower.join("bin/tool")).unwrap();
        assert_eq!((m.uid(), m.gid()), (101000, 100000 + MAP_SIZE - 2));
        assert_eq!(m.mode() & 0o7777, 0o4755);
        assert_eq!(
            m.ino(),
            fs::metadata(lower.join("bin/tool2")).unwrap().ino()
        );
        let l = fs::symlink_metadata(lower.join("bin/link")).unwrap();
        assert_eq!(l.uid(), 100000);
        assert_eq!(
            fs::read_link(lower.join("bin/link")).unwrap(),
            PathBuf::from("tool")
        );
        // Cached: the same directory comes back.
        assert_eq!(
            shifted_lower(&src, &images, Owners::Shift(100000)).unwrap(),
            lower
        );
        assert_ne!(
            shifted_lower(&src, &images, Owners::Shift(200000)).unwrap(),
            lower
        );
    }

    #[test]
    fn rootless_owners_keep_mapped_ids_and_make_the_rest_root() {
        let c = Copier {
            owners: Owners::Rootless { mapped: 65537 },
            links: HashMap::new(),
            skipped: 0,
        };
        assert_eq!((c.shift(0), c.shift(1000)), (0, 1000));
        assert_eq!((c.shift(OVERFLOW_ID), c.shift(70000)), (0, 0));
        let single = Copier {
            owners: Owners::Rootless { mapped: 1 },
            ..c
        };
        assert_eq!((single.shift(0), single.shift(1000)), (0, 0));
    }
}
