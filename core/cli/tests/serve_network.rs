#![allow(clippy::unwrap_used)]
//! Networks and published ports over `burrow serve`'s HTTP API, end to end
//! (a real server process on SQLite, real sandboxes, a plain HTTP client):
//! a policy created, read back and changed live; a bad rule refused as
//! `invalid_config` naming the rule's path, creating nothing; the
//! capabilities say so; a published port's host address taken is
//! `port_unavailable` (409) and a start once it is free serves it.

use burrow_cli_testkit as common;

use common::gateway::blocking;
use common::serve::{http, ServeEnv};
use common::TestHome;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn policies_and_ports_over_the_http_api() {
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("t");
    let server = env.start("a");
    let url = server.url.clone();
    let image = common::busybox_rootfs().display().to_string();
    blocking(move || {
        let t = Some(token.as_str());
        let caps = http("GET", &format!("{url}/v1/capabilities"), t, None);
        assert_eq!(caps.status, 200);
        assert_eq!(caps.json()["network_policy"], true);
        assert_eq!(caps.json()["published_ports"], true);

        // A policy: created running, read back as given, changed live.
        let body = serde_json::json!({
            "name": "pol",
            "detached": true,
            "config": {"image": image, "network": {"allow": ["pypi.org", "tcp:10.0.0.0/8:5432"], "deny": ["udp:*"]}},
        });
        let r = http("POST", &format!("{url}/v1/sandboxes"), t, Some(&body.to_string()));
        assert_eq!(r.status, 201, "{}", r.text());
        let id = r.json()["id"].as_str().unwrap().to_owned();
        let r = http("POST", &format!("{url}/v1/sandboxes/{id}/start"), t, Some("{}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let r = http("GET", &format!("{url}/v1/sandboxes/{id}"), t, None);
        assert_eq!(
            r.json()["config"]["network"],
            serde_json::json!({"allow": ["pypi.org", "tcp:10.0.0.0/8:5432"], "deny": ["udp:*"]})
        );
        let change = r#"{"network": {"allow": ["files.pythonhosted.org:443"]}}"#;
        let r = http("PATCH", &format!("{url}/v1/sandboxes/{id}"), t, Some(change));
        assert_eq!(r.status, 200, "{}", r.text());
        let plan = r.json();
        let net = plan["changes"].as_array().unwrap().iter().find(|c| c["field"] == "network").unwrap();
        assert_eq!(net["applies"], "live");
        assert_eq!(plan["info"]["config"]["network"]["allow"], serde_json::json!(["files.pythonhosted.org:443"]));

        // A bad rule: typed, the rule's path named, nothing created or changed.
        let bad = serde_json::json!({
            "name": "bad", "detached": true,
            "config": {"image": image, "network": {"allow": ["pypi.org", "a..b"]}},
        });
        let r = http("POST", &format!("{url}/v1/sandboxes"), t, Some(&bad.to_string()));
        assert_eq!(r.status, 422);
        assert_eq!(r.json()["error"]["code"], "invalid_config");
        assert_eq!(r.json()["error"]["subject"], "config.network.allow[1]");
        assert_eq!(http("GET", &format!("{url}/v1/sandboxes/by-name/bad"), t, None).status, 404);
        let r = http("PATCH", &format!("{url}/v1/sandboxes/{id}"), t, Some(r#"{"network": {"deny": ["pypi.org:9-8"]}}"#));
        assert_eq!(r.json()["error"]["subject"], "network.deny[0]");
        let r = http("GET", &format!("{url}/v1/sandboxes/{id}"), t, None);
        assert_eq!(r.json()["config"]["network"]["allow"], serde_json::json!(["files.pythonhosted.org:443"]));

        // A published port whose host address is taken.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let body = serde_json::json!({
            "name": "web", "detached": true,
            "config": {"image": image, "ports": [format!("{port}:8000")]},
        });
        let r = http("POST", &format!("{url}/v1/sandboxes"), t, Some(&body.to_string()));
        assert_eq!(r.status, 201, "{}", r.text());
        let web = r.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(r.json()["config"]["ports"], serde_json::json!([format!("127.0.0.1:{port}:8000")]));
        let r = http("POST", &format!("{url}/v1/sandboxes/{web}/start"), t, Some("{}"));
        assert_eq!(r.status, 409, "{}", r.text());
        assert_eq!(r.json()["error"]["code"], "port_unavailable");
        drop(taken);
        let r = http("POST", &format!("{url}/v1/sandboxes/{web}/start"), t, Some("{}"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(), "the server's supervisor listens");
        for sb in [&id, &web] {
            let r = http("POST", &format!("{url}/v1/sandboxes/{sb}/destroy"), t, Some("{}"));
            assert!(r.status < 300, "{}", r.text());
        }
    })
    .await;
}

/// A loopback HTTP server keeping each request's head; answers `ok`.
fn recorder() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head).into_owned());
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    (port, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secret_goes_in_over_the_http_api_and_never_comes_back() {
    const VALUE: &str = "sk_served_secret_value_0123";
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("t");
    let server = env.start("a");
    let url = server.url.clone();
    let remote: std::sync::Arc<dyn burrow::Backend> =
        std::sync::Arc::new(burrow::RemoteBackend::connect(&url, Some(token.clone())).unwrap());
    assert!(remote.capabilities().await.unwrap().secrets);
    let (port, heads) = recorder();
    // Created through the remote client: the one request that carries the
    // value.
    let sb = burrow::Sandbox::builder("served")
        .image(common::busybox_rootfs().display().to_string())
        .backend(remote.clone())
        .network(burrow::NetworkPolicy::allow(["127.0.0.1"]).unwrap())
        .secret("TOKEN", VALUE, ["127.0.0.1"])
        .create()
        .await
        .unwrap();
    let info = sb.info().await.unwrap();
    let secret = &info.config.secrets[0];
    assert_eq!(
        (secret.name.as_str(), secret.hosts.clone()),
        ("TOKEN", vec!["127.0.0.1".to_owned()])
    );
    assert!(secret.value.is_none());
    let placeholder = secret.placeholder.clone().unwrap();
    let out = sb
        .exec([
            "sh",
            "-c",
            &format!("echo $TOKEN; wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://10.0.2.2:{port}/"),
        ])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), format!("{placeholder}\nok"));
    let got = heads.lock().unwrap().clone();
    assert!(
        got[0].contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{got:?}"
    );
    // What the server answers never holds it, nor does its home.
    let path = format!("{url}/v1/sandboxes/{}", info.id);
    let raw = blocking(move || http("GET", &path, Some(&token), None).text()).await;
    assert!(raw.contains(&placeholder) && !raw.contains(VALUE), "{raw}");
    sb.stop().await.unwrap();
    let grep = std::process::Command::new("grep")
        .args(["-rlaF", "--", VALUE])
        .arg(th.path())
        .output()
        .unwrap();
    assert_eq!(
        grep.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&grep.stdout)
    );
    sb.kill().await.unwrap();
}
