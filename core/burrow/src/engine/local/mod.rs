//! The local backend: SQLite state, per-name flock transitions, one
//! supervisor process per running sandbox.

mod config;
mod fork;
mod full_snapshots;
mod policy;
mod pools;
mod snapshots;
mod spawn;
mod transitions;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

pub use config::{
    DefaultLimits, LocalConfig, ENV_DEFAULT_CPUS, ENV_DEFAULT_DISK, ENV_DEFAULT_MEMORY,
    ENV_DEFAULT_PIDS, ENV_DEMAND_START, ENV_DRIVER,
};
#[doc(hidden)]
pub use snapshots::{unpack_layer_in_user_namespace, write_layer_in_user_namespace};

use crate::backend::{
    Backend, Capabilities, CreateRequest, ListFilter, Metrics, RuntimeStream, StartOptions,
    StopOptions,
};
use crate::engine::fault::Fault;
use crate::engine::image::{
    parse_reference, ImageSource, ImageSummary, PreparedImage, PruneReport, PullOptions,
};
use crate::engine::locks::FileLock;
use crate::engine::paths::Home;
use crate::engine::store::{Record, Store};
use crate::error::{Error, ErrorCode, Result};
use crate::logs::{LogOptions, LogStream};
use crate::model::{validate_name, ExitReason, RunInfo, SandboxId, SandboxInfo, Status};
use crate::model::{ForkOptions, Modify, ModifyPlan, SnapshotInfo, SnapshotOptions};

/// The embedded backend: sandboxes of one burrow home on this host.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    home: Home,
    store: Store,
    config: LocalConfig,
}

static DEFAULT: OnceCell<Arc<LocalBackend>> = OnceCell::const_new();

/// Lock file in a sandbox's directory, held by a remove from before it
/// deletes the record until the directory is gone.
const REMOVAL_LOCK: &str = "remove.lock";

impl LocalBackend {
    /// A configuration as this host records it: its defaults filled in
    /// (whoever created the sandbox, a remote client included, this backend
    /// runs it), checked, its image found and a local image's path made
    /// absolute (later starts may come from another working directory).
    fn prepare_config(&self, config: &mut crate::model::SandboxConfig) -> Result<()> {
        config.resolve_defaults(
            self.config.default_driver,
            self.config.default_runtime,
            self.config.demand_start_default,
        );
        config.validate()?;
        self.check_image(&config.image)?;
        // What this host can do comes after what the request names exists.
        crate::engine::driver::check_limits(config)?;
        crate::engine::driver::fill_default_limits(config, &self.config.default_limits);
        config.image = crate::engine::image::normalize_reference(&self.home, &config.image)?;
        Ok(())
    }

    /// Opens the backend whose home is `home` (created, mode 0700, if
    /// missing; a relative path is taken from the current directory), with
    /// the host defaults of the environment ([`LocalConfig::from_env`]).
    pub async fn open_at(home: impl AsRef<Path>) -> Result<LocalBackend> {
        Self::open_with(home, LocalConfig::from_env()?).await
    }

    /// Opens the backend whose home is `home` with the host defaults
    /// `config`.
    pub async fn open_with(home: impl AsRef<Path>, config: LocalConfig) -> Result<LocalBackend> {
        Self::open(Home::at(home.as_ref())?, config).await
    }

    pub(crate) async fn open(home: Home, config: LocalConfig) -> Result<LocalBackend> {
        let store = Store::open(&home).await?;
        let backend = LocalBackend {
            home,
            store,
            config,
        };
        backend.sweep_orphans().await;
        Ok(backend)
    }

    /// The process-wide backend for the default home
    /// ([`LocalBackend::default_home`]) with the host defaults of the
    /// environment (opened once).
    pub async fn shared() -> Result<Arc<LocalBackend>> {
        DEFAULT
            .get_or_try_init(|| async {
                Ok(Arc::new(
                    LocalBackend::open(Home::from_env()?, LocalConfig::from_env()?).await?,
                ))
            })
            .await
            .cloned()
    }

