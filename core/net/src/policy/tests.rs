#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use super::*;

fn rule(s: &str) -> Rule {
    s.parse().unwrap()
}

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy {
        allow: allow.iter().map(|r| rule(r)).collect(),
        deny: deny.iter().map(|r| rule(r)).collect(),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_host_named_like_a_protocol_is_refused() {
    for text in ["tcp", "Tcp.", "UDP:443", "tcp:tcp", "Udp:udp:53"] {
        assert!(text.parse::<Rule>().is_err(), "{text}");
    }
}

#[test]
fn rules_round_trip_through_their_canonical_text() {
    for (text, canonical) in [
        ("pypi.org", "pypi.org"),
        ("PyPI.org.", "pypi.org"),
        ("*.github.com:443", "*.github.com:443"),
        ("tcp:*:22,80-90", "tcp:*:22,80-90"),
        ("udp:10.1.2.3/8:53", "udp:10.0.0.0/8:53"),
        ("192.0.2.7", "192.0.2.7"),
        ("[2001:db8::1]", "[2001:db8::1]"),
        ("[2001:db8::1/32]:443", "[2001:db8::/32]:443"),
        ("_svc.example.com", "_svc.example.com"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        // The protocol in any case (found by fuzzing: `Tcp:` was read as
        // a host named tcp, whose canonical text read back as TCP).
        ("Tcp:80-90", "tcp:80-90"),
        ("UDP:Example.com:53", "udp:example.com:53"),
    ] {
        let r = rule(text);
        assert_eq!(r.to_string(), canonical, "{text}");
        assert_eq!(rule(canonical), r, "{canonical} parses back");
    }
}

#[test]
fn malformed_rules_are_refused_with_the_rule_named() {
    for bad in [
        "",
        " ",
        "tcp:",
        "*.",
        "a..b",
        "-a.com",
        "a-.com",
        "ex ample.com",
        "*.*.com",
        "a*.com",
        "x.com:0",
        "x.com:65536",
        "x.com:443-80",
        "x.com:",
        "x.com:80,",
        "x.com:+80",
        "1.2.3",
        "1.2.3.4/33",
        "1.2.3.4/",
        "2001:db8::1",
        "[2001:db8::1",
        "[2001:db8::1]x",
        "[1.2.3.4]",
        "[2001:db8::/129]",
        "tcp:udp:x.com",
        "sctp:x.com",
        "x.123",
    ] {
        let e = bad.parse::<Rule>().unwrap_err();
        assert_eq!(e.rule, bad.chars().take(80).collect::<String>(), "{bad:?}");
        assert!(!e.reason.is_empty());
    }
    let long = format!("{}.com", "a".repeat(300));
    assert!(long.parse::<Rule>().is_err());
    let label = format!("{}.com", "a".repeat(64));
    assert!(label.parse::<Rule>().is_err());
}

#[test]
fn domain_rules_match_the_names_that_resolved_to_the_address() {
    let p = policy(&["pypi.org:443", "*.github.com"], &[]);
    let a = ip("198.18.0.2");
    assert!(p.check(a, 443, Proto::Tcp, &["pypi.org"], false).allowed);
    assert_eq!(
        p.check(a, 80, Proto::Tcp, &["pypi.org"], false).why,
        Why::NoRule,
        "the rule is for port 443 only"
    );
    assert!(
        p.check(a, 22, Proto::Udp, &["api.github.com"], false)
            .allowed
    );
    assert!(
        p.check(a, 22, Proto::Tcp, &["a.b.github.com"], false)
            .allowed
    );
    assert!(
        !p.check(a, 22, Proto::Tcp, &["github.com"], false).allowed,
        "*. is subdomains only"
    );
    assert!(
        !p.check(a, 22, Proto::Tcp, &["evilgithub.com"], false)
            .allowed
    );
    // An IP literal that no allowed name resolved to.
    assert_eq!(p.check(a, 443, Proto::Tcp, &[], false).why, Why::NoRule);
}

#[test]
fn deny_wins_over_allow() {
    let p = policy(
        &["*.example.com", "198.18.0.0/15"],
        &["bad.example.com", "tcp:198.18.0.9:22"],
    );
    let a = ip("198.18.0.9");
    assert_eq!(
        p.check(a, 443, Proto::Tcp, &["bad.example.com"], false).why,
        Why::Denied(rule("bad.example.com"))
    );
    assert!(
        p.check(a, 443, Proto::Tcp, &["good.example.com"], false)
            .allowed
    );
    assert_eq!(
        p.check(a, 22, Proto::Tcp, &[], false).why,
        Why::Denied(rule("tcp:198.18.0.9:22"))
    );
    assert!(p.check(a, 22, Proto::Udp, &[], false).allowed);
    assert_eq!(
        p.resolves("bad.example.com").why,
        Why::Denied(rule("bad.example.com"))
    );
    assert!(p.resolves("good.example.com").allowed);
    assert!(!p.resolves("example.com").allowed);
}

#[test]
fn a_deny_rule_limited_to_ports_still_lets_the_name_resolve() {
    let p = policy(&["*"], &["x.com:25"]);
    assert!(p.resolves("x.com").allowed);
    assert!(
        !p.check(ip("198.18.0.3"), 25, Proto::Tcp, &["x.com"], false)
            .allowed
    );
    assert!(
        p.check(ip("198.18.0.3"), 443, Proto::Tcp, &["x.com"], false)
            .allowed
    );
}

#[test]
fn special_ranges_need_a_rule_that_names_them() {
    let all = Policy::all();
    for addr in [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "127.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fd00::1",
        "ff02::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
    ] {
        let v = all.check(ip(addr), 80, Proto::Tcp, &["x.com"], false);
        assert!(matches!(v.why, Why::Special(_)), "{addr}: {v}");
        assert!(
            !all.answer_admits(ip(addr), false).allowed,
            "{addr} in an answer"
        );
    }
    assert!(
        all.check(ip("198.18.0.2"), 80, Proto::Tcp, &[], false)
            .allowed
    );
    assert!(
        all.check(ip("2001:db8::1"), 80, Proto::Tcp, &[], false)
            .allowed
    );

    let wide = policy(&["0.0.0.0/0", "10.0.0.0/8", "[fd00::/8]"], &[]);
    assert!(
        wide.check(ip("10.9.9.9"), 80, Proto::Tcp, &[], false)
            .allowed
    );
    assert!(
        wide.check(ip("::ffff:10.9.9.9"), 80, Proto::Tcp, &[], false)
            .allowed,
        "mapped v4"
    );
    assert!(
        !wide
            .check(ip("192.168.0.1"), 80, Proto::Tcp, &[], false)
            .allowed,
        "/0 names nothing"
    );
    assert!(
        wide.check(ip("fd00::5"), 80, Proto::Tcp, &[], false)
            .allowed
    );
    assert!(wide.answer_admits(ip("10.0.0.7"), false).allowed);
}

#[test]
fn the_hosts_own_addresses_are_named_only_by_their_exact_ip() {
    let p = policy(&["198.18.0.0/15", "198.18.0.1:8080"], &[]);
    let host = ip("198.18.0.1");
    assert_eq!(
        p.check(host, 80, Proto::Tcp, &[], true).why,
        Why::Special("host".into())
    );
    assert!(p.check(host, 8080, Proto::Tcp, &[], true).allowed);
    assert!(!p.answer_admits(ip("198.18.0.5"), true).allowed);
}

#[test]
fn network_settings_read_old_flags_words_and_policies() {
    let n: Network = serde_json::from_str("true").unwrap();
    assert_eq!(n, Network::All);
    let n: Network = serde_json::from_str("false").unwrap();
    assert_eq!(n, Network::None);
    let n: Network = serde_json::from_str("\"none\"").unwrap();
    assert!(!n.is_enabled());
    let n: Network =
        serde_json::from_str(r#"{"allow": ["pypi.org:443"], "deny": ["10.0.0.0/8"]}"#).unwrap();
    let Network::Policy(p) = &n else {
        panic!("a policy")
    };
    assert_eq!(p.allow, vec![rule("pypi.org:443")]);
    let text = serde_json::to_string(&n).unwrap();
    assert_eq!(text, r#"{"allow":["pypi.org:443"],"deny":["10.0.0.0/8"]}"#);
    assert_eq!(serde_json::from_str::<Network>(&text).unwrap(), n);
    assert_eq!(serde_json::to_string(&Network::All).unwrap(), "true");
    assert_eq!(serde_json::to_string(&Network::None).unwrap(), "false");

    for bad in [
        r#""some""#,
        "1",
        r#"{"allow": ["a..b"]}"#,
        r#"{"allow": [], "extra": 1}"#,
        r#"["x.com"]"#,
    ] {
        assert!(serde_json::from_str::<Network>(bad).is_err(), "{bad}");
    }
    let many = serde_json::json!({ "allow": vec!["x.com"; MAX_RULES + 1] });
    assert!(serde_json::from_value::<Network>(many).is_err());
}
