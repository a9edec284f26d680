//! What a sandbox's network reads from untrusted hands: DNS messages (a
//! guest's queries, an upstream server's answers) and network rules (the
//! text of a policy, and a policy as JSON).
//!
//! Input: the first byte picks the reader; the rest is the message or
//! the text (UTF-8, lossily).
//!
//! Properties: no panic; a parsed message rebuilt as a response (its
//! question echoed, its answers kept) parses back to the same question
//! and answers; a parsed rule's canonical text parses to the same rule
//! and prints the same; a policy that deserializes serializes to JSON
//! that deserializes to the same policy.

#![no_main]

use burrow_net::{dns, Network, Rule};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        0 => message(rest),
        1 => rule(&String::from_utf8_lossy(rest)),
        _ => network(rest),
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
