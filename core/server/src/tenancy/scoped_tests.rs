//! The tenant's view over a bookkeeping engine that records what it is
//! asked: every start is the tenant's, within its quota (a wake on the
//! runtime stream included: the engine is never asked to wake a sandbox
//! itself), and a sandbox that names no limit is given the tenant's
//! defaults (best effort where the engine's host cannot enforce them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use burrow::model::ExitReason;
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ErrorCode, ListFilter, Result, RunInfo,
    RuntimeStream, SandboxConfig, SandboxId, SandboxInfo, StartOptions, Status, StopOptions,
};

use super::quota::{QuotaCtx, DEFAULT_CPUS, DEFAULT_MEMORY_MB};
use super::{Scoped, TenantPolicy};
use crate::store::{Quotas, Store};

/// An engine that runs nothing: sandboxes are records, a start makes one
/// Running; every call that starts or opens is written down.
#[derive(Debug, Default)]
struct Books {
    sandboxes: Mutex<Vec<SandboxInfo>>,
    /// `start {name}`, `open {name} wake={wake}`, `create {name}`.
    calls: Mutex<Vec<String>>,
    /// Refuses memory and CPU limits unless best effort, as a host without
    /// a cgroup to enforce them does.
    unenforcing: bool,
}

impl Books {
    fn note(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn find(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let all = self.sandboxes.lock().unwrap();
        all.iter()
            .find(|s| &s.id == id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("sandbox {id}"),
                name: None,
                id: Some(id.clone()),
            })
    }

    fn set(&self, id: &SandboxId, change: impl FnOnce(&mut SandboxInfo)) -> Result<SandboxInfo> {
        let mut all = self.sandboxes.lock().unwrap();
        let s = all.iter_mut().find(|s| &s.id == id).unwrap();
        change(s);
        Ok(s.clone())
    }

    fn run(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.note(format!("start {name}"));
        self.set(id, |s| {
            s.status = Status::Running;
            s.generation += 1;
        })
    }

    /// A sandbox of the tenant `t1`, as its view would have made it.
    fn add(&self, name: &str, status: Status, reclaimed: bool) -> SandboxId {
        let mut config = SandboxConfig::new("busybox");
        config.idle_timeout = Some(Duration::from_secs(1));
        futures_util::FutureExt::now_or_never(
            TenantPolicy::scoped(&[]).check_create(&mut config, None),
        )
        .unwrap()
        .unwrap();
        let mut info = SandboxInfo::new(SandboxId::new(), format!("t1/{name}"), config);
        info.status = status;
        if reclaimed {
            let mut run = RunInfo::new(1, 0);
            run.exit_reason = Some(ExitReason::IdleTimeout);
            info.last_run = Some(run);
            info.generation = 1;
        }
        let id = info.id.clone();
        self.sandboxes.lock().unwrap().push(info);
        id
    }
}

#[async_trait]
impl Backend for Books {
    async fn capabilities(&self) -> Result<Capabilities> {
        Ok(Capabilities::NONE)
    }
    async fn create(&self, req: CreateRequest) -> Result<SandboxInfo> {
        let c = &req.config;
        if self.unenforcing && !c.best_effort_limits {
            if let Some(field) = [
                ("memory_mb", c.memory_mb.is_some()),
                ("cpus", c.cpus.is_some()),
            ]
            .into_iter()
            .find_map(|(f, asked)| asked.then_some(f))
            {
                return Err(Error::InvalidConfig {
                    field: field.into(),
                    reason: "this host cannot enforce it".into(),
                });
            }
        }
        self.note(format!("create {}", req.name));
        let info = SandboxInfo::new(SandboxId::new(), req.name, req.config);
        self.sandboxes.lock().unwrap().push(info.clone());
        Ok(info)
    }
    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        let all = self.sandboxes.lock().unwrap();
        all.iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("sandbox {name:?}"),
                name: Some(name.into()),
                id: None,
            })
    }
    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        self.find(id)
    }
    async fn list(&self, _filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        Ok(self.sandboxes.lock().unwrap().clone())
    }
    async fn status(&self, _name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.find(id)
    }
    async fn start(&self, name: &str, id: &SandboxId, _opts: StartOptions) -> Result<SandboxInfo> {
        self.run(name, id)
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        _opts: StartOptions,
    ) -> Result<SandboxInfo> {
        match self.find(id)?.status {
            Status::Running => self.find(id),
            _ => self.run(name, id),
        }
    }
    async fn stop(&self, _name: &str, id: &SandboxId, _opts: StopOptions) -> Result<SandboxInfo> {
        self.set(id, |s| s.status = Status::Stopped)
    }
    async fn kill(&self, _name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.set(id, |s| s.status = Status::Stopped)
    }
    async fn request_drain(&self, _name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.find(id)
    }
    async fn restart(&self, name: &str, id: &SandboxId, _opts: StopOptions) -> Result<SandboxInfo> {
        self.run(name, id)
    }
    async fn remove(&self, _name: &str, _id: &SandboxId) -> Result<()> {
        Ok(())
    }
    async fn destroy(&self, _name: &str, _id: &SandboxId) -> Result<()> {
        Ok(())
    }
    async fn wait_for_status(
        &self,
        _name: &str,
        id: &SandboxId,
        _statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.find(id)
    }
    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        self.note(format!("open {name} wake={wake}"));
        let info = self.find(id)?;
        if info.status != Status::Running {
            return Err(Error::InvalidState {
                operation: "exec".into(),
                name: info.name,
                id: info.id,
                status: info.status,
            });
        }
        Ok(RuntimeStream::new(
            tokio::io::empty(),
            tokio::io::sink(),
            info.generation,
        ))
    }
    async fn detach(&self, _name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.find(id)
    }
    async fn touch(&self, _name: &str, _id: &SandboxId) -> Result<()> {
        Ok(())
    }
}

