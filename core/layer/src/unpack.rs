//! A layer written by [`super::layer`] unpacked into an overlayfs upper
//! directory: the inverse of `write_layer` (a container fork's copies get
//! the parent's writable layer this way). `.wh.NAME` becomes a whiteout
//! (a character device 0:0), `.wh..wh..opq` the opaque attribute of its
//! directory; owners are shifted into the sandbox's host range. Paths that
//! would leave `upper` (absolute, `..`, through a symlink) are refused.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::write::{Owners, OPAQUE_MARKER, WHITEOUT_PREFIX};

/// Unpacks `layer` into the (new or empty) directory `upper`, marking
/// opaque directories with the extended attribute `opaque_xattr`
/// (`trusted.overlay.opaque` for root's overlay, `user.overlay.opaque`
/// for a user namespace's).
pub fn unpack_layer(
    layer: impl Read,
    upper: &Path,
    owners: Owners,
    opaque_xattr: &str,
) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(upper)?;
    let mut archive = tar::Archive::new(layer);
    // Directory times, set last (their entries change them).
    let mut dir_times: Vec<(PathBuf, i64)> = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let rel = inside(&entry.path()?)?;
        let Some(name) = rel.file_name().map(|n| n.to_owned()) else {
            continue;
        };
        let parent = upper.join(rel.parent().unwrap_or(Path::new("")));
        no_symlink_between(upper, &parent)?;
        let name_bytes = name.as_bytes();
        if name_bytes == OPAQUE_MARKER.as_bytes() {
            set_xattr(&parent, opaque_xattr, b"y")?;
            continue;
        }
        if let Some(hidden) = name_bytes.strip_prefix(WHITEOUT_PREFIX.as_bytes()) {
            // A marker only: its header says nothing (no owner, no mode).
            let path = parent.join(std::ffi::OsStr::from_bytes(hidden));
            mknod(&path, libc::S_IFCHR, 0)?;
            chown(&path, owners.host(0), owners.host(0))?;
            continue;
        }
        let header = entry.header().clone();
        let uid = owners.host(header.uid()?);
        let gid = owners.host(header.gid()?);
        let mode = header.mode()? & 0o7777;
        let mtime = i64::try_from(header.mtime()?).unwrap_or(0);
        let path = parent.join(&name);
        match header.entry_type() {
            tar::EntryType::Directory => {
                match fs::DirBuilder::new().mode(0o700).create(&path) {
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    other => other?,
                }
                // Owner and mode through the directory itself: an earlier
                // entry of the same name may be a symlink, never followed.
                let dir = fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::ELOOP | libc::ENOTDIR) => {
                            bad(&format!("a directory {rel:?} over another entry"))
                        }
                        _ => e,
                    })?;
                std::os::unix::fs::fchown(&dir, Some(uid), Some(gid))?;
                dir.set_permissions(fs::Permissions::from_mode(mode))?;
                dir_times.push((path, mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)?;
                io::copy(&mut entry, &mut file)?;
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
                file.set_permissions(fs::Permissions::from_mode(mode))?;
                drop(file);
                set_mtime(&path, mtime)?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| bad("a symlink without a target"))?;
                std::os::unix::fs::symlink(&target, &path)?;
                chown(&path, uid, gid)?;
                set_mtime(&path, mtime)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()?
                    .ok_or_else(|| bad("a hard link without a target"))?;
                let target = upper.join(inside(&target)?);
                no_symlink_between(upper, target.parent().unwrap_or(upper))?;
                fs::hard_link(&target, &path)?;
            }
            kind @ (tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo) => {
                let (file_type, rdev) = match kind {
                    tar::EntryType::Fifo => (libc::S_IFIFO, 0),
                    _ => {
                        let major = header.device_major()?.unwrap_or(0);
                        let minor = header.device_minor()?.unwrap_or(0);
                        let file_type = if kind == tar::EntryType::Char {
                            libc::S_IFCHR
                        } else {
                            libc::S_IFBLK
                        };
                        (file_type, libc::makedev(major, minor))
                    }
                };
                mknod(&path, file_type, rdev)?;
                chown(&path, uid, gid)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
            }
            other => return Err(bad(&format!("an entry of type {other:?}"))),
        }
    }
    for (dir, mtime) in dir_times.iter().rev() {
        set_mtime(dir, *mtime)?;
    }
    Ok(())
}

impl Owners {
    /// The host id of guest id `guest` (ids past the sandbox's range are
    /// its root's, as the writer shows them).
    fn host(self, guest: u64) -> u32 {
        let guest = u32::try_from(guest)
            .ok()
            .filter(|g| *g < crate::MAP_SIZE)
            .unwrap_or(0);
        guest + self.shift
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the layer has {what}"))
}

/// `path` as a path inside the layer's root: relative, without `..`.
fn inside(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(bad(&format!("the path {path:?}, which leaves its root"))),
        }
    }
    Ok(out)
}

/// Refuses a directory below `root` reached through a symlink.
fn no_symlink_between(root: &Path, dir: &Path) -> io::Result<()> {
    let Ok(rel) = dir.strip_prefix(root) else {
        return Err(bad(&format!("the path {dir:?}, outside its root")));
    };
    let mut at = root.to_path_buf();
    for c in rel.components() {
        at.push(c);
        if !fs::symlink_metadata(&at)?.is_dir() {
            return Err(bad(&format!("{at:?} on a path, which is not a directory")));
        }
    }
    Ok(())
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| bad("a path with a NUL byte"))
}

