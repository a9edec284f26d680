//! One tenant's view of the engine: a [`Backend`] that keeps the tenant's
//! objects in its scope and shows it nothing else.
//!
//! A tenant's sandboxes, pools and snapshots are the engine's objects whose
//! names are in the tenant's scope (`<tenant>/<name>`, see
//! [`burrow::model::validate_scope`]); the default tenant's are the names
//! without a scope. Names come in without the scope (one with a `/` is
//! `invalid_name`) and go out without it, in answers and in errors.
//!
//! Another tenant's object answers exactly as one that does not exist: a
//! call by id whose sandbox is out of scope is made with a fresh id
//! instead (nothing holds it, so nothing is acted on), and the engine's own
//! answer for a missing id is returned with the caller's id put back.

use std::sync::Arc;

use super::limits::names_no_limit;
use super::policy::TenantPolicy;
use super::quota::{Demand, QuotaCtx};

use async_trait::async_trait;
use burrow::api::ErrorBody;
use burrow::model::{snapshot_of_image, split_scope, validate_base, validate_snapshot_base};
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ForkOptions, ListFilter, LogOptions, LogStream,
    Metrics, Modify, ModifyPlan, MountSource, PoolInfo, PoolSpec, Result, RunInfo, RuntimeStream,
    SandboxConfig, SandboxId, SandboxInfo, SnapshotInfo, SnapshotOptions, StartOptions, Status,
    StopOptions, SNAPSHOT_IMAGE_PREFIX,
};

/// Named volumes of a scoped tenant are the engine's `_t.<tenant>.<name>`;
/// the default tenant may not name one so.
const VOLUME_SCOPE_PREFIX: &str = burrow::model::SCOPED_VOLUME_PREFIX;

/// The engine as one tenant sees it.
#[derive(Debug, Clone)]
pub struct Scoped {
    pub(super) inner: Arc<dyn Backend>,
    /// `None`: the default tenant (names without a scope).
    scope: Option<String>,
    /// Whose limits apply (none: no limits).
    pub(super) quota: Option<QuotaCtx>,
    /// What the tenant's sandboxes may be and reach.
    policy: TenantPolicy,
}

impl Scoped {
    /// `inner` seen by the tenant of `scope` (`None`: the default one),
    /// under such a tenant's bare policy ([`TenantPolicy::for_scope`]).
    pub fn new(inner: Arc<dyn Backend>, scope: Option<String>) -> Scoped {
        let policy = TenantPolicy::for_scope(scope.as_deref(), &[]);
        Scoped {
            inner,
            scope,
            quota: None,
            policy,
        }
    }

    /// The same, under `policy`.
    pub fn with_policy(mut self, policy: TenantPolicy) -> Scoped {
        self.policy = policy;
        self
    }

    /// Checks a stored sandbox against the tenant's policy before it
    /// starts or is copied (`fork`): its configuration as the engine
    /// holds it.
    async fn policy_holds(&self, name: &str, id: &SandboxId, fork: bool) -> Result<()> {
        if self.policy == TenantPolicy::unrestricted() {
            return Ok(());
        }
        let info = self
            .by_id(
                name,
                id,
                |n, i| async move { self.inner.status(&n, &i).await },
            )
            .await?;
        if fork {
            self.policy.check_fork(&info.config)
        } else {
            self.policy.check_start(&info.config)
        }
    }

    /// The same, checking the limits of `ctx`'s tenant (see
    /// [`super::quota`]).
    pub fn with_quota(mut self, ctx: QuotaCtx) -> Scoped {
        self.quota = Some(ctx);
        self
    }

    /// What a start of `id` adds: nothing when it has a runtime already.
    async fn start_demand(&self, name: &str, id: &SandboxId, restart: bool) -> Result<Demand> {
        let info = self.status(name, id).await?;
        Ok(match (info.status.has_runtime(), restart) {
            (true, true) => Demand::restart(),
            (true, false) => Demand::none(),
            (false, _) => Demand::started(&info.config, 1, false),
        })
    }

    /// The engine's name of the tenant's `name` (checked: no scope of its
    /// own).
    fn engine_name(&self, name: &str) -> Result<String> {
        validate_base(name)?;
        Ok(self.wrap(name))
    }

    fn wrap(&self, name: &str) -> String {
        match &self.scope {
            Some(s) => format!("{s}/{name}"),
            None => name.to_owned(),
        }
    }