    /// The home a backend opened without a path uses: `$BURROW_HOME`, else
    /// `$XDG_DATA_HOME/burrow`, else `~/.local/share/burrow`.
    pub fn default_home() -> Result<PathBuf> {
        Home::default_root()
    }

    /// The home directory.
    pub fn home_dir(&self) -> &Path {
        self.home.root()
    }

    /// The host defaults this backend applies at create.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The directory holding the logs of sandbox `id` (`guest.log`,
    /// `supervisor.log`, see [`crate::LogSource::file_name`]), whether or
    /// not it exists yet.
    pub fn log_dir(&self, id: &SandboxId) -> PathBuf {
        crate::engine::logs::log_dir(&self.home.sandbox_dir(id))
    }

    /// Pulls a registry image into this home's image store (as `opts`
    /// says: if missing, always, never) and unpacks it.
    pub async fn pull_image(&self, reference: &str, opts: &PullOptions) -> Result<PreparedImage> {
        crate::engine::image::pull(&self.home, reference, opts).await
    }

    /// The registry images in this home's image store.
    pub fn list_images(&self) -> Result<Vec<ImageSummary>> {
        crate::engine::image::list_images(&self.home)
    }

    /// Forgets the registry image `reference` (its blobs go at the next
    /// [`LocalBackend::prune_images`]).
    pub fn remove_image(&self, reference: &str) -> Result<()> {
        crate::engine::image::remove_image(&self.home, reference)
    }

    /// Makes the VM boot template a vm sandbox of `config` (image, memory,
    /// CPUs, network, number of mounts) starts from, unless it exists, so
    /// that its first start restores a booted guest too (see
    /// `docs/architecture.md`, *Boot templates*). Concurrent callers and
    /// starts build it once.
    pub async fn warm_vm_template(
        &self,
        config: &crate::model::SandboxConfig,
    ) -> Result<crate::engine::driver::vm::WarmTemplate> {
        config.validate()?;
        crate::engine::driver::vm::warm_template(&self.home, config).await
    }

    /// Deletes blobs and unpacked trees no image refers to, keeping those of
    /// the references in `in_use` and of every snapshot.
    pub async fn prune_images(&self, in_use: &[String]) -> Result<PruneReport> {
        let snapshots = self.snapshot_digests().await?;
        // A full snapshot's sandboxes run its base image.
        let mut in_use = in_use.to_vec();
        in_use.extend(
            self.store
                .list_snapshots()
                .await?
                .into_iter()
                .filter(|s| s.kind == crate::model::SnapshotKind::Full)
                .map(|s| s.base_image),
        );
        crate::engine::image::prune(&self.home, &in_use, &snapshots)
    }

