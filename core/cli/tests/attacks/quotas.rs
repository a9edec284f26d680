//! Quotas on every start path (issue 56, class 8): a tenant at its
//! `max_running` had a second sandbox running by asking the runtime stream
//! for `?wake=true` on an idle-reclaimed one (the engine's own demand
//! start, outside the tenant's quota turn), and so did a gateway call to a
//! reclaimed target (its tunnel woke it through the engine as it is); a
//! sandbox that named no limits was counted at 512 MiB and 1 CPU but ran
//! unlimited.
//!
//! Now every start is the tenant's, through its view of the engine: with
//! one sandbox running under `max_running 1`, a wake, a gateway call, a
//! start, a connect-or-start, a restart, a fork, a restore from a snapshot
//! and a pool's claim are each refused `quota_exceeded` and start nothing.
//! And a tenant's sandbox that names no limit is given what its quota
//! counts, in its answer and in its cgroup (where the host can enforce
//! one; where it cannot, recorded and marked best effort). A real
//! `burrow serve` on SQLite, real sandboxes.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use burrow::api;
use burrow_cli_testkit as common;
use common::serve::{ok, read_head, web_command, Resp, TenantServer};
use serde_json::{json, Value};

struct Fixture {
    // Field order is drop order: the server before its database.
    t: TenantServer,
    /// The tenant `q`'s admin.
    token: String,
    _db: tempfile::TempDir,
}

/// A server whose tenant `q` may run one sandbox at a time (the gateway's
/// reaper off: a target is stopped only by its own idle timeout).
fn fixture() -> Fixture {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/serve.db", db.path().display());
    let tokens = [("q-admin", "q", "tenant_admin")];
    let mut t = TenantServer::start_with(&url, &["q"], &tokens, &[("IDLE_TIMEOUT", "0")]);
    t.env.admin(&["tenant", "set", "q", "--max-running", "1"]);
    let token = t.tokens.pop().unwrap();
    Fixture { t, token, _db: db }
}

impl Fixture {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.t.call(&self.token, method, path, body)
    }

    /// Creates `name` (defined, not started); its id.
    fn create(&self, name: &str, config: Value) -> String {
        let body = json!({"name": name, "config": config, "detached": true});
        let created = ok(self.call("POST", "/v1/sandboxes", Some(body)), "create");
        created["id"].as_str().unwrap().to_owned()
    }

    fn op(&self, id: &str, op: &str, body: Value) -> Resp {
        self.call("POST", &format!("/v1/sandboxes/{id}/{op}"), Some(body))
    }

    fn info(&self, id: &str) -> Value {
        ok(
            self.call("GET", &format!("/v1/sandboxes/{id}"), None),
            "get",
        )
    }

    /// The tenant's sandboxes, by name, with their status.
    fn statuses(&self) -> Vec<(String, String)> {
        let list = ok(self.call("GET", "/v1/sandboxes", None), "list");
        let mut v: Vec<(String, String)> = list["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let field = |k: &str| s[k].as_str().unwrap().to_owned();
                (field("name"), field("status"))
            })
            .collect();
        v.sort();
        v
    }

    /// How many of the tenant's sandboxes have a runtime.
    fn running(&self) -> usize {
        self.statuses()
            .iter()
            .filter(|(_, s)| matches!(s.as_str(), "starting" | "running" | "draining" | "paused"))
            .count()
    }

    /// Waits until `id` was stopped by its own idle timeout.
    fn reclaimed(&self, id: &str) -> Value {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let info = self.info(id);
            if info["status"] == "stopped" {
                assert_eq!(info["last_run"]["exit_reason"], "idle_timeout", "{info}");
                return info;
            }
            assert!(Instant::now() < end, "never reclaimed: {info}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `GET /v1/sandboxes/{id}/runtime?wake=true`, upgraded: its status
    /// (101: the stream was opened) and, when refused, its answer.
    fn wake(&self, id: &str) -> Resp {
        let authority = self.t.server.url.strip_prefix("http://").unwrap();
        let mut s = TcpStream::connect(authority).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            s,
            "GET /v1/sandboxes/{id}/runtime?wake=true HTTP/1.1\r\nHost: {authority}\r\n\
             Authorization: Bearer {}\r\nConnection: Upgrade\r\nUpgrade: {}\r\n\r\n",
            self.token,
            api::UPGRADE_PROTOCOL
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r);
        // The connection stays open (an upgrade's): the answer's length.
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; length];
        r.read_exact(&mut body).unwrap();
        Resp {
            status,
            headers,
            body,
        }
    }
}

