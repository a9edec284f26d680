//! A burrow [`Backend`] of its own: [`QuotaBackend`] wraps the local
//! backend with two rules of its own, and proves with `burrow-conformance`
//! (see `tests/conformance.rs`) that it keeps every rule of the contract.
//!
//! - **Namespaces.** Every sandbox created through a `QuotaBackend` carries
//!   its namespace in a label ([`NAMESPACE_LABEL`], hidden from what it
//!   returns). It lists, finds and acts on its own namespace's sandboxes
//!   only: another namespace's id is `not_found`, another namespace's name
//!   is `invalid_name` (names stay unique across the whole home, so such a
//!   name cannot be created here either).
//! - **A quota of running sandboxes** ([`Quota`]): in total and per value
//!   of a label. A start past it is refused with `runtime_unavailable` and
//!   changes nothing.
//!
//! Snapshots are the local backend's too: a sandbox of this namespace can
//! be saved; the snapshots themselves are named across the home, as images
//! are.
//!
//! Warm pools are not offered (the capability `pools` is off): a sandbox
//! claimed from a pool runs without a start, past any quota.
//!
//! Everything else is the local backend's: every required method
//! delegates to it by id, so identity checks, atomic claims, idempotent
//! stops and waiting through Starting are the local backend's own.
//!
//! What must be atomic here is the quota: counting the running sandboxes
//! and starting one is check-then-act, so every start (`start`,
//! `connect_or_start`, `restart`, a demand start through `open_runtime`)
//! holds the backend's start lock, an exclusive lock on a file of the home
//! shared by every process, from before the count until the start has
//! settled. The namespace check needs no lock: an id's namespace label is
//! set when it is created and can never change (modify refuses it), and an
//! id is never reused.
//!
//! ```no_run
//! # async fn demo() -> burrow::Result<()> {
//! use std::sync::Arc;
//! use burrow::{Backend, Sandbox, SandboxConfig};
//! use custom_backend::{Quota, QuotaBackend};
//!
//! let backend: Arc<dyn Backend> = Arc::new(
//!     QuotaBackend::open("/var/lib/burrow", "team-a", Quota::new().max_running(4)).await?,
//! );
//! let sandbox = Sandbox::builder("worker")
//!     .backend(backend)
//!     .config(SandboxConfig::new("docker.io/library/alpine:3.20"))
//!     .connect_or_create()
//!     .await?;
//! # Ok(()) }
//! ```

mod quota;

/// The implementer guide, `docs/backends.md`: its Rust examples are compiled
/// as doctests of this crate, so they keep matching the real API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/backends.md")]
pub struct BackendsGuide;

use std::future::Future;
use std::path::PathBuf;

use async_trait::async_trait;
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ExitReason, ListFilter, LocalBackend, LogOptions,
    LogStream, Metrics, Modify, ModifyPlan, Result, RuntimeStream, SandboxId, SandboxInfo,
    StartOptions, Status, StopOptions,
};

pub use quota::Quota;
use quota::{running_statuses, StartLock};

/// The label that carries a sandbox's namespace.
pub const NAMESPACE_LABEL: &str = "quota.example/namespace";

/// The local backend of one burrow home, seen through one namespace and
/// limited by a [`Quota`]. See the [crate documentation](crate).
#[derive(Debug)]
pub struct QuotaBackend {
    inner: LocalBackend,
    namespace: String,
    quota: Quota,
    starts: StartLock,
}

impl QuotaBackend {
    /// The local backend of the burrow home `home` (created if needed),
    /// seen through `namespace` and limited by `quota`.
    pub async fn open(
        home: impl Into<PathBuf>,
        namespace: &str,
        quota: Quota,
    ) -> Result<QuotaBackend> {
        if namespace.is_empty() || namespace.len() > 128 || namespace.contains(char::is_control) {
            return Err(Error::InvalidConfig {
                field: "namespace".into(),
                reason: "1..=128 bytes without control characters".into(),
            });
        }
        let home: PathBuf = home.into();
        // The home exists once the backend is open: the lock file lives in it.
        let inner = LocalBackend::open_at(&home).await?;
        let lock = home.join("quota.lock");
        Ok(QuotaBackend {
            inner,
            namespace: namespace.to_owned(),
            quota,
            starts: StartLock::new(lock),
        })
    }

    fn is_mine(&self, info: &SandboxInfo) -> bool {
        info.config.labels.get(NAMESPACE_LABEL) == Some(&self.namespace)
    }

