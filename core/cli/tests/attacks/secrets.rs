//! Item 7: secret values came back to the guest. The stack put a secret's
//! value in place of its placeholder anywhere in a request's head (the
//! request line too) and never read the answers, so a 404 page echoing
//! the request, or a redirect repeating it in `Location`, handed the value
//! to the guest; on intercepted HTTPS the `Host` was not compared with the
//! TLS name, nor an absolute-form target's host with `Host`, so a virtual
//! host or a proxy behind the secret's host got it for another.
//!
//! Real sandboxes whose guest holds the placeholder of `TOKEN` (for
//! `api.test`), a test DNS naming `api.test` and `other.test` (both at the
//! guest's gateway, so both reach this host's loopback), and HTTP and
//! HTTPS servers there (one certificate for both names) that keep every
//! head they get and reflect it: a 404 echoing the request line and
//! headers in the reason phrase, a header and a chunked body (raw, base64,
//! URL-safe base64, hex both cases, percent-encoded, JSON), a redirect
//! repeating the path and the `Authorization` in `Location`, or an answer
//! that says it is gzip. The guest speaks raw HTTP (a static Go client,
//! plain or TLS trusting the image's store, where the sandbox's CA is), so
//! each attack sends exactly its bytes. Each test asserts on what reached
//! the server (the value only ever in `Authorization`) and on what reached
//! the guest (the value in no form).

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use burrow::{NetworkPolicy, Sandbox};
use common::TestHome;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

const VALUE: &str = "ghp_AttackValue/NeverInTheGuest+9c41";

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
                std::thread::spawn(move || reflect(c, &kept));
            }
        });
        let (tls, ca_pem) = tls_config();
        let ca_file = std::env::temp_dir().join(format!(
            "burrow-attacks-secrets-ca-{}.pem",
            std::process::id()
        ));
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
                        reflect(rustls::StreamOwned::new(conn, c), &kept);
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

/// Keeps a request's head and reflects it the way its `X-Answer` header
/// asks (`echo` by default).
fn reflect<S: Read + Write>(mut s: S, heads: &Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    heads.lock().unwrap().push(text.clone());
    let line = |name: &str| {
        text.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let target = text.split(' ').nth(1).unwrap_or("").to_owned();
    let auth = line("authorization");
    let answer = match line("x-answer").as_str() {
        "redirect" => format!(
            "HTTP/1.1 302 Found\r\nLocation: https://api.test/login?next={target}&auth={}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            pct(auth.as_bytes())
        ),
        "gzip" => format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{text}",
            text.len()
        ),
        _ => {
            let body = format!(
                "head: {text}\nb64: {}\nb64url: {}\nhex: {}\nHEX: {}\npct: {}\njson: {}\nend\n",
                b64(text.as_bytes(), false, true),
                b64(text.as_bytes(), true, false),
                hex(text.as_bytes(), false),
                hex(text.as_bytes(), true),
                pct(text.as_bytes()),
                serde_json::to_string(&text).unwrap(),
            );
            // In 5-byte chunks: every value is cut across several.
            let mut chunked = String::new();
            for piece in body.as_bytes().chunks(5) {
                chunked.push_str(&format!("{:x}\r\n", piece.len()));
                chunked.push_str(std::str::from_utf8(piece).unwrap());
                chunked.push_str("\r\n");
            }
            format!(
                "HTTP/1.1 404 No {target}\r\nX-Echo-Authorization: {auth}\r\n\
                 Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunked}0\r\n\r\n"
            )
        }
    };
    let _ = s.write_all(answer.as_bytes());
    let _ = s.flush();
}

/// The HTTPS server's configuration (a certificate for both names from a
/// test CA) and the CA's PEM.
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "attacks secrets test CA");
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

/// The guest's raw HTTP client: `graw tcp|tls HOST:PORT SNI REQUEST_B64`
/// sends the request's bytes as they are (over TLS as SNI, trusting the
/// system store) and prints every byte that comes back until the far end
/// closes.
const GRAW: &str = r#"package main

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: graw tcp|tls HOST:PORT SNI REQUEST_B64")
		os.Exit(2)
	}
	req, err := base64.StdEncoding.DecodeString(os.Args[4])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := net.DialTimeout("tcp", os.Args[2], 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Args[1] == "tls" {
		t := tls.Client(c, &tls.Config{ServerName: os.Args[3], NextProtos: []string{"http/1.1"}})
		if err := t.Handshake(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c = t
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(req); err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
	}
	out, err := io.ReadAll(c)
	os.Stdout.Write(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
	}
}
"#;

/// The guest's client, built once.
fn graw() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| super::guest_program("graw", GRAW))
}

