#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Lifecycle events and webhooks through `burrow serve`, on a real
//! PostgreSQL with real sandboxes and a real HTTP receiver on 127.0.0.1:
//! every transition of a tenant's sandboxes, whoever made it, in order,
//! and nothing of another tenant's; resuming after an id (NDJSON, SSE with
//! `Last-Event-ID`); following; webhooks signed with their secret,
//! filtered by type, retried with a backoff that doubles and given up
//! after `max_attempts`, each attempt in the delivery log; and a delivery
//! whose replica is SIGKILLed mid-post posted again by another replica.

use burrow_cli_testkit as common;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::serve::pg::PgCluster;
use common::serve::{http, ok, Resp, ServeEnv, Server};
use common::TestHome;
use serde_json::{json, Value};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

struct Fixture {
    home: TestHome,
    env: ServeEnv,
}

/// One database and one engine home (the test image installed as
/// `busybox`), with `BURROW_SERVE_<key>=value` settings; replicas are
/// started by the test.
fn fixture(db: &str, settings: &[(&str, &str)]) -> Fixture {
    let home = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(TestHome::new());
    home.name_image("busybox");
    let url = cluster().create_database(db).unwrap();
    // The receivers are on this host's loopback, which the server's
    // outbound calls reach only where the operator allows.
    let env = settings.iter().fold(
        ServeEnv::new(home.path(), &url).set("OUTBOUND_ALLOW", "127.0.0.1"),
        |env, (k, v)| env.set(k, v),
    );
    Fixture { home, env }
}

impl Fixture {
    /// A tenant and its admin's token.
    fn tenant(&self, name: &str) -> String {
        self.env.create_tenant(name);
        self.env
            .create_token_in(&format!("{name}-admin"), name, "tenant_admin")
    }
}

fn call(server: &Server, token: &str, method: &str, path: &str, body: Option<Value>) -> Resp {
    let body = body.map(|b| b.to_string());
    http(
        method,
        &format!("{}{path}", server.url),
        Some(token),
        body.as_deref(),
    )
}

/// Creates (detached) and returns the id of sandbox `name`.
fn create(server: &Server, token: &str, name: &str) -> String {
    let config = json!({"image": "busybox", "command": ["sleep", "3600"]});
    let made = ok(
        call(
            server,
            token,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "config": config, "detached": true})),
        ),
        "create",
    );
    made["id"].as_str().unwrap().to_owned()
}

/// Starts, stops and removes sandbox `id`.
fn run_through(server: &Server, token: &str, id: &str) {
    let path = |op: &str| format!("/v1/sandboxes/{id}/{op}");
    ok(
        call(server, token, "POST", &path("start"), Some(json!({}))),
        "start",
    );
    ok(
        call(
            server,
            token,
            "POST",
            &path("stop"),
            Some(json!({"grace_ms": 100})),
        ),
        "stop",
    );
    ok(
        call(
            server,
            token,
            "DELETE",
            &format!("/v1/sandboxes/{id}"),
            None,
        ),
        "remove",
    );
}

