#![allow(clippy::unwrap_used)]
//! MCP sessions through the gateway: the example's server in its stateful
//! mode (the official TypeScript SDK; sessions die with its process) in a
//! real sandbox behind two real `burrow serve` replicas on a real Postgres
//! server, and the example's client (the same SDK) holding one session
//! across stop reclaims, switching replicas between calls. The client
//! initializes once; every later call carries the same session id and
//! succeeds.

use burrow_cli_testkit as common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow::internal::fault::Fault;
use burrow_server::store::{RuntimeState, Store};
use burrow_test_support::fault::FaultWindow;
use common::mcp::{self, SessionClient};
use common::serve::pg::PgCluster;
use common::serve::{http, read_response, send_with, ServeEnv};
use common::TestHome;
use serde_json::{json, Value};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

const REPLAYS: &str = "burrow_gateway_mcp_sessions_reestablished_total";

/// What the `count` tool answered: the session id the server knows, the
/// calls in that session, when the server's process started.
fn count(answer: &Value) -> (String, u64, String) {
    assert_eq!(answer["isError"], false, "{answer}");
    let r: Value = serde_json::from_str(answer["result"].as_str().unwrap()).unwrap();
    (
        r["sessionId"].as_str().unwrap().to_owned(),
        r["calls"].as_u64().unwrap(),
        r["startedAt"].as_str().unwrap().to_owned(),
    )
}

async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let end = Instant::now() + Duration::from_secs(60);
    while !f().await {
        assert!(Instant::now() < end, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stateful_mcp_servers_session_survives_reclaims_through_two_replicas() {
    let th = TestHome::new().await;
    let url = tokio::task::spawn_blocking(|| cluster().create_database("mcp_sessions").unwrap())
        .await
        .unwrap();
    let env = ServeEnv::new(th.path(), &url)
        .set("IDLE_TIMEOUT", "2s")
        .set("SWEEP_INTERVAL", "300ms");
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("mcp"))
            .await
            .unwrap()
    };
    // Replica A holds a replay, when the test gets there, after the new
    // server's session exists and before the client's id is mapped to it.
    let dir = tempfile::tempdir().unwrap();
    let window = FaultWindow::new(dir.path(), Fault::GatewayMcpBeforeRemap.as_str());
    let mut env_a = env.clone();
    env_a.vars.extend(
        window
            .env()
            .map(|(k, v)| (k.to_owned(), v.into_string().unwrap())),
    );
    let (a, b) = (env_a.start("a"), env.start("b"));
    let store = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();

    let h = burrow::Sandbox::builder("stateful")
        .image(mcp::rootfs())
        .backend(th.dyn_backend())
        .detached(true)
        .define()
        .await
        .unwrap();
    let id = h.id().to_string();
    let body = json!({"port": mcp::PORT, "command": mcp::stateful_server_command()}).to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{id}", a.url),
        Some(&token),
        Some(&body),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (at_a, at_b) = (
        format!("{}/gw/{id}/mcp", a.url),
        format!("{}/gw/{id}/mcp", b.url),
    );
    let home = th.path().to_string_lossy().into_owned();
    let reclaimed = || async {
        wait_until("reclaimed", || async {
            store.runtime(&id).await.unwrap().map(|r| r.state) == Some(RuntimeState::Dormant)
        })
        .await;
        wait_until("the server's process gone", || async {
            common::supervisors_of(&home).is_empty()
        })
        .await;
    };

    // One initialize (through A, which starts the sandbox); the session is
    // kept in the database under the id the server gave.
    let mut client = tokio::task::block_in_place(|| SessionClient::spawn(&at_a, &token));
    let first = tokio::task::block_in_place(|| client.call(json!({"call": "count"})));
    let session = first["sessionId"].as_str().unwrap().to_owned();
    let (server_session, calls, started1) = count(&first);
    assert_eq!((server_session.as_str(), calls), (session.as_str(), 1));
    let kept = store.mcp_session(&id, &session, 0).await.unwrap().unwrap();
    assert_eq!(
        (kept.upstream.as_str(), kept.tenant.as_str()),
        (session.as_str(), "default")
    );
    assert!(kept.initialize.contains("\"initialize\""), "{kept:?}");

    // A client's standalone event stream on a kept session is the
    // gateway's 405 (it would keep the workload awake), with Allow.
    let get = tokio::task::block_in_place(|| {
        read_response(send_with(
            "GET",
            &at_b,
            Some(&token),
            &[
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", &session),
            ],
            None,
        ))
    });
    assert_eq!(get.status, 405, "{}", get.text());
    assert_eq!(get.header("allow"), Some("POST, DELETE"));

    // Warm, through B: the same server session and its state.
    let warm = tokio::task::block_in_place(|| client.call(json!({"call": "count", "via": at_b})));
    assert_eq!(count(&warm), (session.clone(), 2, started1.clone()));

    // Reclaimed (stop): the server's process and its sessions are gone.
    // The next call, through B, re-establishes the session on the new
    // process: the client's id is unchanged, the server's is new, and the
    // state kept in the session starts anew.
    reclaimed().await;
    let woken = tokio::task::block_in_place(|| client.call(json!({"call": "count", "via": at_b})));
    assert_eq!(woken["sessionId"], session.as_str(), "{woken}");
    let (new_session, calls, started2) = count(&woken);
    assert_ne!(new_session, session);
    assert_ne!(
        started2, started1,
        "the same process answered after a reclaim"
    );
    assert_eq!(calls, 1);
    let kept = store.mcp_session(&id, &session, 0).await.unwrap().unwrap();
    assert_eq!(kept.upstream, new_session);
    assert_eq!(mcp::metric(&b.url, &token, REPLAYS), 1);

    // Through A: A reads the mapping B made.
    let via_a = tokio::task::block_in_place(|| client.call(json!({"call": "count", "via": at_a})));
    assert_eq!(count(&via_a), (new_session.clone(), 2, started2.clone()));
    assert_eq!(mcp::metric(&a.url, &token, REPLAYS), 0);

    // Reclaimed again; two calls at once, the first through A (which
    // starts the sandbox, replays the session and is held before mapping
    // it), the second through B once A is held (B replays and maps first).
    // A then finds B's mapping and sends its call under B's server
    // session: both calls land in one session of the new process.
    reclaimed().await;
    let before = store
        .mcp_session(&id, &session, 0)
        .await
        .unwrap()
        .unwrap()
        .upstream;
    let gate = dir.path().join("a-is-held");
    tokio::task::block_in_place(|| {
        client.send(&json!({"concurrent": [
            {"call": "count", "via": at_a},
            {"call": "count", "via": at_b, "after": gate},
        ]}))
    });
    assert!(
        window.wait_open(Duration::from_secs(60)).await,
        "A never replayed the session"
    );
    std::fs::write(&gate, b"").unwrap();
    wait_until("B maps the session", || async {
        store
            .mcp_session(&id, &session, 0)
            .await
            .unwrap()
            .unwrap()
            .upstream
            != before
    })
    .await;
    let mapped = store
        .mcp_session(&id, &session, 0)
        .await
        .unwrap()
        .unwrap()
        .upstream;
    window.release();
    let both = tokio::task::block_in_place(|| client.read());
    let results = both["results"].as_array().unwrap();
    let (s1, c1, p1) = count(&results[0]);
    let (s2, c2, p2) = count(&results[1]);
    assert_eq!(
        (s1.as_str(), s2.as_str()),
        (mapped.as_str(), mapped.as_str())
    );
    assert_eq!(p1, p2);
    assert_eq!(
        {
            let mut c = [c1, c2];
            c.sort_unstable();
            c
        },
        [1, 2]
    );
    assert_eq!(
        store
            .mcp_session(&id, &session, 0)
            .await
            .unwrap()
            .unwrap()
            .upstream,
        mapped
    );
    assert_eq!(mcp::metric(&b.url, &token, REPLAYS), 2);
    assert_eq!(mcp::metric(&a.url, &token, REPLAYS), 0);

    // The client ends its session: the server's is ended and the gateway
    // forgets it.
    let end = tokio::task::block_in_place(|| client.call(json!({"end": true})));
    assert_eq!(end["ended"], true, "{end}");
    assert_eq!(store.mcp_session(&id, &session, 0).await.unwrap(), None);
    let log = format!("{}{}", a.log(), b.log());
    assert!(!log.contains("panicked"), "{log}");
}

