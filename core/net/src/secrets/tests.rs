#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn hosts_parse_and_match() {
    let exact = SecretHost::parse("API.Example.com.").unwrap();
    assert_eq!(exact, SecretHost::Domain("api.example.com".into()));
    assert!(exact.matches("api.example.com"));
    assert!(!exact.matches("x.api.example.com"));
    let wild = SecretHost::parse("*.example.com").unwrap();
    assert!(wild.matches("a.b.example.com"));
    assert!(!wild.matches("example.com"));
    assert!(!wild.matches("badexample.com"));
    let ip = SecretHost::parse("127.0.0.1").unwrap();
    assert!(ip.matches("127.0.0.1"));
    assert!(!ip.matches("127.0.0.2"));
    assert_eq!(wild.to_string(), "*.example.com");
    for bad in ["", "*", "a..b", "*.*.x", "exa mple.com", "1.2.3", "-a.com"] {
        let e = SecretHost::parse(bad).unwrap_err();
        assert_eq!(e.what, "secret host", "{bad}");
    }
}

#[test]
fn names_and_values_are_checked_without_quoting_the_value() {
    check_name("GITHUB_TOKEN").unwrap();
    check_name("_x1").unwrap();
    for bad in ["", "1A", "A-B", "A=B", &"A".repeat(129)] {
        assert_eq!(check_name(bad).unwrap_err().what, "secret name");
    }
    check_value("ghp_abc").unwrap();
    for bad in ["", "a\nb", "a\rb", "a\0b"] {
        let e = check_value(bad).unwrap_err();
        assert_eq!(e.what, "secret value");
        assert!(e.text.is_empty());
    }
    assert!(check_value(&"x".repeat(MAX_VALUE + 1)).is_err());
}

#[test]
fn placeholders_have_their_form() {
    let p = placeholder_from([0xab; 16]);
    assert!(is_placeholder(&p));
    assert_eq!(p.len(), PLACEHOLDER_PREFIX.len() + PLACEHOLDER_DIGITS);
    assert!(!is_placeholder("BURROW_SECRET_xyz"));
    assert!(!is_placeholder(&p[1..]));
}

#[cfg(feature = "stack")]
mod filter {
    use std::sync::Arc;

    use super::super::http::{Filter, Leak, Peer, Place};
    use super::*;

    pub(crate) fn secret(name: &str, fill: u8, value: &str, hosts: &[&str]) -> Secret {
        Secret {
            name: name.into(),
            placeholder: placeholder_from([fill; 16]),
            value: value.into(),
            hosts: hosts
                .iter()
                .map(|h| SecretHost::parse(h).unwrap())
                .collect(),
            headers: Vec::new(),
        }
    }

    fn secrets() -> Arc<[Secret]> {
        let mut key = secret("KEY", 3, "key_real", &["api.github.com"]);
        key.headers = vec!["X-Api-Key".into()];
        Arc::from(vec![
            secret("GH", 1, "ghp_real", &["api.github.com"]),
            secret("LOCAL", 2, "loc_real", &["127.0.0.1"]),
            key,
        ])
    }

    fn ph(fill: u8) -> String {
        placeholder_from([fill; 16])
    }