    /// The tenant's name of the engine's `name`, if it is in scope.
    fn unwrap<'a>(&self, name: &'a str) -> Option<&'a str> {
        let (scope, base) = split_scope(name);
        (scope == self.scope.as_deref()).then_some(base)
    }

    fn snapshot_name(&self, name: &str) -> Result<String> {
        validate_snapshot_base(name)?;
        Ok(self.wrap(name))
    }

    /// An image reference as the engine takes it: a snapshot in scope.
    fn image_in(&self, image: &str) -> Result<String> {
        match snapshot_of_image(image) {
            Some(name) => Ok(format!(
                "{SNAPSHOT_IMAGE_PREFIX}{}",
                self.snapshot_name(name).map_err(|e| Error::InvalidImage {
                    image: image.to_owned(),
                    reason: ErrorBody::from(&e).message,
                })?
            )),
            None => Ok(image.to_owned()),
        }
    }

    fn image_out(&self, image: &mut String) {
        if let Some(name) = snapshot_of_image(image) {
            if let Some(base) = self.unwrap(name) {
                *image = format!("{SNAPSHOT_IMAGE_PREFIX}{base}");
            }
        }
    }

    /// A configuration as the engine takes it. A scoped tenant's may not
    /// reach the server's host: no host directories (as mounts or as
    /// images) and no published host ports.
    fn config_in(&self, config: &mut SandboxConfig) -> Result<()> {
        config.image = self.image_in(&config.image)?;
        let scoped = self.scope.is_some();
        let forbidden = |field: &str, what: &str| Error::InvalidConfig {
            field: field.to_owned(),
            reason: format!("{what} of the server's host are not open to a tenant's sandboxes"),
        };
        if scoped
            && (config.image.starts_with('/')
                || config.image.starts_with('.')
                || config.image.starts_with("oci:"))
        {
            return Err(forbidden("image", "directories"));
        }
        if scoped && !config.ports.is_empty() {
            return Err(forbidden("ports", "ports"));
        }
        for (i, m) in config.mounts.iter_mut().enumerate() {
            match &mut m.source {
                MountSource::Host(_) if scoped => {
                    return Err(forbidden(&format!("mounts[{i}].source.host"), "directories"))
                }
                MountSource::Host(_) => {}
                // The tenant's own name is checked here: the engine's,
                // with the scope, is longer.
                MountSource::Volume(v) if !burrow::model::is_volume_name(v) => {
                    return Err(burrow::model::volume_name_error(
                        &format!("mounts[{i}].source.volume"),
                        v,
                    ))
                }
                MountSource::Volume(v) => match &self.scope {
                    Some(s) => *v = format!("{VOLUME_SCOPE_PREFIX}{s}.{v}"),
                    None if v.starts_with(VOLUME_SCOPE_PREFIX) => {
                        return Err(Error::InvalidConfig {
                            field: format!("mounts[{i}].source.volume"),
                            reason: format!(
                                "volume names starting with {VOLUME_SCOPE_PREFIX:?} are the server's"
                            ),
                        })
                    }
                    None => {}
                },
            }
        }
        Ok(())
    }

    fn config_out(&self, config: &mut SandboxConfig) {
        self.image_out(&mut config.image);
        if let Some(s) = &self.scope {
            // The server's, not the tenant's (its exceptions are the
            // operator's allow list).
            config.egress_ceiling = None;
            let prefix = format!("{VOLUME_SCOPE_PREFIX}{s}.");
            for m in &mut config.mounts {
                if let MountSource::Volume(v) = &mut m.source {
                    if let Some(rest) = v.strip_prefix(&prefix) {
                        *v = rest.to_owned();
                    }
                }
            }
        }
    }

    fn info_out(&self, mut info: SandboxInfo) -> SandboxInfo {
        if let Some(base) = self.unwrap(&info.name) {
            info.name = base.to_owned();
        }
        self.config_out(&mut info.config);
        info
    }

    fn snapshot_out(&self, mut s: SnapshotInfo) -> SnapshotInfo {
        if let Some(base) = self.unwrap(&s.name) {
            s.name = base.to_owned();
        }
        if let Some(base) = self.unwrap(&s.source_name) {
            s.source_name = base.to_owned();
        }
        self.image_out(&mut s.image);
        self.image_out(&mut s.base_image);
        s
    }

    fn pool_out(&self, mut p: PoolInfo) -> PoolInfo {
        if let Some(base) = self.unwrap(&p.name) {
            p.name = base.to_owned();
        }
        self.config_out(&mut p.config);
        p
    }

    /// An engine error as the tenant sees it: names without the scope, and
    /// each `(engine's, caller's)` pair of `swaps` (a stand-in id or name)
    /// put back as the caller gave it.
    fn error_out(&self, e: Error, swaps: &[(String, String)]) -> Error {
        if self.scope.is_none() && swaps.is_empty() {
            return e;
        }
        let Ok(mut value) = serde_json::to_value(ErrorBody::from(&e)) else {
            return e;
        };
        let quoted = self.scope.as_ref().map(|s| format!("\"{s}/"));
        let prefix = self.scope.as_ref().map(|s| format!("{s}/"));
        let fix = |text: &mut String| {
            for (engine, caller) in swaps {
                *text = text.replace(engine.as_str(), caller);
            }
            if let (Some(q), Some(p)) = (&quoted, &prefix) {
                *text = text.replace(q.as_str(), "\"");
                if let Some(rest) = text.strip_prefix(p.as_str()) {
                    *text = rest.to_owned();
                }
            }
        };
        rewrite_strings(&mut value, &fix);
        match serde_json::from_value::<ErrorBody>(value) {
            Ok(body) => body.into_error(),
            Err(_) => e,
        }
    }

    fn out<T>(&self, r: Result<T>, map: impl FnOnce(T) -> T) -> Result<T> {
        r.map(map).map_err(|e| self.error_out(e, &[]))
    }

    /// The engine's `(name, id)` for a call by id, and the stand-ins to
    /// put back in its errors: the caller's id when its sandbox is in
    /// scope, else a fresh one (see the module doc); the caller's name in
    /// scope, or, when it is no name (the identity check takes any
    /// string), one nobody can hold.
    async fn target(
        &self,
        name: &str,
        id: &SandboxId,
    ) -> Result<(String, SandboxId, Vec<(String, String)>)> {
        let mut swaps = Vec::new();
        let engine_name = match validate_base(name) {
            Ok(()) => self.wrap(name),
            Err(_) => {
                let stand_in = format!("\u{1}{name}");
                swaps.push((stand_in.clone(), name.to_owned()));
                stand_in
            }
        };
        let visible = match self.inner.get_by_id(id).await {
            Ok(info) => self.unwrap(&info.name).is_some(),
            Err(Error::NotFound { .. }) => false,
            Err(e) => return Err(self.error_out(e, &[])),
        };
        if visible {
            return Ok((engine_name, id.clone(), swaps));
        }
        let fresh = SandboxId::new();
        swaps.push((fresh.as_str().to_owned(), id.as_str().to_owned()));
        Ok((engine_name, fresh, swaps))
    }

    /// Runs a call by id through [`Self::target`].
    pub(super) async fn by_id<T, F, Fut>(&self, name: &str, id: &SandboxId, call: F) -> Result<T>
    where
        F: FnOnce(String, SandboxId) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let (engine_name, engine_id, swaps) = self.target(name, id).await?;
        call(engine_name, engine_id)
            .await
            .map_err(|e| self.error_out(e, &swaps))
    }

    async fn info_by_id<F, Fut>(&self, name: &str, id: &SandboxId, call: F) -> Result<SandboxInfo>
    where
        F: FnOnce(String, SandboxId) -> Fut,
        Fut: std::future::Future<Output = Result<SandboxInfo>>,
    {
        self.by_id(name, id, call).await.map(|i| self.info_out(i))
    }
}

