//! Warm pools of the local backend.
//!
//! A pool's warm sandboxes are ordinary detached sandboxes of the pool's
//! configuration (less what a claim sets: no idle reclaim, no age limit),
//! named `pool/<pool>/<id>` and marked with their pool in the state
//! database, hidden from listings. A create whose configuration a pool can
//! serve claims one (see `Store::claim_warm`: one statement, so one
//! claimer per warm sandbox across processes) and gets it running, under
//! the creator's name, with the creator's labels, timeouts and ownership;
//! a refill then starts a replacement. A create that finds none running
//! counts a miss and starts cold, as without the pool.
//!
//! A refill holds the pool's lock file (one refill per pool at a time,
//! across processes): it removes warm sandboxes that ended (crashed or
//! stopped) and stray ones (a refill killed between two writes), starts
//! the ones still created (a refill killed before their start), then
//! creates and starts what is missing, one first (a configuration that
//! cannot start fails once, not in every sandbox), then the rest at once,
//! or removes the excess after a scale down.

use std::time::Instant;

use burrow_protocol::{Control, Owner};

use super::transitions::ControlError;
use super::LocalBackend;
use crate::backend::{Backend, StartOptions};
use crate::engine::locks::FileLock;
use crate::engine::procs::ProcIdentity;
use crate::engine::store::pools::{not_found, Warm};
use crate::error::{Error, Result};
use crate::model::{PoolInfo, PoolSpec, SandboxConfig, SandboxId, SandboxInfo, Status};

impl LocalBackend {
    /// Defines a pool and fills it (returns once its sandboxes run). A pool
    /// whose first fill fails (its first sandbox does not start: see
    /// [`Self::refill_pool`]) is removed again, with what it started: a
    /// create gives a running pool or nothing.
    pub(super) async fn do_create_pool(&self, mut spec: PoolSpec) -> Result<PoolInfo> {
        self.prepare_config(&mut spec.config)?;
        spec.validate()?;
        self.store.insert_pool(&spec).await?;
        if let Err(e) = self.refill_pool(&spec.name).await {
            if let Err(undo) = self.do_remove_pool(&spec.name).await {
                tracing::warn!(pool = %spec.name, error = %undo, "removing a pool whose fill failed");
            }
            return Err(e);
        }
        self.do_get_pool(&spec.name).await
    }

    /// One pool, with its warm sandboxes counted.
    pub(super) async fn do_get_pool(&self, name: &str) -> Result<PoolInfo> {
        let info = self
            .store
            .get_pool(name)
            .await?
            .ok_or_else(|| not_found(name))?;
        self.counted(info).await
    }

    /// Every pool, by name.
    pub(super) async fn do_list_pools(&self) -> Result<Vec<PoolInfo>> {
        let mut out = Vec::new();
        for info in self.store.list_pools().await? {
            out.push(self.counted(info).await?);
        }
        Ok(out)
    }

    /// Sets how many warm sandboxes a pool keeps, and starts or removes
    /// sandboxes to match (returns once it does).
    pub(super) async fn do_scale_pool(&self, name: &str, size: u32) -> Result<PoolInfo> {
        let current = self.do_get_pool(name).await?;
        PoolSpec::new(name, current.config, size).validate()?;
        if !self.store.scale_pool(name, size).await? {
            return Err(not_found(name));
        }
        self.refill_pool(name).await?;
        self.do_get_pool(name).await
    }

    /// Removes a pool and its warm sandboxes (claimed ones are not its
    /// any more, and stay).
    pub(super) async fn do_remove_pool(&self, name: &str) -> Result<()> {
        let _lock = self.pool_lock(name).await?;
        if !self.store.remove_pool(name).await? {
            return Err(not_found(name));
        }
        for warm in self.store.warm_of(name).await? {
            self.remove_warm(&warm.id).await?;
        }
        tracing::info!(pool = name, "pool removed");
        Ok(())
    }

