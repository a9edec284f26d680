//! The stack against real kernels on both ends: a guest namespace whose
//! traffic goes through a packet link to the stack, and servers in a far
//! namespace (see `lab`). Each test runs in a lab of its own.

#![allow(clippy::unwrap_used)]

mod lab;

use std::time::Duration;

use burrow_net::stack::Target;
use burrow_net::{Proto, Why};
use lab::{policy, Lab};

#[tokio::test]
async fn an_allowed_address_connects_and_others_are_reset() {
    if !lab::inside("an_allowed_address_connects_and_others_are_reset") {
        return;
    }
    let lab = Lab::new(policy(&["198.18.0.2"], &[]));
    assert_eq!(lab.guest(&["tcp", "198.18.0.2", "80"]).await, "A");
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.3", "80"]).await,
        "ERR ECONNREFUSED"
    );
    let refusals = lab.refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(matches!(
        &refusals[0].target,
        Target::Connection { proto: Proto::Tcp, dst, names } if dst.to_string() == "198.18.0.3:80" && names.is_empty()
    ));
    assert_eq!(refusals[0].verdict.why, Why::NoRule);
    let c = lab.counters.read();
    assert_eq!((c.connections, c.refusals), (1, 1));
    assert_eq!(c.bytes_in, 1);
}

#[tokio::test]
async fn names_resolve_only_where_allowed_and_an_ip_literal_does_not_bypass() {
    if !lab::inside("names_resolve_only_where_allowed_and_an_ip_literal_does_not_bypass") {
        return;
    }
    let lab = Lab::new(policy(&["a.test", "*.c.test"], &[]));
    assert_eq!(lab.guest(&["dns", "a.test"]).await, "0 198.18.0.2");
    assert_eq!(lab.guest(&["fetch", "a.test", "80"]).await, "A");
    // Not allowed: no answer at all.
    assert_eq!(lab.guest(&["dns", "b.test"]).await, "3");
    // A wildcard is for subdomains, not the domain itself.
    assert_eq!(lab.guest(&["dns", "x.c.test"]).await, "0 198.18.0.3");
    assert_eq!(lab.guest(&["dns", "c.test"]).await, "3");
    assert_eq!(lab.guest(&["fetch", "x.c.test", "80"]).await, "B");
    // b.test is also 198.18.0.3, but the guest reached it by x.c.test:
    // 198.18.0.3 is reachable; 198.18.0.2 only through a.test, which
    // was resolved, so both are. An address no allowed name gave is not.
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.4", "80"]).await,
        "ERR ECONNREFUSED"
    );
    let refused_names: Vec<String> = lab
        .refusals()
        .into_iter()
        .filter_map(|r| match r.target {
            Target::Name(n) => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(refused_names, ["b.test", "c.test"]);
    // The same over TCP.
    assert_eq!(lab.guest(&["dns", "a.test", "tcp"]).await, "0 198.18.0.2");
    assert_eq!(lab.guest(&["dns", "b.test", "tcp"]).await, "3");
    assert!(lab.counters.read().dns_queries >= 8);
}

#[tokio::test]
async fn deny_wins_over_allow() {
    if !lab::inside("deny_wins_over_allow") {
        return;
    }
    let lab = Lab::new(policy(
        &["*.test", "198.18.0.0/24"],
        &["b.test", "tcp:198.18.0.2:81"],
    ));
    assert_eq!(lab.guest(&["fetch", "a.test", "80"]).await, "A");
    assert_eq!(lab.guest(&["dns", "b.test"]).await, "3");
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.2", "81"]).await,
        "ERR ECONNREFUSED"
    );
    let last = lab.refusals().pop().unwrap();
    assert!(matches!(last.verdict.why, Why::Denied(ref r) if r.to_string() == "tcp:198.18.0.2:81"));
}

#[tokio::test]
async fn private_answers_and_addresses_are_refused_unless_named() {
    if !lab::inside("private_answers_and_addresses_are_refused_unless_named") {
        return;
    }
    let lab = Lab::new(policy(&["*.test", "*"], &[]));
    // A public name rebinding to a private address: the answer is dropped.
    assert_eq!(lab.guest(&["dns", "rebind.test"]).await, "0");
    assert_eq!(lab.guest(&["dns", "mixed.test"]).await, "0 198.18.0.3");
    assert_eq!(
        lab.guest(&["tcp", "10.9.0.2", "80"]).await,
        "ERR ECONNREFUSED"
    );
    // The host itself (its own address on the lab's link).
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.1", "80"]).await,
        "ERR ECONNREFUSED"
    );
    let refusals = lab.refusals();
    assert!(refusals.iter().any(|r| matches!(&r.target, Target::Answer(n, ip) if n == "rebind.test" && ip.to_string() == "10.9.0.2")));
    assert!(refusals
        .iter()
        .any(|r| r.verdict.why == Why::Special("10.0.0.0/8".into())));
    assert!(refusals
        .iter()
        .any(|r| r.verdict.why == Why::Special("host".into())));
    // Named by a rule, the private range is reachable, by name too.
    lab.policy
        .send(policy(&["*.test", "*", "10.9.0.0/24"], &[]))
        .unwrap();
    assert_eq!(lab.guest(&["dns", "rebind.test"]).await, "0 10.9.0.2");
    assert_eq!(lab.guest(&["tcp", "10.9.0.2", "80"]).await, "P");
}

