//! Child processes and signals.
//!
//! One strategy for PID 1 and for an ordinary process alike: SIGCHLD,
//! SIGTERM and SIGINT are blocked in every thread (before the first thread
//! exists) and a single signal thread takes them with `sigwait`. On SIGCHLD it
//! reaps *every* exited child with `waitpid`, which also collects orphans that
//! reparented to us as PID 1, and hands the status of a tracked process to
//! the mailbox of the request that spawned it. Nothing else in the agent
//! waits for children (no `std::process::Child::wait`), so no status is ever
//! stolen.
//!
//! SIGTERM and SIGINT start a graceful shutdown.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::agent::{lock, Agent};
use crate::log::{info, warning};
use crate::mailbox::{Event, Mailbox};
use crate::{shutdown, sys};

/// Signals handled by the signal thread.
const HANDLED: [libc::c_int; 3] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT];

/// The set of handled signals, blocked in the calling thread.
#[derive(Clone, Copy)]
pub struct Signals(libc::sigset_t);

impl Signals {
    /// Waits for the next handled signal; its number.
    pub fn wait(&self) -> libc::c_int {
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: the set is a valid, initialised sigset_t; `sig` is storage.
            if unsafe { libc::sigwait(&self.0, &mut sig) } == 0 {
                return sig;
            }
        }
    }
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signals")
    }
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Installs (never running) handlers and blocks the handled signals. Must be
/// called before any other thread is started, so every thread inherits the
/// mask. The handlers matter for PID 1: the kernel drops signals that have
/// the default disposition before they reach a namespace's init.
pub fn block_signals() -> io::Result<Signals> {
    // SAFETY: an all-zero sigset_t is valid storage for sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid, exclusively borrowed storage.
    sys::cvt(unsafe { libc::sigemptyset(&mut set) })?;
    for sig in HANDLED {
        // SAFETY: an all-zero sigaction is a valid starting value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        // SAFETY: `sa` is fully initialised and the handler is async-signal-safe
        // (it does nothing); `set` is valid.
        unsafe {
            sys::cvt(libc::sigemptyset(&mut sa.sa_mask))?;
            sys::cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
            sys::cvt(libc::sigaddset(&mut set, sig))?;
        }
    }
    // SAFETY: `set` is a valid sigset_t; the old mask is not needed.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(Signals(set))
}

/// Processes spawned for requests, by pid (each is also its process group
/// and session id), with the mailbox their exit status goes to.
#[derive(Debug, Default)]
pub struct Processes {
    table: Mutex<HashMap<libc::pid_t, Mailbox>>,
}

impl Processes {
    /// Runs `fork` (which returns the child's pid in the parent) and tracks
    /// the child. The table lock is held across the fork, so the reaper
    /// cannot collect the child's status before it is registered.
    pub fn spawn(
        &self,
        mailbox: Mailbox,
        fork: impl FnOnce() -> io::Result<libc::pid_t>,
    ) -> io::Result<libc::pid_t> {
        let mut table = lock(&self.table);
        let pid = fork()?;
        table.insert(pid, mailbox);
        Ok(pid)
    }

    /// Sends `sig` to the process group of a tracked process. Fails with
    /// ESRCH once the leader has been reaped: its pid (and so the group id)
    /// may then be reused, so the group is never addressed again.
    pub fn signal_group(&self, pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        let table = lock(&self.table);
        // The reaper reaps a pid only while holding this lock (see `reap`),
        // so a pid found here still names our process and its group.
        if pid > 1 && table.contains_key(&pid) {
            sys::kill(-pid, sig)
        } else {
            Err(io::Error::from_raw_os_error(libc::ESRCH))
        }
    }

    /// Sends `sig` to the process group of every tracked process. This is
    /// how a non-PID-1 agent terminates "everything": only what it spawned.
    pub fn signal_all(&self, sig: libc::c_int) {
        let table = lock(&self.table);
        for &pid in table.keys() {
            if pid > 1 {
                let _ = sys::kill(-pid, sig);
            }
        }
    }

    /// Number of tracked processes still running (or unreaped).
    pub fn len(&self) -> usize {
        lock(&self.table).len()
    }

    /// Reaps every exited child and dispatches tracked statuses.
    fn reap(&self) {
        loop {
            // Peek first (WNOWAIT): the child stays a zombie, so its pid
            // cannot be reused while we take the lock.
            // SAFETY: an all-zero siginfo_t is valid storage for waitid.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is valid, exclusively borrowed storage.
            let r = unsafe {
                libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            if r == -1 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return; // ECHILD: no children at all.
            }
            // SAFETY: waitid succeeded with WEXITED, so si_pid is the field in use
            // (it is 0 when no child has exited yet).
            let pid = unsafe { info.si_pid() };
            if pid == 0 {
                return;
            }
            let mut table = lock(&self.table);
            let mut status = 0;
            // SAFETY: `status` is valid storage; `pid` is an exited child of ours.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if got != pid {
                warning!(
                    "waitpid({pid}) returned {got}: {}",
                    io::Error::last_os_error()
                );
                return;
            }
            let mailbox = table.remove(&pid);
            drop(table);
            if let Some(mailbox) = mailbox {
                mailbox.send(Event::Exited(status));
            }
        }
    }
}

/// Starts the signal thread.
pub fn start(agent: Arc<Agent>, signals: Signals) -> io::Result<()> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || signal_loop(agent, signals))?;
    Ok(())
}

fn signal_loop(agent: Arc<Agent>, signals: Signals) {
    agent.procs.reap();
    loop {
        match signals.wait() {
            libc::SIGCHLD => agent.procs.reap(),
            sig @ (libc::SIGTERM | libc::SIGINT) => {
                info!("received signal {sig}: shutting down");
                // Shut down on another thread: this one must keep reaping.
                let agent = agent.clone();
                let spawned = std::thread::Builder::new()
                    .name("shutdown".into())
                    .spawn(move || shutdown::run(&agent, shutdown::SIGNAL_GRACE, None, 0));
                if let Err(e) = spawned {
                    warning!("cannot start the shutdown thread: {e}");
                }
            }
            _ => {}
        }
    }
}
