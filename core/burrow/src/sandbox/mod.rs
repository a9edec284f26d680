//! The public handles: [`Sandbox`] (live, bound to one id and one runtime
//! generation), [`SandboxHandle`] (metadata, bound to one id) and the
//! [`SandboxBuilder`].
//!
//! Every receiver operation is bound to the captured id: if the name now
//! belongs to another sandbox, the operation fails with
//! [`Error::SandboxReplaced`] and touches nothing.

mod builder;
mod exec;
mod fs;
mod handle;
mod tunnel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_protocol::{GuestError, GuestErrorCode, Identity, Request, Response};

pub use builder::{ReplaceBuilder, SandboxBuilder};
pub use exec::{ExecEvent, ExecOptions, ExecOutput, ExitStatus, Process};
pub use fs::Fs;
pub use handle::SandboxHandle;
pub use tunnel::{PublishedPort, Tunnel};

use crate::backend::{Backend, ListFilter, StopOptions};
use crate::error::{Error, GuestFailure, Result};
use crate::local::LocalBackend;
use crate::model::{SandboxId, SandboxInfo, Status};
use crate::remote::RemoteBackend;
use crate::runtime::client::{AgentClient, ConnectError, RequestHandle};

const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A live handle to a running sandbox. Cheap to clone; clones share one
/// connection.
#[derive(Debug, Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn Backend>,
    id: SandboxId,
    name: String,
    generation: AtomicU64,
    conn: tokio::sync::Mutex<Option<AgentClient>>,
}

impl Sandbox {
    /// Starts building a sandbox named `name`.
    pub fn builder(name: impl Into<String>) -> SandboxBuilder {
        SandboxBuilder::new(name)
    }

    /// A metadata handle to the sandbox currently named `name` (default backend).
    pub async fn get(name: &str) -> Result<SandboxHandle> {
        SandboxHandle::get_in(default_backend().await?, name).await
    }

    /// A metadata handle to exactly `id` (default backend).
    pub async fn get_by_id(id: &SandboxId) -> Result<SandboxHandle> {
        SandboxHandle::get_by_id_in(default_backend().await?, id).await
    }

    /// Lists sandboxes (default backend).
    pub async fn list(filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        default_backend().await?.list(filter).await
    }

    /// Removes the stopped sandbox named `name` (default backend).
    pub async fn remove(name: &str) -> Result<()> {
        default_backend().await?.remove(name).await
    }