/// With `idle_action = hibernate` (the vm driver), the server's memory, and
/// so its sessions, live through the idle reclaim: the next call resumes
/// the guest and goes to the same server session, with nothing replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hibernated_vm_keeps_its_mcp_servers_sessions() {
    let th = TestHome::new().await;
    let url = tokio::task::spawn_blocking(|| cluster().create_database("mcp_hibernate").unwrap())
        .await
        .unwrap();
    // The gateway's reaper is off: the sandbox's own idle timeout
    // hibernates it.
    let env = ServeEnv::new(th.path(), &url).set("IDLE_TIMEOUT", "0");
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("mcp"))
            .await
            .unwrap()
    };
    let server = env.start("a");
    let h = burrow::Sandbox::builder("stateful-vm")
        .image(mcp::rootfs())
        .backend(th.dyn_backend())
        .driver("vm")
        .memory_mb(512)
        .idle_timeout(Duration::from_secs(3))
        .idle_action(burrow::IdleAction::Hibernate)
        .detached(true)
        .define()
        .await
        .unwrap();
    let id = h.id().to_string();
    let body = json!({"port": mcp::PORT, "command": mcp::stateful_server_command()}).to_string();
    let r = http(
        "PUT",
        &format!("{}/v1/gateway/targets/{id}", server.url),
        Some(&token),
        Some(&body),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let endpoint = format!("{}/gw/{id}/mcp", server.url);

    let mut client = tokio::task::block_in_place(|| SessionClient::spawn(&endpoint, &token));
    let first = tokio::task::block_in_place(|| client.call(json!({"call": "count"})));
    let session = first["sessionId"].as_str().unwrap().to_owned();
    let (server_session, calls, started) = count(&first);
    assert_eq!((server_session.as_str(), calls), (session.as_str(), 1));

    // Idle: hibernated (the run ends Stopped, its reason Hibernated).
    let info = tokio::time::timeout(
        Duration::from_secs(120),
        h.wait_for_status(&[burrow::Status::Stopped]),
    )
    .await
    .expect("hibernated within two minutes")
    .unwrap();
    let reason = info.last_run.as_ref().and_then(|r| r.exit_reason);
    assert_eq!(reason, Some(burrow::ExitReason::Hibernated));

    // The next call resumes it: the same process, the same session, its
    // state, and no replay.
    let woken = tokio::task::block_in_place(|| client.call(json!({"call": "count"})));
    assert_eq!(woken["sessionId"], session.as_str(), "{woken}");
    assert_eq!(count(&woken), (session.clone(), 2, started));
    assert_eq!(mcp::metric(&server.url, &token, REPLAYS), 0);
    let end = tokio::task::block_in_place(|| client.call(json!({"end": true})));
    assert_eq!(end["ended"], true, "{end}");
}
