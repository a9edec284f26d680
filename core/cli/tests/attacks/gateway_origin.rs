//! Sandbox pages against the console (issue 56, class 1): the console's
//! cookie never admits a gateway call nor reaches a sandbox, a sandbox
//! cannot set cookies or widen a service worker's scope, `/gw/` answers on
//! the API's origin are inert in a browser (`Content-Security-Policy:
//! sandbox`), and the gateway's own origin (`gateway.listen`, one origin
//! per target) admits a browser only by a preview link of that very
//! origin: once, revocable, never another target's, never from another
//! site's page.
//!
//! The sandbox serves a CGI that prints every variable of its request
//! (`HTTP_COOKIE`, `HTTP_AUTHORIZATION` among them) and answers with
//! `Set-Cookie` and `Service-Worker-Allowed: /`, as the review's attack
//! page did. A real `burrow serve` on a real PostgreSQL, real sandboxes.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow_cli_testkit::serve::pg::PgCluster;
use burrow_cli_testkit::serve::{ok, read_head, request_to_host as request, Resp, TenantServer};
use serde_json::json;

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

/// The attack page's CGI: every variable of the request, and headers that
/// would act on the browser's state for the whole origin.
const CGI: &str = "#!/bin/sh\necho Content-Type: text/plain\n\
echo 'Set-Cookie: burrow_console=planted; Path=/'\n\
echo 'Service-Worker-Allowed: /'\n\
echo 'Clear-Site-Data: \"cookies\"'\necho\nenv\n";

/// The review's attack page: as the console's viewer, it reads the
/// console's session (and its CSRF token), creates a sandbox `pwned`
/// (same origin) or `pwned-api` (the API's origin named in `?api=`), reads
/// its own cookies and registers a service worker for `/`; it writes what
/// it got into its title (`ran:{...}`).
const ATTACK: &str = r#"<!doctype html><title>page</title><script>
(async () => {
  const api = new URLSearchParams(location.search).get('api') || '';
  const r = { ran: true, cookie: document.cookie };
  const make = async (url, name, csrf) => {
    const headers = { 'content-type': 'application/json' };
    if (csrf) headers['x-burrow-csrf'] = csrf;
    try {
      const x = await fetch(url, { method: 'POST', credentials: 'include', headers,
        body: JSON.stringify({ name, config: { image: 'busybox' }, detached: true }) });
      return x.status;
    } catch (e) { return 'blocked'; }
  };
  let csrf = null;
  try {
    const x = await fetch('/ui/api/session', { credentials: 'include' });
    r.session = x.status;
    try { csrf = (await x.json()).csrf; } catch (e) {}
  } catch (e) { r.session = 'blocked'; }
  r.same_origin_post = await make('/v1/sandboxes', 'pwned', csrf);
  try {
    const x = await fetch(api + '/ui/api/session', { credentials: 'include' });
    r.api_session = x.status + ' ' + (await x.text()).slice(0, 200);
  } catch (e) { r.api_session = 'blocked'; }
  r.api_post = await make(api + '/v1/sandboxes', 'pwned-api', null);
  try { await navigator.serviceWorker.register('sw.js', { scope: '/' }); r.sw = 'registered'; }
  catch (e) { r.sw = 'refused'; }
  document.title = 'ran:' + JSON.stringify(r);
})();
</script>"#;

struct Fixture {
    t: TenantServer,
    ops: String,
    /// The tenant's admin (reads the audit log).
    admin: String,
    other: String,
    id: String,
}

