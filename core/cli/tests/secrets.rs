#![allow(clippy::unwrap_used)]
//! Secrets end to end: real sandboxes whose guest holds a placeholder,
//! HTTP and HTTPS servers on this host's loopback that keep what reached
//! them, and a DNS server there naming them `api.test` (the secret's host)
//! and `other.test` (allowed by the policy, not the secret's), both at the
//! guest's gateway. The guest's HTTPS client is a static Go program
//! trusting only the image's store, where the sandbox's CA was put.
//! Nothing else is reached; root and rootless alike, both drivers.

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use burrow::{Backend, Error, NetworkPolicy, Sandbox};
use common::TestHome;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

const VALUE: &str = "ghp_ValueThatNeverEntersTheGuest_7f3a";

/// The loopback servers (once per test binary) and what reached them.
struct Servers {
    http: u16,
    https: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

fn servers() -> &'static Servers {
    static S: OnceLock<Servers> = OnceLock::new();
    S.get_or_init(|| {
        common::dns::serve(|name| match name {
            "api.test" | "other.test" => Some("10.0.2.2".parse().unwrap()),
            _ => None,
        });
        let heads = Arc::new(Mutex::new(Vec::new()));
        let http = TcpListener::bind("127.0.0.1:0").unwrap();
        let http_port = http.local_addr().unwrap().port();
        let kept = heads.clone();
        std::thread::spawn(move || {
            for c in http.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || answer(c, &kept));
            }
        });
        let (tls, ca_pem) = tls_config();
        let ca_file =
            std::env::temp_dir().join(format!("burrow-secrets-ca-{}.pem", std::process::id()));
        std::fs::write(&ca_file, ca_pem).unwrap();
        // The supervisors' stacks trust it for the far ends, as they would
        // a public CA of the host's store.
        std::env::set_var("BURROW_SECRETS_EXTRA_CA", &ca_file);
        let https = TcpListener::bind("127.0.0.1:0").unwrap();
        let https_port = https.local_addr().unwrap().port();
        let kept = heads.clone();
        std::thread::spawn(move || {
            for c in https.incoming().flatten() {
                let (kept, tls) = (kept.clone(), tls.clone());
                std::thread::spawn(move || {
                    if let Ok(conn) = rustls::ServerConnection::new(tls) {
                        answer(rustls::StreamOwned::new(conn, c), &kept);
                    }
                });
            }
        });
        Servers {
            http: http_port,
            https: https_port,
            heads,
        }
    })
}

/// Keeps a request's head and answers `ok` (never echoing it: the guest
/// must not see the value).
fn answer<S: Read + Write>(mut s: S, heads: &Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    heads
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    let _ = s.flush();
}

/// The HTTPS server's configuration (a certificate for both names from a
/// test CA) and the CA's PEM.
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "secrets test CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf =
        rcgen::CertificateParams::new(vec!["api.test".to_owned(), "other.test".to_owned()])
            .unwrap();
    leaf.use_authority_key_identifier_extension = true;
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)
    .unwrap();
    (Arc::new(cfg), ca_pem)
}

/// The guest's HTTPS client, built once (static, so any image runs it).
fn hget() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("secrets-hget");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/secrets/hget.go");
        let st = std::process::Command::new("go")
            .args(["build", "-trimpath", "-o"])
            .arg(&out)
            .arg(&src)
            .env("CGO_ENABLED", "0")
            .env("GO111MODULE", "off")
            .status()
            .expect("running go build");
        assert!(st.success(), "building the guest's HTTPS client");
        out
    })
}

async fn sh(sb: &Sandbox, script: &str) -> (i32, String) {
    let out = sb.exec(["sh", "-c", script]).await.unwrap();
    (
        out.status.code.unwrap_or(-1),
        out.stdout_str().trim().to_owned(),
    )
}

fn heads() -> Vec<String> {
    servers().heads.lock().unwrap().clone()
}

