//! The image's `User` setting, resolved against the rootfs' own
//! `/etc/passwd` and `/etc/group` (read without following symlinks out of
//! the rootfs).

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::error::{Error, Result};

use super::rootfs::{cstr, MAP_SIZE};

/// Resolves `user` (`uid[:gid]`, `name[:group]`, empty for root) to ids.
pub(crate) fn resolve(rootfs: &Path, user: Option<&str>, image: &str) -> Result<(u32, u32)> {
    let invalid = |reason: String| Error::InvalidImage {
        image: image.to_owned(),
        reason,
    };
    let user = user.map(str::trim).unwrap_or_default();
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = read_in_root(rootfs, "etc/passwd")
        .map_err(|e| invalid(format!("reading /etc/passwd: {e}")))?;
    let entries: Vec<(&str, u32, u32)> = passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((
                *f.first()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.parse().ok()?,
            ))
        })
        .collect();
    let (uid, primary_gid) = match u.parse::<u32>() {
        Ok(uid) => (uid, entries.iter().find(|e| e.1 == uid).map_or(0, |e| e.2)),
        Err(_) => match entries.iter().find(|e| e.0 == u) {
            Some(e) => (e.1, e.2),
            None => {
                return Err(invalid(format!(
                    "user {u:?} is not in the image's /etc/passwd"
                )))
            }
        },
    };
    let gid = match g {
        None | Some("") => primary_gid,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => {
                let group = read_in_root(rootfs, "etc/group")
                    .map_err(|e| invalid(format!("reading /etc/group: {e}")))?;
                group
                    .lines()
                    .find_map(|l| {
                        let f: Vec<&str> = l.split(':').collect();
                        (f.first() == Some(&g))
                            .then(|| f.get(2)?.parse::<u32>().ok())
                            .flatten()
                    })
                    .ok_or_else(|| {
                        invalid(format!("group {g:?} is not in the image's /etc/group"))
                    })?
            }
        },
    };
    if uid >= MAP_SIZE || gid >= MAP_SIZE {
        return Err(invalid(format!(
            "user {user:?} ({uid}:{gid}) is outside the container's id range 0..{MAP_SIZE}"
        )));
    }
    Ok((uid, gid))
}

/// Reads `rel` inside `root`, resolving symlinks as if `root` were `/`.
/// A missing file reads as empty.
fn read_in_root(root: &Path, rel: &str) -> io::Result<String> {
    let root_c = cstr(root)?;
    // SAFETY: valid path; the returned descriptor is owned below.
    let dirfd = unsafe {
        libc::open(
            root_c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dirfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dirfd` is a fresh descriptor nobody else owns.
    let dir = unsafe { OwnedFd::from_raw_fd(dirfd) };
    let rel_c = CString::new(rel)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: open_how is plain old data; zero is a valid starting value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    use std::os::fd::AsRawFd;
    // SAFETY: valid dirfd, path and open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel_c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound {
            Ok(String::new())
        } else {
            Err(e)
        };
    }
    // SAFETY: `fd` is a fresh descriptor returned by openat2.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    let mut text = String::new();
    // Bounded: a passwd file larger than this is not a real one.
    file.by_ref().take(4 << 20).read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_numbers_and_rejects_unknown() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("etc")).unwrap();
        std::fs::write(
            t.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(t.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let r = |u: &str| resolve(t.path(), Some(u), "img");
        assert_eq!(resolve(t.path(), None, "img").unwrap(), (0, 0));
        assert_eq!(r("app").unwrap(), (1000, 1001));
        assert_eq!(r("app:staff").unwrap(), (1000, 50));
        assert_eq!(r("1000").unwrap(), (1000, 1001));
        assert_eq!(r("42:7").unwrap(), (42, 7));
        assert_eq!(
            r("ghost").unwrap_err().code(),
            crate::ErrorCode::InvalidImage
        );
        assert_eq!(
            r("app:nogroup").unwrap_err().code(),
            crate::ErrorCode::InvalidImage
        );
        assert_eq!(
            r("70000").unwrap_err().code(),
            crate::ErrorCode::InvalidImage
        );
    }

    #[test]
    fn symlinks_do_not_escape_the_rootfs() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, "evil:x:7:7::/:/bin/sh\n").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("etc/passwd")).unwrap();
        // The absolute target resolves inside the rootfs, where it is missing.
        assert_eq!(
            resolve(&root, Some("evil"), "img").unwrap_err().code(),
            crate::ErrorCode::InvalidImage
        );
    }
}
