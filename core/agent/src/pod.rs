//! The agent in a Kubernetes pod (the `burrow-kube` backend).
//!
//! A pod's main container runs `burrow-agent --init` as its PID 1: it serves
//! no channel, it only does an init's duties (reap every orphan; on SIGTERM,
//! which the kubelet sends when the pod is deleted, stop every process of
//! the container within the grace and exit 0). Each host process that
//! reaches the sandbox execs a session agent (`burrow-agent` on the exec
//! stream's stdin/stdout) through the API server; a session's processes are
//! its own and end with it, as a client's requests end with the client.
//!
//! The agent gets into the pod without changing the user's image: an init
//! container of the agent image runs `burrow-agent --install DIR`, which
//! copies the running binary into DIR (an emptyDir volume the main container
//! mounts at `/.burrow`).

use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::log::{info, warning};
use crate::{reaper, sys};

/// How long processes get between SIGTERM and SIGKILL when the pod stops:
/// the kubelet's own grace bounds the whole anyway.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The file whose `flock` tells a reclaim whether requests are in flight
/// (see `calls`), next to the agent.
pub const CALLS_LOCK: &str = "calls.lock";

/// Copies this executable to `dir/agent` (through a temporary file and a
/// rename: a half-written agent is never there to run), and makes the
/// calls lock file beside it (the main container sees `dir` read-only).
pub fn install(dir: &Path) -> io::Result<()> {
    let exe = std::fs::read("/proc/self/exe")?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(".agent.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&tmp)?;
    f.write_all(&exe)?;
    f.sync_all()?;
    drop(f);
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, dir.join("agent"))?;
    let lock = dir.join(CALLS_LOCK);
    if lock.exists() {
        return Ok(());
    }
    std::fs::write(&lock, b"")?;
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o444))
}

/// The init of a pod's container: reaps children until SIGTERM or SIGINT,
/// then stops every process and returns the exit code (0).
pub fn init() -> i32 {
    // The agent's own signal set (SIGCHLD, SIGTERM, SIGINT), blocked with
    // do-nothing handlers so that they reach a namespace's init.
    let signals = match reaper::block_signals() {
        Ok(s) => s,
        Err(e) => {
            warning!("cannot block signals: {e}");
            return 1;
        }
    };
    info!(
        "agent {} serving as the pod's init",
        env!("CARGO_PKG_VERSION")
    );
    loop {
        let sig = signals.wait();
        reap();
        if sig == libc::SIGTERM || sig == libc::SIGINT {
            info!("stopping: signal {sig}");
            stop_all(STOP_GRACE);
            return 0;
        }
    }
}

/// Reaps every exited child (orphans included) without blocking.
fn reap() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG writes only `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// SIGTERM to every process of the namespace, SIGKILL to what is left after
/// `grace`, reaping as they go.
fn stop_all(grace: Duration) {
    let gone = || {
        reap();
        sys::no_children()
    };
    let _ = sys::kill(-1, libc::SIGTERM);
    if !sys::wait_until(grace, gone) {
        let _ = sys::kill(-1, libc::SIGKILL);
        sys::wait_until(Duration::from_secs(2), gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_copies_this_executable_atomically() {
        let dir = std::env::temp_dir().join(format!("burrow-agent-install-{}", std::process::id()));
        install(&dir).unwrap();
        let copied = std::fs::read(dir.join("agent")).unwrap();
        assert_eq!(copied, std::fs::read("/proc/self/exe").unwrap());
        let mode = std::fs::metadata(dir.join("agent"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!dir.join(".agent.tmp").exists());
        assert!(dir.join(CALLS_LOCK).is_file());
        // Again over an existing copy.
        install(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