/// A sandbox whose `TOKEN` is for api.test, with the client in it; and
/// its placeholder.
async fn sandbox(home: &TestHome, name: &str) -> (Sandbox, String) {
    servers();
    let sb = home
        .builder(name)
        .network(NetworkPolicy::allow(["127.0.0.1", "10.0.2.2", "api.test", "other.test"]).unwrap())
        .secret("TOKEN", VALUE, ["api.test"])
        .create()
        .await
        .unwrap();
    sb.fs()
        .write_with(
            "/root/graw",
            &std::fs::read(graw()).unwrap(),
            Some(0o755),
            false,
        )
        .await
        .unwrap();
    let out = sb.exec(["sh", "-c", "echo $TOKEN"]).await.unwrap();
    let placeholder = out.stdout_str().trim().to_owned();
    assert!(placeholder.starts_with("BURROW_SECRET_"), "{placeholder}");
    (sb, placeholder)
}

#[derive(Clone, Copy)]
enum Via {
    Http,
    Https,
}

/// Sends `request` from the guest to api.test (as SNI over HTTPS); every
/// byte the guest got back.
async fn send(sb: &Sandbox, via: Via, request: &str) -> Vec<u8> {
    let s = servers();
    let (mode, port) = match via {
        Via::Http => ("tcp", s.http),
        Via::Https => ("tls", s.https),
    };
    let addr = format!("api.test:{port}");
    let req = b64(request.as_bytes(), false, true);
    let out = sb
        .exec(["/root/graw", mode, addr.as_str(), "api.test", req.as_str()])
        .await
        .unwrap();
    out.stdout
}

/// The heads the servers got carrying `marker` (each request names its
/// attack in an `X-Test` header).
fn heads_marked(marker: &str) -> Vec<String> {
    servers()
        .heads
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.contains(&format!("\r\nX-Test: {marker}\r\n")))
        .cloned()
        .collect()
}

/// Asserts the value reached the server only in `Authorization` lines
/// (and only to api.test, in heads naming no other host).
fn value_only_in_authorization(marker: &str) {
    for head in heads_marked(marker) {
        for (i, line) in head.split("\r\n").enumerate() {
            if line.contains(VALUE) {
                assert!(
                    i > 0 && line.starts_with("Authorization: "),
                    "{marker}: the value reached the server outside Authorization: {head}"
                );
                assert!(
                    !head.contains("other.test"),
                    "{marker}: the value reached the server for another host: {head}"
                );
            }
        }
    }
}

/// Every way the value can be spelled in what the guest got: as it is,
/// base64 (both alphabets, at the three alignments it can have in a
/// longer text: the characters only its bits decide), hex both cases,
/// percent-encoded both cases, JSON.
fn spellings() -> Vec<String> {
    let v = VALUE.as_bytes();
    let mut out = vec![
        VALUE.to_owned(),
        hex(v, false),
        hex(v, true),
        pct(v),
        pct(v).to_lowercase(),
        serde_json::to_string(VALUE).unwrap(),
        serde_json::to_string(VALUE).unwrap().replace('/', "\\/"),
    ];
    for url in [false, true] {
        for shift in 0..3usize {
            let mut text = vec![0u8; shift];
            text.extend_from_slice(v);
            let enc = b64(&text, url, false);
            let first = (8 * shift).div_ceil(6);
            let last = 8 * text.len() / 6;
            out.push(enc[first..last].to_owned());
        }
    }
    out
}

/// An answer with its chunked body read through the chunks (as the
/// guest's HTTP client would read it); as it is when it is not chunked.
fn dechunked(got: &[u8]) -> Vec<u8> {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return got.to_vec();
    };
    let (head, mut rest) = (&got[..end + 4], &got[end + 4..]);
    if !String::from_utf8_lossy(head).contains("Transfer-Encoding: chunked") {
        return got.to_vec();
    }
    let mut out = head.to_vec();
    while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|t| usize::from_str_radix(t.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0 && rest.len() >= nl + 2 + n) else {
            break;
        };
        out.extend_from_slice(&rest[nl + 2..nl + 2 + size]);
        rest = rest.get(nl + 4 + size..).unwrap_or(&[]);
    }
    out
}

