//! The server over a backend of its own (what `burrow_server::run_with`
//! serves): every answer comes from that backend, its capabilities are
//! `GET /v1/capabilities`, and what it lacks reaches a remote client as the
//! typed `unsupported` error, changing nothing.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use burrow::{
    ensure_identity, Backend, Capabilities, CreateRequest, Error, ErrorCode, ListFilter,
    LogOptions, LogStream, RemoteBackend, RuntimeStream, SandboxConfig, SandboxHandle, SandboxId,
    SandboxInfo, StartOptions, Status, StopOptions,
};
use burrow_server::app::{router, AppState, Transport};
use burrow_server::ServeConfig;

/// A bookkeeping-only backend: records sandboxes and moves them between
/// Created and Stopped, runs nothing, and supports none of the optional
/// operations (the trait's defaults answer `unsupported`).
#[derive(Debug, Default)]
struct Ledger {
    sandboxes: Mutex<Vec<SandboxInfo>>,
}

impl Ledger {
    fn find(&self, id: &SandboxId) -> Option<SandboxInfo> {
        self.sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|s| &s.id == id)
            .cloned()
    }

    fn exactly(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        match self.find(id) {
            Some(info) => Ok(info),
            None => match self
                .sandboxes
                .lock()
                .unwrap()
                .iter()
                .find(|s| s.name == name)
            {
                Some(other) => {
                    ensure_identity(name, id, other)?;
                    unreachable!("a different id holds the name")
                }
                None => Err(Error::NotFound {
                    what: format!("sandbox {id}"),
                    name: None,
                    id: Some(id.clone()),
                }),
            },
        }
    }

    fn cannot(&self, name: &str, id: &SandboxId, op: &'static str) -> burrow::Result<SandboxInfo> {
        let info = self.exactly(name, id)?;
        Err(Error::InvalidState {
            operation: op.into(),
            name: info.name,
            id: info.id,
            status: info.status,
        })
    }
}

