#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `burrow serve` over TLS, end to end: real server processes with
//! certificates of test CAs (rcgen), the `burrow` CLI as the remote
//! backend's client with `BURROW_URL=https://...` and `BURROW_CA_CERT`, a
//! blocking rustls client that keeps its connection open, and plain
//! clients on the TLS port. The certificate and key are replaced while the
//! server runs, as a rotation (or a Kubernetes Secret update) does.

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::serve::{ServeEnv, Server};
use common::tls::{install, replace_file, HttpsConn, TestCa};
use common::TestHome;
use serde_json::Value;

/// A server home with a token and a first CA whose certificate the server
/// starts with.
struct Fixture {
    home: TestHome,
    env: ServeEnv,
    token: String,
    ca: TestCa,
    cert: PathBuf,
    key: PathBuf,
}

impl Fixture {
    async fn new() -> Fixture {
        let home = TestHome::new().await;
        let sqlite = format!("sqlite://{}/serve.db", home.path().display());
        let env = ServeEnv::new(home.path(), &sqlite).set("IDLE_TIMEOUT", "0");
        let token = {
            let env = env.clone();
            blocking(move || env.create_token("tls")).await
        };
        let ca = TestCa::new("burrow test CA 1");
        let cert = home.path().join("tls.crt");
        let key = home.path().join("tls.key");
        install(&ca.leaf(), &cert, &key);
        Fixture {
            home,
            env,
            token,
            ca,
            cert,
            key,
        }
    }

    /// A PEM file of `ca`'s certificate under the home.
    fn ca_file(&self, ca: &TestCa, name: &str) -> PathBuf {
        let path = self.home.path().join(name);
        ca.write(&path);
        path
    }

    /// `burrow --json ARGS` against `url`, trusting `ca_file` if given.
    fn cli(&self, url: &str, ca_file: Option<&Path>, args: &[&str]) -> Output {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        self.cli_text(url, ca_file, &all)
    }

