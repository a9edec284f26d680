#![allow(clippy::unwrap_used)]
//! Serverless MCP on the local backend, end to end: the example's MCP
//! server (the official TypeScript SDK, streamable HTTP) in a real sandbox
//! behind a real `burrow serve` on a real Postgres server, called by the
//! example's MCP client (the same SDK) through `/gw/{id}/mcp`. The Kubernetes
//! backend runs the same round trip in `kube.rs`.

use burrow_cli_testkit as common;

use std::sync::OnceLock;
use std::time::Duration;

use burrow_server::store::Store;
use common::mcp::{self, RoundTrip};
use common::serve::pg::PgCluster;
use common::serve::{http, ServeEnv};
use common::TestHome;

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcp_server_sleeps_when_idle_and_wakes_on_the_next_tool_call() {
    let th = TestHome::new().await;
    let url = tokio::task::spawn_blocking(|| cluster().create_database("mcp_local").unwrap())
        .await
        .unwrap();
    // Idle after 2 s, swept every 300 ms; leases live 1.5 s unless
    // heartbeated, and the replica is frozen for 3 s mid-call, so the
    // lease dies and only the call's lock keeps the reaper off.
    let env = ServeEnv::new(th.path(), &url)
        .set("IDLE_TIMEOUT", "2s")
        .set("SWEEP_INTERVAL", "300ms")
        .set("LEASE_TTL", "1500ms");
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("mcp"))
            .await
            .unwrap()
    };
    let server = env.start("a");
    let store = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();

    // The MCP server's sandbox: defined, not started; a gateway target on
    // its port with an upstream header (stored, never returned).
    let h = burrow::Sandbox::builder("mcp")
        .image(mcp::rootfs())
        .backend(th.dyn_backend())
        .detached(true)
        .define()
        .await
        .unwrap();
    let id = h.id().to_string();
    let body = serde_json::json!({
        "port": mcp::PORT,
        "command": mcp::slow_server_command(2),
        "metadata": {"server": "burrow-mcp-example"},
        "headers": {"x-upstream-key": "s3cret"},
    })
    .to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{id}", server.url),
        Some(&token),
        Some(&body),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // Gone: no supervisor of this home (it runs this one sandbox) is left.
    let home = th.path().to_string_lossy().into_owned();
    let gone = move || common::supervisors_of(&home).is_empty();
    let log = || server.log();
    RoundTrip {
        url: server.url.clone(),
        log: &log,
        one_replica: true,
        env: &env,
        token: &token,
        id: &id,
        store: &store,
        long_call_s: 8,
        workload_gone: &gone,
        freeze_pid: Some(server.pid()),
    }
    .run()
    .await;
}
