//! Issue 56, item 9: the audit log missed what matters most. Execs, file
//! writes and reads, copies and tunnels over the runtime stream, console
//! downloads and gateway calls (on the API's `/gw/` and on the gateway's
//! own origin) left no entry, and entries named no client address. Now
//! each such action is one entry with the tenant, the token, the client's
//! address, the sandbox, the operation and a short object (the program,
//! the path, the port) and its outcome, and no entry holds a command's
//! arguments, its output or a file's bytes.
//!
//! A real `burrow serve` on a real PostgreSQL, a real sandbox, the remote
//! backend's own use of the runtime stream, and raw HTTP for the console
//! and the gateway.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use burrow::{Backend, RemoteBackend, Sandbox, SandboxHandle, SandboxId};
use burrow_cli_testkit::serve::pg::PgCluster;
use burrow_cli_testkit::serve::{ok, request_to_host, TenantServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

/// What no entry may hold: the exec's arguments past `argv[0]`, its
/// output, the bytes written, read and copied, a gateway call's query.
const SECRETS: [&str; 5] = [
    "ARG-SECRET",
    "OUT-42-TAIL",
    "FILE-SECRET",
    "COPY-SECRET",
    "QUERY-SECRET",
];

/// The exec: starts a web server on 8080 (for the tunnel) and prints
/// something that is not in its arguments.
const EXEC: &str = "mkdir -p /www && echo ok > /www/index.html && httpd -p 8080 -h /www; \
                    printf 'OUT-%s-TAIL' $((6*7)) # ARG-SECRET";

struct Fixture {
    t: TenantServer,
    /// The operator's token (`audit-ops`, tenant `team`).
    ops: String,
    /// The server's admin's, which reads the whole log (a refused call
    /// has no tenant).
    admin: String,
    id: String,
}

/// A server (with settings `vars`), tenant `team` and a sandbox of it.
fn fixture(db: &str, vars: &[(&str, &str)]) -> Fixture {
    let url = cluster().create_database(db).unwrap();
    let tokens = [
        ("audit-ops", "team", "operator"),
        ("audit-root", "default", "admin"),
    ];
    let mut t = TenantServer::start_with(&url, &["team"], &tokens, vars);
    let admin = t.tokens.pop().unwrap();
    let ops = t.tokens.pop().unwrap();
    let created = ok(
        t.call(
            &ops,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "audited", "config": {"image": "busybox"}, "detached": true})),
        ),
        "create",
    );
    let id = created["id"].as_str().unwrap().to_owned();
    Fixture { t, ops, admin, id }
}

/// The log's entries once `done` holds of them (the queued ones are
/// written within moments), else what there is after 30 s.
fn entries_when(f: &Fixture, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = ok(
            f.t.call(&f.admin, "GET", "/v1/audit?limit=1000", None),
            "audit",
        );
        let entries = page["entries"].as_array().unwrap().clone();
        if done(&entries) || Instant::now() > deadline {
            return entries;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The entries of `operation` on `object`.
fn of<'a>(entries: &'a [Value], operation: &str, object: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["operation"] == operation && e["object"] == object)
        .collect()
}

/// Exactly one entry of `operation` on `object`, by the operator from
/// 127.0.0.1 on the sandbox, that ended `ok` with `status`.
fn one_ok(f: &Fixture, entries: &[Value], operation: &str, object: &str, status: Value) {
    let found = of(entries, operation, object);
    assert_eq!(found.len(), 1, "{operation} {object}: {entries:#?}");
    let e = found[0];
    assert_eq!(
        (
            &e["tenant"],
            &e["token"],
            &e["client"],
            &e["sandbox"],
            &e["status"],
            &e["outcome"],
            &e["code"]
        ),
        (
            &json!("team"),
            &json!("audit-ops"),
            &json!("127.0.0.1"),
            &json!(f.id),
            &status,
            &json!("ok"),
            &Value::Null
        ),
        "{operation} {object}: {e:#}"
    );
}

/// Nothing the actions carried is in the log.
fn no_secrets(entries: &[Value]) {
    let all = serde_json::to_string(entries).unwrap();
    for s in SECRETS {
        assert!(!all.contains(s), "{s} is in the audit log: {all}");
    }
}