/// Asserts a refusal for the tenant's running sandboxes.
fn refused(r: &Resp, what: &str) {
    assert_eq!(r.status, 429, "{what}: {}", r.text());
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (429, "quota_exceeded"),
        "{what}: {}",
        r.text()
    );
    assert_eq!(
        r.json()["error"]["subject"],
        "running",
        "{what}: {}",
        r.text()
    );
}

fn sleeper() -> Value {
    json!({"image": "busybox", "command": ["sleep", "3600"]})
}

/// A sandbox reclaimed for idleness (demand start on, as an idle timeout
/// makes it) and another one running: a waking runtime stream is refused
/// and wakes nothing.
#[test]
fn a_wake_on_the_runtime_stream_takes_the_quota_turn() {
    let f = fixture();
    let idle = f.create("idle", json!({"image": "busybox", "idle_timeout": 1000}));
    ok(f.op(&idle, "start", json!({})), "start idle");
    let before = f.reclaimed(&idle);
    let busy = f.create("busy", sleeper());
    ok(f.op(&busy, "start", json!({})), "start busy");

    let r = f.wake(&idle);
    let after = f.info(&idle);
    assert_eq!(after["status"], "stopped", "the wake started it: {after}");
    assert_eq!(after["generation"], before["generation"]);
    assert_eq!(f.running(), 1);
    refused(&r, "wake");

    // With room again, the same wake starts it (the tenant's start).
    ok(f.op(&busy, "stop", json!({"grace_ms": 100})), "stop busy");
    let r = f.wake(&idle);
    assert_eq!(r.status, 101, "{}", r.text());
    let woken = f.info(&idle)["generation"].as_u64().unwrap();
    assert!(woken > before["generation"].as_u64().unwrap());
}

/// A gateway target started through the gateway, then reclaimed by its
/// own idle timeout while the gateway still holds its handle; another
/// sandbox running: a gateway call is refused (429, not a start, not a
/// 502) and the target stays stopped.
#[test]
fn a_gateway_call_to_a_reclaimed_target_takes_the_quota_turn() {
    let f = fixture();
    let target = f.create("web", json!({"image": "busybox", "idle_timeout": 1000}));
    let put = json!({"port": 8080, "command": web_command(0)});
    let path = format!("/v1/gateway/targets/{target}");
    ok(f.call("PUT", &path, Some(put)), "target");
    let gw = format!("/gw/{target}/index.html");
    let r = f.call("GET", &gw, None);
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    let before = f.reclaimed(&target);
    let busy = f.create("busy", sleeper());
    ok(f.op(&busy, "start", json!({})), "start busy");

    for attempt in 0..2 {
        let r = f.call("GET", &gw, None);
        let after = f.info(&target);
        assert_eq!(
            after["status"], "stopped",
            "call {attempt} started it: {after}"
        );
        assert_eq!(after["generation"], before["generation"]);
        assert_eq!(f.running(), 1);
        refused(&r, &format!("gateway call {attempt}"));
    }
}

