//! What a sandbox's network reads from untrusted hands: DNS messages (a
//! guest's queries, an upstream server's answers), network rules (the
//! text of a policy, and a policy as JSON), a guest's TLS ClientHello,
//! the guest's bytes through the secrets' HTTP filter, and a secret's
//! host.
//!
//! Input: the first byte picks the reader; the rest is the message or
//! the text (UTF-8, lossily).
//!
//! Properties: no panic; a parsed message rebuilt as a response (its
//! question echoed, its answers kept) parses back to the same question
//! and answers; a parsed rule's canonical text parses to the same rule
//! and prints the same; a policy that deserializes serializes to JSON
//! that deserializes to the same policy; a ClientHello's name is a valid
//! domain; the filter's verdict and output do not depend on how the bytes
//! were cut into reads, a secret's placeholder never passes toward a host
//! it is not for, its value goes nowhere else, and bytes without a
//! placeholder pass unchanged; a secret host prints as it parses.

#![no_main]

use std::sync::Arc;

use burrow_net::secrets::http::{Filter, Peer};
use burrow_net::secrets::tls::{client_hello, Hello};
use burrow_net::secrets::{placeholder_from, Secret, SecretHost, PLACEHOLDER_PREFIX};
use burrow_net::{dns, Network, Rule};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 6 {
        0 => message(rest),
        1 => rule(&String::from_utf8_lossy(rest)),
        2 => network(rest),
        3 => hello(rest),
        4 => filter(rest),
        _ => secret_host(&String::from_utf8_lossy(rest)),
    }
});

fn message(bytes: &[u8]) {
    let Ok(m) = dns::parse(bytes) else {
        return;
    };
    let Some(q) = m.questions.first() else {
        return;
    };
    let rebuilt = dns::response(&m, dns::NOERROR, &m.answers);
    let back = dns::parse(&rebuilt).expect("a rebuilt response parses");
    assert_eq!(back.id, m.id);
    assert_eq!(back.questions, vec![q.clone()]);
    assert_eq!(back.answers, m.answers);
}

fn rule(text: &str) {
    let Ok(r) = text.parse::<Rule>() else {
        return;
    };
    let canonical = r.to_string();
    let again: Rule = canonical.parse().expect("a canonical rule parses");
    assert_eq!(again, r);
    assert_eq!(again.to_string(), canonical);
}

fn network(bytes: &[u8]) {
    let Ok(n) = serde_json::from_slice::<Network>(bytes) else {
        return;
    };
    let json = serde_json::to_vec(&n).expect("a network setting serializes");
    let back: Network = serde_json::from_slice(&json).expect("its JSON reads back");
    assert_eq!(back, n);
}

fn hello(bytes: &[u8]) {
    if let Hello::Tls(Some(name)) = client_hello(bytes) {
        let parsed = SecretHost::parse(&name).expect("an SNI name is a domain");
        assert!(parsed.matches(&name));
    }
}

/// The placeholders the filter input may use: A's (for `a.test`) and B's
/// (for `b.test`), two bytes naming them.
fn secrets() -> Arc<[Secret]> {
    let make = |name: &str, fill: u8, host: &str| Secret {
        name: name.into(),
        placeholder: placeholder_from([fill; 16]),
        value: format!("VALUE_OF_{name}"),
        hosts: vec![SecretHost::parse(host).expect("a host")],
        headers: Vec::new(),
    };
    Arc::from(vec![make("A", 0xaa, "a.test"), make("B", 0xbb, "b.test")])
}

fn filter(bytes: &[u8]) {
    let (Some(&mode), Some(&cut)) = (bytes.first(), bytes.get(1)) else {
        return;
    };
    let secrets = secrets();
    // \x01 and \x02 in the input stand for A's and B's placeholders.
    let mut input = Vec::new();
    for &b in &bytes[2..] {
        match b {
            1 => input.extend_from_slice(secrets[0].placeholder.as_bytes()),
            2 => input.extend_from_slice(secrets[1].placeholder.as_bytes()),
            b => input.push(b),
        }
    }
    let peer = if mode % 2 == 0 {
        Peer::Tls("a.test".into())
    } else {
        Peer::Plain {
            dst: "192.0.2.1".parse().expect("an address"),
            host_ip: "192.0.2.1".parse().expect("an address"),
            names: vec!["a.test".into()],
        }
    };
    let run = |step: usize| {
        let mut f = Filter::new(secrets.clone(), peer.clone());
        let mut out = Vec::new();
        for piece in input.chunks(step.max(1)) {
            f.push(piece, &mut out)?;
        }
        f.finish(&mut out)?;
        Ok::<_, burrow_net::secrets::http::Leak>(out)
    };
    let whole = run(input.len());
    let cut = run(usize::from(cut % 64) + 1);
    assert_eq!(whole.is_ok(), cut.is_ok(), "the verdict depends on the reads");
    let (Ok(whole), Ok(cut)) = (whole, cut) else {
        return;
    };
    assert_eq!(whole, cut, "the output depends on the reads");
    let has = |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!has(&whole, &secrets[1].placeholder), "B's placeholder went to a.test");
    if !has(&input, &secrets[1].value) {
        assert!(!has(&whole, &secrets[1].value), "B's value went to a.test");
    }
    if !has(&input, PLACEHOLDER_PREFIX) {
        assert_eq!(whole, input, "bytes without a placeholder changed");
    }
}

fn secret_host(text: &str) {
    let Ok(h) = SecretHost::parse(text) else {
        return;
    };
    let printed = h.to_string();
    assert_eq!(SecretHost::parse(&printed).expect("a printed host parses"), h);
}
