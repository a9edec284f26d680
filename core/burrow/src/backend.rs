//! The `Backend` trait: where sandboxes live.
//!
//! Every lifecycle method is **id-addressed**: it acts on exactly the sandbox
//! `id`, and carries the `name` the caller knows it by, so that a sandbox
//! replaced under that name is reported as [`Error::SandboxReplaced`] and a
//! vanished one as [`Error::NotFound`] — never acted on. Implementations
//! check the id and act atomically (under one lock, or in one statement).
//! Handles hold an `Arc<dyn Backend>` plus the id they are bound to.
//!
//! Name-addressed conveniences ("whatever sandbox has this name now") live
//! in [`BackendExt`], implemented for every backend on top of the
//! id-addressed methods. The implementer guide is `docs/backends.md`; the
//! `burrow-conformance` crate checks an implementation against it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{Error, Result};
use crate::logs::{LogOptions, LogStream};
use crate::model::{
    EventPage, ForkOptions, Modify, ModifyPlan, PoolInfo, PoolSpec, RunInfo, SandboxConfig,
    SandboxId, SandboxInfo, SnapshotInfo, SnapshotOptions, Status,
};

pub use burrow_protocol::Metrics;

/// How long a caller waits for a run that stopped taking work to record its
/// end (a stop's grace period, the guest's sync and shutdown and the
/// runtime's cleanup fit in it many times over); past it, a `timeout`.
pub(crate) const RUN_END_BOUND: Duration = Duration::from_secs(120);

/// A request to create a sandbox.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CreateRequest {
    /// Name (validated by the backend).
    pub name: String,
    /// Configuration (validated by the backend).
    pub config: SandboxConfig,
    /// Survive the creating process.
    pub detached: bool,
    /// The caller starts the sandbox right after: a backend with a warm
    /// pool for this configuration may then hand over one of its running
    /// sandboxes instead (the answer's status is Running). A create alone
    /// (`define`) leaves it false and always gets a Created sandbox.
    #[serde(default)]
    pub claim: bool,
}

impl CreateRequest {
    /// A request for `name` with `config`, attached to the creating process.
    pub fn new(name: impl Into<String>, config: SandboxConfig) -> Self {
        CreateRequest {
            name: name.into(),
            config,
            detached: false,
            claim: false,
        }
    }

    /// May be served by a warm pool's running sandbox (see
    /// [`CreateRequest::claim`]).
    #[must_use]
    pub fn claiming(mut self, claim: bool) -> Self {
        self.claim = claim;
        self
    }

    /// Survive the creating process (or not).
    #[must_use]
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }
}

/// Filter for [`Backend::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only these statuses (empty: all).
    pub statuses: Vec<Status>,
    /// Only sandboxes carrying all of these labels.
    pub labels: BTreeMap<String, String>,
}

impl ListFilter {
    /// Only sandboxes in one of `statuses`.
    #[must_use]
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = Status>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Only sandboxes carrying label `key` = `value` (and any others set).
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Whether `info` passes the filter.
    pub fn matches(&self, info: &SandboxInfo) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&info.status))
            && self
                .labels
                .iter()
                .all(|(k, v)| info.config.labels.get(k) == Some(v))
    }
}

/// Options of a graceful stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopOptions {
    /// Time between SIGTERM and SIGKILL for guest processes.
    pub grace: Duration,
    /// Record the stop with reason `owner_exited` instead of `stopped`: for
    /// a server stopping the attached sandboxes of a client that went away.
    pub owner_exited: bool,
}

impl Default for StopOptions {
    fn default() -> Self {
        StopOptions {
            grace: Duration::from_secs(10),
            owner_exited: false,
        }
    }
}

impl StopOptions {
    /// A requested stop with this grace period.
    pub fn with_grace(grace: Duration) -> Self {
        StopOptions {
            grace,
            ..StopOptions::default()
        }
    }

