#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tenants' quotas through `burrow serve`, on a real PostgreSQL with two
//! replicas and real sandboxes: concurrent creates across the replicas
//! never pass a limit together (16 against 5: exactly 5), starts count
//! against running sandboxes, CPUs, memory and starts per minute, a pool's
//! warm sandboxes count at its size, and a refusal (`quota_exceeded`, 429,
//! with the quota and its limit) changes nothing. A token over its request
//! rate is answered `rate_limited` (429, `Retry-After`), alone.

use burrow_cli_testkit as common;

use std::sync::OnceLock;

use common::serve::pg::PgCluster;
use common::serve::{http, Resp, ServeEnv, Server};
use common::TestHome;
use serde_json::{json, Value};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

struct Fixture {
    _home: TestHome,
    env: ServeEnv,
    replicas: Vec<Server>,
}

/// Two replicas on one database and one engine home, with the test image
/// installed as the named image `busybox`.
fn fixture(db: &str) -> Fixture {
    fixture_with(db, &[])
}

/// The same, with `BURROW_SERVE_<key>=value` settings.
fn fixture_with(db: &str, settings: &[(&str, &str)]) -> Fixture {
    let home = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(TestHome::new());
    home.name_image("busybox");
    let url = cluster().create_database(db).unwrap();
    let env = settings
        .iter()
        .fold(ServeEnv::new(home.path(), &url), |env, (k, v)| {
            env.set(k, v)
        });
    let replicas = vec![env.start("r1"), env.start("r2")];
    Fixture {
        _home: home,
        env,
        replicas,
    }
}

impl Fixture {
    /// A tenant with `limits` (`burrow serve tenant create` flags) and a
    /// tenant admin token.
    fn tenant(&self, name: &str, limits: &[&str]) -> String {
        let mut args = vec!["tenant", "create", name];
        args.extend_from_slice(limits);
        self.env.admin(&args);
        self.env
            .create_token_in(&format!("{name}-admin"), name, "tenant_admin")
    }

    fn call(
        &self,
        replica: usize,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Resp {
        let body = body.map(|b| b.to_string());
        let url = format!("{}{path}", self.replicas[replica % 2].url);
        http(method, &url, Some(token), body.as_deref())
    }

    fn create(&self, token: &str, name: &str) -> Resp {
        let config = json!({"image": "busybox", "command": ["sleep", "3600"]});
        self.call(
            0,
            token,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "config": config, "detached": true})),
        )
    }
}

fn id_of(r: &Resp) -> String {
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["id"].as_str().unwrap().to_owned()
}

/// Asserts a refusal of `quota` at `limit`.
fn refused(r: &Resp, quota: &str, limit: u64) {
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (429, "quota_exceeded"),
        "{}",
        r.text()
    );
    let e = &r.json()["error"];
    assert_eq!(e["subject"], quota, "{}", r.text());
    assert_eq!(e["limit"], limit, "{}", r.text());
}

