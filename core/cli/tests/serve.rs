#![allow(clippy::unwrap_used)]
//! `burrow serve` end to end: real server processes (two replicas where it
//! matters) on a real Postgres server started by the tests, real sandboxes
//! (the services behind the gateway are busybox httpd inside them), and a
//! plain HTTP client.

use burrow_cli_testkit as common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use burrow::{SandboxId, Status};
use burrow_server::store::{now_ms, RuntimeState, Store};
use common::gateway::{blocking, gw, setup};
use common::serve::{call_retrying, http, metric_sample, web_command, ServeEnv, Server};
use common::TestHome;

/// The value of an unlabelled-or-labelled sample in a `/metrics` answer.
fn metric(server: &Server, token: &str, sample: &str) -> u64 {
    metric_sample(&server.url, token, sample)
        .unwrap_or_else(|| panic!("no sample {sample} in {}/metrics", server.url))
}

/// Runs `n` gateway calls at once, alternating between the servers, each
/// retrying on 503; returns (final answer, 503s seen) per call.
fn race(servers: &[&Server], id: &SandboxId, token: &str, n: usize) -> Vec<(u16, String, usize)> {
    let barrier = Arc::new(Barrier::new(n));
    let urls: Vec<String> = (0..n)
        .map(|i| gw(servers[i % servers.len()], id, "index.html"))
        .collect();
    let handles: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let (barrier, token) = (barrier.clone(), token.to_owned());
            std::thread::spawn(move || {
                barrier.wait();
                let (r, busy) = call_retrying(&url, &token, Duration::from_secs(120));
                (r.status, r.text(), busy)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_fifty_cold_calls_make_one_start_and_warm_calls_never_see_503() {
    let s = setup("cold_race", &[("IDLE_TIMEOUT", "0")]).await;
    let a = s.env.start("a");
    let b = s.env.start("b");
    // The service comes up 2 s after the sandbox: every call lands mid-start.
    let id = s.web_target(&a, "web", web_command(2)).await;
    assert_eq!(s.state(&id).await, None, "never called: no runtime row");

    let (ra, rb) = (Arc::new(a), Arc::new(b));
    let results = {
        let (ra, rb, id, token) = (ra.clone(), rb.clone(), id.clone(), s.token.clone());
        blocking(move || race(&[&ra, &rb], &id, &token, 50)).await
    };
    assert_eq!(results.len(), 50);
    for (status, body, _) in &results {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body.trim(), "ok");
    }
    let refused = results.iter().filter(|(_, _, busy)| *busy > 0).count();
    assert!(
        refused >= 45,
        "only {refused} of 50 calls saw 503 during a 2 s start"
    );
    // Exactly one start: one engine run, one gateway generation, one start
    // counted over both replicas.
    assert_eq!(s.engine_generation(&id).await, 1);
    let row = s.state(&id).await.unwrap();
    assert_eq!((row.state, row.generation), (RuntimeState::Ready, 1));
    let starts = {
        let (ra, rb, token) = (ra.clone(), rb.clone(), s.token.clone());
        blocking(move || {
            let m = "burrow_gateway_starts_total{result=\"ok\"}";
            metric(&ra, &token, m) + metric(&rb, &token, m)
        })
        .await
    };
    assert_eq!(starts, 1);

    // Warm: 50 at once over both replicas, not one 503.
    let warm = {
        let (ra, rb, id, token) = (ra.clone(), rb.clone(), id.clone(), s.token.clone());
        blocking(move || race(&[&ra, &rb], &id, &token, 50)).await
    };
    for (status, body, busy) in &warm {
        assert_eq!((*status, *busy), (200, 0), "{body}");
    }
    assert_eq!(s.engine_generation(&id).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_of_four_serves_twenty_retrying_clients_through_a_ten_second_start() {
    let s = setup(
        "pool",
        &[
            ("IDLE_TIMEOUT", "0"),
            ("MAX_CONNECTIONS", "4"),
            ("ACQUIRE_TIMEOUT", "5s"),
        ],
    )
    .await;
    let a = Arc::new(s.env.start("a"));
    let id = s.web_target(&a, "slow", web_command(10)).await;
    let t0 = Instant::now();
    let results = {
        let (a, id, token) = (a.clone(), id.clone(), s.token.clone());
        blocking(move || race(&[&a], &id, &token, 20)).await
    };
    assert!(
        t0.elapsed() >= Duration::from_secs(10),
        "the start was not slow"
    );
    for (status, body, _) in &results {
        assert_eq!(*status, 200, "{body}");
    }
    assert!(results.iter().filter(|r| r.2 > 0).count() >= 19);
    assert_eq!(s.engine_generation(&id).await, 1);
    assert_eq!(s.state(&id).await.unwrap().state, RuntimeState::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_in_flight_fences_the_reaper_then_idle_is_reclaimed_and_woken_again() {
    let s = setup(
        "lease",
        &[("IDLE_TIMEOUT", "2s"), ("SWEEP_INTERVAL", "300ms")],
    )
    .await;
    let a = Arc::new(s.env.start("a"));
    let id = s.web_target(&a, "leased", web_command(0)).await;

    // A call streaming for 6 s (3x the idle timeout), which also makes the
    // start (so no gap before it can let the sandbox idle): once started,
    // the sandbox stays up the whole time and the stream is complete.
    let (url, token) = (gw(&a, &id, "cgi-bin/slow?6"), s.token.clone());
    let call = tokio::task::spawn_blocking(move || http("GET", &url, Some(&token), None));
    s.wait_state(&id, RuntimeState::Ready, Duration::from_secs(60))
        .await;
    let t0 = Instant::now();
    while !call.is_finished() {
        assert_eq!(
            s.engine_status(&id).await,
            Status::Running,
            "reclaimed under a call in flight"
        );
        assert_eq!(s.state(&id).await.unwrap().state, RuntimeState::Ready);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = call.await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(4));
    assert_eq!(r.status, 200);
    assert_eq!(r.text().lines().count(), 6, "{}", r.text());

    // Then idle: reclaimed (stopped, id and config kept).
    s.wait_state(&id, RuntimeState::Dormant, Duration::from_secs(15))
        .await;
    assert_eq!(s.engine_status(&id).await, Status::Stopped);
    // A reaper that works says nothing (it logs only failures).
    let log = a.log();
    assert!(!log.contains("burrow_server::reaper"), "{log}");
    // The next call starts it again: a new generation.
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    let r = blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0).await;
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    assert_eq!(s.state(&id).await.unwrap().generation, 2);
    assert_eq!(s.engine_generation(&id).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_lease_is_swept_and_no_longer_fences() {
    let s = setup(
        "expired",
        &[("IDLE_TIMEOUT", "1s"), ("SWEEP_INTERVAL", "300ms")],
    )
    .await;
    let a = s.env.start("a");
    let id = s.web_target(&a, "expired", web_command(0)).await;
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    assert_eq!(
        blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0)
            .await
            .status,
        200
    );
    // A lease left by a replica that died: expired, never closed.
    let stale = s
        .store
        .open_lease(id.as_str(), "dead-replica", now_ms() - 1)
        .await
        .unwrap();
    s.wait_state(&id, RuntimeState::Dormant, Duration::from_secs(15))
        .await;
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE id = $1")
        .bind(&stale)
        .fetch_one(s.store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "the expired lease was swept");
    assert_eq!(s.engine_status(&id).await, Status::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_called_sandboxes_and_url_targets_are_never_reclaimed() {
    // The URL target is on this host's loopback: the operator allows it.
    let s = setup(
        "never",
        &[
            ("IDLE_TIMEOUT", "1s"),
            ("SWEEP_INTERVAL", "200ms"),
            ("OUTBOUND_ALLOW", "127.0.0.1"),
        ],
    )
    .await;
    let a = Arc::new(s.env.start("a"));
    // Running, registered, never called through the gateway.
    let id = s.web_target(&a, "quiet", web_command(0)).await;
    burrow::SandboxHandle::get_by_id_in(s.th.dyn_backend(), &id)
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    // A URL target: a plain HTTP server of the test.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in upstream.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let request = String::from_utf8_lossy(&buf).into_owned();
            let seen_auth = request.to_ascii_lowercase().contains("authorization");
            // It answers the request target it got.
            let target = request.split(' ').nth(1).unwrap_or("").to_owned();
            let body = if seen_auth {
                "leaked".to_owned()
            } else {
                target
            };
            let _ = std::io::Write::write_all(
                &mut conn,
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    let body = serde_json::json!({"url": format!("http://127.0.0.1:{port}")}).to_string();
    let (u, t) = (format!("{}/v1/gateway/targets", a.url), s.token.clone());
    let created = blocking(move || http("POST", &u, Some(&t), Some(&body))).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let tg = created.json()["id"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        let (u, t) = (format!("{}/gw/{tg}/ping", a.url), s.token.clone());
        let r = blocking(move || http("GET", &u, Some(&t), None)).await;
        // Proxied, without the caller's burrow token, marked as relayed.
        assert_eq!((r.status, r.text()), (200, "/ping".to_string()));
        assert_eq!(r.header("via"), Some("1.1 burrow"));
    }
    // The path as sent: percent-encoding kept (`%2F` is no separator,
    // `%3F` no query), the query passed on.
    for (sent, got) in [
        ("/a%2Fb/%3Fc%20d?q=1&r", "/a%2Fb/%3Fc%20d?q=1&r"),
        ("", "/"),
        ("/", "/"),
        ("?only=query", "/?only=query"),
    ] {
        let (u, t) = (format!("{}/gw/{tg}{sent}", a.url), s.token.clone());
        let r = blocking(move || http("GET", &u, Some(&t), None)).await;
        assert_eq!((r.status, r.text()), (200, got.to_string()), "{sent}");
    }
    // Many sweeps later: the sandbox still runs, nothing was recorded for
    // it, and the URL target has no runtime state at all.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(s.engine_status(&id).await, Status::Running);
    assert_eq!(s.state(&id).await, None);
    assert_eq!(s.store.runtime(&tg).await.unwrap(), None);
    let reclaimed = {
        let (a, t) = (a.clone(), s.token.clone());
        blocking(move || metric(&a, &t, "burrow_reaper_reclaims_total{result=\"ok\"}")).await
    };
    assert_eq!(reclaimed, 0);
    assert!(metric_sweeps(&a, &s.token).await > 5);
}

async fn metric_sweeps(a: &Arc<Server>, token: &str) -> u64 {
    let (a, t) = (a.clone(), token.to_owned());
    blocking(move || metric(&a, &t, "burrow_reaper_sweeps_total")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_reclaim_leaves_nothing_stuck() {
    let s = setup(
        "killed",
        &[("IDLE_TIMEOUT", "1s"), ("SWEEP_INTERVAL", "300ms")],
    )
    .await;
    let mut servers = [s.env.start("a"), s.env.start("b")];
    // A workload that ignores SIGTERM: its graceful stop takes the whole
    // grace period (10 s), so the reclaim is slow enough to kill its reaper.
    let mut cmd = web_command(0);
    cmd[2] = format!(
        "(trap '' TERM; while true; do sleep 1; done) >/dev/null 2>&1 & {}",
        cmd[2]
    );
    let id = s.web_target(&servers[0], "stubborn", cmd).await;
    let (url, token) = (gw(&servers[0], &id, "index.html"), s.token.clone());
    assert_eq!(
        blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0)
            .await
            .status,
        200
    );

    // Wait for a reaper to claim it, then SIGKILL that replica.
    let end = Instant::now() + Duration::from_secs(20);
    let owner = loop {
        let row = s.state(&id).await.unwrap();
        if row.state == RuntimeState::Reaping {
            break row.owner.unwrap();
        }
        assert!(Instant::now() < end, "never claimed for reclaim: {row:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let victim = servers.iter().position(|s| s.replica == owner).unwrap();
    servers[victim].kill9();
    let survivor = &servers[1 - victim];

    // The survivor finds the row whose reaper died (its lock went with its
    // connection) and finishes the reclaim.
    s.wait_state(&id, RuntimeState::Dormant, Duration::from_secs(40))
        .await;
    let row = s.state(&id).await.unwrap();
    assert_eq!(row.owner, None);
    assert!(matches!(
        s.engine_status(&id).await,
        Status::Stopped | Status::Crashed
    ));
    // And it serves the next call.
    let (url, token) = (gw(survivor, &id, "index.html"), s.token.clone());
    let r = blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_that_disconnects_mid_start_does_not_cancel_the_start() {
    let s = setup("disconnect", &[("IDLE_TIMEOUT", "0")]).await;
    let a = Arc::new(s.env.start("a"));
    let id = s.web_target(&a, "walkaway", web_command(2)).await;
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    blocking(move || {
        let conn = common::serve::send("GET", &url, Some(&token), None);
        std::thread::sleep(Duration::from_millis(300));
        drop(conn);
    })
    .await;
    assert_eq!(s.state(&id).await.unwrap().state, RuntimeState::Starting);
    s.wait_state(&id, RuntimeState::Ready, Duration::from_secs(30))
        .await;
    assert_eq!(s.engine_status(&id).await, Status::Running);
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    let r = blocking(move || http("GET", &url, Some(&token), None)).await;
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    assert_eq!(s.state(&id).await.unwrap().generation, 1);
    // idle_timeout = 0: said once, and nothing else from the reaper.
    let log = a.log();
    assert_eq!(
        log.matches("idle reaper disabled by explicit zero timeout")
            .count(),
        1,
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_past_startup_timeout_is_removed_recorded_and_retried() {
    let s = setup(
        "timeout",
        &[("IDLE_TIMEOUT", "0"), ("STARTUP_TIMEOUT", "3s")],
    )
    .await;
    let a = Arc::new(s.env.start("a"));
    // The first start hangs; the writable layer remembers it, so the
    // second comes up at once.
    let web = web_command(0)[2].clone();
    let cmd = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("if [ -f /tried ]; then {web}; else touch /tried; sync; sleep 60; fi"),
    ];
    let id = s.web_target(&a, "hangs", cmd).await;
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    let t0 = Instant::now();
    let r = blocking(move || http("GET", &url, Some(&token), None)).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), "start_failed");
    assert!(t0.elapsed() >= Duration::from_secs(3));
    let row = s.state(&id).await.unwrap();
    assert_eq!(row.state, RuntimeState::Failed);
    assert!(row.last_error.is_some());
    assert!(
        !s.engine_status(&id).await.has_runtime(),
        "the workload was removed"
    );

    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    let r = blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0).await;
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    let row = s.state(&id).await.unwrap();
    assert_eq!((row.state, row.generation), (RuntimeState::Ready, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_are_required_on_tcp_and_checked() {
    let s = setup("auth", &[("IDLE_TIMEOUT", "0")]).await;
    let a = Arc::new(s.env.start("a"));
    let id = s.web_target(&a, "guarded", web_command(0)).await;
    let spare = {
        let env = s.env.clone();
        blocking(move || env.create_token("spare")).await
    };
    let (a2, id2, token, spare2) = (a.clone(), id.clone(), s.token.clone(), spare.clone());
    let env = s.env.clone();
    blocking(move || {
        for path in [
            "v1/sandboxes".to_string(),
            format!("gw/{id2}/index.html"),
            "metrics".into(),
        ] {
            let u = format!("{}/{path}", a2.url);
            for bad in [None, Some("bw_0000"), Some("garbage")] {
                let r = http("GET", &u, bad, None);
                assert_eq!(r.status, 401, "{path} with {bad:?}");
                assert_eq!(r.error_code(), "unauthorized");
            }
        }
        // Health needs no token.
        assert_eq!(
            http("GET", &format!("{}/healthz", a2.url), None, None).status,
            200
        );
        assert_eq!(
            http("GET", &format!("{}/readyz", a2.url), None, None).status,
            200
        );
        let u = format!("{}/v1/sandboxes", a2.url);
        assert_eq!(http("GET", &u, Some(&token), None).status, 200);
        // The CLI against the server: a bad token is exit code 8.
        for (tok, code) in [("garbage", 8), (token.as_str(), 0)] {
            let out = std::process::Command::new(common::burrow_bin())
                .args(["--json", "ls"])
                .env("BURROW_URL", &a2.url)
                .env("BURROW_TOKEN", tok)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(code),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            if code == 8 {
                let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(body["error"]["code"], "unauthorized");
            }
        }
        // A revoked token is refused.
        let out = env
            .command()
            .args(["token", "revoke", "spare"])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(http("GET", &u, Some(&spare2), None).status, 401);
    })
    .await;
    // Nothing was started by the refused gateway calls.
    assert_eq!(s.state(&id).await, None);
    let stored: Vec<String> = sqlx::query_scalar("SELECT token_hash FROM api_tokens")
        .fetch_all(s.store.pool())
        .await
        .unwrap();
    assert!(
        !stored.contains(&s.token) && !stored.contains(&spare),
        "tokens are stored hashed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_stops_the_server_at_startup() {
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let file = th.path().join("serve.toml");
    std::fs::write(&file, "[reaper]\nidle_timout = \"5m\"\n").unwrap();
    // A cluster nobody listens for (port 1 of the loopback).
    let unreachable = th.path().join("kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: k, cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: k, user: u}}]\n",
    )
    .unwrap();
    // (what, environment, with the config file)
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, bool);
    let cases: Vec<Case> = vec![
        ("unknown key in the file", vec![], true),
        (
            "unknown backend",
            vec![("BURROW_SERVE_BACKEND", "nomad".into())],
            false,
        ),
        (
            "kubernetes: a kubeconfig that does not load",
            vec![
                ("BURROW_SERVE_BACKEND", "kubernetes".into()),
                (
                    "BURROW_KUBECONFIG",
                    th.path().join("missing").display().to_string(),
                ),
            ],
            false,
        ),
        (
            "kubernetes: an unknown context",
            vec![
                ("BURROW_SERVE_BACKEND", "kubernetes".into()),
                ("BURROW_KUBECONFIG", unreachable.display().to_string()),
                ("BURROW_KUBE_CONTEXT", "no-such-context".into()),
            ],
            false,
        ),
        (
            "kubernetes: an API server that does not answer",
            vec![
                ("BURROW_SERVE_BACKEND", "kubernetes".into()),
                ("BURROW_KUBECONFIG", unreachable.display().to_string()),
            ],
            false,
        ),
        (
            "unknown variable",
            vec![("BURROW_SERVE_IDLE_TIMOUT", "5m".into())],
            false,
        ),
        (
            "unsupported database",
            vec![("BURROW_SERVE_DATABASE", "mysql://x/y".into())],
            false,
        ),
        (
            "unreachable database",
            vec![(
                "BURROW_SERVE_DATABASE",
                "postgres://burrow@127.0.0.1:1/x".into(),
            )],
            false,
        ),
        (
            "bad duration",
            vec![("BURROW_SERVE_LEASE_TTL", "soon".into())],
            false,
        ),
        (
            "public address",
            vec![("BURROW_SERVE_LISTEN", "0.0.0.0:0".into())],
            false,
        ),
    ];
    for (what, vars, with_file) in cases {
        let mut env = ServeEnv::new(th.path(), &sqlite);
        env.vars = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let mut cmd = env.command();
        cmd.arg("--json");
        if with_file {
            cmd.arg("--config").arg(&file);
        }
        let out = blocking(move || {
            cmd.env("BURROW_SERVE_LISTEN", "127.0.0.1:0");
            for (k, v) in &vars {
                cmd.env(k, v);
            }
            cmd.output().unwrap()
        })
        .await;
        assert_eq!(
            out.status.code(),
            Some(6),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let body: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{what}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(body["error"]["code"], "invalid_config", "{what}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening on"),
            "{what}: it listened"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_needs_no_token_and_tcp_still_does() {
    let th = TestHome::new().await;
    let sock = th.path().join("serve.sock");
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite)
        .set("LISTEN", &format!("127.0.0.1:0,unix:{}", sock.display()))
        .set("IDLE_TIMEOUT", "0");
    let a = env.start("a");
    let (url, sock2) = (a.url.clone(), sock.clone());
    blocking(move || {
        use std::io::{Read, Write};
        let mut u = std::os::unix::net::UnixStream::connect(&sock2).unwrap();
        u.write_all(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        u.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sock2).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the socket is private");
        let r = http("GET", &format!("{url}/v1/sandboxes"), None, None);
        assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_typed_errors_and_change_nothing() {
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("t");
    let a = env.start("a");
    let h = th.builder("kept").define().await.unwrap();
    let (url, id) = (a.url.clone(), h.id().clone());
    let ghost = SandboxId::new();
    let image = common::busybox_rootfs().display().to_string();
    blocking(move || {
        let t = Some(token.as_str());
        let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
            (
                "POST",
                "/v1/sandboxes".into(),
                Some("{not json".into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                "/v1/sandboxes".into(),
                Some(r#"{"name":"x"}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                "/v1/sandboxes".into(),
                Some(format!(
                    r#"{{"name":"a/b/c","config":{{"image":"{image}"}},"detached":true}}"#
                )),
                422,
                "invalid_name",
            ),
            (
                "POST",
                "/v1/sandboxes".into(),
                Some(format!(
                    r#"{{"name":"c","config":{{"image":"{image}","cpus":0}},"detached":true}}"#
                )),
                422,
                "invalid_config",
            ),
            (
                "POST",
                "/v1/sandboxes".into(),
                Some(format!(
                    r#"{{"name":"kept","config":{{"image":"{image}"}},"detached":true}}"#
                )),
                409,
                "already_exists",
            ),
            (
                "GET",
                "/v1/sandboxes/not-an-id".into(),
                None,
                422,
                "invalid_argument",
            ),
            (
                "GET",
                "/v1/sandboxes/by-name/nope".into(),
                None,
                404,
                "not_found",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/explode"),
                Some("{}".into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/stop"),
                Some(r#"{"grace":1}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/exec?name=other"),
                Some("{}".into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{ghost}/touch?name=kept"),
                None,
                409,
                "sandbox_replaced",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{ghost}/touch?name=nobody"),
                None,
                404,
                "not_found",
            ),
            (
                "GET",
                "/v1/sandboxes?status=sleepy".into(),
                None,
                422,
                "invalid_argument",
            ),
            (
                "PATCH",
                format!("/v1/sandboxes/{id}"),
                Some(r#"{"colour":1}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "PUT",
                format!("/v1/gateway/targets/{id}"),
                Some(r#"{"port":0}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "PUT",
                format!("/v1/gateway/targets/{id}"),
                Some(r#"{"port":80,"command":[]}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                "/v1/gateway/targets".into(),
                Some(r#"{"url":"https://x"}"#.into()),
                422,
                "invalid_argument",
            ),
            ("GET", format!("/gw/{id}/x"), None, 404, "not_found"),
            (
                "GET",
                "/gw/tg_01h2x3y4z5a6b7c8d9e0f1g2h3/x".into(),
                None,
                404,
                "not_found",
            ),
            // A malformed target id, NUL included, is refused before the
            // database sees it.
            ("GET", "/gw/tg_missing/x".into(), None, 422, "invalid_argument"),
            ("GET", "/gw/tg_a%00b".into(), None, 422, "invalid_argument"),
            (
                "GET",
                "/v1/gateway/targets/a%00b".into(),
                None,
                422,
                "invalid_argument",
            ),
            (
                "DELETE",
                "/v1/gateway/targets/tg_".into(),
                None,
                422,
                "invalid_argument",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/start"),
                Some("{\"session\":\"a\\u0000b\"}".into()),
                422,
                "invalid_argument",
            ),
            // A struct is an object, not its fields in an array.
            (
                "PATCH",
                format!("/v1/sandboxes/{id}"),
                Some("[null, null]".into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                format!("/v1/sandboxes/{id}/stop"),
                Some(r#"{"grace_ms":9007199254740992}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                "/v1/gateway/targets".into(),
                Some(r#"{"url":"http://[::1]:80"}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "POST",
                "/v1/sandboxes".into(),
                Some(r#"{"name":"m","detached":true,"config":{"image":"x","max_duration":9007199254740992}}"#.into()),
                422,
                "invalid_config",
            ),
            // No route, or not this method: still an error envelope.
            ("GET", "/nope".into(), None, 404, "invalid_argument"),
            ("DELETE", "/gw/".into(), None, 404, "invalid_argument"),
            (
                "DELETE",
                "/v1/capabilities".into(),
                None,
                405,
                "invalid_argument",
            ),
            // An integral float is an integer (then validated as one); a
            // fraction is not.
            (
                "POST",
                format!("/v1/sandboxes/{id}/stop"),
                Some(r#"{"grace_ms":1.5}"#.into()),
                422,
                "invalid_argument",
            ),
            (
                "PUT",
                format!("/v1/gateway/targets/{id}"),
                Some(r#"{"port":0.0}"#.into()),
                422,
                "invalid_argument",
            ),
        ];
        for (method, path, body, status, code) in cases {
            let r = http(method, &format!("{url}{path}"), t, body.as_deref());
            assert_eq!(r.status, status, "{method} {path}: {}", r.text());
            assert_eq!(r.error_code(), code, "{method} {path}");
        }
        // Nothing changed: one sandbox, still Created, no targets.
        let list = http("GET", &format!("{url}/v1/sandboxes"), t, None).json();
        let sandboxes = list["sandboxes"].as_array().unwrap();
        assert_eq!(sandboxes.len(), 1);
        assert_eq!(sandboxes[0]["status"], "created");
        let targets = http("GET", &format!("{url}/v1/gateway/targets"), t, None).json();
        assert_eq!(targets["targets"].as_array().unwrap().len(), 0);
        // JSON Schema's integer 8080.0 is taken as 8080.
        let target = format!("{url}/v1/gateway/targets/{id}");
        let r = http("PUT", &target, t, Some(r#"{"port":8080.0}"#));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(http("GET", &target, t, None).json()["port"], 8080);
        let r = http(
            "POST",
            &format!("{url}/v1/sandboxes/{id}/stop"),
            t,
            Some(r#"{"grace_ms":10.0}"#),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_upgrades_are_relayed_and_hold_their_lease() {
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("t");
    let a = env.start("a");
    // An "echo" protocol: 101, then every byte comes back.
    let script = r#"cat > /up.sh <<'X'
#!/bin/sh
while read -r l; do l=$(printf %s "$l" | tr -d '\r'); [ -z "$l" ] && break; done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n'
exec cat
X
chmod +x /up.sh; nc -ll -p 8080 -e /up.sh >/dev/null 2>&1 &"#;
    let h = th.builder("echo").detached(true).define().await.unwrap();
    let store = Store::open(&sqlite, "t", 2, Duration::from_secs(5))
        .await
        .unwrap();
    let body = serde_json::json!({"port": 8080, "command": ["sh", "-c", script]}).to_string();
    let (url, id, t) = (a.url.clone(), h.id().clone(), token.clone());
    let conn = blocking(move || {
        use std::io::{BufRead, Read, Write};
        let r = http(
            "PUT",
            &format!("{url}/v1/gateway/targets/{id}"),
            Some(&t),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        // Started by a plain call first (an upgrade is not retried).
        let (r, _) = call_retrying(&format!("{url}/gw/{id}/"), &t, Duration::from_secs(60));
        assert_eq!(r.status, 101, "{}", r.text());
        let mut s = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
        write!(
            s,
            "GET /gw/{id}/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
             Connection: Upgrade\r\nUpgrade: echo\r\n\r\n"
        )
        .unwrap();
        let mut r = std::io::BufReader::new(s.try_clone().unwrap());
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 101"), "{status}");
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
        }
        s.write_all(b"hello through the gateway\n").unwrap();
        let mut back = [0u8; 26];
        r.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"hello through the gateway\n");
        s
    })
    .await;
    // The relay holds a lease while it lives...
    let live = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM leases WHERE target_id = $1")
            .bind(h.id().as_str())
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    // (the first call, upgraded too, gives its lease back once the server
    // has seen its connection close, which it may not have yet)
    let end = Instant::now() + Duration::from_secs(10);
    while live().await > 1 && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(live().await, 1);
    // ...and closes it when the connection ends.
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while live().await != 0 {
        assert!(Instant::now() < end, "the lease outlived the relay");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
