//! Warm pools on the cluster.
//!
//! A pool is a `SandboxPool` object ([`crate::pool_record`]); its warm
//! sandboxes are ordinary records named `pool/<pool>/<slot>` (a name no
//! create can take), one per slot `0..size`, marked in their spec
//! ([`WarmMark`]) and hidden from listings. Slots make refills of many
//! processes converge without a lock: the record of a slot is created by
//! whoever comes first (the API server's create conflict), then started by
//! `connect_or_start`, which converges on one start.
//!
//! A claim, as the local backend's, takes a running warm sandbox for a
//! create in steps, each one write: (1) the warm record is marked with
//! the claim, conditional on the resourceVersion read, so each warm
//! sandbox goes to one claimer across processes and replicas; (2) the
//! claimer's record is created under its name (a taken name gives the mark
//! back: `already_exists`), same id and run, the run counted from now;
//! (3) the run's pod is given to that record (its owner reference); (4) the
//! warm record is deleted, which frees the slot for the refill that
//! follows. A claimer that dies between the steps leaves a mark that any
//! refill finishes or undoes once it is [`STALE_CLAIM`] old.

use std::time::{Duration, Instant};

use burrow::lifecycle::Operation;
use burrow::model::validate_name;
use burrow::{
    Error, OciRuntime, PoolInfo, PoolSpec, Result, SandboxConfig, SandboxId, SandboxInfo,
    StartOptions, Status,
};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};

use crate::pool_record::{self, PoolDef, PoolStatus, StoredPool};
use crate::record::{self, ClaimMark, Spec, Stored, WarmMark};
use crate::{api_error, is_status, names, now_ms, pods, KubeBackend};

/// The prefix of a warm sandbox's name.
pub const WARM_PREFIX: &str = "pool/";
/// How old a claim's mark is when a refill takes its claimer for dead.
pub const STALE_CLAIM: Duration = Duration::from_secs(60);

/// The name of slot `slot` of `pool`.
pub fn warm_name(pool: &str, slot: u32) -> String {
    format!("{WARM_PREFIX}{pool}/{slot}")
}

/// Whether `name` is a warm sandbox's.
pub fn is_warm_name(name: &str) -> bool {
    name.starts_with(WARM_PREFIX)
}

fn not_found(pool: &str) -> Error {
    Error::NotFound {
        what: format!("pool {pool:?}"),
        name: Some(pool.to_owned()),
        id: None,
    }
}

impl KubeBackend {
    /// Checks and normalizes a pool's configuration as a create does.
    fn prepare_pool(&self, spec: &mut PoolSpec) -> Result<()> {
        spec.config.runtime.get_or_insert(OciRuntime::Runc);
        spec.validate()?;
        pods::validate_image(&spec.config.image)?;
        pods::check_limits(&spec.config)
    }

    pub(crate) async fn read_pool(&self, pool: &str) -> Result<Option<StoredPool>> {
        match self.pools.get_opt(&names::record_name(pool)).await {
            Ok(Some(o)) => StoredPool::from_object(&o).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(api_error("reading a pool record", e)),
        }
    }

    async fn all_pools(&self) -> Result<Vec<StoredPool>> {
        let list = self
            .pools
            .list(&ListParams::default().labels(&format!("{}=burrow", record::MANAGED_LABEL)))
            .await
            .map_err(|e| api_error("listing pool records", e))?;
        let mut out: Vec<StoredPool> = list
            .iter()
            .map(StoredPool::from_object)
            .collect::<Result<_>>()?;
        out.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        Ok(out)
    }