fn names(f: &Fixture, token: &str) -> Vec<String> {
    let r = f.call(1, token, "GET", "/v1/sandboxes", None);
    let mut v: Vec<String> = r.json()["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn concurrent_creates_across_replicas_never_pass_a_limit() {
    let f = fixture("quotas_race");
    let token = f.tenant("racers", &["--max-sandboxes", "5"]);
    let answers: Vec<Resp> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (f, token) = (&f, &token);
                s.spawn(move || {
                    let config = json!({"image": "busybox"});
                    f.call(
                        i,
                        token,
                        "POST",
                        "/v1/sandboxes",
                        Some(json!({"name": format!("c{i}"), "config": config, "detached": true})),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made = answers.iter().filter(|r| r.status == 201).count();
    assert_eq!(
        made,
        5,
        "{:?}",
        answers.iter().map(|r| r.text()).collect::<Vec<_>>()
    );
    for r in answers.iter().filter(|r| r.status != 201) {
        refused(r, "sandboxes", 5);
    }
    assert_eq!(names(&f, &token).len(), 5);
    // Another tenant's limit is its own; the default tenant has none.
    let other = f.tenant("others", &["--max-sandboxes", "1"]);
    id_of(&f.create(&other, "c0"));
    refused(&f.create(&other, "c1"), "sandboxes", 1);
    // Lifted, the limit lets creates through again.
    f.env
        .admin(&["tenant", "set", "racers", "--max-sandboxes", "none"]);
    id_of(&f.create(&token, "late"));
}

#[test]
fn starts_count_against_running_cpus_memory_and_the_minute() {
    let f = fixture("quotas_starts");
    let token = f.tenant(
        "runners",
        &["--max-running", "1", "--max-starts-per-minute", "3"],
    );
    let a = id_of(&f.create(&token, "a"));
    let b = id_of(&f.create(&token, "b"));
    let start = |id: &str, replica: usize| {
        f.call(
            replica,
            &token,
            "POST",
            &format!("/v1/sandboxes/{id}/start"),
            Some(json!({})),
        )
    };
    let stop = |id: &str| {
        f.call(
            0,
            &token,
            "POST",
            &format!("/v1/sandboxes/{id}/stop"),
            Some(json!({"grace_ms": 100})),
        )
    };
    assert_eq!(start(&a, 0).status, 200);
    let r = start(&b, 1);
    refused(&r, "running", 1);
    let status = |id: &str| {
        f.call(0, &token, "GET", &format!("/v1/sandboxes/{id}"), None)
            .json()["status"]
            .clone()
    };
    assert_eq!(status(&b), "created", "a refused start changes nothing");
    // A start of what runs already asks nothing more.
    assert_eq!(
        f.call(
            1,
            &token,
            "POST",
            &format!("/v1/sandboxes/{a}/connect-or-start"),
            Some(json!({}))
        )
        .status,
        200
    );
    assert_eq!(stop(&a).status, 200);
    assert_eq!(start(&b, 1).status, 200, "the running one stopped");
    assert_eq!(stop(&b).status, 200);
    // Three starts so far this minute (a, b, and no more).
    assert_eq!(start(&a, 0).status, 200);
    assert_eq!(stop(&a).status, 200);
    refused(&start(&a, 1), "starts_per_minute", 3);

    // CPUs and memory of running sandboxes, summed.
    let token = f.tenant("sized", &["--max-cpus", "1.5", "--max-memory", "1G"]);
    let sized = |name: &str, cpus: f64, mem: u64| {
        // Best-effort limits: an unprivileged user's host may have no
        // cgroup to enforce them; the quota counts them either way.
        let config = json!({
            "image": "busybox", "command": ["sleep", "3600"], "cpus": cpus,
            "memory_mb": mem, "best_effort_limits": true,
        });
        id_of(&f.call(
            0,
            &token,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "config": config, "detached": true})),
        ))
    };
    let one = sized("one", 1.0, 256);
    let two = sized("two", 1.0, 256);
    let three = sized("three", 0.5, 900);
    let start = |id: &str| {
        f.call(
            0,
            &token,
            "POST",
            &format!("/v1/sandboxes/{id}/start"),
            Some(json!({})),
        )
    };
    assert_eq!(start(&one).status, 200);
    refused(&start(&two), "millicpus", 1500);
    refused(&start(&three), "memory_mb", 1024);
    // More CPUs or memory for a running sandbox count too; a stopped one
    // may be given anything (it counts when it starts).
    let modify = |id: &str, body: Value| {
        f.call(
            0,
            &token,
            "PATCH",
            &format!("/v1/sandboxes/{id}"),
            Some(body),
        )
    };
    refused(&modify(&one, json!({"cpus": 2.0})), "millicpus", 1500);
    refused(&modify(&one, json!({"memory_mb": 2048})), "memory_mb", 1024);
    let r = modify(&one, json!({"cpus": 1.5}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = modify(&two, json!({"cpus": 4.0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let path = format!("/v1/sandboxes/{one}/destroy");
    assert_eq!(
        f.call(0, &token, "POST", &path, Some(json!({}))).status,
        204
    );
}

#[test]
fn a_pools_warm_sandboxes_count_at_its_size() {
    let f = fixture("quotas_pools");
    let token = f.tenant("pooled", &["--max-sandboxes", "3", "--max-running", "2"]);
    let config = json!({"image": "busybox", "command": ["sleep", "3600"]});
    let pool = |size: u32| {
        f.call(
            0,
            &token,
            "POST",
            "/v1/pools",
            Some(json!({"name": "p", "size": size, "config": config})),
        )
    };
    refused(&pool(3), "running", 2);
    let pools = f.call(0, &token, "GET", "/v1/pools", None);
    assert_eq!(
        pools.json()["pools"],
        json!([]),
        "a refused pool is not defined"
    );
    assert_eq!(pool(2).status, 201);
    let created = id_of(&f.create(&token, "x"));
    refused(&f.create(&token, "y"), "sandboxes", 3);
    let r = f.call(1, &token, "PATCH", "/v1/pools/p", Some(json!({"size": 3})));
    refused(&r, "sandboxes", 3);
    assert_eq!(
        f.call(1, &token, "PATCH", "/v1/pools/p", Some(json!({"size": 1})))
            .status,
        200
    );
    assert_eq!(
        f.call(
            0,
            &token,
            "DELETE",
            &format!("/v1/sandboxes/{created}"),
            None
        )
        .status,
        204
    );
    assert_eq!(f.call(0, &token, "DELETE", "/v1/pools/p", None).status, 204);
}

#[test]
fn a_token_over_its_rate_is_refused_alone() {
    // 60 a minute: 10 at once, then one a second (per token and replica).
    let f = fixture_with("quotas_rate", &[("REQUESTS_PER_MINUTE", "60")]);
    let busy = f.tenant("busy", &[]);
    let calm = f.env.create_token_in("calm", "busy", "read_only");
    let answers: Vec<Resp> = (0..12)
        .map(|_| f.call(0, &busy, "GET", "/v1/sandboxes", None))
        .collect();
    let limited: Vec<&Resp> = answers.iter().filter(|r| r.status != 200).collect();
    assert!(
        !limited.is_empty(),
        "12 requests at once passed a burst of 10"
    );
    for r in &limited {
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (429, "rate_limited"),
            "{}",
            r.text()
        );
        let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&after), "Retry-After {after}");
        assert!(r.json()["error"]["retry_after_ms"].as_u64().unwrap() > 0);
    }
    // Another token has its own rate; the limited one's comes back.
    assert_eq!(f.call(0, &calm, "GET", "/v1/sandboxes", None).status, 200);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(f.call(0, &busy, "GET", "/v1/sandboxes", None).status, 200);
}

/// The race window held open: a create that passed its check in replica
/// r1 is held inside the tenant's quota turn (fault point
/// `quota.in_turn`); a create through r2 waits for the turn rather than
/// checking beside it, and once r1's create is done it is refused. Without
/// the turn both would pass a limit of 1.
#[test]
fn a_create_held_in_its_quota_turn_makes_the_other_replicas_wait() {
    use burrow_test_support::fault::FaultWindow;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let home = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(TestHome::new());
    home.name_image("busybox");
    let url = cluster().create_database("quotas_turn").unwrap();
    let env = ServeEnv::new(home.path(), &url);
    let window = FaultWindow::new(home.path(), "quota.in_turn");
    let mut armed = env.clone();
    for (k, v) in window.env() {
        armed.vars.push((k.to_owned(), v.into_string().unwrap()));
    }
    let (r1, r2) = (armed.start("r1"), env.start("r2"));
    env.admin(&["tenant", "create", "one", "--max-sandboxes", "1"]);
    let token = env.create_token_in("one-admin", "one", "tenant_admin");
    let create = |server: &Server, name: &str| {
        let config = json!({"image": "busybox"});
        let body = json!({"name": name, "config": config, "detached": true}).to_string();
        http(
            "POST",
            &format!("{}/v1/sandboxes", server.url),
            Some(&token),
            Some(&body),
        )
    };
    std::thread::scope(|s| {
        let first = s.spawn(|| create(&r1, "a"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !window.is_open() {
            assert!(Instant::now() < deadline, "r1 never reached its quota turn");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (tx, rx) = mpsc::channel();
        let create = &create;
        let (r2, tx) = (&r2, tx.clone());
        let second = s.spawn(move || {
            let r = create(r2, "b");
            let _ = tx.send(());
            r
        });
        // Held open: r2's create waits for the turn.
        assert!(
            rx.recv_timeout(Duration::from_secs(2)).is_err(),
            "r2 checked the quota while r1 held the turn"
        );
        window.release();
        id_of(&first.join().unwrap());
        refused(&second.join().unwrap(), "sandboxes", 1);
    });
    let f = |server: &Server| {
        let r = http(
            "GET",
            &format!("{}/v1/sandboxes", server.url),
            Some(&token),
            None,
        );
        r.json()["sandboxes"].as_array().unwrap().len()
    };
    assert_eq!((f(&r1), f(&r2)), (1, 1));
}

/// A gateway call that would start its target is within the target's
/// tenant's quota: refused (429 `quota_exceeded`), nothing started.
#[test]
fn a_gateway_start_is_within_the_tenants_quota() {
    let f = fixture("quotas_gateway");
    let token = f.tenant("gw", &["--max-running", "1"]);
    let a = id_of(&f.create(&token, "a"));
    let b = id_of(&f.create(&token, "b"));
    let r = f.call(
        0,
        &token,
        "POST",
        &format!("/v1/sandboxes/{a}/start"),
        Some(json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = f.call(
        0,
        &token,
        "PUT",
        &format!("/v1/gateway/targets/{b}"),
        Some(json!({"port": 8080})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for replica in [0, 1] {
        let r = f.call(replica, &token, "GET", &format!("/gw/{b}/"), None);
        refused(&r, "running", 1);
    }
    let r = f.call(1, &token, "GET", &format!("/v1/sandboxes/{b}"), None);
    assert_eq!(
        r.json()["status"],
        "created",
        "a refused start starts nothing"
    );
}