    /// Record the stop as `owner_exited` (see the field).
    #[must_use]
    pub fn owner_exited(mut self, owner_exited: bool) -> Self {
        self.owner_exited = owner_exited;
        self
    }
}

/// Options of a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StartOptions {
    /// Start attached to (`Some(false)`) or detached from (`Some(true)`) the
    /// calling process; `None` keeps the persisted choice.
    pub detached: Option<bool>,
}

impl StartOptions {
    /// Start detached from (`true`) or attached to (`false`) the caller.
    #[must_use]
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = Some(detached);
        self
    }
}

/// What a backend can do beyond the lifecycle every backend has (create,
/// start, stop, kill, drain, restart, remove, status, runtime streams).
/// An operation a backend lacks answers [`Error::Unsupported`]; callers and
/// the conformance kit read this to know beforehand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`Backend::pause`] and [`Backend::resume`].
    pub pause: bool,
    /// Changes of a running sandbox's limits and environment through
    /// [`Backend::modify`] (stored-only changes are always possible).
    pub modify_live: bool,
    /// [`Backend::metrics`].
    pub metrics: bool,
    /// [`Backend::logs`], including following.
    pub logs: bool,
    /// Idle timeouts and demand start (a stopped sandbox woken by the next
    /// call).
    pub idle_reclaim: bool,
    /// Sandboxes attached to (and stopped with) their creating process.
    pub attached: bool,
    /// Files written outside volumes survive a stop (an idle reclaim
    /// included) and are there at the next start: the writable layer is
    /// kept with the sandbox. Without it every start begins from the image
    /// (a Kubernetes pod's filesystem ends with the pod). Absent from an
    /// older server's answer, where it was always so: `true`.
    #[serde(default = "yes")]
    pub persistent_layer: bool,
    /// A network policy (allow and deny rules, `Network::Policy`) is
    /// enforced, and changed live with [`Backend::modify`]. Without it a
    /// policy is refused (`invalid_config`). Absent from an older server's
    /// answer: `false`.
    #[serde(default)]
    pub network_policy: bool,
    /// Published ports (`SandboxConfig::ports`), served while a sandbox
    /// runs. Without it ports are refused (`invalid_config`). Absent from
    /// an older server's answer: `false`.
    #[serde(default)]
    pub published_ports: bool,
    /// Secrets (`SandboxConfig::secrets`): placeholders in the guest, the
    /// values put into HTTP requests to their hosts by the sandbox's
    /// network stack. Without it secrets are refused (`invalid_config`).
    /// Absent from an older server's answer: `false`.
    #[serde(default)]
    pub secrets: bool,
    /// Filesystem snapshots ([`Backend::snapshot`], the snapshot store,
    /// `snapshot:NAME` images). Absent from an older server's answer:
    /// `false`.
    #[serde(default)]
    pub snapshots: bool,
    /// Full snapshots of running sandboxes (memory and processes too,
    /// [`SnapshotKind::Full`](crate::SnapshotKind::Full)) on this host's default driver. Absent from
    /// an older server's answer: `false`.
    #[serde(default)]
    pub full_snapshots: bool,
    /// Fork of running sandboxes ([`Backend::fork`]) on this host's
    /// default driver. Absent from an older server's answer: `false`.
    #[serde(default)]
    pub fork: bool,
    /// Warm pools ([`Backend::create_pool`] and the rest): a create whose
    /// configuration a pool serves claims one of its running sandboxes.
    /// Absent from an older server's answer: `false`.
    #[serde(default)]
    pub pools: bool,
}

fn yes() -> bool {
    true
}

impl Capabilities {
    /// Everything (the local and remote backends).
    pub const ALL: Capabilities = Capabilities {
        pause: true,
        modify_live: true,
        metrics: true,
        logs: true,
        idle_reclaim: true,
        attached: true,
        persistent_layer: true,
        network_policy: true,
        published_ports: true,
        secrets: true,
        snapshots: true,
        full_snapshots: true,
        fork: true,
        pools: true,
    };

