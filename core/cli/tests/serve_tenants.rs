#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tenants of `burrow serve`, on a real PostgreSQL with real sandboxes:
//! roles refuse what they may not do (`forbidden`), a token's role is
//! named when it is made, and the audit log says who did what to which
//! object. (That tenants never see each other's objects is
//! serve_isolation.rs.)

#[path = "tenants/fixture.rs"]
mod fixture;

use burrow_cli_testkit as common;

use common::serve::{http, ok, Resp, ServeEnv};
use common::TestHome;
use fixture::{call, cluster, fixture, Fixture};
use serde_json::{json, Value};

#[test]
fn roles_refuse_what_they_may_not_do() {
    let f = fixture("tenants_roles");
    // A token's role is named when it is made: none by default.
    let out = f
        .env
        .command()
        .args(["token", "create", "unnamed-role"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a token without --role was made"
    );
    let tokens = f.env.admin(&["token", "list"]);
    assert!(
        !String::from_utf8_lossy(&tokens.stdout).contains("unnamed-role"),
        "{}",
        String::from_utf8_lossy(&tokens.stdout)
    );
    let reader = f.env.create_token_in("alpha-reader", "alpha", "read_only");
    let operator = f.env.create_token_in("alpha-op", "alpha", "operator");
    let config = json!({"image": "busybox"});
    let forbidden = |r: Resp, what: &str| {
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (403, "forbidden"),
            "{what}: {}",
            r.text()
        );
    };
    forbidden(
        call(
            &f,
            &reader,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "r", "config": config, "detached": true})),
        ),
        "read_only create",
    );
    ok(
        call(&f, &reader, "GET", "/v1/sandboxes", None),
        "read_only list",
    );
    let made = ok(
        call(
            &f,
            &operator,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "o", "config": config, "detached": true})),
        ),
        "operator create",
    );
    let id = made["id"].as_str().unwrap();
    // A change's answer names the sandbox as the tenant does, never by the
    // engine's scoped name.
    let plan = ok(
        call(
            &f,
            &operator,
            "PATCH",
            &format!("/v1/sandboxes/{id}"),
            Some(json!({"env_set": {"A": "1"}})),
        ),
        "operator modify",
    );
    assert_eq!(plan["info"]["name"], "o", "{plan}");
    assert!(!plan.to_string().contains("alpha/"), "{plan}");
    // A sandbox's log holds its processes' output (execs' too).
    forbidden(
        call(
            &f,
            &reader,
            "GET",
            &format!("/v1/sandboxes/{id}/logs"),
            None,
        ),
        "read_only logs",
    );
    forbidden(
        call(
            &f,
            &reader,
            "GET",
            &format!("/v1/sandboxes/{id}/runtime"),
            None,
        ),
        "read_only runtime",
    );
    forbidden(
        call(&f, &reader, "DELETE", &format!("/v1/sandboxes/{id}"), None),
        "read_only remove",
    );
    forbidden(
        call(
            &f,
            &operator,
            "POST",
            "/v1/pools",
            Some(json!({"name": "p", "size": 0, "config": config})),
        ),
        "operator pool",
    );
    forbidden(
        call(
            &f,
            &operator,
            "POST",
            "/v1/gateway/targets",
            Some(json!({"url": "http://127.0.0.1:9"})),
        ),
        "operator url target",
    );
    forbidden(
        call(&f, &f.alpha, "GET", "/metrics", None),
        "tenant admin metrics",
    );
    // /metrics names every tenant's pools: not for another tenant's
    // admin, only the default tenant's.
    let alpha_admin = f.env.create_token_in("alpha-root", "alpha", "admin");
    forbidden(
        call(&f, &alpha_admin, "GET", "/metrics", None),
        "a tenant's admin metrics",
    );
    let admin = f.env.create_token("server-admin");
    assert_eq!(
        call(&f, &admin, "GET", "/metrics", None).status,
        200,
        "admin metrics"
    );
    // Nothing was made by what was refused.
    let pools = ok(call(&f, &f.alpha, "GET", "/v1/pools", None), "pools");
    assert_eq!(pools["pools"], json!([]));
    let listed = ok(call(&f, &f.alpha, "GET", "/v1/sandboxes", None), "list");
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 1);
    // A tenant may not reach the server's host: host directories as images
    // or mounts, published ports.
    for (field, config) in [
        ("image", json!({"image": common::busybox_rootfs()})),
        (
            "mounts[0].source.host",
            json!({"image": "busybox", "mounts": [{"source": {"host": "/tmp"}, "target": "/h"}]}),
        ),
        ("ports", json!({"image": "busybox", "ports": ["18080:80"]})),
    ] {
        let r = call(
            &f,
            &f.alpha,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "h", "config": config, "detached": true})),
        );
        assert_eq!(r.error_code(), "invalid_config", "{field}: {}", r.text());
        assert_eq!(r.json()["error"]["subject"], field, "{}", r.text());
    }
    ok(
        call(
            &f,
            &operator,
            "DELETE",
            &format!("/v1/sandboxes/{id}"),
            None,
        ),
        "operator remove",
    );
}