#[tokio::test]
async fn udp_flows_follow_the_policy() {
    if !lab::inside("udp_flows_follow_the_policy") {
        return;
    }
    let lab = Lab::new(policy(&["udp:198.18.0.2:7"], &[]));
    let got = lab.guest(&["udp", "198.18.0.2", "7", "ping"]).await;
    assert_eq!(
        got,
        "ping",
        "{:?} {:?}",
        lab.refusals(),
        lab.counters.read()
    );
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.2", "80"]).await,
        "ERR ECONNREFUSED"
    );
    lab.policy.send(policy(&["198.18.0.3"], &[])).unwrap();
    assert_eq!(
        lab.guest(&["udp", "198.18.0.2", "7", "ping"]).await,
        "ERR timeout"
    );
    assert!(lab.refusals().iter().any(|r| matches!(
        &r.target,
        Target::Connection {
            proto: Proto::Udp,
            ..
        }
    )));
}

#[tokio::test]
async fn a_policy_change_closes_what_it_forbids() {
    if !lab::inside("a_policy_change_closes_what_it_forbids") {
        return;
    }
    let lab = Lab::new(policy(&["198.18.0.2"], &[]));
    let mut held = lab.guest_bg(&["hold", "198.18.0.2", "81"]);
    let mut out = held.stdout.take().unwrap();
    let mut line = [0u8; 6];
    tokio::io::AsyncReadExt::read_exact(&mut out, &mut line)
        .await
        .unwrap();
    assert_eq!(&line, b"READY\n");
    lab.policy.send(policy(&["198.18.0.3"], &[])).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), held.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut out, &mut rest)
        .await
        .unwrap();
    assert_eq!(rest.trim(), "ERR ECONNRESET");
}

#[tokio::test]
async fn a_bulk_download_arrives_whole() {
    if !lab::inside("a_bulk_download_arrives_whole") {
        return;
    }
    let lab = Lab::new(policy(&["198.18.0.2"], &[]));
    let got = lab.guest(&["bulk", "198.18.0.2", "82"]).await;
    assert_eq!(got, lab::BULK.to_string());
    assert_eq!(lab.counters.read().bytes_in, lab::BULK as u64);
}

#[tokio::test]
async fn the_gateway_reaches_the_hosts_loopback_only_where_named() {
    if !lab::inside("the_gateway_reaches_the_hosts_loopback_only_where_named") {
        return;
    }
    let lab = Lab::new(policy(&["198.18.0.2"], &[]));
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in server.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"H");
        }
    });
    assert_eq!(
        lab.guest(&["tcp", "10.0.2.2", &port]).await,
        "ERR ECONNREFUSED"
    );
    let last = lab.refusals().pop().unwrap();
    assert_eq!(last.verdict.why, Why::Special("host".into()));
    lab.policy
        .send(policy(&[&format!("tcp:127.0.0.1:{port}")], &[]))
        .unwrap();
    assert_eq!(lab.guest(&["tcp", "10.0.2.2", &port]).await, "H");
    // Other addresses of the guest's network lead nowhere.
    assert_eq!(
        lab.guest(&["tcp", "10.0.2.9", &port]).await,
        "ERR ECONNREFUSED"
    );
}

#[tokio::test]
async fn an_egress_ceiling_wins_over_rules_that_name_denied_addresses() {
    if !lab::inside("an_egress_ceiling_wins_over_rules_that_name_denied_addresses") {
        return;
    }
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in server.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"H");
        }
    });
    // Every denied address named by a rule: the private network, the
    // host's own address on the lab's link, its loopback (the gateway).
    let named = [
        "*.test",
        "198.18.0.2",
        "10.9.0.0/24",
        "198.18.0.1",
        &format!("tcp:127.0.0.1:{port}"),
    ];
    let lab = Lab::with_ceiling(policy(&named, &[]));
    // A public address the rules allow: reached as without a ceiling.
    assert_eq!(lab.guest(&["tcp", "198.18.0.2", "80"]).await, "A");
    assert_eq!(
        lab.guest(&["tcp", "10.9.0.2", "80"]).await,
        "ERR ECONNREFUSED"
    );
    assert_eq!(
        lab.guest(&["tcp", "198.18.0.1", "80"]).await,
        "ERR ECONNREFUSED"
    );
    assert_eq!(
        lab.guest(&["tcp", "10.0.2.2", &port]).await,
        "ERR ECONNREFUSED"
    );
    // A name leading into a denied range: the answer is dropped; a mixed
    // one keeps its public address only.
    assert_eq!(lab.guest(&["dns", "rebind.test"]).await, "0");
    assert_eq!(lab.guest(&["dns", "mixed.test"]).await, "0 198.18.0.3");
    let refusals = lab.refusals();
    // (The loopback is one of the host's own addresses.)
    for (dst, range) in [
        ("10.9.0.2:80", "10.0.0.0/8"),
        ("198.18.0.1:80", "host"),
        (&*format!("127.0.0.1:{port}"), "host"),
    ] {
        assert!(
            refusals.iter().any(|r| matches!(&r.target,
                Target::Connection { dst: d, .. } if d.to_string() == dst)
                && r.verdict.why == Why::Ceiling(range.into())),
            "{dst}: {refusals:?}"
        );
    }
    // A change of the rules does not lift the ceiling.
    lab.policy.send(policy(&["*", "10.9.0.2"], &[])).unwrap();
    assert_eq!(
        lab.guest(&["tcp", "10.9.0.2", "80"]).await,
        "ERR ECONNREFUSED"
    );
}