/// Asserts no 8 bytes of any spelling of the value are in `got`, as it
/// came or read through its chunks.
fn no_value_in(what: &str, got: &[u8]) {
    let read = dechunked(got);
    for got in [got, &read[..]] {
        no_spelling_in(what, got);
    }
}

fn no_spelling_in(what: &str, got: &[u8]) {
    for s in spellings() {
        let inner = s.trim_matches('"').as_bytes();
        for w in inner.windows(8) {
            assert!(
                !got.windows(8).any(|g| g == w),
                "{what}: the guest got {:?} of the value: {}",
                String::from_utf8_lossy(w),
                String::from_utf8_lossy(got)
            );
        }
    }
}

fn b64(bytes: &[u8], url: bool, pad: bool) -> String {
    let abc: &[u8; 64] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = Vec::new();
    for g in bytes.chunks(3) {
        let n = (u32::from(g[0]) << 16)
            | (u32::from(*g.get(1).unwrap_or(&0)) << 8)
            | u32::from(*g.get(2).unwrap_or(&0));
        for i in 0..=g.len() {
            out.push(abc[((n >> (18 - 6 * i)) & 63) as usize]);
        }
        if pad {
            out.extend(std::iter::repeat_n(b'=', 3 - g.len()));
        }
    }
    String::from_utf8(out).unwrap()
}

