#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::IpAddr;

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn every_spelling_of_an_address_is_read_as_that_address() {
    for (text, want) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        (" 127.0.0.1 ", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0X7F.0.0.0x1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("::127.0.0.1", "::127.0.0.1"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
    ] {
        assert_eq!(parse_ip(text), Some(ip(want)), "{text}");
    }
    for name in [
        "example.com",
        "localhost",
        "1.2.3.4.5",
        "256.1.1.1",
        "1.2.3.256",
        "08.1.1.1",
        "0x1g.1",
        "4294967296",
        "1.16777216",
        "",
        ".",
        "a.1",
        "[127.0.0.1",
        "::g",
    ] {
        assert_eq!(parse_ip(name), None, "{name}");
    }
}

#[test]
fn the_denied_ranges_in_every_family_and_embedded_form() {
    for (addr, range) in [
        ("0.0.0.0", "0.0.0.0/8"),
        ("10.1.2.3", "10.0.0.0/8"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("100.127.255.254", "100.64.0.0/10"),
        ("127.0.0.1", "127.0.0.0/8"),
        ("127.255.255.254", "127.0.0.0/8"),
        ("169.254.169.254", "169.254.0.0/16"),
        ("172.16.0.1", "172.16.0.0/12"),
        ("172.31.255.1", "172.16.0.0/12"),
        ("192.0.0.8", "192.0.0.0/24"),
        ("192.168.1.1", "192.168.0.0/16"),
        ("224.0.0.1", "224.0.0.0/4"),
        ("239.255.255.250", "224.0.0.0/4"),
        ("240.0.0.1", "240.0.0.0/4"),
        ("255.255.255.255", "240.0.0.0/4"),
        ("::", "::/128"),
        ("::1", "::1/128"),
        ("::7f00:1", "::/96"),
        ("::a00:1", "::/96"),
        ("::ffff:127.0.0.1", "127.0.0.0/8"),
        ("::ffff:10.0.0.1", "10.0.0.0/8"),
        ("::ffff:169.254.169.254", "169.254.0.0/16"),
        ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"),
        ("64:ff9b:1::1", "64:ff9b:1::/48"),
        ("2002:7f00:1::", "127.0.0.0/8"),
        ("2002:a00:1::5", "10.0.0.0/8"),
        ("100::1", "100::/64"),
        ("fc00::1", "fc00::/7"),
        ("fd12:3456::1", "fc00::/7"),
        ("fe80::1", "fe80::/10"),
        ("febf::1", "fe80::/10"),
        ("fec0::1", "fec0::/10"),
        ("ff02::1", "ff00::/8"),
    ] {
        assert_eq!(denied(ip(addr), false).as_deref(), Some(range), "{addr}");
    }
    for public in [
        "8.8.8.8",
        "1.1.1.1",
        "198.18.10.2",
        "100.128.0.1",
        "172.32.0.1",
        "169.253.255.255",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::",
        "2001:4860::8888",
    ] {
        assert_eq!(denied(ip(public), false), None, "{public}");
    }
    // The host's own, public or not.
    assert_eq!(denied(ip("8.8.8.8"), true).as_deref(), Some("host"));
    let refused = Ceiling::default().refuses(ip("10.0.0.1"), false).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.why, Why::Ceiling("10.0.0.0/8".into()));
    assert_eq!(Ceiling::default().refuses(ip("8.8.8.8"), false), None);
}

#[test]
fn rules_naming_a_denied_address_are_caught_whatever_their_spelling() {
    let host: HashSet<IpAddr> = [ip("203.0.113.5"), ip("2001:db8::5")].into();
    for rule in [
        "127.0.0.1",
        "tcp:127.0.0.1:8080",
        "udp:127.0.0.53:53",
        "127.0.0.0/8",
        "127.0.0.0/9",
        "10.0.0.0/8",
        "10.1.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/24",
        "169.254.169.254",
        "tcp:169.254.169.254:80",
        "100.64.0.0/10",
        "224.0.0.0/4",
        "0.0.0.0/8",
        "255.255.255.255",
        "[::1]",
        "[::]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:0/104]",
        "[::ffff:10.0.0.0/104]",
        "[::7f00:1]",
        "[64:ff9b::a9fe:a9fe]",
        "[2002:7f00:1::/48]",
        "[fd00::/8]",
        "[fc00::/7]",
        "[fe80::1]",
        "[ff02::1]",
        "localhost",
        "LocalHost.",
        "*.localhost",
        "a.localhost",
        "localhost.localdomain",
        "0x7f000001",
        "0x7f000001:80",
        "203.0.113.5",
        "tcp:203.0.113.5:22",
        "[2001:db8::5]",
    ] {
        let r: Rule = rule.parse().unwrap();
        assert!(rule_reaches_denied(&r, &host).is_some(), "{rule}");
    }
    for rule in [
        "*",
        "tcp:*:443",
        "0.0.0.0/0",
        "0.0.0.0/1",
        "10.0.0.0/7",
        "8.8.8.8",
        "203.0.113.0/24",
        "198.18.10.2",
        "example.com",
        "*.example.com",
        "localhost.example.com",
        "[::/0]",
        "[2000::/3]",
        "[2606:4700::1111]",
        "[::ffff:8.8.8.8]",
    ] {
        let r: Rule = rule.parse().unwrap();
        assert_eq!(rule_reaches_denied(&r, &host), None, "{rule}");
    }
}

#[test]
fn a_ceiling_reads_and_writes_its_pull_allow_rules() {
    let c: Ceiling =
        serde_json::from_str(r#"{"pull_allow": ["10.0.0.0/8", "registry.internal"]}"#).unwrap();
    assert_eq!(c.pull_allow.len(), 2);
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        r#"{"pull_allow":["10.0.0.0/8","registry.internal"]}"#
    );
    assert_eq!(serde_json::to_string(&Ceiling::default()).unwrap(), "{}");
    assert_eq!(
        serde_json::from_str::<Ceiling>("{}").unwrap(),
        Ceiling::default()
    );
    assert!(serde_json::from_str::<Ceiling>(r#"{"nope": 1}"#).is_err());
}

#[cfg(feature = "stack")]
#[test]
fn the_hosts_loopback_is_one_of_its_addresses() {
    assert!(is_host_own(ip("127.0.0.1")));
    assert!(!is_host_own(ip("192.0.2.123")));
}