fn audit(f: &Fixture, token: &str, query: &str) -> Value {
    ok(
        call(f, token, "GET", &format!("/v1/audit{query}"), None),
        "audit",
    )
}

fn operations(page: &Value) -> Vec<(String, u64, Option<String>)> {
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["operation"].as_str().unwrap().to_owned(),
                e["status"].as_u64().unwrap(),
                e["code"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn the_audit_log_says_who_did_what_to_which_object() {
    let f = fixture("tenants_audit");
    let reader = f.env.create_token_in("alpha-reader", "alpha", "read_only");
    let operator = f.env.create_token_in("alpha-op", "alpha", "operator");
    let config = json!({"image": "busybox"});
    let create = |token: &str, name: &str| {
        call(
            &f,
            token,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "config": config, "detached": true})),
        )
    };
    let made = ok(create(&f.alpha, "w"), "create");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(create(&reader, "r").status, 403);
    assert_eq!(create("bw_nonsense", "x").status, 401);
    ok(create(&f.beta, "b"), "beta create");
    ok(
        call(&f, &f.alpha, "GET", "/v1/sandboxes", None),
        "a read, not logged",
    );
    assert_eq!(
        call(&f, &f.alpha, "DELETE", &format!("/v1/sandboxes/{id}"), None).status,
        204
    );

    // Alpha's admin reads alpha's entries only, oldest first.
    let page = audit(&f, &f.alpha, "");
    assert_eq!(
        operations(&page),
        [
            ("POST /v1/sandboxes".into(), 201, None),
            ("POST /v1/sandboxes".into(), 403, Some("forbidden".into())),
            ("DELETE /v1/sandboxes/{id}".into(), 204, None),
        ]
    );
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries[0]["token"], "alpha-admin");
    assert_eq!(entries[1]["token"], "alpha-reader");
    assert_eq!(entries[2]["object"], id.as_str());
    assert!(entries.iter().all(|e| e["tenant"] == "alpha"));
    assert_eq!(page["next"], Value::Null);
    // Pages of one.
    let first = audit(&f, &f.alpha, "?limit=1");
    let next = first["next"].as_i64().unwrap();
    let second = audit(&f, &f.alpha, &format!("?limit=1&after={next}"));
    assert_eq!(operations(&second)[0].1, 403);
    // An operator may not read it (and that refusal is logged); a tenant's
    // admin may not read another tenant's.
    let r = call(&f, &operator, "GET", "/v1/audit", None);
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    let r = call(&f, &f.alpha, "GET", "/v1/audit?tenant=beta", None);
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    let r = call(&f, &f.alpha, "GET", "/v1/audit?limit=0", None);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_argument")
    );
    // The server's admin reads any tenant's, or all (the request without a
    // valid token too).
    let admin = f.env.create_token("server-admin");
    let beta = audit(&f, &admin, "?tenant=beta");
    assert_eq!(
        operations(&beta),
        [("POST /v1/sandboxes".into(), 201, None)]
    );
    let all = audit(&f, &admin, "");
    let unknown: Vec<&Value> = all["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tenant"].is_null())
        .collect();
    assert_eq!(unknown.len(), 1, "{all}");
    assert_eq!(
        (unknown[0]["status"].as_u64(), unknown[0]["code"].as_str()),
        (Some(401), Some("unauthorized"))
    );
    // The CLI reads the same log from the database.
    let out = f.env.admin(&["audit", "--tenant", "alpha", "--json"]);
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Alpha's three, then its two refused reads of the log.
    let ops = operations(&cli);
    assert_eq!(ops.len(), 5, "{cli}");
    assert!(
        ops[3..]
            .iter()
            .all(|(op, status, _)| op == "GET /v1/audit" && *status == 403),
        "{cli}"
    );
}

#[test]
fn audit_entries_older_than_the_retention_are_dropped() {
    let home = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(TestHome::new());
    let url = cluster()
        .create_database("tenants_audit_retention")
        .unwrap();
    let env = ServeEnv::new(home.path(), &url)
        .set("AUDIT_RETENTION", "1s")
        .set("SWEEP_INTERVAL", "1s");
    let token = env.create_token("admin");
    let server = env.start("r1");
    let r = http(
        "DELETE",
        &format!("{}/v1/pools/nope", server.url),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 404);
    let count = || {
        let r = http(
            "GET",
            &format!("{}/v1/audit", server.url),
            Some(&token),
            None,
        );
        r.json()["entries"].as_array().unwrap().len()
    };
    assert_eq!(count(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the entry outlived its retention"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
