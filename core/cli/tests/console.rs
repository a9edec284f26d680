#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The web console against a real `burrow serve` on a real PostgreSQL with
//! real sandboxes: its login and cookie rules over raw HTTP, and the whole
//! console in headless Chromium (Debian's, driven by playwright-core:
//! tests/console/browser.mjs) — log in, list, stop and start a sandbox and
//! see the status change, follow logs, type `echo hi` in the terminal and
//! read it back, upload and download a file, a forbidden action with a
//! read-only token, axe-core and keyboard reach on every page. Then the
//! server's side of what the browser did. Screenshots go to
//! target/console-screenshots/.

use burrow_cli_testkit as common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::serve::pg::PgCluster;
use common::serve::{ok, read_response, send_with, web_command, Resp, TenantServer};
use serde_json::{json, Value};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Fixture {
    t: TenantServer,
    ops: String,
    read_only: String,
}

impl std::ops::Deref for Fixture {
    type Target = TenantServer;
    fn deref(&self) -> &TenantServer {
        &self.t
    }
}

fn fixture(db: &str) -> Fixture {
    let url = cluster().create_database(db).unwrap();
    let tokens = [
        ("console-ops", "team", "operator"),
        ("console-ro", "team", "read_only"),
    ];
    let mut t = TenantServer::start(&url, &["team"], &tokens);
    let read_only = t.tokens.pop().unwrap();
    let ops = t.tokens.pop().unwrap();
    Fixture { t, ops, read_only }
}

fn call(f: &Fixture, token: &str, method: &str, path: &str, body: Option<Value>) -> Resp {
    f.t.call(token, method, path, body)
}

/// A request with only `headers` (a cookie, the CSRF header, an origin).
fn raw(
    f: &Fixture,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let url = format!("{}{path}", f.server.url);
    read_response(send_with(method, &url, None, headers, body))
}

/// Logs in with `token`: the cookie's `name=value` and the CSRF token.
fn login(f: &Fixture, token: &str) -> (String, String, Resp) {
    let body = json!({ "token": token }).to_string();
    let r = raw(f, "POST", "/ui/api/login", &[], Some(&body));
    assert_eq!(r.status, 200, "{}", r.text());
    let set = r.header("set-cookie").unwrap().to_owned();
    let cookie = set.split(';').next().unwrap().to_owned();
    let csrf = r.json()["csrf"].as_str().unwrap().to_owned();
    (cookie, csrf, r)
}