    fn plain(names: &[&str]) -> Peer {
        Peer::Plain {
            dst: "140.82.112.6".parse().unwrap(),
            host_ip: "140.82.112.6".parse().unwrap(),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// Pushes `input` in pieces of `step` bytes; the bytes that went on,
    /// or the leak.
    fn run(peer: Peer, input: &[u8], step: usize) -> Result<Vec<u8>, Leak> {
        let mut f = Filter::new(secrets(), peer);
        let mut out = Vec::new();
        for piece in input.chunks(step.max(1)) {
            f.push(piece, &mut out)?;
        }
        f.finish(&mut out)?;
        Ok(out)
    }

    fn text(r: Result<Vec<u8>, Leak>) -> String {
        String::from_utf8(r.unwrap()).unwrap()
    }

    #[test]
    fn the_value_goes_only_in_the_headers_the_secret_names() {
        let req = format!(
            "GET /x HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer {}\r\n\
             Accept-Encoding: gzip, br\r\nProxy-Authorization: {}\r\nx-api-key: {}\r\n\r\n",
            ph(1),
            ph(1),
            ph(3)
        );
        for step in [1, 7, 4096] {
            assert_eq!(
                text(run(plain(&["api.github.com"]), req.as_bytes(), step)),
                "GET /x HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer ghp_real\r\n\
                 Proxy-Authorization: ghp_real\r\nx-api-key: key_real\r\n\
                 Accept-Encoding: identity\r\n\r\n"
            );
        }
        // Without a placeholder the head passes as it is, Accept-Encoding
        // and all.
        let req = "GET / HTTP/1.1\r\nHost: api.github.com\r\nAccept-Encoding: gzip\r\n\r\n";
        assert_eq!(
            text(run(plain(&["api.github.com"]), req.as_bytes(), 3)),
            req
        );
    }

    #[test]
    fn a_placeholder_in_the_request_line_or_another_header_is_refused_even_to_its_host() {
        let cases = [
            (
                format!(
                    "GET /x?t={} HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n",
                    ph(1),
                    ph(1)
                ),
                "GH",
                Place::RequestLine,
            ),
            (
                format!(
                    "GET /x HTTP/1.1\r\nHost: api.github.com\r\nX-Token: {}\r\n\r\n",
                    ph(1)
                ),
                "GH",
                Place::Header("X-Token".into()),
            ),
            // KEY names X-Api-Key only: not Authorization.
            (
                format!(
                    "GET / HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n",
                    ph(3)
                ),
                "KEY",
                Place::Header("Authorization".into()),
            ),
            // In a header's name.
            (
                format!(
                    "GET / HTTP/1.1\r\nHost: api.github.com\r\n{}: x\r\n\r\n",
                    ph(1)
                ),
                "GH",
                Place::Header(ph(1)),
            ),
        ];
        for (req, secret, place) in cases {
            for step in [1, 5, 4096] {
                let leak = run(plain(&["api.github.com"]), req.as_bytes(), step).unwrap_err();
                assert_eq!(leak.secret, secret, "{req}");
                assert_eq!(leak.place, place, "{req}");
                assert_eq!(leak.host.as_deref(), Some("api.github.com"));
            }
        }
    }

    #[test]
    fn a_head_to_another_host_is_a_leak() {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        let leak = run(plain(&["evil.test"]), req.as_bytes(), 5).unwrap_err();
        assert_eq!(leak.secret, "GH");
        assert_eq!(leak.host.as_deref(), Some("evil.test"));
        assert_eq!(leak.place, Place::Elsewhere);
    }

    #[test]
    fn a_host_header_the_address_was_not_resolved_from_is_not_believed() {
        // The guest names the allowed host but connects to an address it
        // resolved from another name (or none).
        let req = format!(
            "GET / HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        let leak = run(plain(&["evil.test"]), req.as_bytes(), 64).unwrap_err();
        assert_eq!(leak.secret, "GH");
        assert!(run(plain(&[]), req.as_bytes(), 64).is_err());
    }

    #[test]
    fn an_absolute_form_target_must_name_the_host_header_s_host() {
        let peer = plain(&["api.github.com", "evil.test"]);
        for target in [
            "http://evil.test/x",
            "http://evil.test:8080",
            "HTTP://user@evil.test/",
            "http://api.github.com@evil.test/",
        ] {
            let req = format!(
                "GET {target} HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n",
                ph(1)
            );
            let leak = run(peer.clone(), req.as_bytes(), 9).unwrap_err();
            assert_eq!(leak.host.as_deref(), Some("evil.test"), "{target}");
            assert_eq!(leak.place, Place::Misdirected("api.github.com".into()));
        }
        // Agreeing, it is the request's host; without Host, it names it.
        for req in [
            format!("GET http://api.github.com:80/x HTTP/1.1\r\nHost: API.github.com\r\nAuthorization: {}\r\n\r\n", ph(1)),
            format!("GET http://api.github.com/x HTTP/1.0\r\nAuthorization: {}\r\n\r\n", ph(1)),
        ] {
            assert!(text(run(peer.clone(), req.as_bytes(), 9)).contains("Authorization: ghp_real\r\n"));
        }
        // Two Host headers that differ.
        let req = format!(
            "GET / HTTP/1.1\r\nHost: api.github.com\r\nHost: evil.test\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        let leak = run(peer.clone(), req.as_bytes(), 9).unwrap_err();
        assert_eq!(leak.place, Place::Misdirected("api.github.com".into()));
        // Without a placeholder none of it is the filter's business.
        let req = "GET http://evil.test/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n";
        assert_eq!(text(run(peer, req.as_bytes(), 9)), req);
    }

    #[test]
    fn on_intercepted_tls_every_host_named_must_be_the_tls_name() {
        let tls = || Peer::Tls("api.github.com".into());
        for req in [
            format!("GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: {}\r\n\r\n", ph(1)),
            format!("GET https://evil.test/ HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n", ph(1)),
            format!("GET https://evil.test/ HTTP/1.1\r\nAuthorization: {}\r\n\r\n", ph(1)),
            format!("GET / HTTP/1.1\r\nHost: api.github.com\r\nHost: evil.test\r\nAuthorization: {}\r\n\r\n", ph(1)),
        ] {
            let leak = run(tls(), req.as_bytes(), 6).unwrap_err();
            assert_eq!(leak.secret, "GH", "{req}");
            assert_eq!(leak.host.as_deref(), Some("evil.test"), "{req}");
            assert_eq!(leak.place, Place::Misdirected("api.github.com".into()));
        }
        let req = format!(
            "GET / HTTP/1.1\r\nHost: api.github.com:443\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        assert!(text(run(tls(), req.as_bytes(), 6)).contains("Authorization: ghp_real\r\n"));
        // A head without a host goes to the TLS name.
        let req = format!("GET / HTTP/1.0\r\nAuthorization: {}\r\n\r\n", ph(1));
        assert!(text(run(tls(), req.as_bytes(), 6)).contains("Authorization: ghp_real\r\n"));
        // The TLS name is not the secret's: a leak, as before.
        let req = format!(
            "GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        let leak = run(Peer::Tls("evil.test".into()), req.as_bytes(), 6).unwrap_err();
        assert_eq!(leak.place, Place::Elsewhere);
    }

    #[test]
    fn an_address_host_is_where_the_host_side_went() {
        let peer = Peer::Plain {
            dst: "10.0.2.2".parse().unwrap(),
            host_ip: "127.0.0.1".parse().unwrap(),
            names: Vec::new(),
        };
        let req = format!(
            "GET / HTTP/1.1\r\nHost: 10.0.2.2:8080\r\nAuthorization: {}\r\n\r\n",
            ph(2)
        );
        let out = text(run(peer.clone(), req.as_bytes(), 3));
        assert!(out.contains("Authorization: loc_real\r\n"), "{out}");
        // Another address named in Host is not this connection's.
        let req = format!(
            "GET / HTTP/1.1\r\nHost: 10.0.2.3\r\nAuthorization: {}\r\n\r\n",
            ph(2)
        );
        assert!(run(peer, req.as_bytes(), 3).is_err());
    }

    #[test]
    fn a_placeholder_in_a_body_passes_unchanged_to_its_host_and_is_a_leak_elsewhere() {
        let body = format!("token={}", ph(1));
        let req = format!(
            "POST / HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let out = run(plain(&["api.github.com"]), req.as_bytes(), 9).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with(&body));
        // LOCAL's placeholder in the same body: not for this host.
        let body = format!("token={}", ph(2));
        let req = format!(
            "POST / HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for step in [1, 13, 4096] {
            let leak = run(plain(&["api.github.com"]), req.as_bytes(), step).unwrap_err();
            assert_eq!(leak.secret, "LOCAL");
        }
    }

    #[test]
    fn pipelined_requests_after_bodies_are_each_read() {
        let second = format!(
            "GET /b HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: {}\r\n\r\n",
            ph(1)
        );
        let req = format!(
            "POST /a HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n\
             PUT /c HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 3\r\n\r\nabc{second}"
        );
        for step in [1, 2, 5, 64, 4096] {
            let out = run(plain(&["api.github.com"]), req.as_bytes(), step).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(
                text.ends_with("Authorization: ghp_real\r\nAccept-Encoding: identity\r\n\r\n"),
                "{step}: {text}"
            );
            assert!(text.contains("5;ext=1\r\nhello\r\n0\r\n"));
        }
    }

    #[test]
    fn what_is_not_http_is_searched_but_never_changed() {
        // SSH's banner and a binary blob: opaque at once, not held.
        let mut f = Filter::new(secrets(), plain(&["api.github.com"]));
        let mut out = Vec::new();
        f.push(b"SSH-2.0-OpenSSH_9.2\r\n", &mut out).unwrap();
        assert_eq!(out, b"SSH-2.0-OpenSSH_9.2\r\n");
        let mut bin = vec![0x16u8, 3, 1, 0, 5];
        bin.extend_from_slice(ph(1).as_bytes());
        assert!(run(plain(&["api.github.com"]), &bin, 3).is_err());
        // Split over two reads.
        let leak = run(plain(&[]), format!("\x00\x01{}", ph(2)).as_bytes(), 20).unwrap_err();
        assert_eq!(leak.secret, "LOCAL");
        assert_eq!(leak.host, None);
    }

    #[test]
    fn an_unfinished_head_at_the_end_is_searched() {
        let req = format!("GET /{} HTTP/1.1\r\nHost: api.github.com\r\n", ph(2));
        assert!(run(plain(&["api.github.com"]), req.as_bytes(), 8).is_err());
    }

    #[test]
    fn upgrades_and_connect_become_opaque_after_the_head() {
        let req = format!(
            "GET /ws HTTP/1.1\r\nHost: api.github.com\r\nUpgrade: websocket\r\nAuthorization: {}\r\n\r\n\
             GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            ph(1),
            ph(1)
        );
        let out = text(run(plain(&["api.github.com"]), req.as_bytes(), 4));
        // The head got its value; what follows an upgrade is not a request
        // (its placeholder, for this host, passes unchanged).
        assert!(out.contains("Authorization: ghp_real\r\n"));
        assert!(out.contains(&format!("X: {}", ph(1))));
    }
}

#[cfg(feature = "stack")]
mod hello {
    use std::sync::Arc;

    use super::super::tls::{client_hello, generate_authority, Hello, Interceptor};

    fn hello_bytes(name: &str) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let sn = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(cfg), sn).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_real_client_hello_names_its_host_at_any_cut() {
        let bytes = hello_bytes("api.github.com");
        assert_eq!(
            client_hello(&bytes),
            Hello::Tls(Some("api.github.com".into()))
        );
        for cut in [0, 1, 4, 5, 40, bytes.len() - 1] {
            assert_eq!(client_hello(&bytes[..cut]), Hello::Incomplete, "{cut}");
        }
        // An address has no SNI.
        assert_eq!(client_hello(&hello_bytes("192.0.2.1")), Hello::Tls(None));
    }

    #[test]
    fn other_bytes_are_not_tls() {
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(&[0x16, 3, 1, 0, 0]), Hello::NotTls);
        assert_eq!(client_hello(&[0x16, 9, 9, 0, 1, 1]), Hello::NotTls);
        // A handshake that is not a ClientHello.
        assert_eq!(client_hello(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]), Hello::NotTls);
        // A ClientHello whose lengths run past its end.
        assert_eq!(
            client_hello(&[0x16, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3]),
            Hello::NotTls
        );
    }

    #[test]
    fn the_authority_issues_certificates_rustls_accepts() {
        let ca = generate_authority("sb-1").unwrap();
        assert!(ca.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        let icpt = Interceptor::new("sb-1", &ca, rustls::RootCertStore::empty()).unwrap();
        let a = icpt.server("api.github.com").unwrap();
        let b = icpt.server("api.github.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "issued once, then reused");
        assert_eq!(a.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // The same CA read back from its PEM (a restarted supervisor).
        Interceptor::new("sb-1", &ca, rustls::RootCertStore::empty()).unwrap();
    }
}
