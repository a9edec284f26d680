//! One request to a sandbox's run that rides through lifecycle boundaries.
//!
//! A run can end under any call: an idle reclaim, a stop, a restart, a kill,
//! a crash, a drain. A request the run did not take (its supervisor refused
//! it unrun, stopped accepting connections, or went away without a word) is
//! sent again, with its input replayed, once the run has settled: to the new
//! run of a restart, or after a demand start of a sandbox reclaimed for
//! idleness. A request the run took and lost is never sent twice; it ends in
//! the typed error of the status the sandbox settled in.

use std::time::{Duration, Instant};

use std::sync::Arc;

use burrow_protocol::{GuestErrorCode, GuestMsg, Request, TtySize};

use super::input::{self, InputSide};
use super::Sandbox;
use crate::backend::RUN_END_BOUND;
use crate::channel::client::RequestHandle;
use crate::error::{Error, GuestFailure, Result};
use crate::model::{ExitReason, SandboxInfo, Status};

/// How many times one request is sent again after meeting the end of a run.
const MAX_RESENDS: u32 = 8;

/// How a request ended without an answer from its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Not run: refused by the supervisor (it no longer takes work), or the
    /// connection failed or was lost before any frame. A supervisor answers
    /// every request it took before it exits, so silence means untaken.
    Unrun,
    /// Taken, then cut off (the guest went away under it).
    Taken,
}

/// A request in flight, re-sent across lifecycle boundaries while unrun.
#[derive(Debug)]
pub(crate) struct Attempt {
    sandbox: Sandbox,
    operation: &'static str,
    body: Request,
    wake: bool,
    handle: RequestHandle,
    generation: u64,
    /// Stdin, file content, pty sizes: written through shared references.
    input: Arc<InputSide>,
    resends: u32,
    finished: bool,
}

impl Attempt {
    /// Sends `body` to the sandbox's run (connecting, or waking a reclaimed
    /// sandbox, as needed).
    pub(crate) async fn start(
        sandbox: &Sandbox,
        operation: &'static str,
        body: Request,
    ) -> Result<Attempt> {
        // Health checks never wake a reclaimed sandbox; real work does.
        let wake = !matches!(body, Request::Ping);
        let (handle, generation) = sandbox.request(operation, body.clone(), wake).await?;
        Ok(Attempt {
            sandbox: sandbox.clone(),
            operation,
            body,
            wake,
            input: Arc::new(InputSide::new(handle.input())),
            handle,
            generation,
            resends: 0,
            finished: false,
        })
    }

    /// Waits until the run has read the request: a process it started is
    /// then work in flight that a drain waits for and an idle reclaim does
    /// not cut, even when the drain or reclaim comes right after on another
    /// connection.
    pub(crate) async fn delivered(&self) {
        self.handle.delivered().await;
    }

    /// The input side, to write through while the output is read.
    pub(crate) fn input(&self) -> Arc<InputSide> {
        self.input.clone()
    }

    /// Sends input data (stdin, file content, tunnel bytes), waiting for
    /// credit.
    pub(crate) async fn send_data(&self, data: &[u8]) -> Result<()> {
        self.input.send_data(data).await
    }

    /// Ends the input.
    pub(crate) async fn send_eof(&self) -> Result<()> {
        self.input.send_eof().await
    }

    /// Resizes the request's pty.
    pub(crate) async fn resize(&self, size: TtySize) -> Result<()> {
        self.input.resize(size).await
    }

    /// Signals the request's process (not replayed: a resent request is a
    /// process that never saw the earlier one's signals).
    pub(crate) fn signal(&self, signal: i32) -> Result<()> {
        match self.handle.signal(signal) {
            // On a connection that just closed: the next frame (or its
            // absence) tells what happened to the request.
            Err(_) if !self.input.taken() => Ok(()),
            other => other,
        }
    }

    /// The next frame of the request: output, then its final `Response`
    /// (only successful ones; a refusal becomes the typed error). `None`
    /// after the response.
    pub(crate) async fn next(&mut self) -> Result<Option<GuestMsg>> {
        if self.finished {
            return Ok(None);
        }
        loop {
            let Some(msg) = self.handle.next().await else {
                if self.input.taken() {
                    return Err(self.cut(Cut::Taken).await);
                }
                self.resend().await?;
                continue;
            };
            match msg {
                GuestMsg::Response { result: Err(g), .. } => {
                    let cut = match g.code {
                        GuestErrorCode::Unavailable if !self.input.taken() => Cut::Unrun,
                        GuestErrorCode::Unavailable | GuestErrorCode::Aborted => Cut::Taken,
                        _ => {
                            self.finished = true;
                            return Err(Error::Guest {
                                operation: self.operation.into(),
                                failure: GuestFailure(g),
                            });
                        }
                    };
                    if cut == Cut::Taken {
                        return Err(self.cut(cut).await);
                    }
                    self.resend().await?;
                }
                GuestMsg::Response { .. } => {
                    self.finished = true;
                    return Ok(Some(msg));
                }
                other => {
                    self.input.set_taken();
                    return Ok(Some(other));
                }
            }
        }
    }