/// A store whose tenant `t1` may have `quotas`.
async fn store(quotas: Quotas) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let s = Store::open(&url, &url, 4, Duration::from_secs(5))
        .await
        .unwrap();
    s.create_tenant("t1").await.unwrap();
    assert!(s.set_quotas("t1", &quotas).await.unwrap());
    (dir, s)
}

fn tenant_view(books: &Arc<Books>, store: &Store) -> Scoped {
    Scoped::new(books.clone(), Some("t1".into())).with_quota(QuotaCtx {
        store: store.clone(),
        tenant: "t1".into(),
    })
}

#[tokio::test]
async fn a_wake_is_a_start_within_the_tenants_quota() {
    let (_d, store) = store(Quotas {
        max_running: Some(1),
        ..Quotas::default()
    })
    .await;
    let books = Arc::new(Books::default());
    let a = books.add("a", Status::Running, false);
    let b = books.add("b", Status::Stopped, true);
    let view = tenant_view(&books, &store);

    let e = view.open_runtime("b", &b, true).await.err().unwrap();
    assert_eq!(e.code(), ErrorCode::QuotaExceeded, "{e}");
    assert_eq!(books.find(&b).unwrap().status, Status::Stopped);
    assert!(
        books.calls().is_empty(),
        "a refused wake asks the engine nothing: {:?}",
        books.calls()
    );

    // Room again: the wake is the tenant's start, then an open that asks
    // the engine for no start of its own.
    view.stop("a", &a, StopOptions::default()).await.unwrap();
    let stream = view.open_runtime("b", &b, true).await.unwrap();
    assert_eq!(stream.generation, 2);
    assert_eq!(books.calls(), ["start t1/b", "open t1/b wake=false"]);

    // A call that does not wake never starts anything.
    books.calls.lock().unwrap().clear();
    books.set(&b, |s| s.status = Status::Stopped).unwrap();
    let e = view.open_runtime("b", &b, false).await.err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidState);
    assert_eq!(books.calls(), ["open t1/b wake=false"]);
}

#[tokio::test]
async fn a_stopped_sandbox_that_was_not_reclaimed_is_not_woken() {
    let (_d, store) = store(Quotas::default()).await;
    let books = Arc::new(Books::default());
    let b = books.add("b", Status::Stopped, false);
    let view = tenant_view(&books, &store);
    let e = view.open_runtime("b", &b, true).await.err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidState);
    assert_eq!(books.calls(), ["open t1/b wake=false"]);
}

#[tokio::test]
async fn a_sandbox_without_limits_gets_the_tenants_defaults() {
    let (_d, store) = store(Quotas::default()).await;
    let books = Arc::new(Books::default());
    let view = tenant_view(&books, &store);
    let req = CreateRequest::new("plain", SandboxConfig::new("busybox"));
    let info = view.create(req).await.unwrap();
    let c = &info.config;
    assert_eq!(
        (c.memory_mb, c.cpus, c.best_effort_limits),
        (Some(DEFAULT_MEMORY_MB), Some(DEFAULT_CPUS), false)
    );
    // The default tenant's: the engine's freedom.
    let default = Scoped::new(books.clone(), None);
    let req = CreateRequest::new("free", SandboxConfig::new("busybox"));
    let info = default.create(req).await.unwrap();
    assert_eq!((info.config.memory_mb, info.config.cpus), (None, None));
}

#[tokio::test]
async fn where_the_host_cannot_enforce_them_the_defaults_are_best_effort() {
    let (_d, store) = store(Quotas::default()).await;
    let books = Arc::new(Books {
        unenforcing: true,
        ..Books::default()
    });
    let view = tenant_view(&books, &store);
    let req = CreateRequest::new("plain", SandboxConfig::new("busybox"));
    let info = view.create(req).await.unwrap();
    let c = &info.config;
    assert_eq!(
        (c.memory_mb, c.cpus, c.best_effort_limits),
        (Some(DEFAULT_MEMORY_MB), Some(DEFAULT_CPUS), true),
        "recorded, and said to be best effort"
    );
    // A limit the tenant named follows the engine's rule: refused by name.
    let mut config = SandboxConfig::new("busybox");
    config.memory_mb = Some(128);
    let e = view
        .create(CreateRequest::new("named", config))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidConfig { field, .. } if field == "memory_mb"),
        "{e}"
    );
    assert_eq!(books.calls(), ["create t1/plain"]);
}