#[test]
fn a_console_login_is_a_cookie_bound_to_its_token() {
    let f = fixture("console_login");
    let (cookie, csrf, r) = login(&f, &f.ops);
    let set = r.header("set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.split("; ").any(|a| a == attr), "{attr} in {set}");
    }
    let who = r.json();
    assert_eq!(
        (
            who["token"].as_str(),
            who["tenant"].as_str(),
            who["role"].as_str()
        ),
        (Some("console-ops"), Some("team"), Some("operator"))
    );

    // The cookie stands for the token: reads need nothing more.
    let c = [("Cookie", cookie.as_str())];
    let r = raw(&f, "GET", "/ui/api/session", &c, None);
    assert_eq!(
        (r.status, r.json()["csrf"].as_str()),
        (200, Some(csrf.as_str()))
    );
    assert_eq!(raw(&f, "GET", "/v1/sandboxes", &c, None).status, 200);

    // A change needs the CSRF header, right.
    let config = json!({"image": "busybox", "command": ["sleep", "3600"]});
    let create = json!({"name": "c1", "config": config, "detached": true}).to_string();
    let r = raw(&f, "POST", "/v1/sandboxes", &c, Some(&create));
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    let wrong = [("Cookie", cookie.as_str()), ("X-Burrow-Csrf", "0000")];
    let r = raw(&f, "POST", "/v1/sandboxes", &wrong, Some(&create));
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    let list = ok(call(&f, &f.ops, "GET", "/v1/sandboxes", None), "list");
    assert_eq!(
        list["sandboxes"],
        json!([]),
        "a refused change changed nothing"
    );
    let good = [
        ("Cookie", cookie.as_str()),
        ("X-Burrow-Csrf", csrf.as_str()),
    ];
    let r = raw(&f, "POST", "/v1/sandboxes", &good, Some(&create));
    assert_eq!(r.status, 201, "{}", r.text());

    // Another site's page gets nothing, whatever it sends.
    for cross in [
        ("Origin", "http://evil.test"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let h = [
            ("Cookie", cookie.as_str()),
            ("X-Burrow-Csrf", csrf.as_str()),
            cross,
        ];
        let r = raw(&f, "GET", "/v1/sandboxes", &h, None);
        assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    }
    let login_body = json!({ "token": f.ops }).to_string();
    let r = raw(
        &f,
        "POST",
        "/ui/api/login",
        &[("Origin", "http://evil.test")],
        Some(&login_body),
    );
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));

    // Bad logins: typed errors, no cookie.
    let r = raw(
        &f,
        "POST",
        "/ui/api/login",
        &[],
        Some(r#"{"token": "bw_nobody"}"#),
    );
    assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
    assert!(r.header("set-cookie").is_none());
    let r = raw(&f, "POST", "/ui/api/login", &[], Some(r#"{"tok": "x"}"#));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_argument")
    );
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let url = format!("{}/ui/api/login", f.server.url);
    let mut s =
        std::net::TcpStream::connect(url.trim_start_matches("http://").split('/').next().unwrap())
            .unwrap();
    {
        use std::io::Write;
        let body = format!("token={}", f.ops);
        let head = format!(
            "POST /ui/api/login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}: {}\r\nContent-Length: {}\r\n\r\n{body}",
            form[0].0,
            form[0].1,
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
    }
    let r = read_response(s);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (415, "invalid_argument")
    );

    // The pages are open; the console's API is not.
    assert_eq!(raw(&f, "GET", "/ui/", &[], None).status, 200);
    let r = raw(&f, "GET", "/ui/api/session", &[], None);
    assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
    let r = raw(&f, "GET", "/ui/api/nothing", &c, None);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (404, "invalid_argument")
    );

    // A read-only login reads, and may not open files or terminals.
    let (ro_cookie, _, _) = login(&f, &f.read_only);
    let ro = [("Cookie", ro_cookie.as_str())];
    assert_eq!(raw(&f, "GET", "/v1/sandboxes", &ro, None).status, 200);
    let id = list_id(&f, "c1");
    let r = raw(
        &f,
        "GET",
        &format!("/ui/api/sandboxes/{id}/files?path=/"),
        &ro,
        None,
    );
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));

    // Logging out ends the session; revoking the token ends the others.
    let r = raw(&f, "POST", "/ui/api/logout", &good, None);
    assert_eq!(r.status, 204);
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    let r = raw(&f, "GET", "/v1/sandboxes", &c, None);
    assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
    f.env.admin(&["token", "revoke", "console-ro"]);
    let r = raw(&f, "GET", "/v1/sandboxes", &ro, None);
    assert_eq!((r.status, r.error_code().as_str()), (401, "unauthorized"));
}

fn list_id(f: &Fixture, name: &str) -> String {
    let got = ok(
        call(
            f,
            &f.ops,
            "GET",
            &format!("/v1/sandboxes/by-name/{name}"),
            None,
        ),
        "get",
    );
    got["id"].as_str().unwrap().to_owned()
}

