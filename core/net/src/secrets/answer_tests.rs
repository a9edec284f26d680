#![allow(clippy::unwrap_used)]
//! Answers read for values: the echoes and redirects a reflecting service
//! sends, framed every way HTTP frames them, cut at every point.

use std::sync::Arc;

use super::{pair, Answers};
use crate::secrets::http::{Filter, Leak, Peer, Place};
use crate::secrets::redact::Forms;
use crate::secrets::{placeholder_from, Secret, SecretHost};

const VALUE: &str = "ghp_TheValueThatNeverComesBack_42";

fn secrets() -> Arc<[Secret]> {
    Arc::from(vec![Secret {
        name: "GH".into(),
        placeholder: placeholder_from([1; 16]),
        value: VALUE.into(),
        hosts: vec![SecretHost::parse("api.test").unwrap()],
        headers: Vec::new(),
    }])
}

fn forms() -> Arc<Forms> {
    Arc::new(Forms::new([VALUE.as_bytes()]))
}

fn plain(names: &[&str]) -> Peer {
    Peer::Plain {
        dst: "10.0.2.2".parse().unwrap(),
        host_ip: "127.0.0.1".parse().unwrap(),
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

/// A filter and answers reader of a TLS connection to api.test.
fn tls() -> (Filter, Answers) {
    let (f, a) = pair(secrets(), Peer::Tls("api.test".into()), forms());
    (f, a.unwrap())
}

/// Sends `request` through the filter (whole), then `answer` through the
/// reader in pieces cut at `cuts`; what the guest got, or the refusal.
fn exchange(request: &str, answer: &[u8], cuts: &[usize]) -> Result<Vec<u8>, Leak> {
    let (mut f, mut a) = tls();
    let mut up = Vec::new();
    f.push(request.as_bytes(), &mut up)?;
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts {
        a.push(&answer[at..c], &mut out)?;
        at = c;
    }
    a.push(&answer[at..], &mut out)?;
    a.finish(&mut out);
    Ok(out)
}

fn get(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {}\r\n\r\n",
        placeholder_from([1; 16])
    )
}

fn shows_value(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    // The value, or any 8 bytes of it.
    VALUE
        .as_bytes()
        .windows(8)
        .any(|w| text.contains(std::str::from_utf8(w).unwrap()))
}

/// A chunked body read back.
fn unchunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16).unwrap();
        rest = &rest[nl + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[..size]);
        assert_eq!(&rest[size..size + 2], b"\r\n");
        rest = &rest[size + 2..];
    }
}

#[test]
fn only_connections_that_may_carry_a_value_are_read() {
    assert!(pair(secrets(), plain(&["api.test"]), forms()).1.is_some());
    assert!(pair(secrets(), plain(&["other.test"]), forms()).1.is_none());
    assert!(pair(secrets(), plain(&[]), forms()).1.is_none());
    assert!(pair(secrets(), Peer::Tls("api.test".into()), forms())
        .1
        .is_some());
}