    pub(crate) fn bind(backend: Arc<dyn Backend>, info: &SandboxInfo) -> Sandbox {
        Sandbox {
            inner: Arc::new(Inner {
                backend,
                id: info.id.clone(),
                name: info.name.clone(),
                generation: AtomicU64::new(info.generation),
                conn: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The sandbox id.
    pub fn id(&self) -> &SandboxId {
        &self.inner.id
    }

    /// The sandbox name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The runtime generation this handle is bound to.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }

    /// The metadata handle of the same sandbox.
    pub fn handle(&self) -> SandboxHandle {
        SandboxHandle::bind(
            self.inner.backend.clone(),
            self.inner.id.clone(),
            self.inner.name.clone(),
        )
    }

    /// A fresh snapshot (status, config, last run).
    pub async fn info(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .status_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// The current status.
    pub async fn status(&self) -> Result<Status> {
        Ok(self.info().await?.status)
    }

    /// The protocol connection, (re)opened on demand and bound to this id.
    async fn client(&self, wake: bool) -> Result<AgentClient> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        // A restart may land between reading the generation and the hello;
        // one retry then sees the new generation.
        for attempt in 0..3 {
            let stream = self
                .inner
                .backend
                .open_runtime_identified(&self.inner.name, &self.inner.id, wake)
                .await?;
            let expect = Identity {
                sandbox_id: self.inner.id.to_string(),
                generation: stream.generation,
            };
            match AgentClient::connect(stream.reader, stream.writer, Some(expect), HELLO_TIMEOUT)
                .await
            {
                Ok(c) => {
                    self.inner
                        .generation
                        .store(stream.generation, Ordering::SeqCst);
                    *slot = Some(c.clone());
                    return Ok(c);
                }
                Err(ConnectError::Refused(g))
                    if g.code == GuestErrorCode::IdentityMismatch && attempt < 2 =>
                {
                    continue
                }
                Err(ConnectError::Refused(g)) => {
                    return Err(Error::protocol(format!(
                        "the supervisor refused the connection: {g}"
                    )))
                }
                Err(ConnectError::Other(e)) => {
                    // The runtime may have stopped under us: report its state.
                    let info = self.info().await?;
                    if info.status != Status::Running {
                        return Err(Error::InvalidState {
                            operation: "exec".into(),
                            name: info.name,
                            id: info.id,
                            status: info.status,
                        });
                    }
                    return Err(e);
                }
            }
        }
        Err(Error::protocol(
            "the sandbox kept restarting while connecting",
        ))
    }

    /// Starts a request on the live connection.
    async fn request(&self, body: Request) -> Result<RequestHandle> {
        // Health checks never wake a reclaimed sandbox; real work does.
        let wake = !matches!(body, Request::Ping);
        let client = self.client(wake).await?;
        match client.request(body.clone()) {
            Ok(h) => Ok(h),
            Err(_) => {
                // Stale cached connection: reconnect once.
                *self.inner.conn.lock().await = None;
                self.client(wake).await?.request(body)
            }
        }
    }

    /// Runs a request that streams nothing and returns its response.
    async fn call(&self, operation: &'static str, body: Request) -> Result<Response> {
        let handle = self.request(body.clone()).await?;
        let mut res = handle.response().await;
        let unrun = match &res {
            Ok(Err(g)) => g.code == GuestErrorCode::Unavailable,
            // Lost before any answer: the supervisor never took it.
            Err(_) => true,
            Ok(Ok(_)) => false,
        };
        if unrun && self.reclaimed_and_wakeable().await {
            // Refused unrun while an idle reclaim began: once more, waking it.
            self.forget_connection().await;
            res = self.request(body).await?.response().await;
        }
        self.settle(operation, res).await
    }

    /// Drops the cached connection (the next call reconnects).
    pub(crate) async fn forget_connection(&self) {
        *self.inner.conn.lock().await = None;
    }

    /// Whether the sandbox was just reclaimed for idleness and a call wakes it.
    pub(crate) async fn reclaimed_and_wakeable(&self) -> bool {
        // A reclaim keeps the status Running until the run has ended; a
        // drain or pause publishes its own status at once. Bounded wait.
        let deadline = Instant::now() + Duration::from_secs(15);
        let info = loop {
            let Ok(info) = self.info().await else {
                return false;
            };
            if info.status != Status::Running
                || info.generation != self.generation()
                || Instant::now() > deadline
            {
                break info;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        info.status == Status::Stopped
            && info.config.demand_start_enabled()
            && info.last_run.as_ref().and_then(|r| r.exit_reason)
                == Some(crate::model::ExitReason::IdleTimeout)
    }

    /// Maps a request outcome to the public error types.
    async fn settle(
        &self,
        operation: &'static str,
        res: Result<std::result::Result<Response, GuestError>>,
    ) -> Result<Response> {
        match res {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(g))
                if matches!(
                    g.code,
                    GuestErrorCode::Unavailable | GuestErrorCode::Aborted
                ) =>
            {
                self.forget_connection().await;
                Err(self.not_running(operation).await)
            }
            Ok(Err(g)) => Err(Error::Guest {
                operation: operation.into(),
                source: GuestFailure(g),
            }),
            Err(e) => {
                let info = self.info().await?;
                if info.status != Status::Running {
                    return Err(Error::InvalidState {
                        operation: operation.into(),
                        name: info.name,
                        id: info.id,
                        status: info.status,
                    });
                }
                Err(e)
            }
        }
    }

    async fn not_running(&self, operation: &'static str) -> Error {
        // The supervisor refuses work a moment before it publishes the new
        // status (pause, drain, stop): let the status catch up.
        for _ in 0..50 {
            match self.info().await {
                Ok(info) if info.status == Status::Running => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                _ => break,
            }
        }
        match self.info().await {
            Ok(info) => Error::InvalidState {
                operation: operation.into(),
                name: info.name,
                id: info.id,
                status: if info.status == Status::Running {
                    Status::Draining
                } else {
                    info.status
                },
            },
            Err(e) => e,
        }
    }

    /// Health check; returns the round-trip time. Does not count as activity.
    pub async fn ping(&self) -> Result<Duration> {
        let t = Instant::now();
        self.call("ping", Request::Ping).await?;
        Ok(t.elapsed())
    }

    /// File operations.
    pub fn fs(&self) -> Fs<'_> {
        Fs::new(self)
    }

    /// Graceful stop (default grace period).
    pub async fn stop(&self) -> Result<SandboxInfo> {
        self.stop_with(StopOptions::default()).await
    }

    /// Graceful stop with options.
    pub async fn stop_with(&self, opts: StopOptions) -> Result<SandboxInfo> {
        let r = self
            .inner
            .backend
            .stop_identified(&self.inner.name, &self.inner.id, opts)
            .await;
        *self.inner.conn.lock().await = None;
        r
    }

    /// Immediate stop.
    pub async fn kill(&self) -> Result<SandboxInfo> {
        let r = self
            .inner
            .backend
            .kill_identified(&self.inner.name, &self.inner.id)
            .await;
        *self.inner.conn.lock().await = None;
        r
    }

    /// Stop accepting new work; the sandbox stops when in-flight work ends.
    pub async fn request_drain(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .request_drain_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Waits until the runtime generation this handle is bound to has ended.
    pub async fn wait_until_stopped(&self) -> Result<SandboxInfo> {
        let generation = self.generation();
        let mut pause = Duration::from_millis(5);
        loop {
            let info = self.info().await?;
            if info.generation != generation || !info.status.has_runtime() {
                return Ok(info);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Stops and starts again: same id, same configuration; this handle
    /// follows the new runtime generation.
    pub async fn restart(&self) -> Result<SandboxInfo> {
        *self.inner.conn.lock().await = None;
        let info = self
            .inner
            .backend
            .restart_identified(&self.inner.name, &self.inner.id, StopOptions::default())
            .await?;
        self.inner
            .generation
            .store(info.generation, Ordering::SeqCst);
        Ok(info)
    }

    /// Explicit keepalive: counts as activity for the idle timeout (a
    /// [`Sandbox::ping`] does not).
    pub async fn touch(&self) -> Result<()> {
        self.inner
            .backend
            .touch_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Suspends every process of the sandbox (status Paused); exec, shell and
    /// fs calls are refused with `invalid_state` until [`Sandbox::resume`].
    pub async fn pause(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .pause_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Continues after [`Sandbox::pause`].
    pub async fn resume(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .resume_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Changes the configuration; the returned plan says, per field, whether
    /// it applied live, applies to future execs, or at the next start.
    pub async fn modify(&self, changes: &crate::model::Modify) -> Result<crate::model::ModifyPlan> {
        self.inner
            .backend
            .modify_identified(&self.inner.name, &self.inner.id, changes)
            .await
    }

    /// A snapshot of CPU, memory, io and process counts.
    pub async fn metrics(&self) -> Result<crate::backend::Metrics> {
        self.inner
            .backend
            .metrics_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Snapshots every `interval` until the receiver is dropped or the
    /// sandbox stops (the last item is then the error).
    pub fn metrics_stream(
        &self,
        interval: Duration,
    ) -> tokio::sync::mpsc::Receiver<Result<crate::backend::Metrics>> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                let m = me.metrics().await;
                let stop = m.is_err();
                if tx.send(m).await.is_err() || stop {
                    return;
                }
            }
        });
        rx
    }

    /// The sandbox's logs.
    pub async fn logs(&self, opts: &crate::logs::LogOptions) -> Result<crate::logs::LogStream> {
        self.inner
            .backend
            .logs_identified(&self.inner.name, &self.inner.id, opts)
            .await
    }

    /// Lets this sandbox survive the owning process (it stays running and is
    /// found again by name or id).
    pub async fn detach(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .detach_identified(&self.inner.name, &self.inner.id)
            .await
    }

    /// Kills (if running) and removes exactly this sandbox.
    pub async fn destroy(&self) -> Result<()> {
        *self.inner.conn.lock().await = None;
        self.inner
            .backend
            .destroy_identified(&self.inner.name, &self.inner.id)
            .await
    }
}

/// The process-wide backend: the `burrow serve` at `$BURROW_URL` when that
/// is set (and not empty), else the local backend of `$BURROW_HOME`.
pub(crate) async fn default_backend() -> Result<Arc<dyn Backend>> {
    if let Some(remote) = RemoteBackend::shared()? {
        return Ok(remote as Arc<dyn Backend>);
    }
    Ok(LocalBackend::shared().await? as Arc<dyn Backend>)
}