    /// Only the lifecycle every backend has.
    pub const NONE: Capabilities = Capabilities {
        pause: false,
        modify_live: false,
        metrics: false,
        logs: false,
        idle_reclaim: false,
        attached: false,
        persistent_layer: false,
        network_policy: false,
        published_ports: false,
        secrets: false,
        snapshots: false,
        full_snapshots: false,
        fork: false,
        pools: false,
    };
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::NONE
    }
}

/// A byte stream to a runtime speaking the burrow protocol (see
/// `docs/backends.md`, "The runtime stream"): the handle's first frame is a
/// hello carrying the sandbox id and this generation, which the runtime
/// checks before anything else.
#[non_exhaustive]
pub struct RuntimeStream {
    /// Read half.
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// Write half.
    pub writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// The runtime generation the stream reaches (checked at hello).
    pub generation: u64,
}

impl RuntimeStream {
    /// A stream over any pair of byte halves: a Unix or TCP socket, a vsock,
    /// a pod's exec or port-forward stream.
    pub fn new(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        generation: u64,
    ) -> Self {
        RuntimeStream {
            reader: Box::new(reader),
            writer: Box::new(writer),
            generation,
        }
    }
}

impl Debug for RuntimeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeStream")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// Checks that `info` (looked up by name) is the sandbox `id`: the check
/// every id-addressed method makes before it acts.
pub fn ensure_identity(name: &str, id: &SandboxId, info: &SandboxInfo) -> Result<()> {
    if &info.id == id {
        Ok(())
    } else {
        Err(Error::SandboxReplaced {
            name: name.to_owned(),
            expected: id.clone(),
            actual: info.id.clone(),
        })
    }
}

/// Where sandboxes live. Object-safe: handles hold `Arc<dyn Backend>`.
///
/// Every method taking `(name, id)` acts on exactly `id` and answers
/// [`Error::SandboxReplaced`] when `name` now belongs to another sandbox,
/// [`Error::NotFound`] when `id` is gone and nothing holds the name; the
/// check and the action are one atomic step. What each method must do in
/// each status is [`crate::lifecycle::Operation::step`]; `docs/backends.md`
/// is the whole contract.
#[async_trait]
pub trait Backend: Send + Sync + Debug {
    /// What this backend supports beyond the common lifecycle.
    async fn capabilities(&self) -> Result<Capabilities>;

    /// Creates a sandbox in status Created. Strict and atomic: of concurrent
    /// creates of one name exactly one succeeds; the others get
    /// [`Error::AlreadyExists`] carrying the winner's id, once the winner's
    /// create finished (so the winner is usable right away).
    async fn create(&self, req: CreateRequest) -> Result<SandboxInfo>;
    /// Looks a sandbox up by name.
    async fn get(&self, name: &str) -> Result<SandboxInfo>;
    /// Looks a sandbox up by id.
    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo>;
    /// Lists sandboxes.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>>;

    /// Status of exactly `id`.
    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo>;
    /// Starts a startable sandbox (Created, Stopped, Crashed) and waits until
    /// it is Running. Strict: Starting is [`Error::Starting`], a live status
    /// [`Error::InvalidState`].
    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo>;
    /// Converges on a running sandbox: waits through Starting, starts
    /// Created/Stopped/Crashed (one start however many callers), returns
    /// Running; rejects Draining/Paused with [`Error::InvalidState`].
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo>;
    /// Graceful stop. Idempotent: a sandbox that is not running is answered
    /// as it is; Starting is waited through first.
    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo>;
    /// Immediate stop; idempotent like [`Backend::stop`].
    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo>;
    /// Stop accepting work; stop when in-flight work is done.
    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo>;
    /// Stop then start (same id, same configuration, next generation).
    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo>;
    /// Removes a sandbox that is not running ([`Error::InvalidState`]
    /// otherwise). Keeps images, named volumes and host mounts.
    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()>;
    /// Kills (if running) and removes, even against concurrent starts.
    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()>;
    /// Waits until the status is one of `statuses` (no implicit deadline).
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo>;
    /// Opens a protocol stream to the running sandbox. With `wake`, a
    /// sandbox reclaimed for idleness is started again first (demand start,
    /// when enabled for it); health checks pass `false`.
    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream>;
    /// Lets a running attached sandbox survive its owner from now on.
    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo>;
    /// Explicit keepalive (counts as activity for the idle timeout).
    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()>;