    /// What the caller sees of `info`: without the namespace label.
    fn outward(&self, mut info: SandboxInfo) -> SandboxInfo {
        info.config.labels.remove(NAMESPACE_LABEL);
        info
    }

    /// `info` if it is this namespace's, else `not_found` for its id.
    fn mine(&self, info: SandboxInfo) -> Result<SandboxInfo> {
        if self.is_mine(&info) {
            Ok(self.outward(info))
        } else {
            Err(not_found(&info.id))
        }
    }

    /// Refuses an id of another namespace before anything acts on it. An id
    /// that does not exist (any more) is left to the local backend, which
    /// answers `sandbox_replaced` or `not_found` by what holds the name.
    async fn own(&self, id: &SandboxId) -> Result<()> {
        match self.inner.get_by_id(id).await {
            Ok(info) if !self.is_mine(&info) => Err(not_found(id)),
            Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Runs `start`, which may start the sandbox `(name, id)`, within the
    /// quota: under the start lock, and if `starts(info)` says the
    /// sandbox as it is now would be started, counts what runs and refuses
    /// past the quota.
    async fn within_quota<T, F, Fut>(
        &self,
        name: &str,
        id: &SandboxId,
        starts: fn(&SandboxInfo) -> bool,
        start: F,
    ) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        // Held from the count until the start has settled: no other start
        // (in this process or another) can take the last slot in between.
        let _guard = self.starts.acquire().await?;
        let info = self.inner.status(name, id).await?;
        if starts(&info) {
            let running = self
                .inner
                .list(
                    &ListFilter::default()
                        .statuses(running_statuses())
                        .label(NAMESPACE_LABEL, &self.namespace),
                )
                .await?;
            self.quota.admits(&info, &running)?;
        }
        start().await
    }

    /// The quota label's change by `changes`, if it changes it.
    fn relabels<'a>(&self, changes: &'a Modify) -> Option<Option<&'a String>> {
        let (key, _) = self.quota.max_running_per_label.as_ref()?;
        if let Some(v) = changes.labels_set.get(key) {
            Some(Some(v))
        } else if changes.labels_unset.contains(key) {
            Some(None)
        } else {
            None
        }
    }
}

/// Whether a start would start `info` (a sandbox with a runtime needs no
/// new slot; the local backend refuses or waits).
fn startable(info: &SandboxInfo) -> bool {
    info.status.can_start()
}

/// Whether a call that wakes `info` would start it: reclaimed for idleness,
/// with demand start on.
fn demand_starts(info: &SandboxInfo) -> bool {
    info.status == Status::Stopped
        && info.last_run.as_ref().and_then(|r| r.exit_reason) == Some(ExitReason::IdleTimeout)
        && info.config.demand_start_enabled()
}

fn not_found(id: &SandboxId) -> Error {
    Error::NotFound {
        what: format!("sandbox {id}"),
        name: None,
        id: Some(id.clone()),
    }
}

fn foreign_name(name: &str) -> Error {
    Error::InvalidName {
        reason: format!("{name:?} belongs to another namespace"),
    }
}

fn namespace_label_refused() -> Error {
    Error::InvalidConfig {
        field: "labels".into(),
        reason: format!("{NAMESPACE_LABEL} is set by the backend"),
    }
}

#[async_trait]
impl Backend for QuotaBackend {
    async fn capabilities(&self) -> Result<Capabilities> {
        let mut caps = self.inner.capabilities().await?;
        // No warm pools: a claim hands over a sandbox already running,
        // which no start (and so no quota check) precedes, and a pool's
        // warm sandboxes would belong to no namespace. The pool methods
        // keep the trait's default (`unsupported`).
        caps.pools = false;
        Ok(caps)
    }