/// Applies `fix` to every string of a JSON value.
fn rewrite_strings(v: &mut serde_json::Value, fix: &impl Fn(&mut String)) {
    match v {
        serde_json::Value::String(s) => fix(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| rewrite_strings(x, fix)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| rewrite_strings(x, fix)),
        _ => {}
    }
}

#[async_trait]
impl Backend for Scoped {
    async fn capabilities(&self) -> Result<Capabilities> {
        self.inner.capabilities().await
    }

    async fn create(&self, mut req: CreateRequest) -> Result<SandboxInfo> {
        req.name = self.engine_name(&req.name)?;
        let defaulted = self.policy.limits.is_some() && names_no_limit(&req.config);
        let (policy, config) = (&self.policy, &mut req.config);
        policy.check_create(config, Some(self)).await?;
        self.config_in(&mut req.config)?;
        // A create that may claim a pool's sandbox counts as a start.
        let demand = match req.claim {
            true => Demand::started(&req.config, 1, true),
            false => Demand::defined(1),
        };
        let config = req.config.clone();
        let make = |config| {
            let mut req = req.clone();
            req.config = config;
            self.inner.create(req)
        };
        let op = self.on_this_host(config, defaulted, make);
        let r = self.within_quota(async { Ok(demand) }, op).await;
        self.out(r, |i| self.info_out(i))
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        let name = self.engine_name(name)?;
        let r = self.inner.get(&name).await;
        self.out(r, |i| self.info_out(i))
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let fresh = SandboxId::new();
        let r = match self.inner.get_by_id(id).await {
            Ok(info) if self.unwrap(&info.name).is_some() => Ok(info),
            Ok(_) | Err(Error::NotFound { .. }) => {
                let r = self.inner.get_by_id(&fresh).await;
                let swap = [(fresh.as_str().to_owned(), id.as_str().to_owned())];
                return r.map_err(|e| self.error_out(e, &swap));
            }
            Err(e) => Err(e),
        };
        self.out(r, |i| self.info_out(i))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let all = self
            .inner
            .list(filter)
            .await
            .map_err(|e| self.error_out(e, &[]))?;
        Ok(all
            .into_iter()
            .filter(|i| self.unwrap(&i.name).is_some())
            .map(|i| self.info_out(i))
            .collect())
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(
            name,
            id,
            |n, i| async move { self.inner.status(&n, &i).await },
        )
        .await
    }

    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.policy_holds(name, id, false).await?;
        let demand = self.start_demand(name, id, false);
        let op = self.info_by_id(name, id, |n, i| async move {
            self.inner.start(&n, &i, opts).await
        });
        self.within_quota(demand, op).await
    }

    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.policy_holds(name, id, false).await?;
        let demand = self.start_demand(name, id, false);
        let op = self.info_by_id(name, id, |n, i| async move {
            self.inner.connect_or_start(&n, &i, opts).await
        });
        self.within_quota(demand, op).await
    }

    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.info_by_id(name, id, |n, i| async move {
            self.inner.stop(&n, &i, opts).await
        })
        .await
    }

    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(
            name,
            id,
            |n, i| async move { self.inner.kill(&n, &i).await },
        )
        .await
    }

    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(name, id, |n, i| async move {
            self.inner.request_drain(&n, &i).await
        })
        .await
    }

    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.policy_holds(name, id, false).await?;
        let demand = self.start_demand(name, id, true);
        let op = self.info_by_id(name, id, |n, i| async move {
            self.inner.restart(&n, &i, opts).await
        });
        self.within_quota(demand, op).await
    }

    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.by_id(
            name,
            id,
            |n, i| async move { self.inner.remove(&n, &i).await },
        )
        .await
    }

    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.by_id(
            name,
            id,
            |n, i| async move { self.inner.destroy(&n, &i).await },
        )
        .await
    }

    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.info_by_id(name, id, |n, i| async move {
            self.inner.wait_for_status(&n, &i, statuses).await
        })
        .await
    }

    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        // A wake is the tenant's own start (see `super::wake`).
        self.open_woken(name, id, wake).await
    }

    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(
            name,
            id,
            |n, i| async move { self.inner.detach(&n, &i).await },
        )
        .await
    }

    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.by_id(
            name,
            id,
            |n, i| async move { self.inner.touch(&n, &i).await },
        )
        .await
    }

    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(
            name,
            id,
            |n, i| async move { self.inner.pause(&n, &i).await },
        )
        .await
    }

    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.info_by_id(
            name,
            id,
            |n, i| async move { self.inner.resume(&n, &i).await },
        )
        .await
    }

    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        let mut changes = changes.clone();
        self.policy.check_modify(&mut changes)?;
        let changes = &changes;
        // More CPUs or memory for a running sandbox count against the
        // tenant's sums.
        let demand = async {
            let info = self.status(name, id).await?;
            Ok(Demand::grown(&info, changes))
        };
        let op = self.by_id(name, id, |n, i| async move {
            self.inner.modify(&n, &i, changes).await
        });
        let mut plan = self.within_quota(demand, op).await?;
        plan.info = self.info_out(plan.info);
        Ok(plan)
    }

    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.by_id(
            name,
            id,
            |n, i| async move { self.inner.metrics(&n, &i).await },
        )
        .await
    }

    async fn runs(&self, name: &str, id: &SandboxId, limit: usize) -> Result<Vec<RunInfo>> {
        self.by_id(name, id, |n, i| async move {
            self.inner.runs(&n, &i, limit).await
        })
        .await
    }

    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        self.by_id(name, id, |n, i| async move {
            self.inner.logs(&n, &i, opts).await
        })
        .await
    }

    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &SnapshotOptions,
    ) -> Result<SnapshotInfo> {
        let snapshot = self.snapshot_name(snapshot)?;
        self.by_id(name, id, |n, i| async move {
            self.inner.snapshot(&n, &i, &snapshot, opts).await
        })
        .await
        .map(|s| self.snapshot_out(s))
    }

    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        let mut opts = opts.clone();
        for n in &mut opts.names {
            *n = self.engine_name(n)?;
        }
        self.policy_holds(name, id, true).await?;
        let copies = match opts.names.len() {
            0 => u64::from(opts.count),
            n => n as u64,
        };
        let demand = async {
            let config = self.status(name, id).await?.config;
            Ok(Demand::started(&config, copies, true))
        };
        let op = self.by_id(name, id, |n, i| async move {
            self.inner.fork(&n, &i, &opts).await
        });
        let copies = self.within_quota(demand, op).await?;
        Ok(copies.into_iter().map(|i| self.info_out(i)).collect())
    }

    async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let all = self
            .inner
            .list_snapshots()
            .await
            .map_err(|e| self.error_out(e, &[]))?;
        Ok(all
            .into_iter()
            .filter(|s| self.unwrap(&s.name).is_some())
            .map(|s| self.snapshot_out(s))
            .collect())
    }

    async fn get_snapshot(&self, snapshot: &str) -> Result<SnapshotInfo> {
        let snapshot = self.snapshot_name(snapshot)?;
        let r = self.inner.get_snapshot(&snapshot).await;
        self.out(r, |s| self.snapshot_out(s))
    }

    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        let snapshot = self.snapshot_name(snapshot)?;
        let r = self.inner.remove_snapshot(&snapshot).await;
        self.out(r, |()| ())
    }

    async fn create_pool(&self, mut spec: PoolSpec) -> Result<PoolInfo> {
        spec.name = self.engine_name(&spec.name)?;
        let defaulted = self.policy.limits.is_some() && names_no_limit(&spec.config);
        self.policy.check_pool(&mut spec.config, Some(self)).await?;
        self.config_in(&mut spec.config)?;
        let demand = Demand::warm(&spec.config, u64::from(spec.size));
        let demand = async { Ok(demand) };
        let config = spec.config.clone();
        let make = |config| {
            let mut spec = spec.clone();
            spec.config = config;
            self.inner.create_pool(spec)
        };
        let op = self.on_this_host(config, defaulted, make);
        let r = self.within_quota(demand, op).await;
        self.out(r, |p| self.pool_out(p))
    }

    async fn get_pool(&self, pool: &str) -> Result<PoolInfo> {
        let pool = self.engine_name(pool)?;
        let r = self.inner.get_pool(&pool).await;
        self.out(r, |p| self.pool_out(p))
    }

    async fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        let all = self
            .inner
            .list_pools()
            .await
            .map_err(|e| self.error_out(e, &[]))?;
        Ok(all
            .into_iter()
            .filter(|p| self.unwrap(&p.name).is_some())
            .map(|p| self.pool_out(p))
            .collect())
    }

    async fn scale_pool(&self, pool: &str, size: u32) -> Result<PoolInfo> {
        let demand = async {
            let current = self.get_pool(pool).await?;
            let more = u64::from(size.saturating_sub(current.size));
            Ok(Demand::warm(&current.config, more))
        };
        let pool = self.engine_name(pool)?;
        let r = self
            .within_quota(demand, self.inner.scale_pool(&pool, size))
            .await;
        self.out(r, |p| self.pool_out(p))
    }

    async fn remove_pool(&self, pool: &str) -> Result<()> {
        let pool = self.engine_name(pool)?;
        let r = self.inner.remove_pool(&pool).await;
        self.out(r, |()| ())
    }

    async fn refill_pools(&self) -> Result<()> {
        self.inner.refill_pools().await
    }
}