    /// Suspends every guest process (status Paused).
    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        let _ = (name, id);
        Err(Error::unsupported("pause"))
    }
    /// Continues after a pause (status Running).
    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        let _ = (name, id);
        Err(Error::unsupported("resume"))
    }
    /// Changes the configuration; the plan says where each change lands.
    /// The default stores nothing and answers [`Error::Unsupported`].
    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        let _ = (name, id, changes);
        Err(Error::unsupported("modify"))
    }
    /// Resource usage of the running sandbox.
    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        let _ = (name, id);
        Err(Error::unsupported("metrics"))
    }
    /// The sandbox's runs, newest first, at most `limit` (at least 1). The
    /// default keeps no history: it gives the last run.
    async fn runs(&self, name: &str, id: &SandboxId, limit: usize) -> Result<Vec<RunInfo>> {
        let _ = limit;
        Ok(self.status(name, id).await?.last_run.into_iter().collect())
    }
    /// The sandbox's logs.
    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        let _ = (name, id, opts);
        Err(Error::unsupported("logs"))
    }

    /// Saves the sandbox under `snapshot` (see [`SnapshotOptions`] for
    /// what is saved). A running sandbox is frozen for the copy and goes
    /// on afterwards; one that is not running stays as it is.
    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &SnapshotOptions,
    ) -> Result<SnapshotInfo> {
        let _ = (name, id, snapshot, opts);
        Err(Error::unsupported("snapshot"))
    }
    /// Copies the running sandbox into new sandboxes (see
    /// [`ForkOptions`]), each started, and returns them in the order of
    /// their names. The parent stops for the copy and goes on afterwards.
    /// All or nothing: on an error no copy is left.
    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        let _ = (name, id, opts);
        Err(Error::unsupported("fork"))
    }
    /// The stored snapshots, by name.
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(Error::unsupported("snapshots"))
    }
    /// One stored snapshot ([`Error::NotFound`] if there is none).
    async fn get_snapshot(&self, snapshot: &str) -> Result<SnapshotInfo> {
        let _ = snapshot;
        Err(Error::unsupported("snapshots"))
    }
    /// Removes a stored snapshot: [`Error::SnapshotInUse`] while sandboxes
    /// created from it exist, [`Error::NotFound`] if there is none.
    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        let _ = snapshot;
        Err(Error::unsupported("snapshots"))
    }

    /// Defines a warm pool and fills it: returns once its sandboxes run.
    /// A taken name is [`Error::PoolExists`]; a bad definition changes
    /// nothing (see [`PoolSpec::validate`]).
    async fn create_pool(&self, spec: PoolSpec) -> Result<PoolInfo> {
        let _ = spec;
        Err(Error::unsupported("pools"))
    }
    /// One pool, with its sandboxes counted ([`Error::NotFound`] if there
    /// is none).
    async fn get_pool(&self, pool: &str) -> Result<PoolInfo> {
        let _ = pool;
        Err(Error::unsupported("pools"))
    }
    /// Every pool, by name.
    async fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        Err(Error::unsupported("pools"))
    }
    /// Sets how many warm sandboxes a pool keeps (0 to
    /// [`MAX_POOL_SIZE`](crate::MAX_POOL_SIZE)) and starts or removes
    /// sandboxes to match; returns once it has.
    async fn scale_pool(&self, pool: &str, size: u32) -> Result<PoolInfo> {
        let _ = (pool, size);
        Err(Error::unsupported("pools"))
    }
    /// Removes a pool and its warm sandboxes; sandboxes claimed from it are
    /// not its any more, and stay.
    async fn remove_pool(&self, pool: &str) -> Result<()> {
        let _ = pool;
        Err(Error::unsupported("pools"))
    }
    /// Brings every pool to its size, replacing warm sandboxes that ended
    /// (what a long-lived caller such as `burrow serve` calls now and
    /// then). Nothing to do for a backend without pools, or one that keeps
    /// its pools by itself.
    async fn refill_pools(&self) -> Result<()> {
        Ok(())
    }

    /// The lifecycle events after position `after` (0: from the oldest
    /// the log holds), oldest first, at most `limit`: every change of a
    /// sandbox record (made, status changed, renamed, removed), whoever
    /// made it. A backend without a log answers [`Error::Unsupported`].
    async fn events(&self, after: u64, limit: usize) -> Result<EventPage> {
        let _ = (after, limit);
        Err(Error::unsupported("events"))
    }
}