    async fn create(&self, mut req: CreateRequest) -> Result<SandboxInfo> {
        if req.config.labels.contains_key(NAMESPACE_LABEL) {
            return Err(namespace_label_refused());
        }
        req.config
            .labels
            .insert(NAMESPACE_LABEL.into(), self.namespace.clone());
        // Never served by a pool another backend of the home made: what
        // starts here goes through the quota (see `capabilities`).
        req.claim = false;
        // The local create is the atomic claim of the name.
        match self.inner.create(req).await {
            Ok(info) => Ok(self.outward(info)),
            Err(Error::AlreadyExists { name, id }) => match self.inner.get_by_id(&id).await {
                Ok(holder) if !self.is_mine(&holder) => Err(foreign_name(&name)),
                _ => Err(Error::AlreadyExists { name, id }),
            },
            Err(e) => Err(e),
        }
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        let info = self.inner.get(name).await?;
        if !self.is_mine(&info) {
            return Err(foreign_name(name));
        }
        Ok(self.outward(info))
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        self.mine(self.inner.get_by_id(id).await?)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let filter = filter.clone().label(NAMESPACE_LABEL, &self.namespace);
        let infos = self.inner.list(&filter).await?;
        Ok(infos.into_iter().map(|i| self.outward(i)).collect())
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.mine(self.inner.status(name, id).await?)
    }

    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.own(id).await?;
        let info = self
            .within_quota(name, id, startable, || self.inner.start(name, id, opts))
            .await?;
        Ok(self.outward(info))
    }

    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.own(id).await?;
        // Running already: no slot to take, no lock to wait for.
        let info = self.inner.status(name, id).await?;
        if info.status == Status::Running {
            return Ok(self.outward(info));
        }
        let info = self
            .within_quota(name, id, startable, || {
                self.inner.connect_or_start(name, id, opts)
            })
            .await?;
        Ok(self.outward(info))
    }

    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.stop(name, id, opts).await?))
    }

    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.kill(name, id).await?))
    }

    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.request_drain(name, id).await?))
    }

    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.own(id).await?;
        let info = self
            .within_quota(name, id, startable, || self.inner.restart(name, id, opts))
            .await?;
        Ok(self.outward(info))
    }

    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.own(id).await?;
        self.inner.remove(name, id).await
    }

    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.own(id).await?;
        self.inner.destroy(name, id).await
    }

    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.wait_for_status(name, id, statuses).await?))
    }

    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        self.own(id).await?;
        // Without waking it, the local backend never starts anything: the
        // common case (a running sandbox) takes no lock.
        match self.inner.open_runtime(name, id, false).await {
            Err(Error::InvalidState {
                status: Status::Stopped | Status::Starting,
                ..
            }) if wake => {
                // A demand start, perhaps: it takes a slot like any start.
                self.within_quota(name, id, demand_starts, || {
                    self.inner.open_runtime(name, id, true)
                })
                .await
            }
            other => other,
        }
    }

    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.detach(name, id).await?))
    }

    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.own(id).await?;
        self.inner.touch(name, id).await
    }

    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.pause(name, id).await?))
    }

    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.own(id).await?;
        Ok(self.outward(self.inner.resume(name, id).await?))
    }

    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        if changes.labels_set.contains_key(NAMESPACE_LABEL)
            || changes.labels_unset.iter().any(|k| k == NAMESPACE_LABEL)
        {
            return Err(namespace_label_refused());
        }
        self.own(id).await?;
        let mut plan = match self.relabels(changes) {
            // Moving a running sandbox into another label group takes a
            // slot there: checked and changed under the start lock.
            Some(new_value) => {
                let _guard = self.starts.acquire().await?;
                let mut info = self.inner.status(name, id).await?;
                if info.status.has_runtime() {
                    if let Some((key, _)) = &self.quota.max_running_per_label {
                        match new_value {
                            Some(v) => info.config.labels.insert(key.clone(), v.clone()),
                            None => info.config.labels.remove(key),
                        };
                    }
                    let running = self
                        .inner
                        .list(
                            &ListFilter::default()
                                .statuses(running_statuses())
                                .label(NAMESPACE_LABEL, &self.namespace),
                        )
                        .await?;
                    self.quota.admits(&info, &running)?;
                }
                self.inner.modify(name, id, changes).await?
            }
            None => self.inner.modify(name, id, changes).await?,
        };
        plan.info = self.outward(plan.info);
        Ok(plan)
    }

    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.own(id).await?;
        self.inner.metrics(name, id).await
    }

    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        self.own(id).await?;
        self.inner.logs(name, id, opts).await
    }

    // Snapshots of this namespace's sandboxes; the snapshots themselves
    // are named across the home, as images are.
    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &burrow::SnapshotOptions,
    ) -> Result<burrow::SnapshotInfo> {
        self.own(id).await?;
        self.inner.snapshot(name, id, snapshot, opts).await
    }
    async fn list_snapshots(&self) -> Result<Vec<burrow::SnapshotInfo>> {
        self.inner.list_snapshots().await
    }
    // The copies keep the parent's configuration, and with it its
    // namespace label: they are this namespace's.
    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &burrow::ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        self.own(id).await?;
        self.inner.fork(name, id, opts).await
    }
    async fn get_snapshot(&self, snapshot: &str) -> Result<burrow::SnapshotInfo> {
        self.inner.get_snapshot(snapshot).await
    }
    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        self.inner.remove_snapshot(snapshot).await
    }
}
