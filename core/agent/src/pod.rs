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
use crate::sys;

/// How long processes get between SIGTERM and SIGKILL when the pod stops:
/// the kubelet's own grace bounds the whole anyway.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Copies this executable to `dir/agent` (through a temporary file and a
/// rename: a half-written agent is never there to run).
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
    std::fs::rename(&tmp, dir.join("agent"))
}

/// The init of a pod's container: reaps children until SIGTERM or SIGINT,
/// then stops every process and returns the exit code (0).
pub fn init() -> i32 {
    let set = match handled_signals() {
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
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is a valid, initialised sigset_t; `sig` is storage.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc != 0 {
            continue;
        }
        reap();
        if sig == libc::SIGTERM || sig == libc::SIGINT {
            info!("stopping: signal {sig}");
            stop_all(STOP_GRACE);
            return 0;
        }
    }
}

/// Blocks SIGCHLD, SIGTERM and SIGINT (with do-nothing handlers: the kernel
/// drops default-disposition signals before they reach a namespace's init).
fn handled_signals() -> io::Result<libc::sigset_t> {
    extern "C" fn ignore(_: libc::c_int) {}
    // SAFETY: an all-zero sigset_t is valid storage for sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid storage.
    sys::cvt(unsafe { libc::sigemptyset(&mut set) })?;
    for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
        // SAFETY: an all-zero sigaction is a valid starting value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        // SAFETY: `sa` is initialised, its handler async-signal-safe.
        unsafe {
            sys::cvt(libc::sigemptyset(&mut sa.sa_mask))?;
            sys::cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
            sys::cvt(libc::sigaddset(&mut set, sig))?;
        }
    }
    // SAFETY: `set` is a valid sigset_t.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(set)
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
        // Again over an existing copy.
        install(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