/// Name-addressed forms of the [`Backend`] methods: each acts on whatever
/// sandbox holds `name` when it is called. The name is resolved to an id
/// first and the id-addressed method does the work, so a replacement in
/// between is never acted on by mistake: it is resolved again (a few
/// times), and a sandbox removed in between is [`Error::NotFound`].
#[async_trait]
pub trait BackendExt: Backend {
    /// [`Backend::start`] of the sandbox named `name`.
    async fn start_by_name(&self, name: &str, opts: StartOptions) -> Result<SandboxInfo> {
        by_name(
            self,
            name,
            |id| async move { self.start(name, &id, opts).await },
        )
        .await
    }
    /// [`Backend::connect_or_start`] of the sandbox named `name`.
    async fn connect_or_start_by_name(
        &self,
        name: &str,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        by_name(self, name, |id| async move {
            self.connect_or_start(name, &id, opts).await
        })
        .await
    }
    /// [`Backend::stop`] of the sandbox named `name`.
    async fn stop_by_name(&self, name: &str, opts: StopOptions) -> Result<SandboxInfo> {
        by_name(
            self,
            name,
            |id| async move { self.stop(name, &id, opts).await },
        )
        .await
    }
    /// [`Backend::kill`] of the sandbox named `name`.
    async fn kill_by_name(&self, name: &str) -> Result<SandboxInfo> {
        by_name(self, name, |id| async move { self.kill(name, &id).await }).await
    }
    /// [`Backend::restart`] of the sandbox named `name`.
    async fn restart_by_name(&self, name: &str, opts: StopOptions) -> Result<SandboxInfo> {
        by_name(self, name, |id| async move {
            self.restart(name, &id, opts).await
        })
        .await
    }
    /// [`Backend::remove`] of the sandbox named `name`.
    async fn remove_by_name(&self, name: &str) -> Result<()> {
        by_name(self, name, |id| async move { self.remove(name, &id).await }).await
    }
    /// [`Backend::destroy`] of the sandbox named `name`.
    async fn destroy_by_name(&self, name: &str) -> Result<()> {
        by_name(
            self,
            name,
            |id| async move { self.destroy(name, &id).await },
        )
        .await
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

/// Resolves `name` and runs `act` on its id; a replacement between the two
/// is resolved again.
async fn by_name<B, T, F, Fut>(backend: &B, name: &str, act: F) -> Result<T>
where
    B: Backend + ?Sized,
    F: Fn(SandboxId) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<T>> + Send,
    T: Send,
{
    let mut attempts = 0;
    loop {
        let id = backend.get(name).await?.id;
        match act(id).await {
            Err(Error::SandboxReplaced { .. }) if attempts < 4 => attempts += 1,
            other => return other,
        }
    }
}