/// Where the screenshots go: target/console-screenshots, or a directory
/// of the user's when that is not writable (an unprivileged run).
fn screenshots() -> PathBuf {
    let dir = workspace().join("target/console-screenshots");
    if std::fs::create_dir_all(&dir).is_ok() && tempfile::tempfile_in(&dir).is_ok() {
        return dir;
    }
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("burrow-console-screenshots-{uid}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_console_in_a_real_browser() {
    let scripts = workspace().join("tests/console");
    assert!(
        scripts.join("node_modules/playwright-core").is_dir(),
        "tests/console has no node_modules: run `cargo xtask console` (scripts/build-console.sh)"
    );
    let f = fixture("console_browser");
    // A sandbox that logs a line every half second, with a gateway target
    // (its httpd) called once from cold, so the targets page has a cold
    // start to plot.
    let script = format!(
        "({}) & i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.5; done",
        web_command(0)[2]
    );
    let config = json!({"image": "busybox", "command": ["sh", "-c", script]});
    let created = ok(
        call(
            &f,
            &f.ops,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "web", "config": config, "detached": true})),
        ),
        "create",
    );
    let id = created["id"].as_str().unwrap().to_owned();
    ok(
        call(
            &f,
            &f.ops,
            "PUT",
            &format!("/v1/gateway/targets/{id}"),
            Some(json!({"port": 8080})),
        ),
        "target",
    );
    let r = call(&f, &f.ops, "GET", &format!("/gw/{id}/index.html"), None);
    assert_eq!(
        (r.status, r.text().trim()),
        (200, "ok"),
        "the cold gateway call"
    );
    let target = ok(
        call(
            &f,
            &f.ops,
            "GET",
            &format!("/v1/gateway/targets/{id}"),
            None,
        ),
        "target",
    );
    assert_eq!(
        target["cold_starts"].as_array().unwrap().len(),
        1,
        "{target}"
    );

    let shots = screenshots();
    let out = Command::new("node")
        .arg(scripts.join("browser.mjs"))
        .env("BURROW_CONSOLE_URL", &f.server.url)
        .env("BURROW_CONSOLE_TOKEN", &f.ops)
        .env("BURROW_CONSOLE_READONLY_TOKEN", &f.read_only)
        .env("BURROW_CONSOLE_SANDBOX", &id)
        .env("BURROW_CONSOLE_SANDBOX_NAME", "web")
        .env("BURROW_CONSOLE_LOG_LINE", "tick-")
        .env("BURROW_CONSOLE_SHOTS", &shots)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no report from browser.mjs: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        out.status.success() && report.get("failed").is_none(),
        "the browser run failed: {}\n{}\nserver log:\n{}",
        serde_json::to_string_pretty(&report["failed"]).unwrap(),
        String::from_utf8_lossy(&out.stderr),
        f.server.log()
    );
    println!("browser steps: {}", report["steps"]);

    // Accessibility: no axe-core violation and every control reached by
    // Tab, on every page.
    for page in [
        "login",
        "sandboxes",
        "sandbox",
        "targets",
        "pools",
        "snapshots",
    ] {
        assert_eq!(
            report["axe"][page],
            json!([]),
            "axe-core violations on {page}"
        );
        assert_eq!(
            report["unreachable"][page],
            json!([]),
            "controls Tab does not reach on {page}"
        );
    }
    assert_eq!(report["terminal"], "hi");
    for shot in report["shots"].as_array().unwrap() {
        assert!(PathBuf::from(shot.as_str().unwrap()).is_file(), "{shot}");
    }

    // The server's side: the stop and start went through the lifecycle
    // API (a new run), the read-only stop did not, the file is there.
    let info = ok(
        call(&f, &f.ops, "GET", &format!("/v1/sandboxes/{id}"), None),
        "get",
    );
    assert_eq!(info["status"], "running");
    let runs = ok(
        call(&f, &f.ops, "GET", &format!("/v1/sandboxes/{id}/runs"), None),
        "runs",
    );
    let runs = runs["runs"].as_array().unwrap();
    assert!(runs.len() >= 2, "the console's start made a run: {runs:?}");
    assert_eq!(runs[0]["generation"], info["generation"], "newest first");
    let r = call(
        &f,
        &f.ops,
        "GET",
        &format!("/ui/api/sandboxes/{id}/files/content?path=/tmp/console-upload.txt"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), report["uploaded"].as_str().unwrap());

    let admin = f.env.create_token_in("team-admin", "team", "tenant_admin");
    let audit = ok(
        call(&f, &admin, "GET", "/v1/audit?limit=1000", None),
        "audit",
    );
    let entries = audit["entries"].as_array().unwrap();
    let by = |token: &str, op: &str, status: u64| {
        entries
            .iter()
            .any(|e| e["token"] == token && e["operation"] == op && e["status"] == status)
    };
    assert!(
        by("console-ops", "POST /v1/sandboxes/{id}/stop", 200),
        "{audit}"
    );
    assert!(
        by("console-ops", "POST /v1/sandboxes/{id}/start", 200),
        "{audit}"
    );
    // The console's actions are named as such, with the path they moved.
    assert!(by("console-ops", "console.terminal", 101), "{audit}");
    assert!(by("console-ops", "console.upload", 204), "{audit}");
    assert!(by("console-ops", "console.download", 200), "{audit}");
    assert!(
        entries.iter().any(|e| e["operation"] == "console.download"
            && e["object"] == "/tmp/console-upload.txt"
            && e["sandbox"] == id.as_str()),
        "{audit}"
    );
    assert!(
        by("console-ro", "POST /v1/sandboxes/{id}/stop", 403),
        "{audit}"
    );
}