/// An exec, a file written and read, a copy in and out, a tunnel through
/// the runtime stream, and a console download: one entry each.
#[test]
fn runtime_stream_actions_and_console_downloads_are_audited() {
    let scratch = tempfile::tempdir().unwrap();
    let sock = scratch.path().join("serve.sock");
    let listen = format!("127.0.0.1:0,unix:{}", sock.display());
    let f = fixture("attack_audit_runtime", &[("LISTEN", &listen)]);
    let src = scratch.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("payload"), b"COPY-SECRET").unwrap();
    let out_dir = scratch.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let remote: Arc<dyn Backend> =
            Arc::new(RemoteBackend::connect(&f.t.server.url, Some(f.ops.clone())).unwrap());
        let id: SandboxId = f.id.parse().unwrap();
        let sb: Sandbox = SandboxHandle::get_by_id_in(remote, &id)
            .await
            .unwrap()
            .connect_or_start()
            .await
            .unwrap();
        let out = sb.exec(["sh", "-c", EXEC]).await.unwrap();
        assert_eq!(out.stdout_str(), "OUT-42-TAIL");
        sb.fs()
            .write("/tmp/audit-file", b"FILE-SECRET")
            .await
            .unwrap();
        assert_eq!(
            sb.fs().read("/tmp/audit-file").await.unwrap(),
            b"FILE-SECRET"
        );
        sb.fs().copy_in(&src, "/tmp/copied").await.unwrap();
        sb.fs().copy_out("/tmp/copied", &out_dir).await.unwrap();
        let mut tunnel = sb.tunnel(8080).await.unwrap();
        tunnel
            .write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tunnel.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(answer.split_whitespace().nth(1), Some("200"), "{answer}");
    });
    assert_eq!(
        std::fs::read(out_dir.join("copied/src/payload")).unwrap(),
        b"COPY-SECRET"
    );
    let r = f.t.call(
        &f.ops,
        "GET",
        &format!(
            "/ui/api/sandboxes/{}/files/content?path=/tmp/audit-file",
            f.id
        ),
        None,
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"FILE-SECRET"[..]));
    // A change asked over the unix socket: its client is `unix`.
    let mut u = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    u.write_all(b"DELETE /v1/pools/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    u.read_to_string(&mut answer).unwrap();
    assert_eq!(answer.split_whitespace().nth(1), Some("404"), "{answer}");

    let want = [
        ("exec", "sh"),
        ("fs.write", "/tmp/audit-file"),
        ("fs.read", "/tmp/audit-file"),
        ("copy_in", "/tmp/copied"),
        ("copy_out", "/tmp/copied"),
        ("tunnel", "8080"),
    ];
    let entries = entries_when(&f, |es| {
        want.iter().all(|(op, object)| {
            of(es, op, object)
                .first()
                .is_some_and(|e| e["outcome"] != "pending")
        }) && !of(es, "console.download", "/tmp/audit-file").is_empty()
    });
    let local = of(&entries, "DELETE /v1/pools/{name}", "nope");
    assert_eq!(local.len(), 1, "{entries:#?}");
    assert_eq!(
        (&local[0]["client"], &local[0]["tenant"], &local[0]["token"]),
        (&json!("unix"), &json!("default"), &Value::Null),
        "{:#}",
        local[0]
    );
    for (op, object) in want {
        // The runtime stream's requests have no HTTP answer of their own.
        one_ok(&f, &entries, op, object, Value::Null);
    }
    one_ok(
        &f,
        &entries,
        "console.download",
        "/tmp/audit-file",
        json!(200),
    );
    no_secrets(&entries);
}

/// Gateway calls on the API's `/gw/` and on the gateway's own origin: one
/// entry per call (answered, starting or refused), with the client's
/// address, never the query.
#[test]
fn gateway_calls_on_both_origins_are_audited() {
    let f = fixture("attack_audit_gateway", &[("GATEWAY_LISTEN", "127.0.0.1:0")]);
    let command = "mkdir -p /www && echo ok > /www/index.html && httpd -p 8080 -h /www";
    ok(
        f.t.call(
            &f.ops,
            "PUT",
            &format!("/v1/gateway/targets/{}", f.id),
            Some(json!({"port": 8080, "command": ["sh", "-c", command]})),
        ),
        "target",
    );
    // The API's origin, retried while the target starts: every try is a
    // call of its own.
    let path = format!("/gw/{}/?token=QUERY-SECRET", f.id);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut tries = 0;
    let r = loop {
        tries += 1;
        let r = f.t.call(&f.ops, "GET", &path, None);
        if r.status != 503 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!((r.status, r.text().trim()), (200, "ok"));

    // The gateway's own origin: a call with the token, and one without
    // (refused, and logged so).
    let gw = f.t.server.gateway.clone().expect("a gateway listener");
    let addr = gw.strip_prefix("http://").unwrap().to_owned();
    let port = addr.rsplit_once(':').unwrap().1.to_owned();
    let host = format!("{}.localhost:{port}", f.id);
    let bearer = format!("Bearer {}", f.ops);
    let r = request_to_host(
        &addr,
        "GET",
        &host,
        "/index.html",
        &[("Authorization", &bearer)],
    );
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    let r = request_to_host(&addr, "GET", &host, "/index.html?QUERY-SECRET", &[]);
    assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));

    let calls = |es: &[Value]| -> usize {
        es.iter()
            .filter(|e| e["operation"] == "gateway.call")
            .count()
    };
    let entries = entries_when(&f, |es| calls(es) >= tries + 2);
    assert_eq!(calls(&entries), tries + 2, "{entries:#?}");
    // On the API's origin: the tries that found the target starting, then
    // the answered one, last of its origin's.
    let api = of(&entries, "gateway.call", "GET /");
    assert_eq!(api.len(), tries, "{entries:#?}");
    for e in &api[..tries - 1] {
        assert_eq!(
            (&e["status"], &e["outcome"], &e["client"]),
            (&json!(503), &json!("error"), &json!("127.0.0.1")),
            "{e:#}"
        );
    }
    let answered: Vec<Value> = api.last().map(|e| (*e).clone()).into_iter().collect();
    one_ok(&f, &answered, "gateway.call", "GET /", json!(200));
    // On its own origin: the call, and the refusal (no token: nobody).
    let own = of(&entries, "gateway.call", "GET /index.html");
    assert_eq!(own.len(), 2, "{entries:#?}");
    let with_token: Vec<Value> = own
        .iter()
        .filter(|e| e["status"] == 200)
        .map(|e| (*e).clone())
        .collect();
    one_ok(
        &f,
        &with_token,
        "gateway.call",
        "GET /index.html",
        json!(200),
    );
    let refused = own.iter().find(|e| e["status"] == 401).unwrap();
    assert_eq!(
        (
            &refused["outcome"],
            &refused["code"],
            &refused["client"],
            &refused["sandbox"],
            &refused["token"]
        ),
        (
            &json!("refused"),
            &json!("unauthorized"),
            &json!("127.0.0.1"),
            &json!(f.id),
            &Value::Null
        ),
        "{refused:#}"
    );
    no_secrets(&entries);
}