/// A server with a gateway listener, tenants `team` (an operator) and
/// `rival`, and a `team` sandbox target serving [`CGI`] on 8080.
fn fixture(db: &str) -> Fixture {
    let url = cluster().create_database(db).unwrap();
    let tokens = [
        ("gw-ops", "team", "operator"),
        ("gw-admin", "team", "tenant_admin"),
        ("rival-ops", "rival", "operator"),
    ];
    let mut t = TenantServer::start_with(
        &url,
        &["team", "rival"],
        &tokens,
        &[("GATEWAY_LISTEN", "127.0.0.1:0")],
    );
    let other = t.tokens.pop().unwrap();
    let admin = t.tokens.pop().unwrap();
    let ops = t.tokens.pop().unwrap();
    let quote = |s: &str| s.replace('\'', "'\\''");
    let script = format!(
        "mkdir -p /www/cgi-bin; echo ok > /www/index.html; printf '%s' '{}' > /www/cgi-bin/env; \
         printf '%s' '{}' > /www/attack.html; echo 'self.onfetch = () => {{}};' > /www/sw.js; \
         chmod +x /www/cgi-bin/env; httpd -p 8080 -h /www; httpd -p 9090 -h /www",
        quote(CGI),
        quote(ATTACK),
    );
    let config = json!({"image": "busybox"});
    let created = ok(
        t.call(
            &ops,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "web", "config": config, "detached": true})),
        ),
        "create",
    );
    let id = created["id"].as_str().unwrap().to_owned();
    ok(
        t.call(
            &ops,
            "PUT",
            &format!("/v1/gateway/targets/{id}"),
            Some(json!({"port": 8080, "command": ["sh", "-c", script]})),
        ),
        "target",
    );
    Fixture {
        t,
        ops,
        admin,
        other,
        id,
    }
}

/// `http://127.0.0.1:PORT` of the gateway listener, as `127.0.0.1:PORT`.
fn gateway_addr(f: &Fixture) -> String {
    let url = f.t.server.gateway.clone().expect("a gateway listener");
    url.strip_prefix("http://").unwrap().to_owned()
}

/// A call through the API's `/gw/`, retried while the target starts.
fn api_gw(f: &Fixture, path: &str, headers: &[(&str, &str)]) -> Resp {
    let addr = f.t.server.url.strip_prefix("http://").unwrap().to_owned();
    retry(|| request(&addr, "GET", &addr, &format!("/gw/{}{path}", f.id), headers))
}

fn retry(mut call: impl FnMut() -> Resp) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = call();
        if r.status != 503 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Logs in to the console with `token`: the cookie's `name=value`.
fn console_login(f: &Fixture, token: &str) -> String {
    let addr = f.t.server.url.strip_prefix("http://").unwrap().to_owned();
    let body = json!({ "token": token }).to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /ui/api/login HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    let set = headers
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .unwrap();
    set.split(';').next().unwrap().to_owned()
}

fn has(r: &Resp, name: &str) -> bool {
    r.headers.iter().any(|(k, _)| k == name)
}