    /// `burrow ARGS` against `url`, trusting `ca_file` if given.
    fn cli_text(&self, url: &str, ca_file: Option<&Path>, args: &[&str]) -> Output {
        let mut c = self.home.cli();
        c.env("BURROW_URL", url)
            .env("BURROW_TOKEN", &self.token)
            .env_remove("BURROW_CA_CERT")
            .args(args);
        if let Some(f) = ca_file {
            c.env("BURROW_CA_CERT", f);
        }
        c.output().unwrap()
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// `127.0.0.1:PORT` of an `https://` URL.
fn authority(server: &Server) -> String {
    server
        .url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not an https URL: {}", server.url))
        .to_owned()
}

/// The `--json` error code of a failed CLI call.
fn error_code(out: &Output) -> String {
    let body: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A keep-alive connection trusting `ca` and a capabilities answer on it.
fn open(server: &Server, ca: &TestCa, token: &str) -> std::io::Result<HttpsConn> {
    let mut conn = HttpsConn::open(&authority(server), "127.0.0.1", ca.client_config())?;
    let r = conn.get("/v1/capabilities", Some(token))?;
    assert_eq!(r.status, 200, "{}", r.text());
    Ok(conn)
}

/// Polls `f` until it holds, for at most `limit`.
fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_clients_trusting_the_ca_are_served_and_others_fail_cleanly() {
    let f = Fixture::new().await;
    let sock = f.home.path().join("serve.sock");
    let env = f
        .env
        .clone()
        .set("LISTEN", &format!("127.0.0.1:0,unix:{}", sock.display()))
        .set("TLS_CERT", f.cert.to_str().unwrap())
        .set("TLS_KEY", f.key.to_str().unwrap());
    let server = env.start("a");
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let url = server.url.clone();
    let port = url.rsplit(':').next().unwrap().to_owned();
    let ca1 = f.ca_file(&f.ca, "ca1.pem");
    let stranger = f.ca_file(&TestCa::new("a CA nobody uses"), "stranger.pem");
    let image = common::busybox_rootfs().display().to_string();
    let f = std::sync::Arc::new(f);
    let server = std::sync::Arc::new(server);
    let (f2, server2) = (f.clone(), server.clone());
    blocking(move || {
        let (f, server) = (f2, server2);
        // (a) The CLI through the remote backend, by address and by name.
        for u in [url.clone(), format!("https://localhost:{port}")] {
            let out = f.cli(&u, Some(&ca1), &["ls"]);
            assert_ok(&out, &u);
            let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(listed.is_array(), "{listed}");
        }
        // A sandbox's whole life over TLS: create, an attached start (the
        // session's streamed answer), a command (the runtime stream, an
        // upgraded connection), its output, stop and removal.
        let out = f.cli_text(
            &url,
            Some(&ca1),
            &["run", &image, "--", "sh", "-c", "echo over-tls"],
        );
        assert_ok(&out, "run");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "over-tls");

        // (b) Without the CA (only the system's roots), or with another
        // CA's: the typed error of a connection that cannot be made, at
        // once (not retried).
        for ca in [None, Some(stranger.as_path())] {
            let started = Instant::now();
            let out = f.cli(&url, ca, &["ls"]);
            assert_eq!(out.status.code(), Some(1), "{ca:?}");
            assert_eq!(error_code(&out), "io", "{ca:?}");
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "an untrusted certificate was retried: {:?}",
                started.elapsed()
            );
        }
        // A CA file that cannot be used is a configuration error.
        let missing = f.home.path().join("missing.pem");
        let out = f.cli(&url, Some(&missing), &["ls"]);
        assert_eq!(out.status.code(), Some(6));
        assert_eq!(error_code(&out), "invalid_config");

        // (c) Plain HTTP on the TLS port: no HTTP answer, the connection
        // ends; the server goes on serving the others.
        let mut kept = open(&server, &f.ca, &f.token).unwrap();
        let mut plain = std::net::TcpStream::connect(authority(&server)).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        plain
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer);
        assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
        // Silent clients (no handshake) held open meanwhile.
        let silent: Vec<_> = (0..4)
            .map(|_| std::net::TcpStream::connect(authority(&server)).unwrap())
            .collect();
        let out = f.cli(&url.replace("https://", "http://"), None, &["ls"]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(error_code(&out), "io");
        let r = kept.get("/v1/sandboxes", Some(&f.token)).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        open(&server, &f.ca, &f.token).unwrap();
        assert_ok(&f.cli(&url, Some(&ca1), &["ls"]), "after plain clients");
        drop(silent);

        // The unix socket stays plain HTTP.
        let mut u = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        u.write_all(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        u.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart_and_a_bad_one_is_not() {
    let f = Fixture::new().await;
    let env = f.env.clone().args(&[
        "--tls-cert",
        f.cert.to_str().unwrap(),
        "--tls-key",
        f.key.to_str().unwrap(),
    ]);
    let server = env.start("a");
    let ca2 = TestCa::new("burrow test CA 2");
    let ca3 = TestCa::new("burrow test CA 3");
    let ca2_file = f.ca_file(&ca2, "ca2.pem");
    blocking(move || {
        let pid = server.pid();
        // A connection opened before the rotation.
        let mut before = open(&server, &f.ca, &f.token).unwrap();
        assert!(open(&server, &ca2, &f.token).is_err());

        // (d) Rotation to a certificate of another CA.
        let leaf2 = ca2.leaf();
        install(&leaf2, &f.cert, &f.key);
        eventually(Duration::from_secs(15), "the rotated certificate", || {
            open(&server, &ca2, &f.token).is_ok()
        });
        // The CLI trusting only the new CA.
        assert_ok(
            &f.cli(&server.url, Some(&ca2_file), &["ls"]),
            "after rotation",
        );
        // The old certificate is no longer served to new connections...
        assert!(open(&server, &f.ca, &f.token).is_err());
        // ...and the connection opened before it still works.
        for _ in 0..3 {
            let r = before.get("/v1/sandboxes", Some(&f.token)).unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
        }

        // (e) A certificate of a third CA with the second's key: not a
        // pair. The second certificate stays in use.
        let leaf3 = ca3.leaf();
        replace_file(&f.cert, &leaf3.cert);
        std::thread::sleep(Duration::from_secs(4));
        for _ in 0..3 {
            open(&server, &ca2, &f.token).unwrap();
            assert!(open(&server, &ca3, &f.token).is_err());
        }
        assert_ok(
            &f.cli(&server.url, Some(&ca2_file), &["ls"]),
            "after a bad pair",
        );
        // Reported once, as a warning naming the file, not at every look.
        let warnings = server
            .log()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(f.cert.to_str().unwrap()))
            .count();
        assert_eq!(warnings, 1, "{}", server.log());

        // Its key arrives: the third certificate is served.
        replace_file(&f.key, &leaf3.key);
        eventually(Duration::from_secs(15), "the repaired pair", || {
            open(&server, &ca3, &f.token).is_ok()
        });
        let r = before.get("/v1/sandboxes", Some(&f.token)).unwrap();
        assert_eq!(r.status, 200);
        // All along, one server process.
        assert_eq!(server.pid(), pid);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_or_unusable_pair_stops_the_server_at_startup() {
    let f = Fixture::new().await;
    let other = TestCa::new("other").leaf();
    let other_key = f.home.path().join("other.key");
    std::fs::write(&other_key, &other.key).unwrap();
    let no_cert = f.home.path().join("no-cert.pem");
    std::fs::write(&no_cert, &other.key).unwrap();
    let missing = f.home.path().join("missing.crt");
    let (cert, key) = (f.cert.to_str().unwrap(), f.key.to_str().unwrap());
    // (what, flags, environment)
    type Case<'a> = (&'a str, Vec<String>, Vec<(&'a str, String)>);
    let cases: Vec<Case> = vec![
        (
            "--tls-cert alone",
            vec!["--tls-cert".into(), cert.into()],
            vec![],
        ),
        (
            "BURROW_SERVE_TLS_KEY alone",
            vec![],
            vec![("BURROW_SERVE_TLS_KEY", key.into())],
        ),
        (
            "a certificate file that is not there",
            vec![
                "--tls-cert".into(),
                missing.display().to_string(),
                "--tls-key".into(),
                key.into(),
            ],
            vec![],
        ),
        (
            "no certificate in the certificate file",
            vec![],
            vec![
                ("BURROW_SERVE_TLS_CERT", no_cert.display().to_string()),
                ("BURROW_SERVE_TLS_KEY", key.into()),
            ],
        ),
        (
            "another certificate's key",
            vec![
                "--tls-cert".into(),
                cert.into(),
                "--tls-key".into(),
                other_key.display().to_string(),
            ],
            vec![],
        ),
    ];
    for (what, args, vars) in cases {
        for check in [false, true] {
            let mut cmd = f.env.command();
            cmd.arg("--json")
                .args(&args)
                .env("BURROW_SERVE_LISTEN", "127.0.0.1:0");
            if check {
                cmd.arg("check");
            }
            for (k, v) in &vars {
                cmd.env(k, v);
            }
            let out = blocking(move || cmd.output().unwrap()).await;
            assert_eq!(
                out.status.code(),
                Some(6),
                "{what} (check: {check}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(error_code(&out), "invalid_config", "{what}");
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains("listening on"),
                "{what}: it listened"
            );
        }
    }
    // The good pair passes `check`.
    let mut cmd = f.env.command();
    cmd.args(["--tls-cert", cert, "--tls-key", key, "check"]);
    let out = blocking(move || cmd.output().unwrap()).await;
    assert_ok(&out, "check with a good pair");
}