/// Every file under `dir` whose bytes hold `needle` (GNU grep: the VM's
/// disks are large).
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let out = std::process::Command::new("grep")
        .args(["-rlaF", "--", needle])
        .arg(dir)
        .output()
        .unwrap();
    // 0: found, 1: none, 2: trouble; but rootless, the overlay's own
    // scratch directory (`work/work`, the user namespace's root's) is not
    // ours to read, and holds no file anyway.
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Nor is a file that went between listing and reading (SQLite's
    // -wal and -shm come and go with its connections).
    let only_scratch = stderr.lines().all(|l| {
        l.ends_with("/work/work: Permission denied") || l.ends_with(": No such file or directory")
    });
    assert!(out.status.code() != Some(2) || only_scratch, "{stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn sandbox(home: &TestHome, name: &str) -> Sandbox {
    home.builder(name)
        .network(NetworkPolicy::allow(["127.0.0.1", "10.0.2.2", "api.test", "other.test"]).unwrap())
        .secret("TOKEN", VALUE, ["api.test"])
        .create()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_its_host_only_and_never_the_guest() {
    let s = servers();
    let home = TestHome::new().await;
    let sb = sandbox(&home, "secret").await;
    let (_, placeholder) = sh(&sb, "echo $TOKEN").await;
    assert!(placeholder.starts_with("BURROW_SECRET_"), "{placeholder}");
    let (_, node_ca) = sh(&sb, "echo $NODE_EXTRA_CA_CERTS").await;
    assert_eq!(node_ca, burrow::SANDBOX_CA_FILE);

    // Plain HTTP to the secret's host: the far end gets the value, in the
    // header only (a placeholder in the URL is refused: see
    // tests/attacks/secrets.rs).
    let get = |host: &str, port: u16| {
        format!(
            "wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://{host}:{port}/x 2>&1; echo \" rc=$?\""
        )
    };
    let (_, out) = sh(&sb, &get("api.test", s.http)).await;
    assert!(out.starts_with("ok rc=0"), "{out}");
    let h = heads();
    let got = h
        .iter()
        .find(|h| h.starts_with("GET /x "))
        .expect("the request to api.test");
    assert!(
        got.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{got}"
    );

    // To another host (allowed by the policy, at the same address): the
    // connection is closed before anything reaches it, and logged.
    let (_, out) = sh(&sb, &get("other.test", s.http)).await;
    assert!(!out.contains("rc=0"), "{out}");
    // (The tests of this binary share the servers: only this one names
    // other.test.)
    assert!(
        heads().iter().all(|h| !h.contains("Host: other.test")),
        "nothing reached other.test"
    );
    let logs = burrow_test_support::logs_of(home.dir.path());
    assert!(
        logs.contains("refused secret TOKEN to other.test"),
        "{logs}"
    );

    // HTTPS to the secret's host: intercepted with the sandbox's CA, which
    // the guest's store trusts.
    sb.fs()
        .write_with(
            "/root/hget",
            &std::fs::read(hget()).unwrap(),
            Some(0o755),
            false,
        )
        .await
        .unwrap();
    let (rc, out) = sh(
        &sb,
        &format!(
            "/root/hget https://api.test:{}/s \"Bearer $TOKEN\" 2>&1",
            s.https
        ),
    )
    .await;
    assert_eq!((rc, out.as_str()), (0, "ok"));
    assert!(heads()
        .iter()
        .any(|h| h.starts_with("GET /s ") && h.contains(&format!("Bearer {VALUE}\r\n"))));
    // other.test's HTTPS is not intercepted: its own certificate, which
    // the guest's store does not trust.
    let (rc, _) = sh(
        &sb,
        &format!("/root/hget https://other.test:{}/ x 2>&1", s.https),
    )
    .await;
    assert_eq!(rc, 1);

    // The value is nowhere in the guest: not in any process's
    // environment, nor in its files.
    let (_, envs) = sh(&sb, &format!("cat /proc/[0-9]*/environ | grep -c {VALUE}")).await;
    assert_eq!(envs, "0");
    let (_, files) = sh(
        &sb,
        &format!("grep -rl {VALUE} /etc /tmp /root /home /var 2>/dev/null | wc -l"),
    )
    .await;
    assert_eq!(files, "0");
    // Nor in the sandbox's records (its inspect), nor anywhere in the
    // burrow home: database, logs, the sandbox's disk.
    let info = serde_json::to_string(&sb.info().await.unwrap()).unwrap();
    assert!(
        !info.contains(VALUE) && info.contains(&placeholder),
        "{info}"
    );
    sb.stop().await.unwrap();
    let found = files_holding(home.dir.path(), VALUE);
    assert!(found.is_empty(), "{found:?}");

    // After a restart: the same placeholder and value, one CA block.
    sb.restart().await.unwrap();
    let (_, again) = sh(&sb, "echo $TOKEN").await;
    assert_eq!(again, placeholder);
    let (_, blocks) = sh(
        &sb,
        "grep -c 'burrow sandbox CA: begin' /etc/ssl/certs/ca-certificates.crt",
    )
    .await;
    assert_eq!(blocks, "1");
    let (rc, out) = sh(
        &sb,
        &format!(
            "/root/hget https://api.test:{}/again \"Bearer $TOKEN\" 2>&1",
            s.https
        ),
    )
    .await;
    assert_eq!((rc, out.as_str()), (0, "ok"));
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_goes_only_in_the_headers_it_names() {
    let s = servers();
    let home = TestHome::new().await;
    let config = |headers: &[&str]| {
        let mut c = burrow::SandboxConfig::new(common::busybox_rootfs().display().to_string());
        c.network = NetworkPolicy::allow(["127.0.0.1", "10.0.2.2", "api.test"])
            .unwrap()
            .into();
        c.secrets =
            vec![burrow::Secret::new("KEY", VALUE, ["api.test"]).in_headers(headers.to_vec())];
        c
    };
    let sb = home
        .builder("headers")
        .config(config(&["X-Api-Key"]))
        .create()
        .await
        .unwrap();
    let got = &sb.info().await.unwrap().config.secrets[0];
    assert_eq!(got.headers, ["X-Api-Key"]);
    assert!(got.value.is_none());
    let get = |header: &str, path: &str| {
        format!(
            "wget -q -O - --header \"{header}: $KEY\" http://api.test:{}/{path} 2>&1; echo \" rc=$?\"",
            s.http
        )
    };
    let (_, out) = sh(&sb, &get("x-api-key", "named")).await;
    assert!(out.starts_with("ok rc=0"), "{out}");
    assert!(heads().iter().any(
        |h| h.starts_with("GET /named ") && h.contains(&format!("\r\nx-api-key: {VALUE}\r\n"))
    ));
    // Authorization is not one of its headers now: refused whole.
    let (_, out) = sh(&sb, &get("Authorization", "unnamed")).await;
    assert!(!out.contains("rc=0"), "{out}");
    assert!(heads().iter().all(|h| !h.starts_with("GET /unnamed ")));
    sb.kill().await.unwrap();

    // The headers are checked at create: nothing is made of a bad one.
    // One past the limit of 16.
    let many: Vec<String> = (0..17).map(|i| format!("X-{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for (headers, field) in [
        (&["Host"][..], "secrets[0].headers[0]"),
        (
            &["X-Api-Key", "Transfer-Encoding"][..],
            "secrets[0].headers[1]",
        ),
        (&["X-A", "x-a"][..], "secrets[0].headers[1]"),
        (&many[..], "secrets[0].headers"),
    ] {
        match home.builder("bad").config(config(headers)).create().await {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field, "{headers:?}"),
            other => panic!("{headers:?}: {other:?}"),
        }
    }
    assert!(matches!(
        home.backend.get("bad").await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_secrets_are_typed_errors_and_create_nothing() {
    servers();
    let home = TestHome::new().await;
    let field = |r: burrow::Result<Sandbox>| match r {
        Err(Error::InvalidConfig { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let policy = || NetworkPolicy::allow(["api.test"]).unwrap();
    let r = home
        .builder("bad")
        .network(policy())
        .secret("1X", "v", ["api.test"])
        .create()
        .await;
    assert_eq!(field(r), "secrets[0].name");
    let r = home
        .builder("bad")
        .network(policy())
        .secret("T", "v", ["not a host"])
        .create()
        .await;
    assert_eq!(field(r), "secrets[0].hosts[0]");
    let r = home
        .builder("bad")
        .network(policy())
        .secret("T", "a\r\nb", ["api.test"])
        .create()
        .await;
    assert_eq!(field(r), "secrets[0].value");
    // No network: nowhere to send it.
    let r = home
        .builder("bad")
        .secret("T", "v", ["api.test"])
        .create()
        .await;
    assert_eq!(field(r), "secrets");
    assert!(matches!(
        home.backend.get("bad").await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_takes_a_secret_from_the_environment_or_a_file_never_the_command_line() {
    let s = servers();
    let home = TestHome::new().await;
    let image = common::busybox_rootfs().display().to_string();
    let file = home.path().join("token.txt");
    std::fs::write(&file, format!("{VALUE}\n")).unwrap();
    let run = |name: &str, secret: &str| {
        home.cli()
            .args([
                "create",
                "--name",
                name,
                "--allow",
                "10.0.2.2",
                "--allow",
                "127.0.0.1",
            ])
            .args(["--allow", "api.test", "--secret", secret])
            .arg(&image)
            .env("MY_TOKEN", VALUE)
            .output()
            .unwrap()
    };
    for bad in [
        "TOKEN@api.test=ghp_literal",
        "TOKEN=env:MY_TOKEN",
        "TOKEN@api.test",
        "TOKEN@api.test=env:NOT_SET_ANYWHERE",
        "1TOKEN@api.test=env:MY_TOKEN",
        "TOKEN@bad host=env:MY_TOKEN",
        // Headers after ':': one at least, never a port, nor a header
        // that routes or frames the request, nor one twice.
        "TOKEN@api.test:=env:MY_TOKEN",
        "TOKEN@api.test:8080=env:MY_TOKEN",
        "TOKEN@api.test:Host=env:MY_TOKEN",
        "TOKEN@api.test:X-Api-Key,x-api-key=env:MY_TOKEN",
    ] {
        let out = run("bad", bad);
        assert_eq!(
            out.status.code(),
            Some(6),
            "{bad}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains(VALUE));
    }
    let out = home.cli().args(["--json", "ls"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(0), "{v}");

    // Each secret, and the header it goes in.
    for (name, secret, header) in [
        (
            "from-env",
            "TOKEN@api.test=env:MY_TOKEN".to_owned(),
            "Authorization: Bearer",
        ),
        (
            "from-file",
            format!("TOKEN@api.test,*.api.test=file:{}", file.display()),
            "Authorization: Bearer",
        ),
        (
            "in-header",
            "TOKEN@api.test:X-Api-Key,X-Other=env:MY_TOKEN".to_owned(),
            "X-Api-Key:",
        ),
    ] {
        let out = run(name, &secret);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = home.cli().args(["inspect", name]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!text.contains(VALUE), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["config"]["secrets"][0]["name"], "TOKEN");
        let headers = &v["config"]["secrets"][0]["headers"];
        if name == "in-header" {
            assert_eq!(*headers, serde_json::json!(["X-Api-Key", "X-Other"]));
        } else {
            assert!(headers.is_null(), "{headers}");
        }
        let out = home.cli().args(["start", name]).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = home
            .cli()
            .args(["exec", name, "--", "sh", "-c"])
            .arg(format!(
                "wget -q -O - --header \"{header} $TOKEN\" http://api.test:{}/cli-{name}",
                s.http
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ok",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let h = heads();
        assert!(
            h.iter().any(|h| h.starts_with(&format!("GET /cli-{name} "))
                && h.contains(&format!("\r\n{header} {VALUE}\r\n"))),
            "{h:?}"
        );
        if name == "in-header" {
            // Not in Authorization, which it does not name: refused, and
            // nothing of the request left.
            let out = home
                .cli()
                .args(["exec", name, "--", "sh", "-c"])
                .arg(format!(
                    "wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://api.test:{}/cli-auth-{name}",
                    s.http
                ))
                .output()
                .unwrap();
            assert_ne!(String::from_utf8_lossy(&out.stdout), "ok");
            let h = heads();
            assert!(
                !h.iter().any(|h| h.contains(&format!("/cli-auth-{name} "))),
                "{h:?}"
            );
        }
        home.cli().args(["rm", "-f", name]).output().unwrap();
    }
}