    /// Brings a pool to its size (see the module documentation).
    pub async fn refill_pool(&self, name: &str) -> Result<()> {
        let _lock = self.pool_lock(name).await?;
        let started = Instant::now();
        let Some(pool) = self.store.get_pool(name).await? else {
            return Err(not_found(name));
        };
        for (id, _) in self.store.stray_warm().await? {
            self.remove_warm(&id).await?;
        }
        let mut live = Vec::new();
        for Warm { id, claimer, .. } in self.store.warm_of(name).await? {
            match claimer {
                // Mid-claim: its claimer's now, not the pool's.
                Some(c) if c.is_alive() => continue,
                // A claimer killed between its two steps.
                Some(_) => {
                    self.remove_warm(&id).await?;
                    continue;
                }
                None => {}
            }
            // Reconciled: a start whose starter died reads as crashed.
            let status = match self.get_by_id(&id).await {
                Ok(info) => info.status,
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            if matches!(status, Status::Crashed | Status::Stopped) {
                self.remove_warm(&id).await?;
            } else {
                live.push(id);
            }
        }
        let size = pool.size as usize;
        for id in live.iter().skip(size) {
            self.remove_warm(id).await?;
        }
        live.truncate(size);
        let spec = PoolSpec::new(name, pool.config, pool.size);
        let config = spec.warm_config();
        let running = live.len();
        while live.len() < size {
            let id = SandboxId::new();
            self.store.insert_warm(&id, name, &config).await?;
            live.push(id);
        }
        // One new sandbox first: a configuration that cannot start (an
        // image that cannot be had, ...) fails the refill once, with the
        // error a create would give, not in every sandbox.
        if running < live.len() {
            let first = live.remove(running);
            if let Err(e) = self.start_warm(&first).await {
                self.store
                    .set_pool_refill(name, started.elapsed().as_millis() as u64)
                    .await?;
                return Err(e);
            }
        }
        let mut starts = tokio::task::JoinSet::new();
        for id in live {
            let this = self.clone();
            starts.spawn(async move { this.start_warm(&id).await });
        }
        let mut failed = None;
        while let Some(done) = starts.join_next().await {
            if let Ok(Err(e)) = done {
                failed.get_or_insert(e);
            }
        }
        let took = started.elapsed().as_millis() as u64;
        self.store.set_pool_refill(name, took).await?;
        tracing::info!(pool = name, size, took_ms = took, "pool refilled");
        failed.map_or(Ok(()), Err)
    }

    /// The pool a create of `config` named `name` may claim from (the
    /// first by name).
    pub(super) async fn pool_for(
        &self,
        name: &str,
        config: &SandboxConfig,
    ) -> Result<Option<String>> {
        let pools = self.store.list_pools().await?;
        Ok(pools
            .into_iter()
            .find(|p| PoolSpec::new(&p.name, p.config.clone(), p.size).claimable_by(name, config))
            .map(|p| p.name))
    }

    /// A create served from `pool`, under the name's lock: a running warm
    /// sandbox reserved for this process, told to take the creator's
    /// configuration, name and ownership (`Control::Claim`), then renamed,
    /// and the pool refilled behind it. `None`: none was running (a miss,
    /// counted), or the reserved one went away meanwhile (its pool was
    /// removed): the create starts cold.
    pub(super) async fn claim_from_pool(
        &self,
        pool: &str,
        name: &str,
        config: &SandboxConfig,
        detached: bool,
    ) -> Result<Option<SandboxInfo>> {
        let _lock = self.name_lock(name).await?;
        if let Some(holder) = self.store.get_by_name(name).await? {
            return Err(Error::AlreadyExists {
                name: name.to_owned(),
                id: holder.info.id,
            });
        }
        let me = ProcIdentity::current();
        let reserved = self.store.reserve_warm(pool, config, detached, me).await?;
        let Some(id) = reserved else {
            self.refill_in_background(pool);
            self.store.count_pool_miss(pool).await?;
            return Ok(None);
        };
        let taken = self.take_reserved(&id, name, detached, me).await;
        // Behind the claim, not beside it: a start's work would slow it.
        self.refill_in_background(pool);
        if let Ok(Some(info)) = taken {
            tracing::info!(sandbox = %id, name, pool, "claimed from the pool");
            return Ok(Some(info));
        }
        // Not half-claimed: the reservation goes (a refill would remove it
        // once this process is gone anyway).
        if let Err(e) = self.remove_warm(&id).await {
            tracing::warn!(sandbox = %id, error = %e, "removing a failed claim's sandbox");
        }
        if let Ok(None) = taken {
            tracing::info!(sandbox = %id, pool, "the claimed sandbox went away; starting cold");
        }
        taken
    }

    /// The claim's second half: the reserved sandbox applies the claim,
    /// then takes the name. `None`: it went away meanwhile (its run ended,
    /// its pool was removed).
    async fn take_reserved(
        &self,
        id: &SandboxId,
        name: &str,
        detached: bool,
        me: ProcIdentity,
    ) -> Result<Option<SandboxInfo>> {
        let gone = |e: Error| match e {
            Error::NotFound { .. } => Ok(None),
            e => Err(e),
        };
        let warm = match self.get_by_id(id).await {
            Ok(info) => info,
            Err(e) => return gone(e),
        };
        let owner = (!detached).then_some(Owner {
            pid: me.pid,
            start: me.start,
        });
        let claim = Control::Claim {
            name: name.to_owned(),
            owner,
        };
        match self.control_answer(&warm, claim).await {
            Ok(_) => {}
            Err(ControlError::Ended) => return Ok(None),
            Err(ControlError::Refused(g)) => return Err(Error::protocol(g.to_string())),
            Err(ControlError::Failed(e)) => return Err(e),
        }
        crate::engine::fault::hold(crate::engine::fault::Fault::PoolClaimReserved).await;
        if let Err(e) = self.store.take_claimed(id, name, me).await {
            return gone(e);
        }
        Ok(Some(self.lookup(name, id).await?.info))
    }

    fn refill_in_background(&self, pool: &str) {
        let this = self.clone();
        let pool = pool.to_owned();
        tokio::spawn(async move {
            if let Err(e) = this.refill_pool(&pool).await {
                tracing::warn!(pool, error = %e, "refilling the pool failed");
            }
        });
    }

    /// Brings a warm sandbox to Running: starts it, waits for a start in
    /// progress, starts again one whose starter died (a claimer's
    /// background refill ends with its process).
    async fn start_warm(&self, id: &SandboxId) -> Result<()> {
        let info = self.get_by_id(id).await?;
        self.connect_or_start(&info.name, id, StartOptions::default().detached(true))
            .await
            .map(drop)
    }

    async fn remove_warm(&self, id: &SandboxId) -> Result<()> {
        match self.get_by_id(id).await {
            Ok(info) => match self.destroy(&info.name, id).await {
                Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            },
            Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The pool's warm sandboxes counted by status.
    async fn counted(&self, mut info: PoolInfo) -> Result<PoolInfo> {
        for warm in self.store.warm_of(&info.name).await? {
            match (warm.claimer, warm.status.as_str()) {
                (Some(_), _) => {}
                (None, "running") => info.warm += 1,
                (None, "created" | "starting") => info.starting += 1,
                _ => {}
            }
        }
        Ok(info)
    }

    async fn pool_lock(&self, name: &str) -> Result<FileLock> {
        let file = format!("{}.pool", crate::engine::paths::short_hash(name));
        FileLock::acquire(&self.home.locks_dir().join(file)).await
    }
}
