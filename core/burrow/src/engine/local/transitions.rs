//! Start, stop, drain, remove and runtime connections of the local backend.

use std::time::Duration;

use burrow_protocol::{Control, GuestErrorCode, Identity, Response, OLDEST_PROTOCOL_VERSION};
use tokio::net::UnixStream;

use super::LocalBackend;
use crate::backend::{RuntimeStream, StartOptions, StopOptions, RUN_END_BOUND};
use crate::channel::client::{AgentClient, ConnectError, Handshake};
use crate::engine::fault::Fault;
use crate::engine::locks::FileLock;
use crate::engine::procs::ProcIdentity;
use crate::error::{Error, Result};
use crate::lifecycle::{open_step, Open, Operation, Step};
use crate::model::{ExitReason, SandboxId, SandboxInfo, Status};

const CONTROL_HELLO: Duration = Duration::from_secs(10);

impl LocalBackend {
    /// `converge`: connect_or_start semantics (wait through Starting, accept
    /// Running). Otherwise strict start semantics.
    pub(super) async fn do_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
        converge: bool,
    ) -> Result<SandboxInfo> {
        loop {
            let rec = self.lookup(name, id).await?;
            let info = rec.info;
            let op = if converge {
                Operation::ConnectOrStart
            } else {
                Operation::Start
            };
            match op.step(info.status) {
                Step::Done => return Ok(info),
                Step::Wait => {
                    // Observe, do not hold any lock while someone else boots.
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Step::Refuse => return Err(op.refusal(&info)),
                Step::Act => {}
            }
            // The claim is the only step under the per-name transition lock;
            // the boot itself happens outside it.
            let claimed = {
                let _lock = self.name_lock(name).await?;
                self.store
                    .claim_start(id, ProcIdentity::current(), opts.detached)
                    .await?
            };
            match claimed {
                Some(generation) => {
                    crate::engine::fault::point(Fault::StartAfterClaim);
                    let detached = opts.detached.unwrap_or(info.detached);
                    // The boot runs in its own task: if the caller gives up
                    // (drops this future), the start still completes or is
                    // recorded as failed, never left Starting by us.
                    let backend = self.clone();
                    let task =
                        tokio::spawn(
                            async move { backend.boot(&info, generation, detached).await },
                        );
                    return task
                        .await
                        .map_err(|e| Error::protocol(format!("start task failed: {e}")))?;
                }
                // Another caller claimed it first: observe their start.
                None => continue,
            }
        }
    }

    async fn boot(
        &self,
        info: &SandboxInfo,
        generation: u64,
        detached: bool,
    ) -> Result<SandboxInfo> {
        let outcome = self.spawn_and_wait(info, generation, detached).await;
        match outcome {
            Ok(()) => {
                let rec = self.lookup(&info.name, &info.id).await?;
                Ok(rec.info)
            }
            Err(reason) => {
                // Whatever happened, the claim must not stay Starting. If the
                // supervisor already recorded the failure this is a no-op.
                self.store
                    .finish_run(
                        &info.id,
                        generation,
                        Status::Crashed,
                        ExitReason::StartFailed,
                        Some(&reason),
                    )
                    .await?;
                // A published port another process has: its own code.
                if let Some(e) = crate::engine::supervisor::port_failure(&reason) {
                    return Err(e);
                }
                Err(Error::StartFailed {
                    name: info.name.clone(),
                    id: info.id.clone(),
                    reason,
                })
            }
        }
    }

    /// A stop (or kill) of a hibernated sandbox discards its saved guest:
    /// the next start boots afresh, and the run says `stopped`. Returns
    /// `None` when a start claimed the saved guest first (its rename came
    /// before ours): that start came first, so the caller looks again and
    /// stops the run it began.
    async fn discard_hibernation(
        &self,
        name: &str,
        id: &SandboxId,
        info: SandboxInfo,
    ) -> Result<Option<SandboxInfo>> {
        let hibernated = info.status == Status::Stopped
            && info.last_run.as_ref().and_then(|r| r.exit_reason) == Some(ExitReason::Hibernated);
        if !hibernated {
            return Ok(Some(info));
        }
        // The window a concurrent start lands in: the row read as
        // hibernated, the saved guest not yet taken.
        crate::engine::fault::hold(Fault::StopBeforeDiscard).await;
        let driver = crate::engine::driver::for_config(&info.config);
        if !driver.discard_saved(&self.home.sandbox_dir(id))? {
            let now = self.lookup(name, id).await?.info;
            if now.generation != info.generation {
                return Ok(None);
            }
            // The same run, and its saved guest is gone (lost outside
            // burrow): the next start is fresh all the same.
        }
        self.store.forget_hibernation(id, info.generation).await?;
        Ok(Some(self.lookup(name, id).await?.info))
    }

    /// Stops (`Some(opts)`) or kills (`None`) exactly `id`.
    pub(super) async fn do_stop(
        &self,
        name: &str,
        id: &SandboxId,
        opts: Option<StopOptions>,
    ) -> Result<SandboxInfo> {
        loop {
            let rec = self.lookup(name, id).await?;
            let info = rec.info;
            let op = if opts.is_some() {
                Operation::Stop
            } else {
                Operation::Kill
            };
            match op.step(info.status) {
                Step::Done => match self.discard_hibernation(name, id, info).await? {
                    Some(info) => return Ok(info),
                    // A start took the saved guest first: stop its run.
                    None => continue,
                },
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Step::Refuse => return Err(op.refusal(&info)),
                Step::Act => {}
            }
            let body = match opts {
                Some(o) => Control::Stop {
                    grace_ms: o.grace.as_millis() as u64,
                    owner_exited: o.owner_exited,
                },
                None => Control::Kill,
            };
            let bound = opts.map(|o| o.grace).unwrap_or_default() + Duration::from_secs(30);
            match self.control(&info, body).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::debug!(sandbox = %id, error = %e, "supervisor unreachable for stop");
                    if opts.is_none() {
                        self.kill_supervisor(&info, rec.owner).await?;
                    }
                }
            }
            let generation = info.generation;
            let after = tokio::time::timeout(
                bound,
                self.wait_until(name, id, |i| {
                    i.generation != generation || !i.status.has_runtime()
                }),
            )
            .await
            .map_err(|_| Error::Timeout {
                operation: "stopping the sandbox".into(),
                after: bound,
            })??;
            if after.generation == generation {
                return Ok(after);
            }
            // Restarted by someone else meanwhile: that is a new run; stop it too.
        }
    }

    /// Last resort when the supervisor does not answer: SIGKILL it. The
    /// agent sees its channel close and the runtime goes down with it.
    async fn kill_supervisor(&self, info: &SandboxInfo, owner: Option<ProcIdentity>) -> Result<()> {
        let sup = info.last_run.as_ref().and_then(|r| r.supervisor_pid);
        if let Some(o) = owner.filter(|o| Some(o.pid) == sup && o.is_alive()) {
            // SAFETY: kill(2) with a pid we just verified (pid + start time)
            // to be this sandbox's supervisor.
            unsafe { libc::kill(o.pid as libc::pid_t, libc::SIGKILL) };
            let mut waited = 0;
            while o.is_alive() && waited < 500 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                waited += 1;
            }
            self.store
                .finish_run(
                    &info.id,
                    info.generation,
                    Status::Stopped,
                    ExitReason::Killed,
                    Some("supervisor killed"),
                )
                .await?;
        }
        Ok(())
    }

    pub(super) async fn do_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        match self
            .control_live(name, id, Operation::Drain, Control::Drain)
            .await?
        {
            (info, None) => Ok(info),
            (_, Some(_)) => self.lookup(name, id).await.map(|r| r.info),
        }
    }

    pub(super) async fn do_detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        // A start in progress has a supervisor that may still be watching
        // the owner: control_live lets it finish, then tells it. Without a
        // run (or once the run ended before it heard), the stored flag.
        if let (_, None) = self
            .control_live(name, id, Operation::Detach, Control::Detach)
            .await?
        {
            self.store.set_detached(id, true).await?;
        }
        self.lookup(name, id).await.map(|r| r.info)
    }

    /// Sends `body` to the run of the sandbox once `operation` acts in its
    /// status (Starting is waited through first). A run that ends before
    /// answering, or that refuses because its status changed meanwhile (a
    /// pause, a drain), is not an error of its own: the operation is decided
    /// again on the status it is in then. `None`: nothing was sent.
    pub(super) async fn control_live(
        &self,
        name: &str,
        id: &SandboxId,
        operation: Operation,
        body: Control,
    ) -> Result<(SandboxInfo, Option<Response>)> {
        loop {
            let info = self.lookup(name, id).await?.info;
            match operation.step(info.status) {
                Step::Done => return Ok((info, None)),
                Step::Refuse => return Err(operation.refusal(&info)),
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Step::Act => {}
            }
            match self.control_answer(&info, body.clone()).await {
                Ok(r) => return Ok((info, Some(r))),
                Err(ControlError::Ended) => continue,
                // What this host cannot do at all (a rootless pause
                // without a cgroup freezer): the caller's typed refusal.
                Err(ControlError::Refused(g)) if g.code == GuestErrorCode::Unsupported => {
                    return Err(Error::unsupported(g.message));
                }
                Err(ControlError::Refused(g)) => {
                    let now = self.lookup(name, id).await?.info;
                    if (now.status, now.generation) == (info.status, info.generation) {
                        return Err(Error::Guest {
                            operation: operation.as_str().into(),
                            failure: crate::error::GuestFailure(g),
                        });
                    }
                }
                Err(ControlError::Failed(e)) => return Err(e),
            }
        }
    }

    pub(super) async fn do_remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        let info = self.lookup(name, id).await?.info;
        if Operation::Remove.step(info.status) != Step::Act {
            return Err(Operation::Remove.refusal(&info));
        }
        let dir = self.home.sandbox_dir(id);
        // Held from before the record goes until the directory is gone, so
        // that a backend opened meanwhile (by any process) does not sweep
        // the directory as an orphan while its runtime state is reclaimed
        // here. No directory (never started, or already removed): nothing
        // to reclaim, nothing to protect.
        let _removing = FileLock::acquire(&dir.join(super::REMOVAL_LOCK)).await.ok();
        let deleted = {
            let _lock = self.name_lock(name).await?;
            self.store.delete(id).await?
        };
        if !deleted {
            // Started (or removed) by someone else between the check and the lock.
            let info = self.lookup(name, id).await?.info;
            return Err(Error::InvalidState {
                operation: "remove".into(),
                name: info.name,
                id: info.id,
                status: info.status,
            });
        }
        crate::engine::fault::hold(Fault::RemoveAfterDelete).await;
        // A run that crashed may have left runtime state (container state,
        // cgroups, mount points) behind; release it before deleting.
        let runtime_dir = dir.join("runtime");
        let reclaimed = crate::engine::driver::for_config(&info.config)
            .reclaim_stale(id, &runtime_dir)
            .await;
        if let Err(e) = reclaimed {
            tracing::debug!(sandbox = %id, error = %e, "reclaiming stale runtime state");
        }
        if let Err(e) = crate::engine::driver::container::remove_sandbox_dir(&dir).await {
            // The record is gone; the next open sweeps the directory.
            tracing::warn!(sandbox = %id, error = %e, "could not delete the sandbox directory");
        }
        // A supervisor that was killed leaves its socket behind (the next
        // run of the id would have replaced it; there is none now).
        let _ = std::fs::remove_file(self.home.socket_path(id));
        tracing::info!(sandbox = %id, name, "removed");
        Ok(())
    }

    pub(super) async fn do_open_runtime(
        &self,
        name: &str,
        id: &SandboxId,
        wake: bool,
    ) -> Result<RuntimeStream> {
        // A run found ending is waited for; a restart that follows it is
        // then waited for too (the caller found the sandbox running).
        let mut settled = false;
        loop {
            let info = self.lookup(name, id).await?.info;
            match open_step(&info, wake, settled) {
                Open::Connect => {}
                // Someone else's (demand) start is in progress: converge on it.
                Open::WaitForStart => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Open::DemandStart => {
                    // Demand start: same id, same configuration, the normal
                    // start path. It runs in its own task, so it completes
                    // (and records its outcome) even if this caller gives up.
                    let backend = self.clone();
                    let (n, i) = (name.to_owned(), id.clone());
                    tracing::info!(sandbox = %id, "demand start after idle reclaim");
                    tokio::spawn(async move {
                        backend
                            .do_start(&n, &i, StartOptions::default(), true)
                            .await
                    })
                    .await
                    .map_err(|e| Error::protocol(format!("demand start task failed: {e}")))??;
                    continue;
                }
                _ => return Err(Operation::Exec.refusal(&info)),
            }
            match self.connect_supervisor(&info).await? {
                Some(stream) => {
                    let (r, w) = stream.into_split();
                    return Ok(RuntimeStream {
                        reader: Box::new(r),
                        writer: Box::new(w),
                        generation: info.generation,
                    });
                }
                // The run is ending: wait for its end, then decide again on
                // what it settled to (a demand start, or the typed error).
                None => {
                    self.settle_run(&info).await?;
                    settled = true;
                }
            }
        }
    }

    /// Connects to the supervisor of `info`'s run. `None`: it no longer
    /// accepts connections, which for a record that still shows the run
    /// means the run is ending (the socket lives from before Running is
    /// published until the end of the run).
    async fn connect_supervisor(&self, info: &SandboxInfo) -> Result<Option<UnixStream>> {
        connect_socket(&self.home.socket_path(&info.id)).await
    }

    /// Waits until the run of `info` has ended: its end recorded by its
    /// supervisor, or the supervisor found dead (reconciled to Crashed), or
    /// a newer run begun. Bounded by [`RUN_END_BOUND`]: a supervisor that
    /// neither finishes nor dies in that time is reported as a `timeout`.
    pub(super) async fn settle_run(&self, info: &SandboxInfo) -> Result<()> {
        let generation = info.generation;
        tokio::time::timeout(
            RUN_END_BOUND,
            self.wait_until(&info.name, &info.id, |i| {
                i.generation != generation || !i.status.has_runtime()
            }),
        )
        .await
        .map_err(|_| Error::Timeout {
            operation: format!(
                "waiting for the end of run {generation} of sandbox {:?} (its supervisor stopped accepting connections; `burrow kill {}` ends it)",
                info.name, info.id
            ),
            after: RUN_END_BOUND,
        })??;
        Ok(())
    }

    /// Sends a control request to the supervisor of `info`'s generation and
    /// waits for its answer; a run that ended meanwhile counts as answered
    /// (callers that must act on what it ended in use [`Self::control_answer`]).
    pub(super) async fn control(&self, info: &SandboxInfo, body: Control) -> Result<()> {
        match self.control_answer(info, body).await {
            Ok(_) | Err(ControlError::Ended) => Ok(()),
            Err(ControlError::Refused(g)) => Err(Error::protocol(g.to_string())),
            Err(ControlError::Failed(e)) => Err(e),
        }
    }

    /// Like [`LocalBackend::control`], returning the supervisor's answer, or
    /// [`ControlError::Ended`] once a run that ended before answering has
    /// recorded its end.
    pub(super) async fn control_answer(
        &self,
        info: &SandboxInfo,
        body: Control,
    ) -> std::result::Result<Response, ControlError> {
        let ended = || async {
            match self.settle_run(info).await {
                Ok(_) => ControlError::Ended,
                Err(e) => ControlError::Failed(e),
            }
        };
        let stream = match self.connect_supervisor(info).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(ended().await),
            Err(e) => return Err(ControlError::Failed(e)),
        };
        let (r, w) = stream.into_split();
        let expect = Identity {
            sandbox_id: info.id.to_string(),
            generation: info.generation,
        };
        // Protocol 1, which every supervisor speaks (one started by an
        // older build too): control requests stream nothing, so they need
        // none of protocol 2's flow control.
        let how = Handshake::Client {
            expect: Some(expect),
            version: OLDEST_PROTOCOL_VERSION,
        };
        let client = match AgentClient::connect(r, w, how, CONTROL_HELLO).await {
            Ok(c) => c,
            // A newer generation answers: ours is already gone.
            Err(ConnectError::Refused(g)) if g.code == GuestErrorCode::IdentityMismatch => {
                return Err(ended().await)
            }
            Err(ConnectError::Refused(g)) => return Err(ControlError::Refused(g)),
            // Closed during the hello: the listener went away with the run.
            Err(ConnectError::Other(Error::Timeout { operation, after })) => {
                return Err(ControlError::Failed(Error::Timeout { operation, after }))
            }
            Err(ConnectError::Other(_)) => return Err(ended().await),
        };
        let handle = client.control(body).map_err(ControlError::Failed)?;
        match handle.response().await {
            Ok(Ok(r)) => Ok(r),
            // Cut off by the run's end (a save the run did not finish).
            Ok(Err(g)) if g.code == GuestErrorCode::Aborted => Err(ended().await),
            Ok(Err(g)) => Err(ControlError::Refused(g)),
            // The supervisor exits right after finishing a stop; losing the
            // connection then is the expected end.
            Err(_) => Err(ended().await),
        }
    }
}