fn mknod(path: &Path, file_type: libc::mode_t, rdev: libc::dev_t) -> io::Result<()> {
    let c = cstring(path)?;
    // SAFETY: a valid C path; mknod creates a node and touches no memory.
    if unsafe { libc::mknod(c.as_ptr(), file_type | 0o600, rdev) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn chown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let (c, n) = (
        cstring(path)?,
        CString::new(name).map_err(|_| bad("an attribute name with a NUL byte"))?,
    );
    // SAFETY: valid C strings and a value buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_mtime(path: &Path, mtime: i64) -> io::Result<()> {
    let c = cstring(path)?;
    let t = libc::timespec {
        tv_sec: mtime,
        tv_nsec: 0,
    };
    let times = [t, t];
    // SAFETY: a valid C path and two timespecs; AT_SYMLINK_NOFOLLOW sets a
    // symlink's own times.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::write::write_layer;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
        let (c, n) = (cstring(path).unwrap(), CString::new(name).unwrap());
        let mut buf = [0u8; 16];
        // SAFETY: valid C strings and a buffer of the given length.
        let n =
            unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        (n >= 0).then(|| buf[..n as usize].to_vec())
    }

    /// A tree of every kind of entry a writable layer holds (as root:
    /// whiteouts and owners need it), written, unpacked elsewhere with
    /// another id base, and written again: the same layer, byte for byte.
    #[test]
    fn a_layer_unpacked_writes_the_same_layer_again() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the tests run as root");
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let base_a = 200_000;
        fs::create_dir_all(a.join("etc/sub")).unwrap();
        fs::create_dir_all(a.join("opaque")).unwrap();
        fs::write(a.join("etc/file"), b"content").unwrap();
        fs::hard_link(a.join("etc/file"), a.join("etc/sub/link")).unwrap();
        std::os::unix::fs::symlink("../etc/file", a.join("opaque/sym")).unwrap();
        mknod(&a.join("gone"), libc::S_IFCHR, 0).unwrap();
        mknod(&a.join("fifo"), libc::S_IFIFO, 0).unwrap();
        set_xattr(&a.join("opaque"), "trusted.overlay.opaque", b"y").unwrap();
        for p in [
            "etc",
            "etc/sub",
            "etc/file",
            "opaque",
            "opaque/sym",
            "gone",
            "fifo",
        ] {
            chown(&a.join(p), base_a + 7, base_a + 8).unwrap();
        }
        // After the chown, which clears it.
        fs::set_permissions(a.join("etc/file"), fs::Permissions::from_mode(0o4750)).unwrap();
        let mut first = Vec::new();
        write_layer(&a, Owners { shift: base_a }, &mut first).unwrap();

        let base_b = 300_000;
        let owners_b = Owners { shift: base_b };
        unpack_layer(&first[..], &b, owners_b, "trusted.overlay.opaque").unwrap();
        let meta = fs::symlink_metadata(b.join("etc/file")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (base_b + 7, base_b + 8));
        assert_eq!(meta.mode() & 0o7777, 0o4750, "modes survive the chown");
        assert_eq!(fs::read(b.join("etc/file")).unwrap(), b"content");
        assert_eq!(
            meta.ino(),
            fs::metadata(b.join("etc/sub/link")).unwrap().ino(),
            "hard links stay links"
        );
        let gone = fs::symlink_metadata(b.join("gone")).unwrap();
        assert!(gone.file_type().is_char_device() && gone.rdev() == 0);
        assert_eq!(
            get_xattr(&b.join("opaque"), "trusted.overlay.opaque").unwrap(),
            b"y"
        );
        let mut second = Vec::new();
        write_layer(&b, owners_b, &mut second).unwrap();
        assert!(first == second, "the same layer again");
    }

    #[test]
    fn paths_that_leave_the_root_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let upper = tmp.path().join("upper");
        for (path, link) in [("../x", None), ("a/../../x", None), ("evil", Some("/etc"))] {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mode(0o644);
            h.set_mtime(0);
            match link {
                Some(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    b.append_link(&mut h, path, target).unwrap();
                    let mut f = h.clone();
                    f.set_entry_type(tar::EntryType::Regular);
                    b.append_data(&mut f, "evil/passwd", io::empty()).unwrap();
                }
                None => {
                    // tar's own append refuses `..`: written raw.
                    h.set_entry_type(tar::EntryType::Regular);
                    h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
                    h.set_cksum();
                    b.append(&h, io::empty()).unwrap();
                }
            }
            let layer = b.into_inner().unwrap();
            let err = unpack_layer(
                &layer[..],
                &upper,
                Owners { shift: 0 },
                "user.overlay.opaque",
            )
            .unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{path}: {err}");
            assert!(!tmp.path().join("x").exists());
            let _ = fs::remove_dir_all(&upper);
        }
    }

    /// A symlink, then a directory entry of the same name: the directory's
    /// mode and owner were set through the symlink, on whatever it named
    /// (`chmod 4777` of a host file). Refused now, and the target keeps
    /// its mode.
    #[test]
    fn a_directory_over_a_symlink_changes_nothing_through_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        fs::write(&victim, b"host").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_mode(0o777);
        h.set_entry_type(tar::EntryType::Symlink);
        b.append_link(&mut h, "a", &victim).unwrap();
        let mut d = h.clone();
        d.set_entry_type(tar::EntryType::Directory);
        d.set_mode(0o4777);
        b.append_data(&mut d, "a", io::empty()).unwrap();
        let layer = b.into_inner().unwrap();
        let upper = tmp.path().join("upper");
        let err = unpack_layer(
            &layer[..],
            &upper,
            Owners { shift: 0 },
            "user.overlay.opaque",
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let mode = fs::metadata(&victim).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
    }
}