#[test]
fn an_echoing_404_is_masked_in_status_headers_and_body_at_every_cut() {
    let body = format!("you sent Authorization: Bearer {VALUE}; path /x?t={VALUE}\n");
    let answer = format!(
        "HTTP/1.1 404 no such /x?t={VALUE}\r\nX-Echo: {VALUE}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let whole = exchange(&get("/x"), answer.as_bytes(), &[]).unwrap();
    assert!(!shows_value(&whole), "{}", String::from_utf8_lossy(&whole));
    assert_eq!(whole.len(), answer.len(), "lengths kept");
    let text = String::from_utf8(whole.clone()).unwrap();
    assert!(text.starts_with("HTTP/1.1 404 no such /x?t=*****"));
    assert!(text.contains(&format!("Content-Length: {}\r\n", body.len())));
    for cut in 0..=answer.len() {
        assert_eq!(
            exchange(&get("/x"), answer.as_bytes(), &[cut]).unwrap(),
            whole,
            "cut at {cut}"
        );
    }
}

#[test]
fn a_value_split_across_chunks_is_still_masked_and_rechunked() {
    // The echo in 3-byte chunks, with extensions: the value is in ten.
    let content = format!("{{\"authorization\":\"Bearer {VALUE}\"}}");
    let mut body = String::new();
    for piece in content.as_bytes().chunks(3) {
        body.push_str(&format!("{:x};ext=1\r\n", piece.len()));
        body.push_str(std::str::from_utf8(piece).unwrap());
        body.push_str("\r\n");
    }
    body.push_str(&format!("0\r\nX-Trailer: {VALUE}\r\n\r\n"));
    let answer = format!("HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
    let whole = exchange(&get("/"), answer.as_bytes(), &[]).unwrap();
    assert!(!shows_value(&whole), "{}", String::from_utf8_lossy(&whole));
    let text = String::from_utf8(whole.clone()).unwrap();
    let (_, got) = text.split_once("\r\n\r\n").unwrap();
    let data = unchunk(got.as_bytes());
    assert_eq!(data.len(), content.len());
    assert!(String::from_utf8(data)
        .unwrap()
        .starts_with("{\"authorization\":\"Bearer ****"));
    assert!(text.ends_with(&format!(
        "0\r\nX-Trailer: {}\r\n\r\n",
        "*".repeat(VALUE.len())
    )));
    for cut in 0..=answer.len() {
        let out = exchange(&get("/"), answer.as_bytes(), &[cut]).unwrap();
        assert!(!shows_value(&out), "cut at {cut}");
        let (_, got) = std::str::from_utf8(&out)
            .unwrap()
            .split_once("\r\n\r\n")
            .unwrap();
        assert_eq!(
            unchunk(got.as_bytes()),
            unchunk(text.split_once("\r\n\r\n").unwrap().1.as_bytes())
        );
    }
}

#[test]
fn a_redirect_repeating_the_request_is_masked() {
    let answer = format!(
        "HTTP/1.1 302 Found\r\nLocation: https://api.test/login?next=%2Fx&auth=Bearer%20{VALUE}\r\nContent-Length: 0\r\n\r\n"
    );
    let out = exchange(&get("/x"), answer.as_bytes(), &[]).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!shows_value(text.as_bytes()), "{text}");
    assert!(text.contains("auth=Bearer%20*****"), "{text}");
}

#[test]
fn pipelined_answers_interim_and_bodiless_ones_are_told_apart() {
    let (mut f, mut a) = tls();
    let mut up = Vec::new();
    let head = format!(
        "HEAD / HTTP/1.1\r\nHost: api.test\r\nAuthorization: {}\r\n\r\n",
        placeholder_from([1; 16])
    );
    f.push(head.as_bytes(), &mut up).unwrap();
    f.push(get("/b").as_bytes(), &mut up).unwrap();
    // The HEAD's answer names a length but has no body; then a 100, then
    // the GET's, whose body ends the echo.
    let answers = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n\
         HTTP/1.1 100 Continue\r\n\r\n\
         HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{VALUE}",
        VALUE.len()
    );
    for cut in 0..=answers.len() {
        let (mut f2, mut a2) = tls();
        let mut sink = Vec::new();
        f2.push(head.as_bytes(), &mut sink).unwrap();
        f2.push(get("/b").as_bytes(), &mut sink).unwrap();
        let mut out = Vec::new();
        a2.push(&answers.as_bytes()[..cut], &mut out).unwrap();
        a2.push(&answers.as_bytes()[cut..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with(&"*".repeat(VALUE.len())), "{cut}: {text}");
        // Nothing held: the last answer was whole.
        assert_eq!(a2.holding(), 0);
    }
    let mut out = Vec::new();
    a.push(answers.as_bytes(), &mut out).unwrap();
    assert_eq!(out.len(), answers.len());
}

#[test]
fn a_coded_answer_to_a_request_that_carried_a_value_is_refused() {
    let answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{VALUE}",
        VALUE.len()
    );
    let leak = exchange(&get("/"), answer.as_bytes(), &[]).unwrap_err();
    assert_eq!(leak.secret, "GH");
    assert_eq!(leak.place, Place::Coded("gzip".into()));
    let te = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n";
    let leak = exchange(&get("/"), te.as_bytes(), &[]).unwrap_err();
    assert_eq!(leak.place, Place::Coded("gzip".into()));
    // To a request without a value: passed, masked as bytes.
    let plain_get = "GET / HTTP/1.1\r\nHost: api.test\r\nAccept-Encoding: gzip\r\n\r\n";
    let out = exchange(plain_get, answer.as_bytes(), &[]).unwrap();
    assert!(!shows_value(&out));
    // identity is no coding.
    let ok = "HTTP/1.1 204 No Content\r\nContent-Encoding: identity\r\n\r\n";
    assert!(exchange(&get("/"), ok.as_bytes(), &[]).is_ok());
}

#[test]
fn what_is_not_http_is_masked_to_the_end() {
    // An upgrade, a malformed head, a body to the end of the connection.
    for answer in [
        format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x01\x7f{VALUE}"),
        format!("HTTP/1.1 200 OK\r\nBad Header\r\n\r\n{VALUE}"),
        format!("HTTP/1.0 200 OK\r\n\r\n{VALUE} and {VALUE}"),
        format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{VALUE}"),
        format!("SSH-2.0-x\r\n{VALUE}"),
    ] {
        for cut in [0, 5, 17, 40, answer.len()] {
            let out = exchange(&get("/"), answer.as_bytes(), &[cut.min(answer.len())]).unwrap();
            assert!(
                !shows_value(&out),
                "{answer:?}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}

#[test]
fn too_many_requests_waiting_stop_the_values_not_the_connection() {
    let (mut f, mut a) = tls();
    let mut up = Vec::new();
    let bare = "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n";
    for _ in 0..super::super::http::MAX_WAITING {
        f.push(bare.as_bytes(), &mut up).unwrap();
    }
    // One more without a value: passes, the answers are then plain bytes.
    f.push(bare.as_bytes(), &mut up).unwrap();
    // With a value: refused.
    let leak = f.push(get("/").as_bytes(), &mut up).unwrap_err();
    assert_eq!(leak.place, Place::Backlog);
    let mut out = Vec::new();
    a.push(
        format!("HTTP/1.1 200 OK\r\n\r\n{VALUE}").as_bytes(),
        &mut out,
    )
    .unwrap();
    a.finish(&mut out);
    assert!(!shows_value(&out));
}
