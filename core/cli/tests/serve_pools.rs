#![allow(clippy::unwrap_used)]
//! Warm pools through `burrow serve`: two replicas on one home and one
//! Postgres database, pools managed through the HTTP API, the remote
//! backend and the CLI, and creates racing over both replicas for a pool
//! of four, each warm sandbox handed out once.

use burrow_cli_testkit as common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use burrow::{Backend, ErrorCode, RemoteBackend};
use common::gateway::{blocking, setup};
use common::serve::{http, metric_sample, Resp};
use serde_json::{json, Value};

fn config() -> Value {
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    json!({"image": image, "driver": common::driver()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pools_through_two_replicas_hand_out_each_sandbox_once() {
    let s = setup("pools_race", &[]).await;
    let (a, b) = (s.env.start("a"), s.env.start("b"));
    let token = s.token.clone();
    let call = {
        let token = token.clone();
        move |method: &'static str, url: String, body: Option<Value>| {
            let token = token.clone();
            async move {
                blocking(move || {
                    http(
                        method,
                        &url,
                        Some(&token),
                        body.map(|b| b.to_string()).as_deref(),
                    )
                })
                .await
            }
        }
    };
    let pools = format!("{}/v1/pools", a.url);

    // Defined through one replica, seen through the other.
    let spec = json!({"name": "api", "config": config(), "size": 4});
    let r: Resp = call("POST", pools.clone(), Some(spec.clone())).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        (r.json()["warm"].as_u64(), r.json()["size"].as_u64()),
        (Some(4), Some(4))
    );
    let r = call("GET", format!("{}/v1/pools/api", b.url), None).await;
    assert_eq!((r.status, r.json()["warm"].as_u64()), (200, Some(4)));

    // Bad definitions and requests: typed errors, nothing recorded.
    for (body, status, code) in [
        (spec.clone(), 409, "already_exists"),
        (
            json!({"name": "a/b/c", "config": config(), "size": 1}),
            422,
            "invalid_name",
        ),
        (
            json!({"name": "big", "config": config(), "size": 65}),
            422,
            "invalid_argument",
        ),
        (
            json!({"name": "x", "config": config(), "size": 1, "extra": 1}),
            422,
            "invalid_argument",
        ),
    ] {
        let r = call("POST", pools.clone(), Some(body.clone())).await;
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (status, code),
            "{body}"
        );
    }
    let r = call("PATCH", format!("{pools}/nope"), Some(json!({"size": 1}))).await;
    assert_eq!((r.status, r.error_code().as_str()), (404, "not_found"));
    let r = call("PATCH", format!("{pools}/api"), Some(json!({"size": -1}))).await;
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_argument")
    );
    let r = call("GET", pools.clone(), None).await;
    let names: Vec<Value> = r.json()["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(names, ["api"]);

    // Sixteen creates at once over both replicas.
    let barrier = Arc::new(Barrier::new(16));
    let urls = [a.url.clone(), b.url.clone()];
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let (barrier, token) = (barrier.clone(), token.clone());
            let url = format!("{}/v1/sandboxes", urls[i % 2]);
            std::thread::spawn(move || {
                let body = json!({"name": format!("c{i}"), "config": config(), "detached": true, "claim": true});
                barrier.wait();
                http("POST", &url, Some(&token), Some(&body.to_string()))
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for (i, racer) in racers.into_iter().enumerate() {
        let r = blocking(move || racer.join().unwrap()).await;
        assert_eq!(r.status, 201, "{}", r.text());
        let info = r.json();
        assert_eq!(info["name"], format!("c{i}").as_str());
        assert!(
            ids.insert(info["id"].as_str().unwrap().to_owned()),
            "{info}"
        );
    }
    let pool = call("GET", format!("{pools}/api"), None).await.json();
    let (claims, misses) = (
        pool["claims"].as_u64().unwrap(),
        pool["misses"].as_u64().unwrap(),
    );
    assert_eq!(claims + misses, 16, "{pool}");
    assert!(claims >= 1, "{pool}");
    let url = a.url.clone();
    let counted = blocking({
        let token = token.clone();
        move || metric_sample(&url, &token, "burrow_pool_claims_total{pool=\"api\"}")
    })
    .await;
    assert_eq!(counted, Some(claims));
    let r = call("GET", format!("{}/v1/sandboxes", b.url), None).await;
    assert_eq!(
        r.json()["sandboxes"].as_array().unwrap().len(),
        16,
        "warm sandboxes are not listed"
    );

    // The remote backend and the CLI manage the same pools.
    let remote = RemoteBackend::connect(&b.url, Some(token.clone())).unwrap();
    assert!(remote.capabilities().await.unwrap().pools);
    let scaled = remote.scale_pool("api", 0).await.unwrap();
    assert_eq!((scaled.size, scaled.warm), (0, 0));
    let err = remote.get_pool("a/b/c").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidName);
    let out =
        s.th.cli()
            .env("BURROW_URL", &a.url)
            .env("BURROW_TOKEN", &token)
            .args(["--json", "pool", "ls"])
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (listed[0]["name"].as_str(), listed[0]["size"].as_u64()),
        (Some("api"), Some(0))
    );
    remote.remove_pool("api").await.unwrap();
    let r = call("GET", format!("{pools}/api"), None).await;
    assert_eq!((r.status, r.error_code().as_str()), (404, "not_found"));
    let r = call("DELETE", format!("{pools}/api"), None).await;
    assert_eq!(r.status, 404);
    let r = call("GET", format!("{}/v1/sandboxes", a.url), None).await;
    assert_eq!(
        r.json()["sandboxes"].as_array().unwrap().len(),
        16,
        "claimed sandboxes stay"
    );
}
