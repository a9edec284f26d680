//! A server without authentication (issue 56, class 10): it was open to
//! DNS rebinding (no `Host` check) and to any page of any site (JSON read
//! whatever the content type), and it could be started on a public
//! address. Now it answers only requests to a loopback name that no other
//! site's page made, bodies must be JSON, and `allow_public` with it
//! stops the server before it listens. A real `burrow serve` on SQLite.

use burrow_cli_testkit::serve::{ok, read_response, request_to_host, send_with, ServeEnv};
use burrow_cli_testkit::TestHome;
use serde_json::json;

fn open_server(home: &TestHome) -> (burrow_cli_testkit::serve::Server, ServeEnv) {
    let db = format!("sqlite://{}/serve.db", home.path().display());
    let env = ServeEnv::new(home.path(), &db).set("AUTH_REQUIRED", "false");
    (env.start("open"), env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_auth_answers_only_local_programs() {
    let home = TestHome::new().await;
    home.name_image("busybox");
    let (server, _env) = open_server(&home);
    let addr = server.url.strip_prefix("http://").unwrap().to_owned();
    let port = addr.rsplit_once(':').unwrap().1.to_owned();
    let created = |r: &burrow_cli_testkit::serve::Resp| r.status == 201;
    let body = json!({"name": "x", "config": {"image": "busybox"}, "detached": true}).to_string();
    tokio::task::spawn_blocking(move || {
        // A local program: answered.
        let r = read_response(send_with(
            "GET",
            &format!("http://{addr}/v1/sandboxes"),
            None,
            &[],
            None,
        ));
        ok(r, "a local program's list");
        // A page whose name was rebound to 127.0.0.1: its Host is its own.
        for host in [format!("attacker.example:{port}"), "10.0.0.1".into()] {
            let r = request_to_host(&addr, "GET", &host, "/v1/sandboxes", &[]);
            assert_eq!(
                (r.status, r.error_code()),
                (403, "forbidden".into()),
                "Host {host}: {}",
                r.text()
            );
        }
        for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
            let r = request_to_host(&addr, "GET", &host, "/v1/sandboxes", &[]);
            assert_eq!(r.status, 200, "Host {host}: {}", r.text());
        }
        // Another site's page (no-cors fetch, a form): refused, nothing made.
        let page = [
            ("Origin", "https://attacker.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ];
        let r = read_response(send_with(
            "POST",
            &format!("http://{addr}/v1/sandboxes"),
            None,
            &page,
            Some(&body),
        ));
        assert_eq!((r.status, r.error_code()), (403, "forbidden".into()));
        // A body that is not JSON (what a cross-site form can send).
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        use std::io::Write;
        write!(
            s,
            "POST /v1/sandboxes HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let r = read_response(s);
        assert_eq!(r.status, 415, "{}", r.text());
        // Nothing was made by what was refused; the same create as JSON is.
        let list = ok(
            read_response(send_with(
                "GET",
                &format!("http://{addr}/v1/sandboxes"),
                None,
                &[],
                None,
            )),
            "list",
        );
        assert_eq!(list["sandboxes"], json!([]), "{list}");
        let r = read_response(send_with(
            "POST",
            &format!("http://{addr}/v1/sandboxes"),
            None,
            &[],
            Some(&body),
        ));
        assert!(created(&r), "{} {}", r.status, r.text());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_auth_cannot_listen_in_public() {
    let home = TestHome::new().await;
    let db = format!("sqlite://{}/serve.db", home.path().display());
    let out = ServeEnv::new(home.path(), &db)
        .set("AUTH_REQUIRED", "false")
        .set("ALLOW_PUBLIC", "true")
        .set("LISTEN", "0.0.0.0:0")
        .command()
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started");
    // It stopped before it listened: no `listening on` line.
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening on"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
