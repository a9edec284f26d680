//! The public handles: [`Sandbox`] (live, bound to one id and one runtime
//! generation), [`SandboxHandle`] (metadata, bound to one id) and the
//! [`SandboxBuilder`].
//!
//! Every receiver operation is bound to the captured id: if the name now
//! belongs to another sandbox, the operation fails with
//! [`Error::SandboxReplaced`] and touches nothing.

mod attempt;
mod builder;
mod exec;
mod fs;
mod fs_stream;
mod handle;
mod input;
mod modify;
pub(crate) mod tunnel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_protocol::{
    GuestErrorCode, Identity, Request, Response, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};

use attempt::Attempt;

pub use builder::{ReplaceBuilder, SandboxBuilder};
pub use exec::{ExecEvent, ExecOptions, ExecOutput, ExitStatus, Process, ProcessStdin};
pub use fs::Fs;
pub use fs_stream::{FileReader, FileWriter};
pub use handle::SandboxHandle;
pub use modify::{ModifyBuilder, Ping, SandboxPage};
pub use tunnel::{PublishedPort, Tunnel};

use crate::backend::{Backend, ListFilter, StopOptions};
use crate::channel::client::{AgentClient, ConnectError, Handshake, RequestHandle};
use crate::error::{Error, Result};
use crate::model::{SandboxId, SandboxInfo, Status};
use crate::select::default_backend;

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
    /// The status it was bound with (what its handle's snapshot says).
    status: Status,
    generation: AtomicU64,
    /// The cached connection and the generation of the run it reaches.
    conn: tokio::sync::Mutex<Option<(AgentClient, u64)>>,
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

    /// Starts the stopped (or created, or crashed) sandbox named `name`
    /// (default backend): the same sandbox, id and configuration kept.
    pub async fn start(name: &str) -> Result<Sandbox> {
        SandboxHandle::start_by_name_in(default_backend().await?, name).await
    }

    /// Handles of every sandbox (default backend), each with the status it
    /// was listed with: `for h in Sandbox::list().await?.sandboxes`.
    pub async fn list() -> Result<SandboxPage> {
        Sandbox::list_with(&ListFilter::default()).await
    }

    /// Handles of the sandboxes matching `filter` (default backend).
    pub async fn list_with(filter: &ListFilter) -> Result<SandboxPage> {
        SandboxHandle::list_in(default_backend().await?, filter).await
    }

    /// Removes the stopped sandbox named `name` (default backend).
    pub async fn remove(name: &str) -> Result<()> {
        use crate::backend::BackendExt;
        default_backend().await?.remove_by_name(name).await
    }

    pub(crate) fn bind(backend: Arc<dyn Backend>, info: &SandboxInfo) -> Sandbox {
        Sandbox {
            inner: Arc::new(Inner {
                backend,
                id: info.id.clone(),
                name: info.name.clone(),
                status: info.status,
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
        SandboxHandle::new(
            self.inner.backend.clone(),
            self.inner.id.clone(),
            self.inner.name.clone(),
            self.inner.status,
        )
    }

    /// A fresh snapshot (status, config, last run).
    pub async fn info(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .status(&self.inner.name, &self.inner.id)
            .await
    }

    /// The current status.
    pub async fn status(&self) -> Result<Status> {
        Ok(self.info().await?.status)
    }

    /// The protocol connection, (re)opened on demand and bound to this id,
    /// with the generation of the run it reaches.
    async fn client(&self, operation: &'static str, wake: bool) -> Result<(AgentClient, u64)> {
        let mut slot = self.inner.conn.lock().await;
        if let Some((c, g)) = slot.as_ref().filter(|(c, _)| !c.is_closed()) {
            return Ok((c.clone(), *g));
        }
        *slot = None;
        // A restart may land between reading the generation and the hello
        // (a newer run answers), or the run may be ending (the hello is cut
        // off): both are decided again on what the sandbox is then.
        // A supervisor started by an older build (still running after an
        // upgrade) may speak only protocol 1: offered again with that.
        let mut version = PROTOCOL_VERSION;
        for _ in 0..8 {
            let bound = self.inner.generation.load(Ordering::SeqCst);
            let stream = match self
                .inner
                .backend
                .open_runtime(&self.inner.name, &self.inner.id, wake)
                .await
            {
                Ok(stream) => stream,
                // The run this handle knew ended, and a newer one is
                // starting (a restart, say, while this call waited for the
                // connection): the call follows it, as a call that was
                // cut off by the end does, or gets the status it settles in.
                Err(Error::InvalidState {
                    status: Status::Starting,
                    ..
                }) if self.info().await?.generation > bound => {
                    self.boundary(operation, bound, attempt::Cut::Unrun, wake)
                        .await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let generation = stream.generation;
            let expect = Identity {
                sandbox_id: self.inner.id.to_string(),
                generation,
            };
            let how = Handshake::Client {
                expect: Some(expect),
                version,
            };
            match AgentClient::connect(stream.reader, stream.writer, how, HELLO_TIMEOUT).await {
                Ok(c) => {
                    self.inner.generation.store(generation, Ordering::SeqCst);
                    *slot = Some((c.clone(), generation));
                    return Ok((c, generation));
                }
                Err(ConnectError::Refused(g)) if g.code == GuestErrorCode::IdentityMismatch => {
                    continue
                }
                Err(e) if e.version_refused() && version > OLDEST_PROTOCOL_VERSION => {
                    version = OLDEST_PROTOCOL_VERSION;
                    continue;
                }
                Err(ConnectError::Refused(g)) => {
                    return Err(Error::protocol(format!(
                        "the supervisor refused the connection: {g}"
                    )))
                }
                Err(ConnectError::Other(e @ Error::Timeout { .. })) => return Err(e),
                Err(ConnectError::Other(_)) => {
                    self.boundary(operation, generation, attempt::Cut::Unrun, wake)
                        .await?;
                }
            }
        }
        Err(Error::Timeout {
            operation: format!(
                "{operation} on sandbox {:?}: it kept restarting while connecting",
                self.inner.name
            ),
            after: Duration::ZERO,
        })
    }

    /// Starts a request on the live connection; returns it with the
    /// generation of the run it went to.
    async fn request(
        &self,
        operation: &'static str,
        body: Request,
        wake: bool,
    ) -> Result<(RequestHandle, u64)> {
        let (client, generation) = self.client(operation, wake).await?;
        match client.request(body.clone()) {
            Ok(h) => Ok((h, generation)),
            Err(_) => {
                // Stale cached connection: reconnect once.
                self.forget_generation(generation).await;
                let (client, generation) = self.client(operation, wake).await?;
                Ok((client.request(body)?, generation))
            }
        }
    }

    /// Runs a request that streams nothing and returns its response.
    async fn call(&self, operation: &'static str, body: Request) -> Result<Response> {
        Attempt::start(self, operation, body)
            .await?
            .response()
            .await
    }

    /// Drops the cached connection if it reaches run `generation` (the next
    /// call reconnects).
    pub(crate) async fn forget_generation(&self, generation: u64) {
        let mut slot = self.inner.conn.lock().await;
        if slot.as_ref().is_some_and(|(_, g)| *g == generation) {
            *slot = None;
        }
    }

    /// Drops the cached connection (the next call reconnects).
    async fn forget_connection(&self) {
        *self.inner.conn.lock().await = None;
    }

    /// Health check: the guest agent answered, in `latency`. Does not count
    /// as activity ([`Sandbox::touch`] does).
    pub async fn ping(&self) -> Result<Ping> {
        let t = Instant::now();
        self.call("ping", Request::Ping).await?;
        Ok(Ping {
            latency: t.elapsed(),
        })
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
            .stop(&self.inner.name, &self.inner.id, opts)
            .await;
        self.forget_connection().await;
        r
    }

    /// Immediate stop.
    pub async fn kill(&self) -> Result<SandboxInfo> {
        let r = self
            .inner
            .backend
            .kill(&self.inner.name, &self.inner.id)
            .await;
        self.forget_connection().await;
        r
    }

    /// Stop accepting new work; the sandbox stops when in-flight work ends.
    pub async fn request_drain(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .request_drain(&self.inner.name, &self.inner.id)
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
        self.forget_connection().await;
        let info = self
            .inner
            .backend
            .restart(&self.inner.name, &self.inner.id, StopOptions::default())
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
            .touch(&self.inner.name, &self.inner.id)
            .await
    }

    /// Suspends every process of the sandbox (status Paused); exec, shell and
    /// fs calls are refused with `invalid_state` until [`Sandbox::resume`].
    pub async fn pause(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .pause(&self.inner.name, &self.inner.id)
            .await
    }

    /// Continues after [`Sandbox::pause`].
    pub async fn resume(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .resume(&self.inner.name, &self.inner.id)
            .await
    }

    /// Changes the configuration: `sb.modify().cpus(4).memory(4096).apply()`;
    /// the returned plan says, per field, whether it applied live, applies
    /// to future execs, or at the next start.
    pub fn modify(&self) -> ModifyBuilder<'_> {
        ModifyBuilder::new(&self.inner.backend, &self.inner.name, &self.inner.id)
    }

    /// Applies `changes` (see [`Sandbox::modify`]).
    pub async fn modify_with(
        &self,
        changes: &crate::model::Modify,
    ) -> Result<crate::model::ModifyPlan> {
        self.inner
            .backend
            .modify(&self.inner.name, &self.inner.id, changes)
            .await
    }

    /// Saves the sandbox's files under `snapshot`, frozen for the copy
    /// (see [`SandboxHandle::snapshot_with`]).
    pub async fn snapshot(&self, snapshot: &str) -> Result<crate::SnapshotInfo> {
        self.snapshot_with(snapshot, &crate::SnapshotOptions::default())
            .await
    }

    /// Saves the sandbox under `snapshot` as `opts` says (see
    /// [`SandboxHandle::snapshot_with`]).
    pub async fn snapshot_with(
        &self,
        snapshot: &str,
        opts: &crate::SnapshotOptions,
    ) -> Result<crate::SnapshotInfo> {
        self.inner
            .backend
            .snapshot(&self.inner.name, &self.inner.id, snapshot, opts)
            .await
    }

    /// Copies the running sandbox into `opts.copies()` new sandboxes, each
    /// started (see [`crate::Backend::fork`]): a vm sandbox whole, its
    /// processes going on in every copy; the parent stops for the copy and
    /// goes on afterwards.
    pub async fn fork(&self, opts: &crate::ForkOptions) -> Result<Vec<Sandbox>> {
        let copies = self
            .inner
            .backend
            .fork(&self.inner.name, &self.inner.id, opts)
            .await?;
        Ok(copies
            .iter()
            .map(|info| Sandbox::bind(self.inner.backend.clone(), info))
            .collect())
    }

    /// A snapshot of CPU, memory, io and process counts.
    pub async fn metrics(&self) -> Result<crate::backend::Metrics> {
        self.inner
            .backend
            .metrics(&self.inner.name, &self.inner.id)
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
            .logs(&self.inner.name, &self.inner.id, opts)
            .await
    }

    /// Lets this sandbox survive the owning process (it stays running and is
    /// found again by name or id).
    pub async fn detach(&self) -> Result<SandboxInfo> {
        self.inner
            .backend
            .detach(&self.inner.name, &self.inner.id)
            .await
    }

    /// Kills (if running) and removes exactly this sandbox.
    pub async fn destroy(&self) -> Result<()> {
        self.forget_connection().await;
        self.inner
            .backend
            .destroy(&self.inner.name, &self.inner.id)
            .await
    }
}
