//! Requests in flight as a fact inside the pod (the `burrow-kube` backend).
//!
//! Every host process that reaches a pod's sandbox has a session agent of
//! its own there. While a session agent has requests in flight it holds a
//! *shared* `flock` on one file of the pod (`--calls-lock PATH`); a reclaim,
//! from any host process, first runs `burrow-agent --reclaim-lock PATH` in
//! the pod, which takes the *exclusive* lock without waiting and holds it
//! until its stdin closes. So a pod is never deleted for idleness under a
//! request in flight, however late the host process that made it stamps its
//! activity (stalled, frozen, starved), and a session whose host process
//! died ends with its exec stream and lets the lock go: the kernel, not a
//! timer, says who is in flight. While a reclaim holds the lock, a session
//! refuses new requests (`unavailable`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// The shared lock of a session agent's requests in flight.
#[derive(Debug)]
pub struct CallsLock {
    file: File,
}

/// The lock file, opened for reading (`flock` needs no more; the main
/// container sees the agent's directory read-only, and the init container
/// made the file there: [`crate::pod::install`]).
fn open(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// `flock(fd, op)`; `Ok(false)` when a non-blocking lock is held elsewhere.
fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on a descriptor this File owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

impl CallsLock {
    /// Opens the lock file at `path`; no lock is taken yet.
    pub fn open(path: &Path) -> io::Result<CallsLock> {
        Ok(CallsLock { file: open(path)? })
    }

    /// Takes the shared lock for the first request in flight; false while
    /// a reclaim holds the file.
    pub fn take(&self) -> io::Result<bool> {
        flock(&self.file, libc::LOCK_SH | libc::LOCK_NB)
    }

    /// Lets it go when the last request has ended.
    pub fn release(&self) {
        let _ = flock(&self.file, libc::LOCK_UN);
    }
}

/// The reclaim role: the exclusive lock of `path` without waiting. Prints
/// `held` and keeps it until stdin closes (the reclaimer has deleted the
/// pod, or gave up), or prints `busy` (a session has requests in flight)
/// and exits at once. Returns the exit code.
pub fn reclaim(path: &Path) -> i32 {
    let file = match open(path) {
        Ok(f) => f,
        Err(e) => {
            crate::log::error!("opening {}: {e}", path.display());
            return 1;
        }
    };
    let mut out = io::stdout();
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(true) => {
            let _ = out.write_all(b"held\n").and_then(|()| out.flush());
            let _ = io::stdin().read_to_end(&mut Vec::new());
            0
        }
        Ok(false) => {
            let _ = out.write_all(b"busy\n").and_then(|()| out.flush());
            0
        }
        Err(e) => {
            crate::log::error!("locking {}: {e}", path.display());
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_share_the_lock_and_a_reclaim_excludes_them() {
        let dir = std::env::temp_dir().join(format!("burrow-calls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("calls.lock");
        std::fs::write(&path, b"").unwrap();
        let (a, b) = (
            CallsLock::open(&path).unwrap(),
            CallsLock::open(&path).unwrap(),
        );
        let reclaimer = open(&path).unwrap();
        assert!(a.take().unwrap());
        assert!(b.take().unwrap(), "sessions share it");
        assert!(!flock(&reclaimer, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        a.release();
        assert!(!flock(&reclaimer, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        b.release();
        assert!(flock(&reclaimer, libc::LOCK_EX | libc::LOCK_NB).unwrap());
        assert!(
            !a.take().unwrap(),
            "no request starts while a reclaim holds it"
        );
        let _ = flock(&reclaimer, libc::LOCK_UN);
        assert!(a.take().unwrap());
        a.release();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