#[async_trait]
impl Backend for Ledger {
    async fn capabilities(&self) -> burrow::Result<Capabilities> {
        Ok(Capabilities::NONE)
    }
    async fn create(&self, req: CreateRequest) -> burrow::Result<SandboxInfo> {
        let mut all = self.sandboxes.lock().unwrap();
        if let Some(s) = all.iter().find(|s| s.name == req.name) {
            return Err(Error::AlreadyExists {
                name: req.name,
                id: s.id.clone(),
            });
        }
        let info = SandboxInfo::new(SandboxId::new(), req.name, req.config);
        all.push(info.clone());
        Ok(info)
    }
    async fn get(&self, name: &str) -> burrow::Result<SandboxInfo> {
        self.sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("sandbox named {name:?}"),
                name: Some(name.into()),
                id: None,
            })
    }
    async fn get_by_id(&self, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.find(id).ok_or_else(|| Error::NotFound {
            what: format!("sandbox {id}"),
            name: None,
            id: Some(id.clone()),
        })
    }
    async fn list(&self, filter: &ListFilter) -> burrow::Result<Vec<SandboxInfo>> {
        let all = self.sandboxes.lock().unwrap();
        Ok(all.iter().filter(|s| filter.matches(s)).cloned().collect())
    }
    async fn status(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn start(
        &self,
        name: &str,
        id: &SandboxId,
        _: StartOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.cannot(name, id, "start")
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        _: StartOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.cannot(name, id, "connect_or_start")
    }
    async fn stop(
        &self,
        name: &str,
        id: &SandboxId,
        _: StopOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn kill(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn request_drain(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn restart(
        &self,
        name: &str,
        id: &SandboxId,
        _: StopOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.cannot(name, id, "restart")
    }
    async fn remove(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        self.exactly(name, id)?;
        self.sandboxes.lock().unwrap().retain(|s| &s.id != id);
        Ok(())
    }
    async fn destroy(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        self.remove(name, id).await
    }
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        _: &[Status],
    ) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn open_runtime(
        &self,
        name: &str,
        id: &SandboxId,
        _: bool,
    ) -> burrow::Result<RuntimeStream> {
        self.cannot(name, id, "exec").map(|_| unreachable!())
    }
    async fn detach(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn touch(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        self.cannot(name, id, "touch").map(drop)
    }
}

/// The server's state over `engine`, its SQLite database and home in a
/// fresh directory.
async fn state_over(engine: Arc<dyn Backend>) -> (tempfile::TempDir, Arc<AppState>) {
    let dir = tempfile::tempdir().unwrap();
    let env: BTreeMap<String, String> = [
        ("BURROW_HOME", dir.path().join("home").display().to_string()),
        (
            "BURROW_SERVE_DATABASE",
            format!("sqlite://{}", dir.path().join("serve.db").display()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let config = ServeConfig::load(None, &env).unwrap();
    let store = burrow_server::serve::open_store(&config).await.unwrap();
    (dir, AppState::new(engine, store, config))
}

/// A server over `engine` on a loopback port (routed as a unix-socket
/// connection, so no token), and a remote backend talking to it.
async fn serve(engine: Arc<dyn Backend>) -> (tempfile::TempDir, Arc<dyn Backend>) {
    let (dir, state) = state_over(engine).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state, Transport::Unix);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (dir, Arc::new(RemoteBackend::connect(&url, None).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_backend_served_answers_its_own_capabilities_and_unsupported() {
    let ledger = Arc::new(Ledger::default());
    let (_dir, remote) = serve(ledger.clone()).await;

    assert_eq!(remote.capabilities().await.unwrap(), Capabilities::NONE);

    let created = remote
        .create(CreateRequest::new("ledgered", SandboxConfig::new("img")))
        .await
        .unwrap();
    assert_eq!(ledger.get("ledgered").await.unwrap().id, created.id);
    let handle = SandboxHandle::get_in(remote.clone(), "ledgered")
        .await
        .unwrap();
    assert_eq!(handle.id(), &created.id);

    for (op, result) in [
        ("pause", handle.pause().await.map(drop)),
        ("resume", handle.resume().await.map(drop)),
        ("metrics", handle.metrics().await.map(drop)),
        (
            "logs",
            handle
                .logs(&LogOptions::default())
                .await
                .map(drop::<LogStream>),
        ),
    ] {
        let err = result.expect_err(op);
        assert_eq!(err.code(), ErrorCode::Unsupported, "{op}: {err}");
    }
    // Nothing changed.
    let after = ledger.get("ledgered").await.unwrap();
    assert_eq!(
        (after.id, after.status),
        (created.id.clone(), Status::Created)
    );

    // The backend's own answers travel typed: its refusal, its removal.
    let err = handle.start().await.expect_err("the ledger runs nothing");
    assert_eq!(err.code(), ErrorCode::InvalidState);
    handle.remove().await.unwrap();
    assert_eq!(
        remote.get("ledgered").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

/// A backend without an event log still has lifecycle events: the pump
/// lists its sandboxes and each difference from the last listing is an
/// event of the sandbox's tenant (what the Kubernetes backend gets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_an_event_log_has_events_from_its_listings() {
    use burrow::model::RunInfo;
    use burrow::ExitReason;
    use burrow_server::events::pump::{diff_turn, turn, PumpError};

    let ledger = Arc::new(Ledger::default());
    let (_dir, state) = state_over(ledger.clone()).await;
    match turn(&state).await.unwrap_err() {
        PumpError::Engine(e) => assert_eq!(e.code(), ErrorCode::Unsupported),
        other => panic!("unexpected {other:?}"),
    }
    let events = |after: i64| {
        let store = state.store.clone();
        async move {
            store
                .events_after(None, after, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|e| serde_json::from_str::<serde_json::Value>(&e.body).unwrap())
                .map(|e| {
                    (
                        e["tenant"].as_str().unwrap().to_owned(),
                        e["type"].as_str().unwrap().to_owned(),
                        e["sandbox"]["name"].as_str().unwrap().to_owned(),
                        e["reason"].as_str().map(str::to_owned),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let ev = |t: &str, ty: &str, n: &str, r: Option<&str>| {
        (
            t.to_owned(),
            ty.to_owned(),
            n.to_owned(),
            r.map(str::to_owned),
        )
    };

    let web = ledger
        .create(CreateRequest::new("web", SandboxConfig::new("img")))
        .await
        .unwrap();
    ledger
        .create(CreateRequest::new("alpha/api", SandboxConfig::new("img")))
        .await
        .unwrap();
    diff_turn(&state).await.unwrap();
    let mut got = events(0).await;
    got.sort();
    assert_eq!(
        got,
        [
            ev("alpha", "sandbox.created", "api", None),
            ev("default", "sandbox.created", "web", None),
        ]
    );
    let set = |status: Status, reason: Option<ExitReason>| {
        let mut all = ledger.sandboxes.lock().unwrap();
        let s = all.iter_mut().find(|s| s.id == web.id).unwrap();
        s.status = status;
        s.generation = 1;
        let mut run = RunInfo::new(1, 0);
        run.exit_reason = reason;
        s.last_run = Some(run);
    };
    set(Status::Running, None);
    diff_turn(&state).await.unwrap();
    // Nothing changed: nothing new.
    diff_turn(&state).await.unwrap();
    set(Status::Stopped, Some(ExitReason::IdleTimeout));
    diff_turn(&state).await.unwrap();
    ledger.remove("web", &web.id).await.unwrap();
    diff_turn(&state).await.unwrap();
    assert_eq!(
        events(2).await,
        [
            ev("default", "sandbox.running", "web", None),
            ev("default", "sandbox.stopped", "web", Some("idle_timeout")),
            ev("default", "sandbox.removed", "web", None),
        ]
    );
}
