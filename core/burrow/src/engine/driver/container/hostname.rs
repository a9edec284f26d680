//! A running container's hostname changed from outside (a claimed warm
//! sandbox takes its claimer's name): the generated `/etc/hostname` and
//! `/etc/hosts` rewritten in place (they are bind mounts of the files in
//! the generation's tmpfs, see `staging`), and the UTS namespace's name set
//! by a child that joins it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Sets the hostname of the container whose init is `pid` to `hostname`
/// and rewrites the generated files in `etc` to match.
pub(super) async fn set(etc: &Path, pid: i32, hostname: &str) -> Result<()> {
    for (name, _, text) in super::staging::identity_files(hostname) {
        let path = etc.join(name);
        // Written over, not replaced: the container's mount is of this inode.
        std::fs::write(&path, text)
            .map_err(|e| Error::io("rewriting a generated guest file", Some(&path), e))?;
    }
    let hostname = hostname.to_owned();
    tokio::task::spawn_blocking(move || set_in_namespace(pid, &hostname))
        .await
        .map_err(|e| Error::io("setting the hostname", None, io::Error::other(e)))?
        .map_err(|e| Error::io("setting the hostname", None, e))
}

/// Joins `pid`'s user namespace (when it is not this process's) and UTS
/// namespace in a forked child, which sets the name there: joining a user
/// namespace takes a single-threaded process.
fn set_in_namespace(pid: i32, hostname: &str) -> io::Result<()> {
    let open = |ns: &str| File::open(format!("/proc/{pid}/ns/{ns}"));
    let user = open("user")?;
    let uts = open("uts")?;
    let own_user = std::fs::metadata("/proc/self/ns/user")?;
    let join_user = user.metadata()?.ino() != own_user.ino();
    let (user_fd, uts_fd) = (user.as_raw_fd(), uts.as_raw_fd());
    let name = hostname.as_bytes();
    // SAFETY: the child makes raw syscalls on values prepared before the
    // fork (no allocation, no locks) and leaves with _exit.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: as above; errno is read right after each failed call.
        unsafe {
            let fail = || libc::_exit(*libc::__errno_location());
            if join_user && libc::setns(user_fd, libc::CLONE_NEWUSER) != 0 {
                fail();
            }
            if libc::setns(uts_fd, libc::CLONE_NEWUTS) != 0 {
                fail();
            }
            if libc::sethostname(name.as_ptr().cast(), name.len()) != 0 {
                fail();
            }
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, errno) => Err(io::Error::from_raw_os_error(errno)),
        _ => Err(io::Error::other(
            "the child setting the hostname was killed",
        )),
    }
}