fn hex(bytes: &[u8], upper: bool) -> String {
    if upper {
        bytes.iter().map(|b| format!("{b:02X}")).collect()
    } else {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

fn pct(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn port(via: Via) -> u16 {
    match via {
        Via::Http => servers().http,
        Via::Https => servers().https,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoing_404_shows_the_guest_no_form_of_the_value() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "echo404").await;
    for via in [Via::Http, Via::Https] {
        let marker = format!("echo404-{}", port(via));
        let got = send(
            &sb,
            via,
            &format!(
                "GET /probe HTTP/1.1\r\nHost: api.test:{}\r\nAuthorization: Bearer {ph}\r\n\
                 X-Test: {marker}\r\nConnection: close\r\n\r\n",
                port(via)
            ),
        )
        .await;
        // The value went, in its header; the echo came back whole, every
        // spelling of the value masked in it.
        no_value_in(&marker, &got);
        let read = dechunked(&got);
        let heads = heads_marked(&marker);
        assert_eq!(heads.len(), 1, "{marker}: {heads:?}");
        assert!(heads[0].contains(&format!("\r\nAuthorization: Bearer {VALUE}\r\n")));
        value_only_in_authorization(&marker);
        let text = String::from_utf8_lossy(&read);
        assert!(
            text.starts_with("HTTP/1.1 404 No /probe") && text.ends_with("\nend\n"),
            "{marker}: {text}"
        );
    }
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_repeating_the_request_shows_the_guest_no_value() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "redirect").await;
    for via in [Via::Http, Via::Https] {
        // The placeholder in the path, which the redirect repeats: refused
        // before anything reaches the server.
        let marker = format!("redirect-path-{}", port(via));
        let got = send(
            &sb,
            via,
            &format!(
                "GET /r/{ph} HTTP/1.1\r\nHost: api.test:{}\r\nAuthorization: Bearer {ph}\r\n\
                 X-Answer: redirect\r\nX-Test: {marker}\r\nConnection: close\r\n\r\n",
                port(via)
            ),
        )
        .await;
        no_value_in(&marker, &got);
        value_only_in_authorization(&marker);
        assert!(heads_marked(&marker).is_empty(), "{marker}");
        // The value in its header, which the redirect repeats
        // (percent-encoded) in Location: masked there.
        let marker = format!("redirect-auth-{}", port(via));
        let got = send(
            &sb,
            via,
            &format!(
                "GET /r HTTP/1.1\r\nHost: api.test:{}\r\nAuthorization: Bearer {ph}\r\n\
                 X-Answer: redirect\r\nX-Test: {marker}\r\nConnection: close\r\n\r\n",
                port(via)
            ),
        )
        .await;
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with(
                "HTTP/1.1 302 Found\r\nLocation: https://api.test/login?next=/r&auth=Bearer%20"
            ),
            "{marker}: {text}"
        );
        no_value_in(&marker, &got);
        value_only_in_authorization(&marker);
        assert_eq!(heads_marked(&marker).len(), 1);
    }
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_header_other_than_the_tls_name_gets_no_value() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "tls-host").await;
    // TLS to api.test (intercepted: the secret is for it), Host other.test
    // (served by the same far end, as a virtual host would be).
    let marker = "tls-host-mismatch";
    let got = send(
        &sb,
        Via::Https,
        &format!(
            "GET /x HTTP/1.1\r\nHost: other.test:{}\r\nAuthorization: Bearer {ph}\r\n\
             X-Test: {marker}\r\nConnection: close\r\n\r\n",
            port(Via::Https)
        ),
    )
    .await;
    no_value_in(marker, &got);
    value_only_in_authorization(marker);
    assert!(heads_marked(marker).iter().all(|h| !h.contains(VALUE)));
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_form_target_naming_another_host_gets_no_value() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "absolute").await;
    for (via, scheme) in [(Via::Http, "http"), (Via::Https, "https")] {
        let marker = format!("absolute-{scheme}");
        let got = send(
            &sb,
            via,
            &format!(
                "GET {scheme}://other.test:{port}/abs HTTP/1.1\r\nHost: api.test:{port}\r\n\
                 Authorization: Bearer {ph}\r\nX-Test: {marker}\r\nConnection: close\r\n\r\n",
                port = port(via)
            ),
        )
        .await;
        no_value_in(&marker, &got);
        value_only_in_authorization(&marker);
        assert!(
            heads_marked(&marker).iter().all(|h| !h.contains(VALUE)),
            "{marker}"
        );
    }
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_in_the_request_line_or_another_header_is_never_replaced() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "reqline").await;
    for via in [Via::Http, Via::Https] {
        let p = port(via);
        for (what, request) in [
            (
                "query",
                format!("GET /q?token={ph} HTTP/1.1\r\nHost: api.test:{p}\r\n"),
            ),
            (
                "path",
                format!(
                    "GET /{ph}/x HTTP/1.1\r\nHost: api.test:{p}\r\nAuthorization: Bearer {ph}\r\n"
                ),
            ),
            (
                "header",
                format!("GET /h HTTP/1.1\r\nHost: api.test:{p}\r\nX-Token: {ph}\r\n"),
            ),
        ] {
            let marker = format!("reqline-{what}-{p}");
            let got = send(
                &sb,
                via,
                &format!("{request}X-Test: {marker}\r\nConnection: close\r\n\r\n"),
            )
            .await;
            no_value_in(&marker, &got);
            value_only_in_authorization(&marker);
            assert!(
                heads_marked(&marker).iter().all(|h| !h.contains(VALUE)),
                "{marker}"
            );
        }
    }
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_answer_to_a_request_with_a_value_does_not_reach_the_guest() {
    let home = TestHome::new().await;
    let (sb, ph) = sandbox(&home, "gzip").await;
    for via in [Via::Http, Via::Https] {
        let marker = format!("gzip-{}", port(via));
        let got = send(
            &sb,
            via,
            &format!(
                "GET /z HTTP/1.1\r\nHost: api.test:{}\r\nAuthorization: Bearer {ph}\r\n\
                 Accept-Encoding: gzip\r\nX-Answer: gzip\r\nX-Test: {marker}\r\n\
                 Connection: close\r\n\r\n",
                port(via)
            ),
        )
        .await;
        // The request asked for no coding; the server coded it anyway
        // (here, by saying so over the echo): the guest gets none of it.
        no_value_in(&marker, &got);
        let heads = heads_marked(&marker);
        assert_eq!(heads.len(), 1, "{marker}: {heads:?}");
        assert!(
            heads[0].contains("\r\nAccept-Encoding: identity\r\n")
                && !heads[0].contains("gzip\r\nX-Answer"),
            "{}",
            heads[0]
        );
        assert!(!String::from_utf8_lossy(&got).contains("Content-Encoding: gzip"));
    }
    sb.kill().await.unwrap();
}