/// The attacks of the review on the API's origin: a sandbox page that the
/// console's viewer opens.
#[test]
fn the_console_cookie_never_reaches_a_sandbox() {
    let f = fixture("attack_gw_cookie");
    let cookie = console_login(&f, &f.ops);
    let value = cookie.split_once('=').unwrap().1.to_owned();
    // The cookie alone (a browser's navigation) is no way in.
    let r = api_gw(&f, "/cgi-bin/env", &[("Cookie", &cookie)]);
    assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
    // A program's call (bearer) with the cookie too: the target sees
    // neither, and its answer cannot set state on the console's origin.
    let bearer = format!("Bearer {}", f.ops);
    let r = api_gw(
        &f,
        "/cgi-bin/env",
        &[("Cookie", &cookie), ("Authorization", &bearer)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let env = r.text();
    assert!(env.contains("GATEWAY_INTERFACE=CGI"), "{env}");
    assert!(
        !env.contains(&value),
        "the console cookie reached the sandbox: {env}"
    );
    assert!(
        !env.contains(&f.ops),
        "the API token reached the sandbox: {env}"
    );
    assert!(!env.contains("HTTP_COOKIE"), "{env}");
    for gone in ["set-cookie", "service-worker-allowed", "clear-site-data"] {
        assert!(!has(&r, gone), "{gone} came through: {:?}", r.headers);
    }
    // Inert if a browser renders it: an opaque origin, no sniffing.
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

/// The gateway's own origin: one per target, by host name; a browser gets
/// in only through a preview link of that origin.
#[test]
fn the_gateway_origin_admits_browsers_by_preview_links_only() {
    let f = fixture("attack_gw_origin");
    let addr = gateway_addr(&f);
    let port = addr.rsplit_once(':').unwrap().1.to_owned();
    let host = format!("{}.localhost:{port}", f.id);
    let cookie = console_login(&f, &f.ops);
    // No credentials, or the console's cookie: refused.
    for headers in [vec![], vec![("Cookie", cookie.as_str())]] {
        let r = request(&addr, "GET", &host, "/index.html", &headers);
        assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
    }
    // A program's bearer token works here too; nothing of the API is
    // served on this origin (the path goes to the target).
    let bearer = format!("Bearer {}", f.ops);
    let r = retry(|| {
        request(
            &addr,
            "GET",
            &host,
            "/index.html",
            &[("Authorization", &bearer)],
        )
    });
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    let r = request(
        &addr,
        "GET",
        &host,
        "/v1/sandboxes",
        &[("Authorization", &bearer)],
    );
    assert_eq!(
        r.header("via"),
        Some("1.1 burrow"),
        "the API answered on the gateway's origin"
    );
    // Another tenant's token: as if the target did not exist.
    let rival = format!("Bearer {}", f.other);
    let r = request(
        &addr,
        "GET",
        &host,
        "/index.html",
        &[("Authorization", &rival)],
    );
    assert_eq!((r.status, r.error_code()), (404, "not_found".into()));

    // A preview link: traded once for this origin's cookie.
    let preview = ok(
        f.t.call(
            &f.ops,
            "POST",
            &format!("/v1/gateway/targets/{}/previews", f.id),
            Some(json!({"ttl": "5m"})),
        ),
        "preview",
    );
    let url = preview["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("http://{host}/__burrow/preview?token=")),
        "{url}"
    );
    let path = &url[url.find("/__burrow").unwrap()..];
    let r = request(&addr, "GET", &host, path, &[]);
    assert_eq!(r.status, 303);
    let set = r.header("set-cookie").unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.split("; ").any(|a| a == attr), "{attr} in {set}");
    }
    assert!(!set.to_ascii_lowercase().contains("domain="), "{set}");
    let preview_cookie = set.split(';').next().unwrap().to_owned();
    // Once only.
    let again = request(&addr, "GET", &host, path, &[]);
    assert_eq!(
        (again.status, again.error_code()),
        (401, "unauthorized".into())
    );
    // The trade is in the tenant's audit log, as the link's tenant and id
    // (the refused second one has no tenant: the server's admins see it),
    // without the token.
    let token = &path[path.find("token=").unwrap() + 6..];
    // Gateway calls are written in batches, off their path: wait for them.
    let trades_in = |log: &serde_json::Value| -> Vec<serde_json::Value> {
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["object"]
                    .as_str()
                    .is_some_and(|o| o.contains("/__burrow/preview"))
            })
            .cloned()
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let (log, trades) = loop {
        let log = ok(f.t.call(&f.admin, "GET", "/v1/audit", None), "audit");
        let trades = trades_in(&log);
        if !trades.is_empty() || Instant::now() > deadline {
            break (log, trades);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(trades.len(), 1, "{log}");
    assert_eq!(trades[0]["tenant"], "team", "{log}");
    assert_eq!(trades[0]["token"], preview["id"], "{log}");
    assert_eq!(trades[0]["outcome"], "ok", "{log}");
    assert!(
        !log.to_string().contains(token),
        "the link's token is in the log"
    );
    // The cookie opens this origin, and the target never sees it.
    let nav = [
        ("Cookie", preview_cookie.as_str()),
        ("Sec-Fetch-Site", "none"),
    ];
    let r = request(&addr, "GET", &host, "/cgi-bin/env", &nav);
    assert_eq!(r.status, 200, "{}", r.text());
    let env = r.text();
    assert!(env.contains("GATEWAY_INTERFACE=CGI"), "{env}");
    assert!(
        !env.contains("HTTP_COOKIE"),
        "a cookie reached the sandbox: {env}"
    );
    for gone in ["set-cookie", "service-worker-allowed", "clear-site-data"] {
        assert!(!has(&r, gone), "{gone} came through: {:?}", r.headers);
    }
    // Not another port's origin, nor from another site's page (a sibling
    // origin under the same domain is the same site).
    let other_port = format!("9090-{}.localhost:{port}", f.id);
    let r = request(&addr, "GET", &other_port, "/index.html", &nav);
    assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
    let sibling = [
        ("Cookie", preview_cookie.as_str()),
        ("Sec-Fetch-Site", "same-site"),
    ];
    let r = request(&addr, "GET", &host, "/index.html", &sibling);
    assert_eq!((r.status, r.error_code()), (403, "forbidden".into()));
    // Revoked: the cookie ends with the link.
    let id = preview["id"].as_str().unwrap();
    let r = f.t.call(
        &f.ops,
        "DELETE",
        &format!("/v1/gateway/targets/{}/previews/{id}", f.id),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let r = request(&addr, "GET", &host, "/index.html", &nav);
    assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
    // Another tenant can neither make nor revoke this target's links.
    let r = f.t.call(
        &f.other,
        "POST",
        &format!("/v1/gateway/targets/{}/previews", f.id),
        None,
    );
    assert_eq!((r.status, r.error_code()), (404, "not_found".into()));

    // A link for one port opens that port's origin only.
    let preview = ok(
        f.t.call(
            &f.ops,
            "POST",
            &format!("/v1/gateway/targets/{}/previews", f.id),
            Some(json!({"port": 9090})),
        ),
        "preview",
    );
    let url = preview["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("http://{other_port}/")), "{url}");
    let path = &url[url.find("/__burrow").unwrap()..];
    let r = request(&addr, "GET", &other_port, path, &[]);
    assert_eq!(r.status, 303);
    let c = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let r = request(
        &addr,
        "GET",
        &other_port,
        "/index.html",
        &[("Cookie", c.as_str())],
    );
    assert_eq!((r.status, r.text().trim()), (200, "ok"));
    let r = request(
        &addr,
        "GET",
        &host,
        "/index.html",
        &[("Cookie", c.as_str())],
    );
    assert_eq!((r.status, r.error_code()), (401, "unauthorized".into()));
}

/// The same attacks from a real browser (headless Chromium) that is
/// logged in to the console: the page never runs on the console's origin,
/// is inert there even when a program-shaped call renders it, and on its
/// own origin (opened through a preview link made with the console's
/// Preview button) runs but gets nothing of the console.
#[test]
fn a_sandbox_page_in_a_real_browser() {
    let scripts = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/console");
    assert!(
        scripts.join("node_modules/playwright-core").is_dir(),
        "tests/console has no node_modules: run `cargo xtask console` (scripts/build-console.sh)"
    );
    let f = fixture("attack_gw_browser");
    // The target runs before the browser comes (its cold start is not
    // what is tested).
    let bearer = format!("Bearer {}", f.ops);
    let r = api_gw(&f, "/index.html", &[("Authorization", &bearer)]);
    assert_eq!(r.status, 200, "{}", r.text());
    let out = std::process::Command::new("node")
        .arg(scripts.join("gateway-attack.mjs"))
        .env("BURROW_CONSOLE_URL", &f.t.server.url)
        .env("BURROW_CONSOLE_TOKEN", &f.ops)
        .env("BURROW_ATTACK_TARGET", &f.id)
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no report from gateway-attack.mjs: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    println!("browser report: {report}");
    assert_eq!(report["ok"], true, "{report:#}\n{}", f.t.server.log());
    // On the console's origin: refused by cookie; inert by bearer.
    assert_eq!(report["api_cookie"]["status"], 401, "{report:#}");
    assert_eq!(report["api_cookie"]["title"], "", "{report:#}");
    assert_eq!(report["api_bearer"]["status"], 200, "{report:#}");
    assert_eq!(report["api_bearer"]["csp"], "sandbox", "{report:#}");
    assert_eq!(
        report["api_bearer"]["title"], "page",
        "the page ran: {report:#}"
    );
    // On its own origin the page runs (so the checks below can fail) and
    // gets nothing: no cookie it can read, no console session, no API.
    let own = &report["own"];
    assert_eq!(own["ran"], true, "{report:#}");
    assert_eq!(own["cookie"], "", "{report:#}");
    assert_ne!(own["session"], 200, "{report:#}");
    assert_ne!(own["same_origin_post"], 201, "{report:#}");
    assert_eq!(own["api_session"], "blocked", "{report:#}");
    assert_eq!(own["api_post"], "blocked", "{report:#}");
    // The server's side: no sandbox the page tried to make.
    let list = ok(f.t.call(&f.ops, "GET", "/v1/sandboxes", None), "list");
    let names: Vec<&str> = list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["web"], "{list}");
}
