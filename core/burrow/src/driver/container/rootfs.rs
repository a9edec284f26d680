//! The container's root filesystem: a persistent writable layer (overlayfs
//! upper) over a read-only, uid-shifted copy of the image rootfs.
//!
//! The container runs in a user namespace that maps container uids and gids
//! `0..65536` to host ids `base..base+65536`. For image files to appear owned
//! by root inside, the lower layer must be owned by `base` on the host, so we
//! keep one shifted copy of each image rootfs per mapping base under
//! `images/shifted/<key>` (built once, atomically, under a file lock). The
//! upper and work directories belong to the sandbox, are owned by
//! `base:base`, and are kept across stop/start: that is the writable layer.
//!
//! The merged overlay is mounted under a directory every user may traverse
//! (`/run/burrow/<container-id>`): runc mounts the rootfs from inside the
//! user namespace, where the 0700 burrow home is not searchable.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File, Metadata};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::paths::short_hash;

/// Number of ids mapped into the container (uids and gids `0..65536`).
pub(super) const MAP_SIZE: u32 = 65536;
/// Host id of container root when nothing else is configured.
const DEFAULT_BASE: u32 = 100_000;
/// File in the sandbox directory recording the base its layer was made with.
const BASE_FILE: &str = "userns-base";

/// The host uid/gid container root maps to for this sandbox.
///
/// The base is recorded in the sandbox directory on first use and reused
/// afterwards, so the files of an existing writable layer keep their owners
/// even if the host default changes later.
pub(super) fn mapping_base(sandbox_dir: &Path) -> Result<u32> {
    let recorded = sandbox_dir.join(BASE_FILE);
    if let Ok(text) = fs::read_to_string(&recorded) {
        if let Some(base) = text.trim().parse::<u32>().ok().filter(|b| valid_base(*b)) {
            return Ok(base);
        }
    }
    let base = host_default_base()?;
    fs::write(&recorded, format!("{base}\n"))
        .map_err(|e| Error::io("recording the user namespace base", Some(&recorded), e))?;
    Ok(base)
}

fn valid_base(base: u32) -> bool {
    base > 0 && base.checked_add(MAP_SIZE).is_some()
}

/// `BURROW_USERNS_BASE`, else root's `/etc/subuid` range, else 100000.
fn host_default_base() -> Result<u32> {
    if let Ok(v) = std::env::var("BURROW_USERNS_BASE") {
        return v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|b| valid_base(*b))
            .ok_or_else(|| Error::InvalidConfig {
                field: "BURROW_USERNS_BASE".into(),
                reason: format!(
                    "{v:?} is not a host uid between 1 and {} ",
                    u32::MAX - MAP_SIZE
                ),
            });
    }
    let subuid = fs::read_to_string("/etc/subuid").unwrap_or_default();
    Ok(subuid_base(&subuid).unwrap_or(DEFAULT_BASE))
}

/// Root's first subordinate range of at least [`MAP_SIZE`] ids.
fn subuid_base(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut parts = line.trim().split(':');
        let (name, start, count) = (parts.next()?, parts.next()?, parts.next()?);
        let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
        ((name == "root" || name == "0") && count >= MAP_SIZE && valid_base(start)).then_some(start)
    })
}

/// The shifted copy of `source` for `base`, built on first use.
///
/// Blocking: call from a blocking thread.
pub(super) fn shifted_lower(source: &Path, images_dir: &Path, base: u32) -> Result<PathBuf> {
    let source = fs::canonicalize(source)
        .map_err(|e| Error::io("resolving the image rootfs", Some(source), e))?;
    let meta = fs::metadata(&source)
        .map_err(|e| Error::io("reading the image rootfs", Some(&source), e))?;
    // The key changes when the root directory is replaced or its entries
    // change; deeper edits of a plain rootfs directory are not detected.
    let key = short_hash(&format!(
        "{}\0{base}\0{}:{}\0{}.{}\0{}.{}",
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
        base,
        links: HashMap::new(),
        skipped: 0,
    };
    if let Err(e) = copier.copy(&source, &tmp, &meta) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(Error::io(
            format!("copying the image rootfs with ids shifted by {base}"),
            Some(&source),
            e,
        ));
    }
    fs::rename(&tmp, &target)
        .map_err(|e| Error::io("publishing the shifted image", Some(&target), e))?;
    tracing::info!(source = %source.display(), lower = %target.display(), base, skipped_special_files = copier.skipped,
        elapsed_ms = started.elapsed().as_millis() as u64, "built shifted image rootfs");
    Ok(target)
}

/// Copies a tree with every owner shifted into the container's id range.
struct Copier {
    base: u32,
    /// First copy of each multiply-linked source inode, to link again.
    links: HashMap<(u64, u64), PathBuf>,
    /// Device nodes and sockets left out (unusable in a user namespace).
    skipped: usize,
}