/// The events `token` reads after `after` (NDJSON, not following).
fn events(server: &Server, token: &str, after: u64) -> Vec<Value> {
    let r = call(
        server,
        token,
        "GET",
        &format!("/v1/events?after={after}&limit=1000"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Polls `events` until `done` holds of them (the pump copies the
/// engine's log every 200 ms), for at most 30 s.
fn events_until(
    server: &Server,
    token: &str,
    after: u64,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = events(server, token, after);
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "events never came: {got:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn of_sandbox<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["sandbox"]["id"] == id).collect()
}

fn types(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

fn id_num(e: &Value) -> u64 {
    e["id"].as_str().unwrap().parse().unwrap()
}

const LIFE: [&str; 5] = [
    "sandbox.created",
    "sandbox.starting",
    "sandbox.running",
    "sandbox.stopped",
    "sandbox.removed",
];

#[test]
fn every_transition_is_an_event_of_its_tenant_only_and_streams_resume() {
    let f = fixture("events_stream", &[]);
    let (r1, r2) = (f.env.start("r1"), f.env.start("r2"));
    let alpha = f.tenant("alpha");
    let beta = f.tenant("beta");
    let a = create(&r1, &alpha, "web");
    run_through(&r2, &alpha, &a);
    let b = create(&r2, &beta, "web");

    let seen = events_until(&r1, &alpha, 0, |e| of_sandbox(e, &a).len() == 5);
    let mine = of_sandbox(&seen, &a);
    assert_eq!(types(&mine), LIFE, "{seen:#?}");
    assert!(seen.iter().all(|e| e["tenant"] == "alpha"), "{seen:#?}");
    assert!(
        of_sandbox(&seen, &b).is_empty(),
        "beta's events shown to alpha"
    );
    assert!(mine.iter().all(|e| e["sandbox"]["name"] == "web"));
    assert_eq!(mine[3]["previous"], "running");
    assert_eq!(mine[3]["reason"], "stopped");
    let ids: Vec<u64> = mine.iter().map(|e| id_num(e)).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Beta sees its own, from either replica.
    let theirs = events_until(&r2, &beta, 0, |e| !of_sandbox(e, &b).is_empty());
    assert!(theirs.iter().all(|e| e["tenant"] == "beta"), "{theirs:#?}");
    assert!(
        of_sandbox(&theirs, &a).is_empty(),
        "alpha's events shown to beta"
    );
    // Another tenant may not ask for alpha's.
    let r = call(&r1, &beta, "GET", "/v1/events?tenant=alpha", None);
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));

    // Resuming after an id gives what came after it, on any replica.
    let rest = events(&r2, &alpha, ids[2]);
    assert_eq!(types(&of_sandbox(&rest, &a)), LIFE[3..]);
    // SSE, resumed by Last-Event-ID.
    let sse = raw_get(
        &r1,
        &alpha,
        "/v1/events",
        &[
            ("Accept", "text/event-stream"),
            ("Last-Event-ID", &ids[3].to_string()),
        ],
    );
    assert!(sse.starts_with("HTTP/1.1 200"), "{sse}");
    assert!(sse
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream"));
    let frames: Vec<&str> = sse.split("\n\n").filter(|f| f.contains("data: ")).collect();
    assert_eq!(frames.len(), 1, "{sse}");
    assert!(frames[0].contains(&format!("id: {}\nevent: sandbox.removed\ndata: {{", ids[4])));

    // Whoever makes a change: the CLI on the server's host is the default
    // tenant's, and its admin sees it.
    let admin = f.env.create_token("root");
    let out = f
        .home
        .cli()
        .args(["create", "busybox", "--name", "from-cli"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = events_until(&r1, &admin, 0, |e| {
        e.iter().any(|x| x["sandbox"]["name"] == "from-cli")
    });
    let cli = all
        .iter()
        .find(|x| x["sandbox"]["name"] == "from-cli")
        .unwrap();
    assert_eq!(
        (cli["tenant"].as_str(), cli["type"].as_str()),
        (Some("default"), Some("sandbox.created"))
    );
    // The server's admin reads every tenant's.
    assert!(all.iter().any(|x| x["tenant"] == "alpha"));
    assert!(all.iter().any(|x| x["tenant"] == "beta"));

    // Bad reads are typed refusals.
    for q in [
        "after=-1",
        "limit=0",
        "follow=maybe",
        "nope=1",
        "tenant=%00",
    ] {
        let r = call(&r1, &alpha, "GET", &format!("/v1/events?{q}"), None);
        assert_eq!(r.error_code(), "invalid_argument", "{q}: {}", r.text());
    }
}

#[test]
fn a_follower_gets_each_event_as_it_comes() {
    let f = fixture("events_follow", &[]);
    let (r1, r2) = (f.env.start("r1"), f.env.start("r2"));
    let alpha = f.tenant("alpha");
    let last = events(&r1, &alpha, 0).last().map_or(0, id_num);
    let mut stream = open_stream(
        &r1,
        &alpha,
        &format!("/v1/events?follow=true&after={last}"),
        &[],
    );
    // Made through the other replica: its pump or this one's copies it,
    // and the follower sees it.
    let id = create(&r2, &alpha, "late");
    let line = stream.line(Duration::from_secs(30));
    let e: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (e["type"].as_str(), e["sandbox"]["id"].as_str()),
        (Some("sandbox.created"), Some(id.as_str()))
    );
    assert!(id_num(&e) > last);
}

#[test]
fn webhooks_are_signed_filtered_retried_and_logged() {
    let f = fixture(
        "events_webhooks",
        &[("WEBHOOK_BACKOFF", "300ms"), ("WEBHOOK_MAX_ATTEMPTS", "3")],
    );
    let r1 = f.env.start("r1");
    let alpha = f.tenant("alpha");
    let rx = Receiver::start();
    // 500, 500, then 200: delivered on the third attempt.
    rx.script(&[Reply::Status(500), Reply::Status(500), Reply::Status(200)]);
    let (hook, secret) = add_webhook(&r1, &alpha, &rx.url("/hook"), "sandbox.created");
    assert!(secret.starts_with("whsec_"));
    // Listed without the secret.
    let listed = ok(call(&r1, &alpha, "GET", "/v1/webhooks", None), "list");
    assert_eq!(listed["webhooks"][0]["id"], hook.as_str());
    assert!(listed["webhooks"][0].get("secret").is_none());

    let id = create(&r1, &alpha, "hooked");
    let hits = rx.wait_for(3, Duration::from_secs(30));
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.path, "/hook");
        assert_eq!(
            h.header("burrow-attempt"),
            Some((i + 1).to_string().as_str())
        );
        assert_eq!(
            h.header("burrow-delivery"),
            hits[0].header("burrow-delivery")
        );
        assert_eq!(h.header("burrow-event-type"), Some("sandbox.created"));
        assert_eq!(h.header("content-type"), Some("application/json"));
        verify(&secret, h);
        let e: Value = serde_json::from_str(&h.body).unwrap();
        assert_eq!(e["sandbox"]["id"], id.as_str());
        assert_eq!(h.header("burrow-event-id"), e["id"].as_str());
    }
    // The backoff doubles: 300 ms, then 600 ms.
    let gap = |i: usize| hits[i].at.duration_since(hits[i - 1].at);
    assert!(gap(1) >= Duration::from_millis(300), "{:?}", gap(1));
    assert!(gap(2) >= Duration::from_millis(600), "{:?}", gap(2));
    // Only `sandbox.created` was asked for: stopping and removing post nothing.
    run_through(&r1, &alpha, &id);
    events_until(&r1, &alpha, 0, |e| {
        types(&of_sandbox(e, &id)).last().map(String::as_str) == Some("sandbox.removed")
    });
    let log = deliveries_until(&r1, &alpha, &hook, |d| d[0]["state"] == "delivered");
    assert_eq!(log.len(), 1, "{log:#?}");
    let statuses: Vec<Value> = log[0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].clone())
        .collect();
    assert_eq!(statuses, [json!(500), json!(500), json!(200)]);
    assert_eq!(rx.hits().len(), 3);

    // A receiver that always fails: given up after max_attempts (3).
    rx.script(&[Reply::Status(503); 8]);
    let r = call(
        &r1,
        &alpha,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": rx.url("/fail"), "types": ["sandbox.removed"]})),
    );
    let failing = ok(r, "webhook")["id"].as_str().unwrap().to_owned();
    let gone = create(&r1, &alpha, "gone");
    ok(
        call(
            &r1,
            &alpha,
            "DELETE",
            &format!("/v1/sandboxes/{gone}"),
            None,
        ),
        "remove",
    );
    let log = deliveries_until(&r1, &alpha, &failing, |d| d[0]["state"] == "failed");
    assert_eq!(log.len(), 1, "{log:#?}");
    assert_eq!(log[0]["attempts"].as_array().unwrap().len(), 3, "{log:#?}");

    // Bad definitions are typed refusals and make nothing; another
    // tenant's webhook is not found; an operator may not add one.
    let before = ok(call(&r1, &alpha, "GET", "/v1/webhooks", None), "list");
    for body in [
        json!({"url": "ftp://127.0.0.1/"}),
        json!({"url": "http://u:p@127.0.0.1/"}),
        json!({"url": rx.url("/"), "types": ["sandbox.nope"]}),
        json!({"url": rx.url("/"), "secret": "short"}),
        json!({"url": rx.url("/"), "other": 1}),
    ] {
        let r = call(&r1, &alpha, "POST", "/v1/webhooks", Some(body.clone()));
        assert_eq!(r.error_code(), "invalid_argument", "{body}: {}", r.text());
    }
    assert_eq!(
        ok(call(&r1, &alpha, "GET", "/v1/webhooks", None), "list"),
        before
    );
    let beta = f.tenant("beta");
    for (m, p) in [
        ("GET", format!("/v1/webhooks/{hook}")),
        ("GET", format!("/v1/webhooks/{hook}/deliveries")),
        ("DELETE", format!("/v1/webhooks/{hook}")),
    ] {
        let r = call(&r1, &beta, m, &p, None);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (404, "not_found"),
            "{m} {p}"
        );
    }
    let operator = f.env.create_token_in("alpha-op", "alpha", "operator");
    let r = call(
        &r1,
        &operator,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": rx.url("/")})),
    );
    assert_eq!((r.status, r.error_code().as_str()), (403, "forbidden"));
    // Removed: its deliveries go with it.
    ok(
        call(&r1, &alpha, "DELETE", &format!("/v1/webhooks/{hook}"), None),
        "remove webhook",
    );
    let r = call(
        &r1,
        &alpha,
        "GET",
        &format!("/v1/webhooks/{hook}/deliveries"),
        None,
    );
    assert_eq!(r.error_code(), "not_found");
}

#[test]
fn a_delivery_cut_short_by_a_replica_kill_is_posted_by_another() {
    let f = fixture("events_kill", &[("WEBHOOK_TIMEOUT", "2s")]);
    let mut r1 = f.env.start("r1");
    let alpha = f.tenant("alpha");
    let rx = Receiver::start();
    rx.script(&[Reply::Hold]);
    let (hook, secret) = add_webhook(&r1, &alpha, &rx.url("/"), "sandbox.created");
    create(&r1, &alpha, "x");
    // The first post arrives and is held unanswered; its replica dies.
    let first = rx.wait_for(1, Duration::from_secs(30)).remove(0);
    r1.kill9();
    let r2 = f.env.start("r2");
    // Its lease (timeout + 5 s) runs out, and the other replica posts it.
    let hits = rx.wait_for(2, Duration::from_secs(60));
    let again = &hits[1];
    assert_eq!(
        again.header("burrow-delivery"),
        first.header("burrow-delivery")
    );
    assert_eq!(
        again.header("burrow-event-id"),
        first.header("burrow-event-id")
    );
    assert_eq!(again.header("burrow-attempt"), Some("2"));
    assert_eq!(again.body, first.body);
    verify(&secret, again);
    let log = deliveries_until(&r2, &alpha, &hook, |d| d[0]["state"] == "delivered");
    let attempts = log[0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{log:#?}");
    // The first attempt was cut short: no end, no answer.
    assert!(attempts[0]["ended_at_ms"].is_null(), "{log:#?}");
    assert_eq!(attempts[1]["status"], 200);
}

/// Adds a webhook of `token`'s tenant for events of type `kind`; returns
/// its id and secret.
fn add_webhook(server: &Server, token: &str, url: &str, kind: &str) -> (String, String) {
    let made = ok(
        call(
            server,
            token,
            "POST",
            "/v1/webhooks",
            Some(json!({"url": url, "types": [kind]})),
        ),
        "webhook",
    );
    let field = |k: &str| made[k].as_str().unwrap().to_owned();
    (field("id"), field("secret"))
}

fn deliveries_until(
    server: &Server,
    token: &str,
    hook: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = ok(
            call(
                server,
                token,
                "GET",
                &format!("/v1/webhooks/{hook}/deliveries"),
                None,
            ),
            "deliveries",
        );
        let d = page["deliveries"].as_array().unwrap().clone();
        if !d.is_empty() && done(&d) {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "deliveries never settled: {d:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Checks `Burrow-Signature` against the body and the secret.
fn verify(secret: &str, h: &Hit) {
    let sig = h.header("burrow-signature").expect("a signature");
    let (t, v1) = sig
        .strip_prefix("t=")
        .and_then(|s| s.split_once(",v1="))
        .expect("t=...,v1=...");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = hex::decode(v1).unwrap();
    ring::hmac::verify(&key, format!("{t}.{}", h.body).as_bytes(), &tag)
        .expect("the signature matches the body and the secret");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t: u64 = t.parse().unwrap();
    assert!(now.abs_diff(t) < 120, "t={t}, now={now}");
}

/// A GET with extra headers, read to its end (`Connection: close`).
fn raw_get(server: &Server, token: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = open_stream(server, token, path, headers);
    let mut out = String::new();
    s.reader.read_to_string(&mut out).unwrap();
    // Chunk sizes stay in the text: only whole frames are looked at.
    out
}

struct Stream {
    reader: BufReader<TcpStream>,
}

impl Stream {
    /// The next non-empty line of a chunked NDJSON body (chunk-size
    /// lines skipped), within `within`.
    fn line(&mut self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no line within {within:?}");
            self.reader.get_ref().set_read_timeout(Some(left)).unwrap();
            let mut l = String::new();
            self.reader.read_line(&mut l).expect("a line");
            let l = l.trim();
            if l.starts_with('{') {
                return l.to_owned();
            }
        }
    }
}

fn open_stream(server: &Server, token: &str, path: &str, headers: &[(&str, &str)]) -> Stream {
    let authority = server.url.trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&authority).unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    Stream {
        reader: BufReader::new(s),
    }
}

/// What the receiver does with a request.
#[derive(Clone, Copy)]
enum Reply {
    /// Answer with this status.
    Status(u16),
    /// Never answer (until the sender goes away).
    Hold,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hit {
    at: Instant,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Hit {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A webhook receiver on 127.0.0.1: records each request, answers as
/// scripted (then 200).
struct Receiver {
    port: u16,
    hits: Arc<Mutex<Vec<Hit>>>,
    script: Arc<Mutex<VecDeque<Reply>>>,
    arrived: Mutex<mpsc::Receiver<()>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let script: Arc<Mutex<VecDeque<Reply>>> = Arc::default();
        let (tx, arrived) = mpsc::channel();
        let (h, sc) = (hits.clone(), script.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (h, sc, tx) = (h.clone(), sc.clone(), tx.clone());
                std::thread::spawn(move || serve_one(conn, &h, &sc, &tx));
            }
        });
        Receiver {
            port,
            hits,
            script,
            arrived: Mutex::new(arrived),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn script(&self, replies: &[Reply]) {
        let mut s = self.script.lock().unwrap();
        s.clear();
        s.extend(replies.iter().copied());
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// Waits until `n` requests have come; returns them.
    fn wait_for(&self, n: usize, within: Duration) -> Vec<Hit> {
        let deadline = Instant::now() + within;
        let arrived = self.arrived.lock().unwrap();
        while self.hits().len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{} of {n} requests came: {:#?}",
                self.hits().len(),
                self.hits()
            );
            let _ = arrived.recv_timeout(left.min(Duration::from_millis(200)));
        }
        self.hits()
    }
}

fn serve_one(
    conn: TcpStream,
    hits: &Mutex<Vec<Hit>>,
    script: &Mutex<VecDeque<Reply>>,
    arrived: &mpsc::Sender<()>,
) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Status(200));
    hits.lock().unwrap().push(Hit {
        at: Instant::now(),
        path,
        headers,
        body: String::from_utf8(body).unwrap(),
    });
    let _ = arrived.send(());
    let mut conn = conn;
    match reply {
        Reply::Status(code) => {
            let _ = write!(
                conn,
                "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Reply::Hold => {
            // Until the sender goes away.
            let mut sink = [0u8; 64];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(120)));
            while matches!(r.read(&mut sink), Ok(1..)) {}
        }
    }
}
