#![allow(clippy::unwrap_used)]
//! The setting of the gateway's end-to-end tests: `burrow serve` replicas
//! on a database of the shared test Postgres cluster, a burrow home for the
//! sandboxes behind them, a token, and the store to read their state from.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow::{SandboxId, Status};
use burrow_server::store::{RuntimeState, Store};

use super::serve::pg::PgCluster;
use super::serve::{http, ServeEnv, Server};
use super::TestHome;

pub fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

/// A fresh database on the shared test cluster.
pub fn database(name: &str) -> String {
    cluster().create_database(name).expect("create database")
}

pub struct Setup {
    pub th: TestHome,
    pub env: ServeEnv,
    pub token: String,
    pub store: Store,
}

pub async fn setup(db: &str, vars: &[(&str, &str)]) -> Setup {
    let th = TestHome::new().await;
    let url = tokio::task::spawn_blocking({
        let db = db.to_owned();
        move || database(&db)
    })
    .await
    .unwrap();
    let mut env = ServeEnv::new(th.path(), &url);
    for (k, v) in vars {
        env = env.set(k, v);
    }
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("tests"))
            .await
            .unwrap()
    };
    let store = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();
    Setup {
        th,
        env,
        token,
        store,
    }
}

impl Setup {
    /// Defines a sandbox and registers it as a gateway target on port 8080
    /// with `command`.
    pub async fn web_target(&self, server: &Server, name: &str, command: Vec<String>) -> SandboxId {
        let h = self.th.builder(name).detached(true).define().await.unwrap();
        let body = serde_json::json!({"port": 8080, "command": command}).to_string();
        let url = format!("{}/v1/gateway/targets/{}", server.url, h.id());
        let token = self.token.clone();
        let r = blocking(move || http("PUT", &url, Some(&token), Some(&body))).await;
        assert_eq!(r.status, 200, "{}", r.text());
        h.id().clone()
    }

    pub async fn state(&self, id: &SandboxId) -> Option<burrow_server::store::RuntimeRow> {
        self.store.runtime(id.as_str()).await.unwrap()
    }

    pub async fn wait_state(&self, id: &SandboxId, want: RuntimeState, within: Duration) {
        let end = Instant::now() + within;
        loop {
            let row = self.state(id).await;
            if row.as_ref().is_some_and(|r| r.state == want) {
                return;
            }
            assert!(Instant::now() < end, "state never became {want:?}: {row:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn engine_status(&self, id: &SandboxId) -> Status {
        use burrow::Backend;
        self.th.backend.get_by_id(id).await.unwrap().status
    }

    pub async fn engine_generation(&self, id: &SandboxId) -> u64 {
        use burrow::Backend;
        self.th.backend.get_by_id(id).await.unwrap().generation
    }
}

pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

pub fn gw(server: &Server, id: &SandboxId, path: &str) -> String {
    format!("{}/gw/{}/{}", server.url, id, path)
}