/// Why a control request did not get an answer.
#[derive(Debug)]
pub(super) enum ControlError {
    /// The run ended before answering (its supervisor stopped accepting
    /// connections, the connection was lost, or a newer generation
    /// answered), waited for until its end was recorded.
    Ended,
    /// The supervisor answered with an error.
    Refused(burrow_protocol::GuestError),
    /// The supervisor could not be reached.
    Failed(Error),
}

/// Connects to a supervisor socket. `None`: nobody accepts connections
/// there any more (see [`LocalBackend::connect_supervisor`]): no socket
/// file, nobody listening, or a connection reset before it completed (it
/// was queued in the backlog of a listener that then closed, as a
/// supervisor's does when its run stops accepting).
async fn connect_socket(path: &std::path::Path) -> Result<Option<UnixStream>> {
    match UnixStream::connect(path).await {
        Ok(s) => Ok(Some(s)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(Error::io(
            "connecting to the sandbox supervisor (check that the burrow home and its run/ directory are readable by this user)",
            Some(path),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Poll;

    use super::connect_socket;

    /// A supervisor that stops accepting closes its listener with the
    /// connections queued in its backlog: one whose connect had not
    /// completed yet fails with ECONNRESET. That is the end of the run, like
    /// a missing socket, not an I/O error (found by core/cli/tests/soak.rs).
    #[tokio::test(flavor = "current_thread")]
    async fn a_connect_reset_by_a_closing_listener_is_the_end_of_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let connect = connect_socket(&path);
        tokio::pin!(connect);
        // Queued in the backlog; the connect waits for writability, which
        // the reactor reports on its next turn.
        let first = std::future::poll_fn(|cx| Poll::Ready(connect.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the connect completed at once");
        drop(listener);
        let r = connect.await;
        assert!(matches!(r, Ok(None)), "{r:?}");
    }
}
