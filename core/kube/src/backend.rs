//! [`Backend`] for [`KubeBackend`]: each operation on the records and runs
//! of `store` and `lifecycle`.

use std::time::Duration;

use async_trait::async_trait;
use burrow::lifecycle::{Operation, Step};
use burrow::model::validate_name;
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ExitReason, ListFilter, OciRuntime, Result,
    RuntimeStream, SandboxId, SandboxInfo, StartOptions, Status, StopOptions,
};
use kube::api::{DeleteParams, ListParams, PostParams};

use crate::pods;
use crate::record::{self, Spec, Stored};
use crate::{api_error, is_status, names, now_ms, KubeBackend};

#[async_trait]
impl Backend for KubeBackend {
    async fn capabilities(&self) -> Result<Capabilities> {
        let mut c = Capabilities::NONE;
        c.idle_reclaim = true;
        c.pools = true;
        Ok(c)
    }

    async fn create(&self, mut req: CreateRequest) -> Result<SandboxInfo> {
        validate_name(&req.name)?;
        // Recorded as the configuration says, or runc: the runtime class is
        // the gVisor class for runsc, the backend's default otherwise.
        req.config.runtime.get_or_insert(OciRuntime::Runc);
        req.config.validate()?;
        pods::validate_image(&req.config.image)?;
        pods::check_limits(&req.config)?;
        if req.claim {
            if let Some(pool) = self.pool_for(&req.name, &req.config).await? {
                if let Some(info) = self.claim_from_pool(&pool, &req.name, &req.config).await? {
                    return Ok(info);
                }
            }
        }
        let mut info = SandboxInfo::new(SandboxId::new(), &req.name, req.config);
        info.detached = true;
        let spec = Spec {
            info,
            activity_ms: now_ms(),
            stopping: None,
            warm: None,
        };
        loop {
            match self
                .records
                .create(&PostParams::default(), &record::new_object(&spec)?)
                .await
            {
                Ok(o) => return Stored::from_object(o).map(|s| s.spec.info),
                Err(e) if is_status(&e, 409) => {
                    // The winner's create is complete: it is readable.
                    if let Some(existing) = self.read(&req.name).await? {
                        return Err(Error::AlreadyExists {
                            name: req.name,
                            id: existing.spec.info.id,
                        });
                    }
                    // Removed meanwhile: claim the name again.
                }
                Err(e) => return Err(api_error("creating a sandbox record", e)),
            }
        }
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        validate_name(name)?;
        match self.read(name).await? {
            Some(s) => Ok(self.reconcile(s).await?.spec.info),
            None => Err(Error::NotFound {
                what: format!("sandbox named {name:?}"),
                name: Some(name.to_owned()),
                id: None,
            }),
        }
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let list = self
            .records
            .list(&ListParams::default().labels(&record::id_selector(id)))
            .await
            .map_err(|e| api_error("looking up a sandbox record", e))?;
        for object in list {
            let s = Stored::from_object(object)?;
            // A claimed warm sandbox's record, until it is deleted.
            if &s.info().id == id && s.spec.warm.is_none() {
                return Ok(self.reconcile(s).await?.spec.info);
            }
        }
        Err(Error::NotFound {
            what: format!("sandbox {id}"),
            name: None,
            id: Some(id.clone()),
        })
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let list = self
            .records
            .list(&ListParams::default().labels(&format!("{}=burrow", record::MANAGED_LABEL)))
            .await
            .map_err(|e| api_error("listing sandbox records", e))?;
        let mut out = Vec::new();
        for object in list {
            let s = Stored::from_object(object)?;
            if s.spec.warm.is_some() {
                continue;
            }
            let info = self.reconcile(s).await?.spec.info;
            if filter.matches(&info) {
                out.push(info);
            }
        }
        out.sort_by(|a, b| {
            a.created_at_ms
                .cmp(&b.created_at_ms)
                .then(a.name.cmp(&b.name))
        });
        Ok(out)
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        Ok(self.exact(name, id).await?.spec.info)
    }

    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.start_as(Operation::Start, name, id, opts).await
    }

    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.start_as(Operation::ConnectOrStart, name, id, opts)
            .await
    }

    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        let reason = if opts.owner_exited {
            ExitReason::OwnerExited
        } else {
            ExitReason::Stopped
        };
        self.stop_as(name, id, opts.grace, reason).await
    }

    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.stop_as(name, id, Duration::ZERO, ExitReason::Killed)
            .await
    }

    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Drain.step(s.info().status) {
                Step::Done => return Ok(s.spec.info),
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Act => {
                    let mut spec = s.spec.clone();
                    spec.info.status = Status::Draining;
                    let Some(draining) = self.write(&s, spec).await? else {
                        continue;
                    };
                    // This process's in-flight work finishes; then the run
                    // stops (reason `drain`).
                    let relays: Vec<_> = self
                        .guests
                        .all()
                        .into_iter()
                        .filter(|(rid, _)| rid == id)
                        .map(|(_, r)| r)
                        .collect();
                    for r in &relays {
                        r.set_closing(true);
                    }
                    let (n, i) = (name.to_owned(), id.clone());
                    let me = self.me.clone();
                    tokio::spawn(async move {
                        for r in relays {
                            // Subscribed before looking: no change is missed.
                            let mut changes = r.in_flight_changes();
                            while r.in_flight() > 0 && !r.is_agent_gone() {
                                if changes.changed().await.is_err() {
                                    break;
                                }
                            }
                        }
                        if let Some(b) = me.upgrade() {
                            let _ = b
                                .stop_as(&n, &i, Duration::from_secs(10), ExitReason::Drain)
                                .await;
                        }
                    });
                    return Ok(draining.spec.info);
                }
                _ => return Err(Operation::Drain.refusal(s.info())),
            }
        }
    }

    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.stop(name, id, opts).await?;
        self.start_as(Operation::Start, name, id, StartOptions::default())
            .await
    }

    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Remove.step(s.info().status) {
                Step::Act => {}
                _ => return Err(Operation::Remove.refusal(s.info())),
            }
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: Some(s.resource_version.clone()),
                    uid: Some(s.uid.clone()),
                }),
                ..DeleteParams::default()
            };
            match self
                .records
                .delete(&names::record_name(name), &params)
                .await
            {
                Ok(_) => {
                    self.guests.forget(id);
                    return Ok(());
                }
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => continue,
                Err(e) => return Err(api_error("removing a sandbox record", e)),
            }
        }
    }

    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        for _ in 0..32 {
            self.kill(name, id).await?;
            match self.remove(name, id).await {
                Err(Error::InvalidState { .. }) | Err(Error::Starting { .. }) => continue,
                other => return other,
            }
        }
        Err(Error::Timeout {
            operation: format!("destroying sandbox {name:?} against repeated starts"),
            after: Duration::ZERO,
        })
    }

    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        Ok(self
            .wait_until(name, id, |i| statuses.contains(&i.status))
            .await?
            .spec
            .info)
    }

    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        self.open(name, id, wake).await
    }

    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        // Kubernetes sandboxes are never attached to a process.
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Detach.step(s.info().status) {
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Done | Step::Act => return Ok(s.spec.info),
                _ => return Err(Operation::Detach.refusal(s.info())),
            }
        }
    }

    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Touch.step(s.info().status) {
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Act => {
                    if let Some(r) = self.guests.get(id, s.info().generation) {
                        r.touch();
                    }
                    return self.stamp(name, now_ms()).await;
                }
                _ => return Err(Operation::Touch.refusal(s.info())),
            }
        }
    }

    async fn create_pool(&self, spec: burrow::PoolSpec) -> Result<burrow::PoolInfo> {
        self.kube_create_pool(spec).await
    }

    async fn get_pool(&self, pool: &str) -> Result<burrow::PoolInfo> {
        self.kube_get_pool(pool).await
    }

    async fn list_pools(&self) -> Result<Vec<burrow::PoolInfo>> {
        self.kube_list_pools().await
    }

    async fn scale_pool(&self, pool: &str, size: u32) -> Result<burrow::PoolInfo> {
        self.kube_scale_pool(pool, size).await
    }

    async fn remove_pool(&self, pool: &str) -> Result<()> {
        self.kube_remove_pool(pool).await
    }
}
