//! Serverless MCP benchmark: the MCP example's server (`examples/mcp`, the
//! official TypeScript SDK) in a sandbox behind `burrow serve` on Postgres,
//! called by the example's client (the same SDK, on the host's node), on
//! the local backend and, when the test cluster is up, on the Kubernetes
//! backend. Each figure beside its anchor, measured in the same run:
//!
//! 1. Warm tool call (`tools/call add` on one connected client, BENCH_ITERS
//!    calls, p50 and p90): through `/gw/{id}/mcp`, and directly to the
//!    server through a port published with `Sandbox::publish` (the same
//!    agent-channel tunnel the gateway uses, no server in between).
//! 2. First result of a fresh client (initialize, then `tools/call`; the
//!    client's own time, not node's start), BENCH_COLD times each:
//!    - directly to the running server (the anchor),
//!    - through the gateway to the running server,
//!    - through the gateway to the dormant sandbox (reclaimed by the reaper
//!      after its idle timeout): the cold call, dormant to first result;
//!      with the part of it the gateway's start took (sandbox start, the
//!      target's command, the port answering) from `/metrics`.
//! 3. A connected client's first call after a stop reclaim (local backend,
//!    BENCH_COLD times each; the client's round trip, dormant to result):
//!    to the stateless server (the anchor: the cold call of today), and to
//!    the stateful one (`MCP_STATEFUL=1`), whose session the gateway
//!    re-establishes on the new process (replaying the client's
//!    `initialize` and `initialized`) before it sends the call again.
//!
//! Run: `cargo bench -p burrow-cli --bench mcp` (starts its own Postgres
//! server). The Kubernetes part runs when `BURROW_TEST_KUBECONFIG` and
//! `BURROW_K8S_BIN` name the test cluster (`eval "$(bash
//! scripts/k8s/cluster.sh start)"`, then `BURROW_TEST_KUBECONFIG=$KUBECONFIG`;
//! the agent image imported as `scripts/test.sh` does).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::pct;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::{Backend, Sandbox, SandboxId};
use burrow_server::store::{RuntimeState, Store};
use common::mcp::{self, client, metric, spawn_client, SessionClient};
use common::serve::pg::PgCluster;
use common::serve::{http, ServeEnv, Server};
use common::TestHome;
use serde_json::{json, Value};

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn ms_list(v: &Value) -> Vec<f64> {
    sorted(
        v["ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect(),
    )
}

/// `n` fresh clients one after the other: their first-result times.
fn fresh_calls(endpoint: &str, token: &str, n: usize) -> Vec<f64> {
    sorted(
        (0..n)
            .map(|_| {
                let out = client(endpoint, token, &["call", "add", r#"{"a":1,"b":2}"#]);
                assert_eq!(out["result"], "3", "{out}");
                out["firstMs"].as_f64().unwrap()
            })
            .collect(),
    )
}

/// What one backend's run needs: a replica, its token, the MCP sandbox's
/// id, and the backend (to publish the server's port directly).
struct Setting {
    label: &'static str,
    server: Server,
    token: String,
    id: SandboxId,
    engine: Arc<dyn Backend>,
    store: Store,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn measure(s: Setting, iters: usize, cold: usize) {
    let gw = format!("{}/gw/{}/mcp", s.server.url, s.id);
    let token = s.token.clone();
    // Started by its first call.
    let first = {
        let (gw, token) = (gw.clone(), token.clone());
        blocking(move || client(&gw, &token, &["tools"])).await
    };
    assert_eq!(first["tools"], json!(["add", "whoami", "countdown"]));

    // A long call holds a lease while the direct calls run (they do not
    // pass the gateway, so they would not keep the sandbox from its idle
    // timeout).
    let mut keep: Child = spawn_client(
        &gw,
        &token,
        &["call", "countdown", r#"{"seconds":3600}"#],
        None,
    );
    let info = s.engine.get_by_id(&s.id).await.unwrap();
    let sandbox = Sandbox::from_info(s.engine.clone(), &info);
    let published = sandbox.publish(mcp::PORT).await.unwrap();
    let direct = format!("http://{}/mcp", published.local_addr());
    let n = iters.to_string();
    let (warm_direct, fresh_direct, warm_gw, fresh_gw) = {
        let (gw, token, direct) = (gw.clone(), token.clone(), direct.clone());
        blocking(move || {
            let warm_direct = ms_list(&client(
                &direct,
                "",
                &["bench", &n, "add", r#"{"a":1,"b":2}"#],
            ));
            let fresh_direct = fresh_calls(&direct, "", cold);
            let warm_gw = ms_list(&client(
                &gw,
                &token,
                &["bench", &n, "add", r#"{"a":1,"b":2}"#],
            ));
            let fresh_gw = fresh_calls(&gw, &token, cold);
            (warm_direct, fresh_direct, warm_gw, fresh_gw)
        })
        .await
    };
    let _ = keep.kill();
    let _ = keep.wait();
    drop(published);

    // Cold: wait for the reaper, then one fresh client.
    let mut cold_ms = Vec::new();
    let mut start_ms = Vec::new();
    for _ in 0..cold {
        let end = Instant::now() + Duration::from_secs(120);
        while s
            .store
            .runtime(s.id.as_str())
            .await
            .unwrap()
            .map(|r| r.state)
            != Some(RuntimeState::Dormant)
        {
            assert!(Instant::now() < end, "never reclaimed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = metric(
            &s.server.url,
            &token,
            "burrow_gateway_start_milliseconds_sum",
        );
        let (gw, t) = (gw.clone(), token.clone());
        let out = blocking(move || client(&gw, &t, &["call", "add", r#"{"a":1,"b":2}"#])).await;
        assert_eq!(out["result"], "3", "{out}");
        cold_ms.push(out["firstMs"].as_f64().unwrap());
        start_ms.push(
            (metric(
                &s.server.url,
                &token,
                "burrow_gateway_start_milliseconds_sum",
            ) - before) as f64,
        );
    }
    let (cold_ms, start_ms) = (sorted(cold_ms), sorted(start_ms));
    println!(
        "MCP on the {label} backend\n\
         warm tools/call, one client, {iters} calls:  p50        p90\n  \
         direct (published port)         {:8.2} ms {:8.2} ms\n  \
         through /gw/{{id}}/mcp           {:8.2} ms {:8.2} ms\n  \
         gateway overhead                {:+8.2} ms {:+8.2} ms\n\
         fresh client, initialize + tools/call, {cold} each: p50 (min..max)\n  \
         direct, server running          {:8.1} ms ({:.1}..{:.1})\n  \
         gateway, server running         {:8.1} ms ({:.1}..{:.1})\n  \
         gateway, dormant (cold call)    {:8.1} ms ({:.1}..{:.1})\n  \
         of which the gateway's start    {:8.1} ms ({:.1}..{:.1})",
        pct(&warm_direct, 0.5),
        pct(&warm_direct, 0.9),
        pct(&warm_gw, 0.5),
        pct(&warm_gw, 0.9),
        pct(&warm_gw, 0.5) - pct(&warm_direct, 0.5),
        pct(&warm_gw, 0.9) - pct(&warm_direct, 0.9),
        pct(&fresh_direct, 0.5),
        fresh_direct[0],
        fresh_direct[cold - 1],
        pct(&fresh_gw, 0.5),
        fresh_gw[0],
        fresh_gw[cold - 1],
        pct(&cold_ms, 0.5),
        cold_ms[0],
        cold_ms[cold - 1],
        pct(&start_ms, 0.5),
        start_ms[0],
        start_ms[cold - 1],
        label = s.label,
    );
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes/{}/destroy", s.server.url, s.id),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());
}

/// A connected client's first calls after stop reclaims: to a stateless
/// server and to a stateful one (its session re-established), BENCH_COLD
/// each.
async fn sessions(s: &Setting, image: &str, cold: usize) {
    let mut rows = Vec::new();
    for (name, command, tool) in [
        ("mcp-stateless", mcp::server_command(), "add"),
        ("mcp-stateful", mcp::stateful_server_command(), "count"),
    ] {
        let id = target(&s.server, &s.token, image, name, &command);
        let gw = format!("{}/gw/{id}/mcp", s.server.url);
        let args = if tool == "add" {
            json!({"a": 1, "b": 2})
        } else {
            json!({})
        };
        let call = json!({"call": tool, "args": args});
        let mut c = tokio::task::block_in_place(|| SessionClient::spawn(&gw, &s.token));
        let first = tokio::task::block_in_place(|| c.call(call.clone()));
        assert_eq!(first["isError"], false, "{first}");
        let session = first["sessionId"].clone();
        let mut ms = Vec::new();
        for _ in 0..cold {
            let end = Instant::now() + Duration::from_secs(120);
            while s.store.runtime(id.as_str()).await.unwrap().map(|r| r.state)
                != Some(RuntimeState::Dormant)
            {
                assert!(Instant::now() < end, "never reclaimed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let t = Instant::now();
            let out = tokio::task::block_in_place(|| c.call(call.clone()));
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                (&out["isError"], &out["sessionId"]),
                (&json!(false), &session),
                "{out}"
            );
        }
        rows.push(sorted(ms));
    }
    let replays = metric(
        &s.server.url,
        &s.token,
        "burrow_gateway_mcp_sessions_reestablished_total",
    );
    assert_eq!(
        replays, cold as u64,
        "every stateful call after a reclaim replays its session"
    );
    let (anchor, stateful) = (&rows[0], &rows[1]);
    println!(
        "a connected client's first call after a stop reclaim, {cold} each: p50 (min..max)\n  \
         stateless server (cold call)        {:8.1} ms ({:.1}..{:.1})\n  \
         stateful, session re-established    {:8.1} ms ({:.1}..{:.1})\n  \
         the replay's share                  {:+8.1} ms",
        pct(anchor, 0.5),
        anchor[0],
        anchor[cold - 1],
        pct(stateful, 0.5),
        stateful[0],
        stateful[cold - 1],
        pct(stateful, 0.5) - pct(anchor, 0.5),
    );
}

/// A sandbox `name` of `image` defined through the API, and a gateway
/// target on the MCP port started with `command`.
fn target(server: &Server, token: &str, image: &str, name: &str, command: &[String]) -> SandboxId {
    let create = json!({"name": name, "config": {"image": image, "startup_timeout": 120_000}, "detached": true})
        .to_string();
    let r = http(
        "POST",
        &format!("{}/v1/sandboxes", server.url),
        Some(token),
        Some(&create),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let id: SandboxId = r.json()["id"].as_str().unwrap().parse().unwrap();
    let target = json!({"port": mcp::PORT, "command": command}).to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{id}", server.url),
        Some(token),
        Some(&target),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    id
}

/// A replica reclaiming after 1 s idle, its token, and the MCP target
/// defined through its API with `image`.
async fn serve(env: ServeEnv, image: &str) -> (Server, String, SandboxId) {
    let env = env.set("IDLE_TIMEOUT", "1s").set("SWEEP_INTERVAL", "200ms");
    let token = env.create_token("bench");
    let server = env.start("bench");
    let id = target(&server, &token, image, "mcp", &mcp::server_command());
    (server, token, id)
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let cold: usize = std::env::var("BENCH_COLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pg = PgCluster::start();
    rt.block_on(async {
        let th = TestHome::new().await;
        let url = pg.create_database("mcp_local").unwrap();
        let (server, token, id) = serve(ServeEnv::new(th.path(), &url), &mcp::rootfs()).await;
        let store = Store::open(&url, &url, 2, Duration::from_secs(10)).await.unwrap();
        let setting = Setting { label: "local", server, token, id, engine: th.dyn_backend(), store };
        sessions(&setting, &mcp::rootfs(), cold).await;
        println!();
        measure(setting, iters, cold).await;

        let Ok(kubeconfig) = std::env::var("BURROW_TEST_KUBECONFIG") else {
            println!("\n(the Kubernetes part needs BURROW_TEST_KUBECONFIG and BURROW_K8S_BIN: the test cluster)");
            return;
        };
        let ns = common::kube::Namespace::new("bench-mcp");
        let (tar, image) = mcp::oci();
        common::kube::import_image(&tar);
        let url = pg.create_database("mcp_kube").unwrap();
        let mut env = ServeEnv::new(th.path(), &url).set("BACKEND", "kubernetes");
        env.vars.push(("BURROW_KUBECONFIG".into(), kubeconfig.clone()));
        env.vars.push(("BURROW_KUBE_NAMESPACE".into(), ns.0.clone()));
        let (server, token, id) = serve(env, &image).await;
        let settings = burrow_kube::KubeSettings {
            kubeconfig: Some(kubeconfig.into()),
            namespace: ns.0.clone(),
            ..burrow_kube::KubeSettings::default()
        };
        let engine: Arc<dyn Backend> = burrow_kube::KubeBackend::connect(settings).await.unwrap();
        let store = Store::open(&url, &url, 2, Duration::from_secs(10)).await.unwrap();
        let setting = Setting { label: "Kubernetes", server, token, id, engine, store };
        println!();
        measure(setting, iters, cold).await;
    });
}