impl Copier {
    fn shift(&self, id: u32) -> u32 {
        // Ids outside the mapped range cannot be represented; they become
        // the overflow id (nobody) inside.
        self.base + if id < MAP_SIZE { id } else { MAP_SIZE - 2 }
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

pub(super) fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Creates the persistent upper and work directories (owned by `base`).
pub(super) fn writable_layer(sandbox_dir: &Path, base: u32) -> Result<(PathBuf, PathBuf)> {
    let upper = sandbox_dir.join("upper");
    let work = sandbox_dir.join("work");
    for dir in [&upper, &work] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| Error::io("creating the writable layer", Some(dir), e))?;
        std::os::unix::fs::chown(dir, Some(base), Some(base)).map_err(|e| {
            Error::io(
                "handing the writable layer to the container's root",
                Some(dir),
                e,
            )
        })?;
    }
    Ok((upper, work))
}

/// Directory holding rootfs mount points: `BURROW_MOUNT_DIR` or `/run/burrow`.
pub(super) fn mount_dir() -> PathBuf {
    std::env::var_os("BURROW_MOUNT_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/burrow"))
}

/// Creates `<mount_dir>/<container_id>` after checking that the container's
/// root will be able to reach it.
pub(super) fn mount_point(container_id: &str) -> Result<PathBuf> {
    let dir = mount_dir();
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&dir)
        .map_err(|e| Error::io("creating the rootfs mount directory", Some(&dir), e))?;
    for ancestor in dir.ancestors() {
        let meta = fs::metadata(ancestor)
            .map_err(|e| Error::io("checking the rootfs mount directory", Some(ancestor), e))?;
        if meta.mode() & 0o001 == 0 {
            return Err(Error::Runtime {
                runtime: "container".into(),
                reason: format!(
                    "{} is not searchable by other users, so the container's (user-namespaced) root cannot reach its rootfs; \
                     allow o+x or set BURROW_MOUNT_DIR",
                    ancestor.display()
                ),
            });
        }
    }
    let target = dir.join(container_id);
    match fs::DirBuilder::new().mode(0o711).create(&target) {
        Ok(()) => Ok(target),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(target),
        Err(e) => Err(Error::io(
            "creating the rootfs mount point",
            Some(&target),
            e,
        )),
    }
}

/// Mounts the overlay at `target`.
pub(super) fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()> {
    for p in [lower, upper, work] {
        // overlayfs splits its options on ',' and lowerdir on ':'.
        if p.as_os_str()
            .as_bytes()
            .iter()
            .any(|b| matches!(b, b',' | b':' | b'\\'))
        {
            return Err(Error::InvalidConfig {
                field: "home".into(),
                reason: format!(
                    "{} contains ',', ':' or '\\', which overlayfs cannot take",
                    p.display()
                ),
            });
        }
    }
    let data = format!(
        "lowerdir={},upperdir={},workdir={},index=off",
        lower.display(),
        upper.display(),
        work.display()
    );
    let data = CString::new(data).map_err(|_| Error::InvalidConfig {
        field: "home".into(),
        reason: "path contains NUL".into(),
    })?;
    let target_c = cstr(target).map_err(|e| Error::io("mounting the rootfs", Some(target), e))?;
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            target_c.as_ptr(),
            c"overlay".as_ptr(),
            libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "mounting the overlay rootfs",
            Some(target),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Detaches a mount (if mounted) and removes the mount point. Idempotent.
pub(super) fn unmount(target: &Path) -> Result<()> {
    let c = cstr(target).map_err(|e| Error::io("unmounting the rootfs", Some(target), e))?;
    // A stacked mount point can hold several mounts: detach until none.
    for _ in 0..8 {
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } != 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::ENOENT) => break,
                _ => return Err(Error::io("unmounting the rootfs", Some(target), e)),
            }
        }
    }
    match fs::remove_dir(target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(
            "removing the rootfs mount point",
            Some(target),
            e,
        )),
    }
}

/// Remembers a mount point in `file` so a later generation can remove it if
/// this one dies without cleaning up.
pub(super) fn record_mount(file: &Path, target: &Path) -> Result<()> {
    let mut f = File::options()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| Error::io("recording the rootfs mount", Some(file), e))?;
    f.write_all(target.as_os_str().as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .map_err(|e| Error::io("recording the rootfs mount", Some(file), e))
}

/// Unmounts every mount point recorded in `file` that lies in the mount
/// directory (never anything else, whatever the file says).
pub(super) fn unmount_recorded(file: &Path) {
    let Ok(text) = fs::read_to_string(file) else {
        return;
    };
    let dir = mount_dir();
    for line in text.lines() {
        let p = Path::new(line);
        if p.parent() == Some(dir.as_path())
            && p.file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"burrow-"))
        {
            if let Err(e) = unmount(p) {
                tracing::warn!(error = %e, "could not remove a stale rootfs mount");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn subuid_picks_roots_large_range() {
        assert_eq!(
            subuid_base("alice:100000:65536\nroot:200000:65536\n"),
            Some(200000)
        );
        assert_eq!(subuid_base("root:300000:1000\n"), None);
        assert_eq!(subuid_base("garbage\n0:400000:70000"), Some(400000));
        assert_eq!(subuid_base(""), None);
    }

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
        let lower = shifted_lower(&src, &images, 100000).unwrap();
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
        assert_eq!(shifted_lower(&src, &images, 100000).unwrap(), lower);
        assert_ne!(shifted_lower(&src, &images, 200000).unwrap(), lower);
    }
}
