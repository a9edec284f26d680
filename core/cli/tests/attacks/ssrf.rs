//! The server's own calls made for a tenant (issue 56, class 3): a tenant
//! admin's URL gateway target `http://127.0.0.1:PORT` (with a `Host`
//! override) returned an internal service's body through `/gw/`; webhook
//! delivery records told which internal ports were open; an image
//! reference naming an internal address was fetched by the server.
//!
//! Now every such call goes through the outbound guard: an address of the
//! host or of a private network, in any spelling or behind a name, is
//! refused when the target or webhook is registered, and again at every
//! connection (a name that answers a public address first and loopback
//! next gains nothing); a refused call and a failed one answer alike; a
//! target may not set `Host` nor hop-by-hop headers; a tenant's pulls reach
//! only what the operator's `[outbound] allow` names. What counts is what
//! reached the internal listener. Real `burrow serve`, real sandboxes.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use burrow_cli_testkit as common;
use serde_json::{json, Value};

use super::egress::{CodeOf, HostService, Served};

/// An internal HTTP service's answer.
const INTERNAL: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\ninternal";

/// The test's DNS server: `loop.test` is the host's loopback; each
/// `flip*.test` answers a public-looking address (TEST-NET-1) the first
/// time it is asked, the loopback after (DNS rebinding).
fn dns() -> std::net::SocketAddr {
    let asked: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
    common::dns::start(move |name: &str| {
        if name == "loop.test" {
            return Some(Ipv4Addr::LOCALHOST);
        }
        if name.starts_with("flip") && name.ends_with(".test") {
            let mut asked = asked.lock().unwrap();
            let n = asked.entry(name.to_owned()).or_insert(0);
            *n += 1;
            return Some(if *n == 1 {
                Ipv4Addr::new(192, 0, 2, 1)
            } else {
                Ipv4Addr::LOCALHOST
            });
        }
        None
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn url_targets_reach_no_internal_address_by_any_spelling() {
    let internal = HostService::start(INTERNAL);
    let s = Served::start(dns(), "tenant_admin", &[]).await;
    let p = internal.port;
    let urls = [
        format!("http://127.0.0.1:{p}"),
        format!("http://127.0.0.1.:{p}"),
        format!("http://2130706433:{p}"),
        format!("http://127.1:{p}"),
        format!("http://0x7f.1:{p}"),
        format!("http://0177.0.0.1:{p}"),
        format!("http://0x7f000001:{p}"),
        format!("http://0:{p}"),
        format!("http://localhost:{p}"),
        format!("http://api.localhost:{p}"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        format!("http://10.0.0.1:{p}"),
        format!("http://loop.test:{p}"),
        format!("http://flip1.test:{p}"),
    ];
    let mut calls = Vec::new();
    let mut taken = Vec::new();
    let mut refusals = Vec::new();
    for url in &urls {
        let r = s
            .call(
                &s.tenant,
                "POST",
                "/v1/gateway/targets",
                Some(json!({"url": url})),
            )
            .await;
        if r.status != 201 {
            refusals.push((url.clone(), r.error_code_or_none()));
            continue;
        }
        taken.push(url.clone());
        let id = r.json()["id"].as_str().unwrap().to_owned();
        for _ in 0..2 {
            let g = s.call(&s.tenant, "GET", &format!("/gw/{id}/"), None).await;
            calls.push((url.clone(), g.status, g.error_code_or_none()));
        }
    }
    assert_eq!(
        internal.hits(),
        0,
        "a URL target reached the internal service"
    );
    for (url, code) in &refusals {
        assert_eq!(code, "invalid_argument", "{url}");
    }
    // The rebinding name looked public when it was registered: taken, and
    // refused at each connection since.
    assert_eq!(taken, [format!("http://flip1.test:{p}")]);
    // Every call that was made failed, and all alike.
    for (url, status, code) in &calls {
        assert_eq!((*status, code.as_str()), (502, "protocol"), "{url}");
    }
    // A target may not name its own Host, nor hop-by-hop headers.
    for header in [
        "Host",
        "host",
        "Connection",
        "Transfer-Encoding",
        "Upgrade",
        "TE",
        "Keep-Alive",
        "Proxy-Authorization",
    ] {
        let body = json!({"url": "http://public.test", "headers": {header: "x"}});
        let r = s
            .call(&s.tenant, "POST", "/v1/gateway/targets", Some(body))
            .await;
        assert_eq!(r.error_code(), "invalid_argument", "{header}: {}", r.text());
    }
    // The default tenant's server calls are guarded as well.
    let r = s
        .call(
            &s.admin,
            "POST",
            "/v1/gateway/targets",
            Some(json!({"url": format!("http://127.0.0.1:{p}")})),
        )
        .await;
    assert_eq!(r.error_code(), "invalid_argument", "{}", r.text());
}

/// A webhook's outcome: how its registration was answered and, once
/// settled, its delivery (state, and each attempt's status and error).
type Outcome = (u16, String, Option<(String, Vec<(Value, Value)>)>);

async fn register(s: &Served, url: &str) -> (u16, String, Option<String>) {
    let r = s
        .call(
            &s.tenant,
            "POST",
            "/v1/webhooks",
            Some(json!({"url": url, "types": ["sandbox.created"]})),
        )
        .await;
    let id = (r.status == 201).then(|| r.json()["id"].as_str().unwrap().to_owned());
    let code = if r.status == 201 {
        String::new()
    } else {
        r.error_code()
    };
    (r.status, code, id)
}

/// The delivery of webhook `hook` once it settled (delivered or failed).
async fn settled(s: &Served, hook: &str) -> (String, Vec<(Value, Value)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = s
            .call(
                &s.tenant,
                "GET",
                &format!("/v1/webhooks/{hook}/deliveries"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let page = r.json();
        if let Some(d) = page["deliveries"].as_array().and_then(|d| d.first()) {
            let state = d["state"].as_str().unwrap_or_default().to_owned();
            if state != "pending" {
                let attempts = d["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| (a["status"].clone(), a["error"].clone()))
                    .collect();
                return (state, attempts);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the delivery never settled: {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_reach_no_internal_address_and_tell_nothing_of_its_ports() {
    let open =
        HostService::start(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = Served::start(
        dns(),
        "tenant_admin",
        &[
            ("WEBHOOK_TIMEOUT", "3s"),
            ("WEBHOOK_BACKOFF", "200ms"),
            ("WEBHOOK_MAX_ATTEMPTS", "2"),
        ],
    )
    .await;
    let (o, c) = (open.port, closed);
    // Pairs: the same internal host, at an open port and at a closed one.
    let pairs = [
        (
            format!("http://127.0.0.1:{o}/h"),
            format!("http://127.0.0.1:{c}/h"),
        ),
        (
            format!("http://2130706433:{o}/"),
            format!("http://2130706433:{c}/"),
        ),
        (format!("http://0x7f.1:{o}/"), format!("http://0x7f.1:{c}/")),
        (
            format!("http://[::ffff:127.0.0.1]:{o}/"),
            format!("http://[::ffff:127.0.0.1]:{c}/"),
        ),
        (
            format!("http://localhost:{o}/"),
            format!("http://localhost:{c}/"),
        ),
        (
            format!("http://loop.test:{o}/"),
            format!("http://loop.test:{c}/"),
        ),
        (
            format!("http://flip1.test:{o}/"),
            format!("http://flip2.test:{c}/"),
        ),
    ];
    let mut registered = Vec::new();
    for (to_open, to_closed) in &pairs {
        registered.push((register(&s, to_open).await, register(&s, to_closed).await));
    }
    // The metadata service of a cloud host.
    let metadata = register(&s, "http://169.254.169.254/latest/meta-data/").await;
    // An event for every webhook taken.
    let r = s
        .call(
            &s.tenant,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "trigger", "detached": true, "config": {"image": "busybox"}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let mut outcomes: Vec<(Outcome, Outcome)> = Vec::new();
    for (a, b) in registered {
        let mut pair = Vec::new();
        for (status, code, id) in [a, b] {
            let delivery = match &id {
                Some(hook) => Some(settled(&s, hook).await),
                None => None,
            };
            pair.push((status, code, delivery));
        }
        let b = pair.pop().unwrap();
        let a = pair.pop().unwrap();
        outcomes.push((a, b));
    }
    assert_eq!(open.hits(), 0, "a webhook reached the internal service");
    assert_eq!((metadata.0, metadata.1.as_str()), (422, "invalid_argument"));
    for ((open_url, _), (at_open, at_closed)) in pairs.iter().zip(&outcomes) {
        assert_eq!(
            at_open, at_closed,
            "{open_url}: an open port answers unlike a closed one"
        );
        if at_open.2.is_none() {
            assert_eq!(
                (at_open.0, at_open.1.as_str()),
                (422, "invalid_argument"),
                "{open_url}"
            );
        }
    }
    // The rebinding names were taken (public at registration) and failed
    // at each attempt, with no answer.
    let (flip, _) = outcomes.last().unwrap();
    let (state, attempts) = flip.2.clone().expect("the rebinding name was taken");
    assert_eq!(state, "failed");
    assert!(
        attempts.iter().all(|(status, _)| status.is_null()),
        "{attempts:?}"
    );
}

/// A sandbox create of `image` (a `true` command), detached.
fn with_image(name: &str, image: String) -> Value {
    json!({"name": name, "detached": true, "config": {"image": image, "command": ["true"]}})
}

/// Creates sandbox `name` of `image` as `s`'s tenant and starts it (its
/// pull): the create's status and error code, and the start's status if
/// the create was taken.
async fn create_and_start(s: &Served, name: &str, image: String) -> (u16, String, Option<u16>) {
    let made = s
        .call(
            &s.tenant,
            "POST",
            "/v1/sandboxes",
            Some(with_image(name, image)),
        )
        .await;
    if made.status != 201 {
        return (made.status, made.error_code_or_none(), None);
    }
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let started = s
        .call(
            &s.tenant,
            "POST",
            &format!("/v1/sandboxes/{id}/start"),
            Some(json!({})),
        )
        .await;
    (made.status, String::new(), Some(started.status))
}

/// What an internal registry answers.
const NO_REGISTRY: &[u8] = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_pulls_reach_no_internal_registry() {
    let registry = HostService::start(NO_REGISTRY);
    let s = Served::start(dns(), "operator", &[]).await;
    let r = registry.port;
    // Images at internal registries: refused as written out, refused at
    // the pull's connection behind a name.
    let mut answers = Vec::new();
    for (i, image) in [
        format!("127.0.0.1:{r}/x:1"),
        format!("[::1]:{r}/x:1"),
        format!("localhost:{r}/x:1"),
        format!("2130706433:{r}/x:1"),
        format!("loop.test:{r}/x:1"),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = create_and_start(&s, &format!("p{i}"), image.clone()).await;
        answers.push((image, answer));
    }
    assert_eq!(
        registry.hits(),
        0,
        "a tenant's pull reached an internal registry"
    );
    for (image, (status, code, started)) in answers {
        match started {
            None => assert_eq!((status, code.as_str()), (422, "invalid_config"), "{image}"),
            Some(st) => assert!(st >= 400, "{image}: started ({st})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_opens_an_internal_registry_to_tenants_pulls() {
    let allowed = HostService::start(NO_REGISTRY);
    let other = HostService::start(NO_REGISTRY);
    let allow = format!("tcp:127.0.0.1:{}", allowed.port);
    let s = Served::start(dns(), "operator", &[("OUTBOUND_ALLOW", allow.as_str())]).await;
    // What the operator allows is reached through the same guard (the
    // pull fails there: no registry), and nothing else of the host.
    let (status, _, started) =
        create_and_start(&s, "ok", format!("loop.test:{}/x:1", allowed.port)).await;
    assert_eq!(status, 201);
    assert!(
        started.is_some_and(|st| st >= 400),
        "not a registry: {started:?}"
    );
    assert!(allowed.hits() >= 1, "the allowed registry was not reached");
    let (_, _, started) = create_and_start(&s, "no", format!("loop.test:{}/x:1", other.port)).await;
    assert!(started.is_some_and(|st| st >= 400), "{started:?}");
    assert_eq!(
        other.hits(),
        0,
        "a registry the operator did not allow was reached"
    );
}