    /// Abandons the request and waits until the sandbox let go of it (its
    /// response, or the end of its run): nothing of it happens after this.
    pub(crate) async fn abandon(mut self) {
        if self.finished || self.handle.cancel().is_err() {
            return;
        }
        while let Some(msg) = self.handle.next().await {
            if matches!(msg, GuestMsg::Response { .. }) {
                break;
            }
        }
        self.finished = true;
    }

    /// The request's handle, once the run took it (nothing is resent after
    /// that), for callers that pump frames and input at once.
    pub(crate) fn into_handle(self) -> RequestHandle {
        self.handle
    }

    /// Waits for the response, discarding streamed output.
    pub(crate) async fn response(mut self) -> Result<burrow_protocol::Response> {
        while let Some(msg) = self.next().await? {
            if let GuestMsg::Response { result: Ok(r), .. } = msg {
                return Ok(r);
            }
        }
        Err(Error::protocol("the request ended without a response"))
    }

    async fn cut(&mut self, cut: Cut) -> Error {
        self.finished = true;
        self.sandbox.forget_generation(self.generation).await;
        match self
            .sandbox
            .boundary(self.operation, self.generation, cut, self.wake)
            .await
        {
            Err(e) => e,
            Ok(()) => Error::protocol("a request cut off by the end of its run was not resent"),
        }
    }

    /// The run did not take the request: once it settled, send it again
    /// (with its input) where the sandbox runs now.
    async fn resend(&mut self) -> Result<()> {
        // Writers wait while the request moves to its new run.
        let input = self.input.clone();
        let _order = input.order.lock().await;
        let replay = input.take_replay();
        let replay = match replay {
            Some(r) if !r.overflowed => r,
            // The input is gone: report the boundary as a lost request.
            _ => return Err(self.cut(Cut::Taken).await),
        };
        self.resends += 1;
        if self.resends > MAX_RESENDS {
            self.finished = true;
            return Err(Error::Timeout {
                operation: format!(
                    "{} on sandbox {:?}: every run it was sent to ended first",
                    self.operation,
                    self.sandbox.name()
                ),
                after: Duration::ZERO,
            });
        }
        self.sandbox.forget_generation(self.generation).await;
        if let Err(e) = self
            .sandbox
            .boundary(self.operation, self.generation, Cut::Unrun, self.wake)
            .await
        {
            self.finished = true;
            return Err(e);
        }
        let (handle, generation) = match self
            .sandbox
            .request(self.operation, self.body.clone(), self.wake)
            .await
        {
            Ok(h) => h,
            Err(e) => {
                self.finished = true;
                return Err(e);
            }
        };
        let target = handle.input();
        self.handle = handle;
        self.generation = generation;
        input::replay(&target, &replay).await;
        input.resent(target, replay);
        Ok(())
    }
}

impl Sandbox {
    /// After a request met the end of its run (generation `generation`; the
    /// caller has dropped its connection to that run): waits until the run
    /// has settled, then `Ok(())` if the request should
    /// be sent again (it was not run, and the sandbox runs again, or wakes
    /// on demand), else the typed error of the status it settled in.
    pub(crate) async fn boundary(
        &self,
        operation: &'static str,
        generation: u64,
        cut: Cut,
        wake: bool,
    ) -> Result<()> {
        // No connection lock is taken here: `client` calls this while it
        // holds the connection slot (which is empty then).
        let begun = Instant::now();
        // A refusal that did not end the run (a pause that failed, say):
        // look again at the run itself after a while.
        let resend_anyway = begun + Duration::from_secs(1);
        let mut pause = Duration::from_millis(2);
        loop {
            let info = self.info().await?;
            let ending = info.generation == generation && info.status == Status::Running;
            if !ending && info.status != Status::Starting {
                if cut == Cut::Unrun && resendable(&info, wake) {
                    return Ok(());
                }
                return Err(Error::InvalidState {
                    operation: operation.into(),
                    name: info.name,
                    id: info.id,
                    // The run the request was on has ended; a newer one is
                    // no place for a request that was taken.
                    status: if info.status == Status::Running {
                        Status::Stopped
                    } else {
                        info.status
                    },
                });
            }
            let now = Instant::now();
            if ending && cut == Cut::Unrun && now >= resend_anyway {
                return Ok(());
            }
            if now >= begun + RUN_END_BOUND {
                return Err(Error::Timeout {
                    operation: format!(
                        "{operation} on sandbox {:?}: waiting for its run to end (`burrow kill {}` ends it)",
                        info.name, info.id
                    ),
                    after: RUN_END_BOUND,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

/// Whether a request that was not run goes to the sandbox as it settled.
fn resendable(info: &SandboxInfo, wake: bool) -> bool {
    match info.status {
        // A newer run (restart, demand start by another caller).
        Status::Running => true,
        // Reclaimed for idleness: a waking call starts it again.
        Status::Stopped => {
            wake && info.config.demand_start_enabled()
                && info
                    .last_run
                    .as_ref()
                    .and_then(|r| r.exit_reason)
                    .is_some_and(ExitReason::is_idle_reclaim)
        }
        _ => false,
    }
}