    pub(crate) async fn kube_create_pool(&self, mut spec: PoolSpec) -> Result<PoolInfo> {
        self.prepare_pool(&mut spec)?;
        let def = PoolDef {
            name: spec.name.clone(),
            config: spec.config,
            size: spec.size,
        };
        match self
            .pools
            .create(&PostParams::default(), &pool_record::new_object(&def)?)
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => return Err(Error::PoolExists { name: spec.name }),
            Err(e) => return Err(api_error("creating a pool record", e)),
        }
        self.refill_pool(&spec.name).await?;
        self.kube_get_pool(&spec.name).await
    }

    /// A pool, its warm and starting sandboxes counted now.
    pub(crate) async fn kube_get_pool(&self, pool: &str) -> Result<PoolInfo> {
        validate_name(pool)?;
        let stored = self.read_pool(pool).await?.ok_or_else(|| not_found(pool))?;
        let warm = self.warm_records(pool).await?;
        Ok(counted(&stored, &warm))
    }

    pub(crate) async fn kube_list_pools(&self) -> Result<Vec<PoolInfo>> {
        let pools = self.all_pools().await?;
        let warm = self.all_warm_records().await?;
        Ok(pools
            .iter()
            .map(|p| {
                let mine: Vec<Stored> = warm
                    .iter()
                    .filter(|s| s.spec.warm.as_ref().is_some_and(|w| w.pool == p.def.name))
                    .cloned()
                    .collect();
                counted(p, &mine)
            })
            .collect())
    }

    /// Sets a pool's size (what `kubectl scale` and an autoscaler set
    /// through the `scale` subresource), then refills it.
    pub(crate) async fn kube_scale_pool(&self, pool: &str, size: u32) -> Result<PoolInfo> {
        validate_name(pool)?;
        loop {
            let stored = self.read_pool(pool).await?.ok_or_else(|| not_found(pool))?;
            PoolSpec::new(pool, stored.def.config.clone(), size).validate()?;
            let mut def = stored.def.clone();
            def.size = size;
            let mut object = pool_record::new_object(&def)?;
            object.metadata.resource_version = Some(stored.resource_version.clone());
            match self
                .pools
                .replace(&names::record_name(pool), &PostParams::default(), &object)
                .await
            {
                Ok(_) => break,
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => return Err(not_found(pool)),
                Err(e) => return Err(api_error("scaling a pool", e)),
            }
        }
        self.refill_pool(pool).await?;
        self.kube_get_pool(pool).await
    }

    /// Removes a pool and its warm sandboxes (a claim in progress loses
    /// its sandbox and starts cold).
    pub(crate) async fn kube_remove_pool(&self, pool: &str) -> Result<()> {
        validate_name(pool)?;
        match self
            .pools
            .delete(&names::record_name(pool), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => return Err(not_found(pool)),
            Err(e) => return Err(api_error("removing a pool record", e)),
        }
        for s in self.warm_records(pool).await? {
            self.remove_warm(&s).await?;
        }
        Ok(())
    }

    /// Every warm record (of every pool).
    async fn all_warm_records(&self) -> Result<Vec<Stored>> {
        let list = self
            .records
            .list(&ListParams::default().labels(&format!("{}=true", record::WARM_LABEL)))
            .await
            .map_err(|e| api_error("listing warm sandbox records", e))?;
        list.into_iter().map(Stored::from_object).collect()
    }

    async fn warm_records(&self, pool: &str) -> Result<Vec<Stored>> {
        let mut all: Vec<Stored> = self
            .all_warm_records()
            .await?
            .into_iter()
            .filter(|s| s.spec.warm.as_ref().is_some_and(|w| w.pool == pool))
            .collect();
        all.sort_by_key(|s| s.spec.warm.as_ref().map_or(0, |w| w.slot));
        Ok(all)
    }

    /// Brings a pool to its size: stale claims finished or undone, ended
    /// and surplus warm sandboxes removed, missing slots made, every slot
    /// started; returns once they run. Safe from any number of processes.
    pub(crate) async fn refill_pool(&self, pool: &str) -> Result<()> {
        let Some(stored) = self.read_pool(pool).await? else {
            return Err(not_found(pool));
        };
        let started = Instant::now();
        let size = stored.def.size;
        let spec = PoolSpec::new(pool, stored.def.config.clone(), size);
        let mut taken = vec![false; size as usize];
        let mut work = tokio::task::JoinSet::new();
        let config = spec.warm_config();
        let mut outdated = Vec::new();
        for s in self.warm_records(pool).await? {
            let Some(mark) = s.spec.warm.clone() else {
                continue;
            };
            if let Some(claim) = &mark.claim {
                if now_ms() - claim.at_ms > STALE_CLAIM.as_millis() as i64 {
                    self.settle_claim(&s, claim).await?;
                } else if let Some(t) = taken.get_mut(mark.slot as usize) {
                    // Its claimer's until it finishes.
                    *t = true;
                }
                continue;
            }
            let ended = matches!(s.info().status, Status::Crashed | Status::Stopped);
            if mark.slot >= size || ended {
                self.remove_warm(&s).await?;
                continue;
            }
            taken[mark.slot as usize] = true;
            if s.info().status != Status::Running {
                let me = self.arc()?;
                work.spawn(async move { me.start_warm(&s.spec.info).await });
            } else if s.info().config != config {
                outdated.push(s);
            }
        }
        // A definition changed under its warm sandboxes (`kubectl edit`):
        // replaced one at a time, once the others run, so that the pool
        // keeps serving claims meanwhile.
        if work.is_empty() {
            if let Some(s) = outdated.first() {
                tracing::info!(pool, sandbox = %s.info().id, "replacing a warm sandbox of an older definition");
                self.remove_warm(s).await?;
                if let Some(mark) = &s.spec.warm {
                    taken[mark.slot as usize] = false;
                }
            }
        }
        for slot in (0..size).filter(|&i| !taken[i as usize]) {
            let me = self.arc()?;
            let (pool, config) = (pool.to_owned(), config.clone());
            work.spawn(async move { me.make_warm(&pool, slot, config).await });
        }
        let starts = work.len();
        let mut failed = None;
        while let Some(done) = work.join_next().await {
            if let Ok(Err(e)) = done {
                failed.get_or_insert(e);
            }
        }
        if starts > 0 {
            let took = started.elapsed().as_millis() as u64;
            let warm = self.warm_records(pool).await?;
            let now = counted(&stored, &warm);
            self.update_pool_status(pool, |st| {
                st.warm = now.warm;
                st.starting = now.starting;
                st.last_refill_ms = Some(took);
            })
            .await?;
            tracing::info!(pool, size, took_ms = took, "pool refilled");
        }
        failed.map_or(Ok(()), Err)
    }

    /// Refills every pool (the reaper's pass).
    pub(crate) async fn refill_all(&self) -> Result<()> {
        for p in self.all_pools().await? {
            if let Err(e) = self.refill_pool(&p.def.name).await {
                tracing::warn!(pool = %p.def.name, error = %e, "refilling a pool failed");
            }
        }
        Ok(())
    }

    /// Creates the record of a warm slot (if nobody did) and starts it.
    async fn make_warm(&self, pool: &str, slot: u32, config: SandboxConfig) -> Result<()> {
        let mut info = SandboxInfo::new(SandboxId::new(), warm_name(pool, slot), config);
        info.detached = true;
        let spec = Spec {
            info,
            activity_ms: now_ms(),
            stopping: None,
            warm: Some(WarmMark {
                pool: pool.to_owned(),
                slot,
                claim: None,
            }),
        };
        match self
            .records
            .create(&PostParams::default(), &record::new_object(&spec)?)
            .await
        {
            Ok(o) => self.start_warm(&Stored::from_object(o)?.spec.info).await,
            // Another refill made it: its start converges with ours.
            Err(e) if is_status(&e, 409) => match self.read(&spec.info.name).await? {
                Some(s) => self.start_warm(&s.spec.info).await,
                None => Ok(()),
            },
            Err(e) => Err(api_error("creating a warm sandbox record", e)),
        }
    }

    async fn start_warm(&self, info: &SandboxInfo) -> Result<()> {
        match self
            .start_as(
                Operation::ConnectOrStart,
                &info.name,
                &info.id,
                StartOptions::default(),
            )
            .await
        {
            // Claimed or removed meanwhile: not ours to start any more.
            Ok(_) | Err(Error::NotFound { .. }) | Err(Error::SandboxReplaced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn remove_warm(&self, s: &Stored) -> Result<()> {
        match burrow::Backend::destroy(self, &s.info().name, &s.info().id).await {
            Ok(()) | Err(Error::NotFound { .. }) | Err(Error::SandboxReplaced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A claim whose claimer is gone: finished when its record was made
    /// (the pod given to it, the warm record deleted), else undone (the
    /// warm sandbox removed).
    async fn settle_claim(&self, warm: &Stored, claim: &ClaimMark) -> Result<()> {
        match self.read(&claim.name).await? {
            Some(claimed) if claimed.info().id == warm.info().id => {
                tracing::info!(sandbox = %claim.name, "finishing a claim its claimer left");
                self.hand_over(warm, &claimed).await.map(drop)
            }
            _ => {
                tracing::info!(pool = ?warm.spec.warm.as_ref().map(|w| &w.pool), "undoing a claim its claimer left");
                self.remove_warm(warm).await
            }
        }
    }

    /// A create served from `pool` (see the module documentation). `None`:
    /// none was running (a miss, counted), or the claimed one went away
    /// (its pool removed): the create starts cold.
    pub(crate) async fn claim_from_pool(
        &self,
        pool: &str,
        name: &str,
        config: &SandboxConfig,
    ) -> Result<Option<SandboxInfo>> {
        if let Some(holder) = self.read(name).await? {
            return Err(Error::AlreadyExists {
                name: name.to_owned(),
                id: holder.info().id.clone(),
            });
        }
        let marked = self.mark_claim(pool, name).await?;
        let Some(marked) = marked else {
            self.refill_in_background(pool);
            self.update_pool_status(pool, |st| st.misses += 1).await?;
            return Ok(None);
        };
        let now = now_ms();
        let mut info = marked.info().clone();
        info.name = name.to_owned();
        info.config = config.clone();
        info.detached = true;
        info.created_at_ms = now;
        if let Some(run) = info.last_run.as_mut() {
            // Its max duration counts from the claim.
            run.running_at_ms = Some(now);
        }
        let spec = Spec {
            info,
            activity_ms: now,
            stopping: None,
            warm: None,
        };
        let created = match self
            .records
            .create(&PostParams::default(), &record::new_object(&spec)?)
            .await
        {
            Ok(o) => Stored::from_object(o)?,
            Err(e) if is_status(&e, 409) => {
                self.unmark(&marked).await;
                let id = match self.read(name).await? {
                    Some(s) => s.info().id.clone(),
                    None => spec.info.id.clone(),
                };
                return Err(Error::AlreadyExists {
                    name: name.to_owned(),
                    id,
                });
            }
            Err(e) => return Err(api_error("creating a claimed sandbox's record", e)),
        };
        if !self.hand_over(&marked, &created).await? {
            // Its pool was removed meanwhile, and the sandbox with it.
            let _ = burrow::Backend::destroy(self, name, &created.info().id).await;
            tracing::info!(pool, name, "the claimed sandbox went away; starting cold");
            return Ok(None);
        }
        // Its slot is free now: made again behind the claim.
        self.refill_in_background(pool);
        self.update_pool_status(pool, |st| st.claims += 1).await?;
        tracing::info!(sandbox = %created.info().id, name, pool, "claimed from the pool");
        Ok(Some(created.spec.info))
    }

    /// Step 1: marks a running warm sandbox of `pool` as claimed for
    /// `name`; `None` when none is running unmarked.
    async fn mark_claim(&self, pool: &str, name: &str) -> Result<Option<Stored>> {
        for s in self.warm_records(pool).await? {
            let Some(mark) = &s.spec.warm else {
                continue;
            };
            if mark.claim.is_some() || s.info().status != Status::Running {
                continue;
            }
            let mut spec = s.spec.clone();
            if let Some(w) = spec.warm.as_mut() {
                w.claim = Some(ClaimMark {
                    name: name.to_owned(),
                    at_ms: now_ms(),
                });
            }
            // A conflict: another claimer (or a stamp) wrote it first.
            if let Some(marked) = self.write(&s, spec).await? {
                return Ok(Some(marked));
            }
        }
        Ok(None)
    }

    /// Gives a claim's mark back (best effort: a refill undoes it later).
    async fn unmark(&self, marked: &Stored) {
        let mut spec = marked.spec.clone();
        if let Some(w) = spec.warm.as_mut() {
            w.claim = None;
        }
        let _ = self.write(marked, spec).await;
    }

    /// Steps 3 and 4: the run's pod goes to `claimed`'s record, and the
    /// warm record is deleted. False when the warm record is gone or no
    /// longer marked for this claim (its pool was removed).
    async fn hand_over(&self, warm: &Stored, claimed: &Stored) -> Result<bool> {
        let info = claimed.info();
        let pod = names::pod_name(&info.id, info.generation);
        let owner = serde_json::json!({"metadata": {"ownerReferences": [{
            "apiVersion": format!("{}/{}", record::GROUP, record::VERSION),
            "kind": record::KIND,
            "name": names::record_name(&info.name),
            "uid": claimed.uid,
            "controller": true,
            "blockOwnerDeletion": false,
        }]}});
        match self
            .pods
            .patch(&pod, &PatchParams::default(), &Patch::Merge(&owner))
            .await
        {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => return Ok(false),
            Err(e) => return Err(api_error("handing a warm sandbox's pod over", e)),
        }
        loop {
            let Some(now) = self.read(&warm.info().name).await? else {
                return Ok(false);
            };
            let ours = now.info().id == warm.info().id
                && now.spec.warm.as_ref().and_then(|w| w.claim.as_ref())
                    == warm.spec.warm.as_ref().and_then(|w| w.claim.as_ref());
            if !ours {
                return Ok(false);
            }
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: Some(now.resource_version.clone()),
                    uid: Some(now.uid.clone()),
                }),
                ..DeleteParams::default()
            };
            match self
                .records
                .delete(&names::record_name(&now.info().name), &params)
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => return Ok(false),
                Err(e) => return Err(api_error("deleting a claimed warm record", e)),
            }
        }
    }

    fn refill_in_background(&self, pool: &str) {
        let Ok(me) = self.arc() else {
            return;
        };
        let pool = pool.to_owned();
        tokio::spawn(async move {
            if let Err(e) = me.refill_pool(&pool).await {
                tracing::warn!(pool, error = %e, "refilling the pool failed");
            }
        });
    }

    /// Changes a pool's status (conditional, again on a conflict).
    async fn update_pool_status(&self, pool: &str, change: impl Fn(&mut PoolStatus)) -> Result<()> {
        for _ in 0..32 {
            let Some(stored) = self.read_pool(pool).await? else {
                return Ok(());
            };
            let mut status = stored.status.clone();
            change(&mut status);
            let object: DynamicObject = stored.with_status(&status)?;
            match self
                .pools
                .replace_status(&names::record_name(pool), &PostParams::default(), &object)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => return Ok(()),
                Err(e) => return Err(api_error("updating a pool's status", e)),
            }
        }
        Err(record::store_error("a pool's status kept changing"))
    }

    /// The pool a create of `config` named `name` may claim from (the
    /// first by name).
    pub(crate) async fn pool_for(
        &self,
        name: &str,
        config: &SandboxConfig,
    ) -> Result<Option<String>> {
        Ok(self
            .all_pools()
            .await?
            .into_iter()
            .find(|p| {
                PoolSpec::new(&p.def.name, p.def.config.clone(), p.def.size)
                    .claimable_by(name, config)
            })
            .map(|p| p.def.name))
    }

    fn arc(&self) -> Result<std::sync::Arc<KubeBackend>> {
        self.me.upgrade().ok_or_else(|| Error::Io {
            context: "the backend is being dropped".into(),
            path: None,
            source: std::io::Error::other("backend dropped"),
        })
    }
}

/// A pool as it stands: its definition and counters, its warm sandboxes
/// counted from `warm` (a claim in progress is not warm).
fn counted(stored: &StoredPool, warm: &[Stored]) -> PoolInfo {
    let mut info = stored.info();
    info.warm = 0;
    info.starting = 0;
    for s in warm {
        if s.spec.warm.as_ref().is_some_and(|w| w.claim.is_some()) {
            continue;
        }
        match s.info().status {
            Status::Running => info.warm += 1,
            Status::Created | Status::Starting => info.starting += 1,
            _ => {}
        }
    }
    info
}