/// One sandbox running: a start, a connect-or-start and a restart of
/// another, a fork of the running one, a restore of its snapshot (defined,
/// then started; and created to start at once) are each refused and start
/// nothing; so is a claim of a pool's warm sandbox while the pool's
/// sandbox is the one running.
#[test]
fn starts_restarts_forks_restores_and_claims_take_the_quota_turn() {
    let f = fixture();
    let busy = f.create("busy", sleeper());
    ok(f.op(&busy, "start", json!({})), "start busy");
    let other = f.create("other", sleeper());
    let ops = [
        ("start", json!({})),
        ("connect-or-start", json!({})),
        ("restart", json!({"grace_ms": 100})),
    ];
    for (op, body) in ops {
        refused(&f.op(&other, op, body), op);
        assert_eq!(f.info(&other)["status"], "created", "{op} started nothing");
    }
    refused(&f.op(&busy, "fork", json!({"count": 1})), "fork");
    let snap = f.op(&busy, "snapshot", json!({"snapshot": "s"}));
    assert_eq!(snap.status, 201, "{}", snap.text());
    let restored = f.create("restored", json!({"image": "snapshot:s"}));
    refused(&f.op(&restored, "start", json!({})), "restore's start");
    let body = json!({
        "name": "restored-now", "config": {"image": "snapshot:s"},
        "detached": true, "claim": true,
    });
    refused(
        &f.call("POST", "/v1/sandboxes", Some(body)),
        "restore at once",
    );
    assert_eq!(f.running(), 1);
    let names: Vec<String> = f.statuses().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["busy", "other", "restored"], "no copy was made");

    // The running one is the pool's warm sandbox now.
    ok(f.op(&busy, "stop", json!({"grace_ms": 100})), "stop busy");
    let pool = json!({"name": "warm", "size": 1, "config": sleeper()});
    let r = f.call("POST", "/v1/pools", Some(pool));
    assert_eq!(r.status, 201, "{}", r.text());
    let claim = json!({"name": "claimed", "config": sleeper(), "detached": true, "claim": true});
    refused(&f.call("POST", "/v1/sandboxes", Some(claim)), "claim");
    let pool = ok(f.call("GET", "/v1/pools/warm", None), "pool");
    assert_eq!(pool["claims"], 0, "{pool}");
    assert!(f.statuses().iter().all(|(n, _)| n != "claimed"));
}

/// A tenant's sandbox that names no limit is given what its quota counts
/// it at (512 MiB, 1 CPU), in its answer and in its memory cgroup; so is
/// a pool's definition, and a change that removes a limit puts the
/// default back.
#[test]
fn a_tenants_sandbox_runs_with_the_limits_its_quota_counts() {
    let f = fixture();
    let id = f.create("plain", sleeper());
    let info = f.info(&id);
    assert_eq!(info["config"]["memory_mb"], 512, "{info}");
    assert_eq!(info["config"]["cpus"], 1.0, "{info}");
    ok(f.op(&id, "start", json!({})), "start");
    let metrics = ok(
        f.call("GET", &format!("/v1/sandboxes/{id}/metrics"), None),
        "metrics",
    );
    if common::enforceable().memory {
        assert_eq!(metrics["memory_limit_bytes"], 512u64 << 20, "{metrics}");
        assert!(info["config"]["best_effort_limits"].is_null(), "{info}");
    } else {
        // No cgroup to enforce it with (an unprivileged user without a
        // delegated one): recorded, counted, and said to be best effort.
        assert!(metrics["memory_limit_bytes"].is_null(), "{metrics}");
        assert_eq!(info["config"]["best_effort_limits"], true, "{info}");
    }
    let path = format!("/v1/sandboxes/{id}");
    let plan = ok(
        f.call("PATCH", &path, Some(json!({"memory_mb": null}))),
        "modify",
    );
    assert_eq!(plan["info"]["config"]["memory_mb"], 512, "{plan}");
    let pool = json!({"name": "warm", "size": 0, "config": {"image": "busybox"}});
    let pool = ok(f.call("POST", "/v1/pools", Some(pool)), "pool");
    assert_eq!(pool["config"]["memory_mb"], 512, "{pool}");
}
