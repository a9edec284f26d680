#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::proxy::GuardProxy;
use super::*;
use crate::dns::{self, RData, Record};

fn rules(list: &[&str]) -> Vec<Rule> {
    list.iter().map(|r| r.parse().unwrap()).collect()
}

fn guard(allow: &[&str]) -> Guard {
    Guard::new(rules(allow)).with_servers(Vec::new())
}

fn at(addr: &str) -> SocketAddr {
    addr.parse().unwrap()
}

#[test]
fn denied_addresses_pass_only_where_an_allow_rule_names_them() {
    let none = guard(&[]);
    for addr in [
        "127.0.0.1:80",
        "10.0.0.5:5000",
        "169.254.169.254:80",
        "100.64.1.1:80",
        "[::1]:80",
        "[::ffff:127.0.0.1]:80",
        "[fd00::1]:80",
        "0.0.0.0:80",
    ] {
        let e = none.vet("h", at(addr)).unwrap_err();
        assert!(e.is_refused(), "{addr}");
    }
    none.vet("example.com", at("8.8.8.8:443")).unwrap();
    let some = guard(&["tcp:127.0.0.1:5000", "10.0.0.0/8", "registry.internal"]);
    some.vet("h", at("127.0.0.1:5000")).unwrap();
    some.vet("h", at("[::ffff:127.0.0.1]:5000")).unwrap();
    assert!(some.vet("h", at("127.0.0.1:5001")).is_err());
    some.vet("h", at("10.200.0.1:80")).unwrap();
    // A name rule admits the addresses of that name only.
    some.vet("Registry.Internal.", at("192.168.1.9:443"))
        .unwrap();
    assert!(some.vet("other.internal", at("192.168.1.9:443")).is_err());
    assert!(some.vet("192.168.1.9", at("192.168.1.9:443")).is_err());
}

#[test]
fn literal_hosts_are_refused_before_any_lookup() {
    let g = guard(&[]);
    for host in [
        "127.0.0.1",
        "127.1",
        "0x7f.1",
        "0177.0.0.1",
        "2130706433",
        "0x7f000001",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
        "169.254.169.254",
        "0xa9fea9fe",
        "10.0.0.1",
        "localhost",
        "api.localhost",
        "0",
    ] {
        assert!(
            g.refuses_literal(host, 80).is_some_and(|e| e.is_refused()),
            "{host}"
        );
    }
    for host in ["example.com", "8.8.8.8", "loop.test"] {
        assert_eq!(g.refuses_literal(host, 80), None, "{host}");
    }
    let allowed = guard(&["127.0.0.1", "localhost"]);
    assert_eq!(allowed.refuses_literal("2130706433", 80), None);
    assert_eq!(allowed.refuses_literal("localhost", 80), None);
}

/// A DNS server on loopback answering `flip.test` with `first`, then
/// `then` for every later question; the number of questions.
fn flipping_dns(first: Ipv4Addr, then: Ipv4Addr) -> (SocketAddr, Arc<AtomicUsize>) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Ok(q) = dns::parse(&buf[..n]) else {
                continue;
            };
            let name = q.questions[0].name.clone();
            let ip = if count.fetch_add(1, Ordering::SeqCst) == 0 {
                first
            } else {
                then
            };
            let reply = dns::response(
                &q,
                dns::NOERROR,
                &[Record {
                    name,
                    ttl: 0,
                    data: RData::A(ip),
                }],
            );
            let _ = sock.send_to(&reply, from);
        }
    });
    (addr, asked)
}

#[tokio::test]
async fn a_name_that_rebinds_is_refused_at_the_lookup_that_connects() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (dns, asked) = flipping_dns(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::LOCALHOST);
    let g = Guard::new(Vec::new()).with_servers(vec![dns]);
    // First: a public-looking address, vetted and kept.
    assert_eq!(
        g.resolve("flip.test", port).await.unwrap(),
        vec![SocketAddr::from(([192, 0, 2, 1], port))]
    );
    // Then loopback: refused, never connected to.
    let e = g.connect("flip.test", port).await.unwrap_err();
    assert!(e.is_refused(), "{e}");
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let accepted =
        tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the listener was reached");
}

#[tokio::test]
async fn connect_reaches_an_allowed_address_and_nothing_denied() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    for host in ["127.0.0.1", "127.1", "2130706433", "localhost"] {
        let e = guard(&[]).connect(host, port).await.unwrap_err();
        assert!(e.is_refused(), "{host}: {e}");
    }
    let mut s = guard(&["127.0.0.1"]).connect("127.1", port).await.unwrap();
    let (mut c, _) = listener.accept().await.unwrap();
    c.write_all(b"hi").await.unwrap();
    let mut got = [0u8; 2];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"hi");
}

/// Sends `head` to the proxy; the status of its answer.
async fn through(proxy: &GuardProxy, head: &str) -> (u16, tokio::net::TcpStream) {
    let mut s = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        buf.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, s)
}

#[tokio::test]
async fn the_proxy_vets_each_connection_and_wants_its_credentials() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let refusing = GuardProxy::start(Arc::new(guard(&[]))).await.unwrap();
    let url = refusing.url();
    let creds = url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('@'))
        .map(|(c, _)| c.to_owned())
        .unwrap();
    let auth = format!(
        "Proxy-Authorization: Basic {}\r\n",
        super::proxy::base64(creds.as_bytes())
    );
    // Without credentials: 407.
    let (status, _) = through(
        &refusing,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 407);
    for target in [
        format!("127.0.0.1:{port}"),
        format!("2130706433:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (status, _) = through(
            &refusing,
            &format!("CONNECT {target} HTTP/1.1\r\n{auth}\r\n"),
        )
        .await;
        assert_eq!(status, 403, "{target}");
    }
    let (status, _) = through(
        &refusing,
        &format!("GET http://127.0.0.1:{port}/v2/ HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
    )
    .await;
    assert_eq!(status, 403);
    let accepted =
        tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the listener was reached");

    // Allowed: CONNECT relays bytes, a plain request is forwarded in
    // origin form with the proxy's own headers taken out.
    let allowing = GuardProxy::start(Arc::new(guard(&["127.0.0.1"])))
        .await
        .unwrap();
    let creds = allowing.url();
    let creds = creds
        .strip_prefix("http://")
        .and_then(|r| r.split_once('@'))
        .map(|(c, _)| c.to_owned())
        .unwrap();
    let auth = format!(
        "Proxy-Authorization: Basic {}\r\n",
        super::proxy::base64(creds.as_bytes())
    );
    let (status, mut s) = through(
        &allowing,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n{auth}\r\n"),
    )
    .await;
    assert_eq!(status, 200);
    let (mut far, _) = listener.accept().await.unwrap();
    s.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    far.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    let mut s = tokio::net::TcpStream::connect(allowing.addr())
        .await
        .unwrap();
    s.write_all(
        format!("GET http://127.0.0.1:{port}/v2/?n=1 HTTP/1.1\r\nHost: h\r\n{auth}Proxy-Connection: keep-alive\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let (mut far, _) = listener.accept().await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        far.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("GET /v2/?n=1 HTTP/1.1\r\n"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
    assert!(head.contains("Connection: close\r\n"), "{head}");
}
