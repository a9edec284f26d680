//! An idmapped view of the image rootfs: the cheap way to a lower layer
//! whose files are owned by the container's id range.
//!
//! Instead of copying the image with every owner shifted (see
//! [`super::rootfs::shifted_lower`]), we clone the image directory's mount
//! with `open_tree`, attach the user namespace mapping `0..65536` to
//! `base..base+65536` with `mount_setattr(MOUNT_ATTR_IDMAP)`, and use that
//! as the overlay's lower layer (overlayfs supports idmapped layers since
//! Linux 5.19). The runtime never sees the difference, so this works with
//! runc 1.1, which cannot create idmapped mounts itself. Files copied up
//! into the writable layer get the mapped owners, exactly as with the copy.
//!
//! The filesystem holding the image must support idmapped mounts (ext4,
//! xfs, btrfs, tmpfs since 6.3, ...); when anything here fails, the driver
//! falls back to the shifted copy.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::rootfs::{cstr, MAP_SIZE};

/// Mounts `source` at `target` (an existing empty directory), read-only,
/// with on-disk ids `0..65536` appearing as `base..base+65536`.
///
/// Blocking (forks a short-lived helper): call from a blocking thread.
pub(super) fn mount_idmapped(source: &Path, target: &Path, base: u32) -> io::Result<()> {
    let userns = mapped_userns(base)?;
    let source_c = cstr(source)?;
    // SAFETY: valid path; the result is a new descriptor we take ownership of.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source_c.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `tree` is a fresh descriptor nobody else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: valid descriptors, an empty path with AT_EMPTY_PATH, and a
    // mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let target_c = cstr(target)?;
    // SAFETY: valid descriptor and paths; MOVE_MOUNT_F_EMPTY_PATH makes the
    // empty source path refer to `tree` itself.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A user namespace mapping `0..65536` to `base..`, held by a descriptor.
///
/// A helper is forked straight into a new user namespace, its maps are
/// written from here, the namespace file is opened, and the helper exits.
fn mapped_userns(base: u32) -> io::Result<OwnedFd> {
    let mut pipe = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    // Prepared before forking: the child must not allocate.
    let map = CString::new(format!("0 {base} {MAP_SIZE}\n"))
        .map_err(|_| io::Error::other("NUL in map"))?;
    // SAFETY: a fork-like clone (no new stack: the child runs on a copy of
    // ours). The child only makes async-signal-safe calls on plain integers
    // and leaves with _exit, as required in a multi-threaded process.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_NEWUSER | libc::SIGCHLD,
            0,
            0,
            0,
            0,
        )
    };
    if pid == 0 {
        // SAFETY: child side; see above.
        unsafe {
            libc::close(write_end.as_raw_fd());
            let mut byte = 0u8;
            // Returns at EOF, when the parent is done with our namespace.
            libc::read(read_end.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(read_end);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = pid as libc::pid_t;
    let result = (|| {
        std::fs::write(format!("/proc/{pid}/uid_map"), map.as_bytes())?;
        std::fs::write(format!("/proc/{pid}/gid_map"), map.as_bytes())?;
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(ns))
    })();
    drop(write_end);
    loop {
        // SAFETY: reaping our own child.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn idmapped_view_shifts_owners() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (src, target) = (t.path().join("src"), t.path().join("target"));
        std::fs::create_dir_all(src.join("etc")).unwrap();
        std::fs::write(src.join("etc/file"), "x").unwrap();
        std::os::unix::fs::chown(src.join("etc/file"), Some(1000), Some(70000)).unwrap();
        std::fs::create_dir(&target).unwrap();
        if let Err(e) = mount_idmapped(&src, &target, 100000) {
            eprintln!("idmapped mounts unavailable here: {e}");
            return;
        }
        let m = std::fs::metadata(target.join("etc/file")).unwrap();
        let root = std::fs::metadata(&target).unwrap();
        super::super::rootfs::unmount(&target).unwrap();
        assert_eq!(root.uid(), 100000);
        assert_eq!(m.uid(), 101000);
        assert_eq!(m.gid(), 65534, "ids outside the range are unmapped");
        assert!(
            std::fs::write(src.join("etc/file"), "y").is_ok(),
            "the source stays writable"
        );
    }
}
