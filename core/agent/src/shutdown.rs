//! Orderly exit: terminate guest processes (SIGTERM, grace, SIGKILL), let
//! in-flight requests send their last frames, sync, answer `Shutdown`
//! requests, flush the channel and exit (in a microVM: end the VM, see
//! [`sys::exit_process`]).
//!
//! SAFETY-CRITICAL: `kill(-1, ..)` hits every process the caller may signal.
//! Only PID 1 of a PID namespace may use it (there it means "everything in
//! this sandbox"). Anywhere else (tests on a developer's machine, running as
//! root!) the agent signals only the process groups it spawned itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow_protocol::{GuestMsg, Response};

use crate::agent::{lock, Agent};
use crate::log::info;
use crate::sys;

/// Grace between SIGTERM and SIGKILL when the channel closes.
pub const EOF_GRACE: Duration = Duration::from_millis(250);
/// Grace between SIGTERM and SIGKILL when the agent itself gets SIGTERM/SIGINT.
pub const SIGNAL_GRACE: Duration = Duration::from_secs(3);
/// How long to wait for processes to disappear after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// How long in-flight requests get to send their final frames.
const REQUESTS_WAIT: Duration = Duration::from_secs(1);
/// How long to try to get the last frames to the host.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Whether a shutdown has begun, and which `Shutdown` requests await `Done`.
#[derive(Debug, Default)]
pub struct ShutdownState {
    /// New requests are refused.
    refusing: AtomicBool,
    /// Someone runs the shutdown procedure.
    claimed: AtomicBool,
    replies: Mutex<Vec<u64>>,
}

impl ShutdownState {
    /// Whether a shutdown has begun (new requests are then refused).
    pub fn started(&self) -> bool {
        self.refusing.load(Ordering::SeqCst)
    }

    /// Refuses new requests from now on. The main thread calls this when it
    /// dispatches a `Shutdown`, so that every request after it in the
    /// channel is refused, however the threads get scheduled.
    pub fn refuse_new(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }
}

/// Shuts the agent down and exits the process with `code`. The first caller
/// does the work; later callers (a second signal, a `Shutdown` request during
/// an EOF shutdown) only register their reply and wait for the exit.
pub fn run(agent: &Arc<Agent>, grace: Duration, reply_to: Option<u64>, code: i32) -> ! {
    if let Some(id) = reply_to {
        lock(&agent.shutdown.replies).push(id);
    }
    agent.shutdown.refuse_new();
    if agent.shutdown.claimed.swap(true, Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    info!(
        "shutting down: SIGTERM, {} ms grace, SIGKILL",
        grace.as_millis()
    );
    terminate_processes(agent, grace);

    // Tunnels, file writes and the like wait for host input that may never
    // come: cancel them, and give every request a moment to send its final
    // frames (exec responses carry the exit statuses just collected).
    let is_reply = |id: &u64| lock(&agent.shutdown.replies).contains(id);
    let others = || {
        agent
            .requests
            .ids()
            .into_iter()
            .filter(|id| !is_reply(id))
            .count()
    };
    let replies = lock(&agent.shutdown.replies).clone();
    agent.requests.cancel_all(&replies);
    if !sys::wait_until(REQUESTS_WAIT, || others() == 0) {
        info!("{} requests did not finish in time", others());
    }

    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };

    let deadline = Instant::now() + FLUSH_WAIT;
    for id in lock(&agent.shutdown.replies).clone() {
        agent.requests.remove(id);
        agent.out.send_by(
            GuestMsg::Response {
                id,
                result: Ok(Response::Done),
            },
            deadline,
        );
    }
    agent.out.flush_by(deadline);
    info!("exiting with code {code}");
    sys::exit_process(code)
}

fn terminate_processes(agent: &Agent, grace: Duration) {
    if agent.pid1 {
        // PID 1: everything in the namespace (or VM) is ours and descends
        // from us. kill(-1) never signals the caller itself.
        let gone = sys::no_children;
        let _ = sys::kill(-1, libc::SIGTERM);
        if !sys::wait_until(grace, gone) {
            let _ = sys::kill(-1, libc::SIGKILL);
            sys::wait_until(KILL_WAIT, gone);
        }
    } else {
        // Not PID 1: only the process groups we spawned. Never kill(-1) here.
        let procs = &agent.procs;
        procs.signal_all(libc::SIGTERM);
        if !sys::wait_until(grace, || procs.len() == 0) {
            procs.signal_all(libc::SIGKILL);
            sys::wait_until(KILL_WAIT, || procs.len() == 0);
        }
    }
}