    /// Removes per-sandbox directories whose record is gone (a remove that
    /// was interrupted after deleting the record). Ids are never reused, so
    /// a directory without a record can never belong to a live sandbox; but
    /// it may belong to a remove in progress (in this or another process),
    /// which holds [`REMOVAL_LOCK`] until it has reclaimed the runtime state
    /// recorded there (rootfs mount points, runtime state): that one is
    /// left to it.
    async fn sweep_orphans(&self) {
        let Ok(entries) = std::fs::read_dir(self.home.sandboxes_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<SandboxId>().ok())
            else {
                continue;
            };
            if let Ok(None) = self.store.get_by_id(&id).await {
                crate::engine::fault::hold(Fault::SweepBeforeLock).await;
                let lock = entry.path().join(REMOVAL_LOCK);
                let Ok(Some(removing)) = FileLock::try_acquire(&lock) else {
                    continue;
                };
                // Read again with the lock held: a sandbox being made
                // ([`LocalBackend::make_unrecorded_dir`]) records itself
                // before it lets the lock go, so the record read now is
                // final. A lock file no longer at its path was another
                // sweep's, which removed the directory.
                if !removing.is_at(&lock) || !matches!(self.store.get_by_id(&id).await, Ok(None)) {
                    continue;
                }
                tracing::info!(sandbox = %id, "removing the leftover directory of a removed sandbox");
                let _ = crate::engine::driver::container::remove_sandbox_dir(&entry.path()).await;
            }
        }
    }

    /// Creates the directory of a sandbox that has no record yet (a fork's
    /// copy, a restore of a full snapshot) and takes its removal lock, to
    /// be held until the record exists, so that no sweep (of any process)
    /// takes the directory for a removed sandbox's leftover. A sweep can
    /// take it in the moment between the two and delete it: then it is
    /// made again.
    async fn make_unrecorded_dir(&self, id: &SandboxId) -> Result<(PathBuf, FileLock)> {
        const ATTEMPTS: usize = 20;
        let dir = self.home.sandbox_dir(id);
        for _ in 0..ATTEMPTS {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io("creating the sandbox directory", Some(&dir), e))?;
            crate::engine::fault::hold(Fault::MakeDirBeforeLock).await;
            if let Some(lock) = FileLock::acquire_linked(&dir.join(REMOVAL_LOCK)).await? {
                return Ok((dir, lock));
            }
        }
        Err(Error::io(
            "creating the sandbox directory",
            Some(&dir),
            std::io::Error::other(format!(
                "removed by other processes' sweeps {ATTEMPTS} times in a row"
            )),
        ))
    }

    async fn name_lock(&self, name: &str) -> Result<FileLock> {
        FileLock::acquire(&self.home.name_lock_path(name)).await
    }

    /// A record whose runtime owner died reads as Crashed (and is recorded so).
    async fn reconcile(&self, rec: Record) -> Result<Record> {
        if !rec.info.status.has_runtime() {
            return Ok(rec);
        }
        if rec.owner.is_some_and(|o| o.is_alive()) {
            return Ok(rec);
        }
        let detail = match rec.owner {
            Some(o) => format!(
                "the owning process {} died while the sandbox was {}",
                o.pid, rec.info.status
            ),
            None => format!("no live owner while {}", rec.info.status),
        };
        let reason = if rec.info.status == Status::Starting {
            ExitReason::StartFailed
        } else {
            ExitReason::Crashed
        };
        self.store
            .finish_run(
                &rec.info.id,
                rec.info.generation,
                Status::Crashed,
                reason,
                Some(&detail),
            )
            .await?;
        let id = rec.info.id.clone();
        self.store
            .get_by_id(&id)
            .await?
            .ok_or_else(|| Error::not_found_id(&id))
    }

    /// Looks up exactly `id`, reconciled. If the id is gone and the name
    /// belongs to another sandbox, that is [`Error::SandboxReplaced`].
    async fn lookup(&self, name: &str, id: &SandboxId) -> Result<Record> {
        match self.store.get_by_id(id).await? {
            Some(rec) => self.reconcile(rec).await,
            None => match self.store.get_by_name(name).await? {
                Some(other) => Err(Error::SandboxReplaced {
                    name: name.to_owned(),
                    expected: id.clone(),
                    actual: other.info.id,
                }),
                None => Err(Error::not_found_id(id)),
            },
        }
    }

    async fn lookup_name(&self, name: &str) -> Result<Record> {
        validate_name(name)?;
        let rec = self
            .store
            .get_by_name(name)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("sandbox named {name:?}"),
                name: Some(name.to_owned()),
                id: None,
            })?;
        self.reconcile(rec).await
    }

    /// Polls (reconciled) until `done` holds for the record.
    async fn wait_until(
        &self,
        name: &str,
        id: &SandboxId,
        done: impl Fn(&SandboxInfo) -> bool,
    ) -> Result<SandboxInfo> {
        let mut pause = Duration::from_millis(2);
        loop {
            let rec = self.lookup(name, id).await?;
            if done(&rec.info) {
                return Ok(rec.info);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    fn check_image(&self, reference: &str) -> Result<()> {
        match parse_reference(&self.home, reference)? {
            ImageSource::RootfsDir(p) | ImageSource::OciLayout { path: p, .. } if !p.is_dir() => {
                Err(Error::InvalidImage {
                    image: reference.to_owned(),
                    reason: format!("{} is not a directory", p.display()),
                })
            }
            // A well-formed registry reference (parse_reference checked
            // it); it is pulled when the sandbox starts, if missing.
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Backend for LocalBackend {
    async fn capabilities(&self) -> Result<Capabilities> {
        // What the host's default driver can do for this user (a rootless
        // container cannot be paused without a delegated cgroup).
        let driver = crate::engine::driver::for_kind(
            self.config.default_driver,
            self.config.default_runtime,
        );
        Ok(Capabilities {
            pause: driver.pauses(),
            network_policy: driver.enforces_network_policy(),
            secrets: driver.enforces_network_policy(),
            snapshots: driver.snapshots(),
            full_snapshots: self.config.default_driver == crate::model::DriverKind::Vm,
            ..Capabilities::ALL
        })
    }

    async fn create(&self, mut req: CreateRequest) -> Result<SandboxInfo> {
        validate_name(&req.name)?;
        self.prepare_config(&mut req.config)?;
        let pool = match req.claim {
            true => self.pool_for(&req.name, &req.config).await?,
            false => None,
        };
        if let Some(pool) = pool {
            if let Some(info) = self
                .claim_from_pool(&pool, &req.name, &req.config, req.detached)
                .await?
            {
                return Ok(info);
            }
        }
        let id = SandboxId::new();
        // Placeholders chosen, values sealed (and taken out of the
        // configuration) before anything is persisted.
        let sealed = crate::engine::secrets::seal_new(&self.home, &id, &mut req.config)?;
        // From a full snapshot: the directory gets the saved guest first.
        let seeded = self.seed_from_full_snapshot(&req.config, &id).await?;
        let inserted = {
            let _lock = self.name_lock(&req.name).await?;
            self.store
                .insert(&id, &req.name, &req.config, req.detached, sealed.as_deref())
                .await
        };
        if let (Some(_making), Err(_)) = (&seeded, &inserted) {
            let _ = std::fs::remove_dir_all(self.home.sandbox_dir(&id));
        }
        drop(seeded);
        match inserted {
            Ok(()) => {
                tracing::info!(sandbox = %id, name = %req.name, "created");
                self.lookup(&req.name, &id).await.map(|r| r.info)
            }
            Err(Error::AlreadyExists { name, id: winner }) => {
                // Report the loss only once the winner's start (if any) settled,
                // so the caller can use the winner right away.
                let _ = self
                    .wait_until(&name, &winner, |i| i.status != Status::Starting)
                    .await;
                Err(Error::AlreadyExists { name, id: winner })
            }
            Err(e) => Err(e),
        }
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        self.lookup_name(name).await.map(|r| r.info)
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let rec = self
            .store
            .get_by_id(id)
            .await?
            .ok_or_else(|| Error::not_found_id(id))?;
        self.reconcile(rec).await.map(|r| r.info)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let mut out = Vec::new();
        let records = self.store.list().await?;
        // The window a concurrent removal lands in: rows read, not yet
        // reconciled.
        crate::engine::fault::hold(Fault::ListBeforeReconcile).await;
        // A pool's warm sandboxes are not anyone's yet.
        let records = records
            .into_iter()
            .filter(|r| !crate::engine::store::pools::is_warm_name(&r.info.name));
        for rec in records {
            let info = match self.reconcile(rec).await {
                Ok(rec) => rec.info,
                // Removed since the listing was read: not in the list.
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            if filter.matches(&info) {
                out.push(info);
            }
        }
        Ok(out)
    }

    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.do_touch(name, id).await
    }
    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.do_pause(name, id, true).await
    }
    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.do_pause(name, id, false).await
    }
    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        self.do_modify(name, id, changes).await
    }
    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.do_metrics(name, id).await
    }
    async fn runs(&self, name: &str, id: &SandboxId, limit: usize) -> Result<Vec<RunInfo>> {
        // The current run as the lookup reconciled it (a dead owner reads
        // as crashed), the others as recorded.
        let info = self.lookup(name, id).await?.info;
        let mut runs = self.store.runs(id, limit).await?;
        if let Some(last) = info.last_run {
            for r in runs.iter_mut().filter(|r| r.generation == last.generation) {
                *r = last.clone();
            }
        }
        Ok(runs)
    }
    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        let rec = self.lookup(name, id).await?;
        let dir = self.home.sandbox_dir(id);
        if !opts.follow {
            return crate::engine::logs::open_local(&dir, opts, None);
        }
        // A followed log ends with the run current now (the store is asked
        // between looks for lines; a dead supervisor is reconciled there).
        // With none, it is the lines already written.
        let Some(run) = crate::logs::followed_run(&rec.info) else {
            return crate::engine::logs::open_local(&dir, &opts.clone().follow(false), None);
        };
        let (me, name, id) = (self.clone(), name.to_owned(), id.clone());
        let ended: crate::engine::logs::RunEnded = Box::new(move || {
            let (me, name, id) = (me.clone(), name.clone(), id.clone());
            Box::pin(async move {
                match me.lookup(&name, &id).await {
                    Ok(now) => crate::logs::run_has_ended(Some(run), Some(&now.info)),
                    // Gone (removed, or the name reused): no run to follow.
                    Err(e)
                        if matches!(e.code(), ErrorCode::NotFound | ErrorCode::SandboxReplaced) =>
                    {
                        true
                    }
                    // The store failed this time: ask again at the next look.
                    Err(_) => false,
                }
            })
        });
        crate::engine::logs::open_local(&dir, opts, Some(ended))
    }
    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.do_detach(name, id).await
    }
    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &SnapshotOptions,
    ) -> Result<SnapshotInfo> {
        self.do_snapshot(name, id, snapshot, opts).await
    }
    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        self.do_fork(name, id, opts).await
    }
    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.do_list_snapshots().await
    }
    async fn get_snapshot(&self, snapshot: &str) -> Result<SnapshotInfo> {
        self.do_get_snapshot(snapshot).await
    }
    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        self.do_remove_snapshot(snapshot).await
    }

    async fn create_pool(&self, spec: crate::PoolSpec) -> Result<crate::PoolInfo> {
        self.do_create_pool(spec).await
    }
    async fn get_pool(&self, pool: &str) -> Result<crate::PoolInfo> {
        self.do_get_pool(pool).await
    }
    async fn list_pools(&self) -> Result<Vec<crate::PoolInfo>> {
        self.do_list_pools().await
    }
    async fn scale_pool(&self, pool: &str, size: u32) -> Result<crate::PoolInfo> {
        self.do_scale_pool(pool, size).await
    }
    async fn remove_pool(&self, pool: &str) -> Result<()> {
        self.do_remove_pool(pool).await
    }
    async fn events(&self, after: u64, limit: usize) -> Result<crate::EventPage> {
        self.store.events(after, limit).await
    }
    async fn refill_pools(&self) -> Result<()> {
        for pool in self.store.list_pools().await? {
            if let Err(e) = self.refill_pool(&pool.name).await {
                tracing::warn!(pool = %pool.name, error = %e, "refilling a pool failed");
            }
        }
        Ok(())
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.lookup(name, id).await.map(|r| r.info)
    }
    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.do_start(name, id, opts, false).await
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.do_start(name, id, opts, true).await
    }
    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.do_stop(name, id, Some(opts)).await
    }
    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.do_stop(name, id, None).await
    }
    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.do_drain(name, id).await
    }
    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.do_stop(name, id, Some(opts)).await?;
        self.do_start(name, id, StartOptions::default(), true).await
    }
    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.do_remove(name, id).await
    }
    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        // Someone may start it again between the kill and the remove; the
        // remove then refuses, and we kill again.
        for _ in 0..5 {
            self.do_stop(name, id, None).await?;
            match self.do_remove(name, id).await {
                Err(Error::InvalidState { .. }) => continue,
                other => return other,
            }
        }
        self.do_stop(name, id, None).await?;
        self.do_remove(name, id).await
    }
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.wait_until(name, id, |i| statuses.contains(&i.status))
            .await
    }
    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        self.do_open_runtime(name, id, wake).await
    }
}
