#![allow(clippy::unwrap_used)]
//! Sandboxes' networks end to end: real containers whose traffic goes
//! through their own stack, to servers on this host's loopback (which a
//! guest reaches at its gateway, 10.0.2.2, where a rule names 127.0.0.1)
//! and a DNS server there that the stacks ask. Nothing else is reached;
//! root and rootless alike. (Names leading to far addresses, and the rest
//! of the rules, are core/net's lab tests, in namespaces of their own.)

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::OnceLock;
use std::time::Duration;

use burrow::{Applies, Network, NetworkPolicy, Sandbox};
use common::TestHome;

/// The loopback servers (once per test binary): their ports, A, B and a
/// held connection's; and a DNS server whose port is given to the stacks.
struct Servers {
    a: u16,
    b: u16,
    hold: u16,
}

fn servers() -> &'static Servers {
    static S: OnceLock<Servers> = OnceLock::new();
    S.get_or_init(|| {
        let greet = |name: &'static [u8]| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            std::thread::spawn(move || {
                for c in l.incoming().flatten() {
                    let mut c = c;
                    let _ = c.write_all(name);
                }
            });
            port
        };
        let (a, b) = (greet(b"A"), greet(b"B"));
        let hold = TcpListener::bind("127.0.0.1:0").unwrap();
        let hold_port = hold.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in hold.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let _ = c.write_all(b"held\n");
                    let mut buf = [0u8; 64];
                    while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                    // Held after the guest's end too (its nc shuts its
                    // side at once): only the stack closes it.
                    std::thread::sleep(Duration::from_secs(60));
                });
            }
        });
        common::dns::serve(|name| {
            let ip = match name {
                "a.test" => "198.18.10.2",
                "b.test" => "198.18.10.3",
                "rebind.test" => "10.9.10.2",
                _ => return None,
            };
            ip.parse().ok()
        });
        Servers {
            a,
            b,
            hold: hold_port,
        }
    })
}

async fn home() -> TestHome {
    servers();
    TestHome::new().await
}

async fn sh(sb: &Sandbox, script: &str) -> String {
    let out = sb.exec(["sh", "-c", script]).await.unwrap();
    out.stdout_str().trim().to_owned()
}

/// The process's stdout until it ends with `end` (or the process ends).
async fn read_until(p: &mut burrow::Process, end: &str) -> String {
    let mut out = Vec::new();
    while !out.ends_with(end.as_bytes()) {
        match p.next_event().await.unwrap() {
            Some(burrow::ExecEvent::Stdout(b)) => out.extend_from_slice(&b),
            Some(burrow::ExecEvent::Stderr(_)) => {}
            Some(burrow::ExecEvent::Exit(_)) | None => break,
        }
    }
    String::from_utf8(out).unwrap()
}

/// `nc` to the host's loopback port `port` through the gateway: what came
/// back, or the exit status after `!` when it failed.
async fn nc(sb: &Sandbox, port: u16) -> String {
    sh(
        sb,
        &format!("nc -w 5 10.0.2.2 {port} </dev/null || echo \"!$?\""),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_lets_through_what_it_allows_and_logs_what_it_refuses() {
    let home = home().await;
    let s = servers();
    let policy = NetworkPolicy::allow([format!("tcp:127.0.0.1:{}", s.a), "*.test".into()])
        .unwrap()
        .and_deny(["b.test"])
        .unwrap();
    let sb = home
        .builder("policy")
        .network(policy)
        .create()
        .await
        .unwrap();
    assert_eq!(sh(&sb, "cat /etc/resolv.conf").await, "nameserver 10.0.2.3");
    assert_eq!(nc(&sb, s.a).await, "A");
    // Another port of the host: the host is refused unless named.
    assert_eq!(nc(&sb, s.b).await, "!1");
    // Names: answered by the stack from the host's DNS server, only where
    // allowed; an answer rebinding to a private address is dropped.
    let lookup = sh(&sb, "nslookup a.test 2>&1").await;
    assert!(lookup.contains("198.18.10.2"), "{lookup}");
    let lookup = sh(&sb, "nslookup b.test 2>&1").await;
    assert!(!lookup.contains("198.18.10.3"), "{lookup}");
    let lookup = sh(&sb, "nslookup rebind.test 2>&1").await;
    assert!(!lookup.contains("10.9.10.2"), "{lookup}");
    // A private address by IP: refused before any connection.
    assert_eq!(
        sh(&sb, "nc -w 5 10.9.10.2 80 </dev/null || echo \"!$?\"").await,
        "!1"
    );
    let m = sb.metrics().await.unwrap();
    let net = m.network.expect("network counters");
    assert_eq!(net.connections, 1);
    assert_eq!(net.bytes_in, 1);
    assert!(net.refusals >= 4, "{net:?}");
    assert!(net.dns_queries >= 3, "{net:?}");
    let logs = burrow_test_support::logs_of(home.dir.path());
    let host_refusal = format!(
        "refused tcp 127.0.0.1:{}: denied: host is not named by any rule",
        s.b
    );
    assert!(logs.contains(&host_refusal), "{logs}");
    assert!(
        logs.contains("refused name b.test: denied by rule b.test"),
        "{logs}"
    );
    assert!(
        logs.contains("refused answer 10.9.10.2 for rebind.test"),
        "{logs}"
    );
    assert!(
        logs.contains("refused tcp 10.9.10.2:80: denied: 10.0.0.0/8 is not named by any rule"),
        "{logs}"
    );
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_changes_the_policy_live_and_closes_what_it_forbids() {
    let home = home().await;
    let s = servers();
    let sb = home
        .builder("live")
        .network(NetworkPolicy::allow([format!("tcp:127.0.0.1:{}", s.hold)]).unwrap())
        .create()
        .await
        .unwrap();
    // A connection held open, then forbidden.
    let held = sb
        .spawn(burrow::ExecOptions::new([
            "sh".to_string(),
            "-c".into(),
            format!("nc 10.0.2.2 {} </dev/null; echo closed", s.hold),
        ]))
        .await
        .unwrap();
    assert_eq!(nc(&sb, s.a).await, "!1");
    let mut held = held;
    assert_eq!(read_until(&mut held, "held\n").await, "held\n");
    let plan = sb
        .modify()
        .network(NetworkPolicy::allow([format!("tcp:127.0.0.1:{}", s.a)]).unwrap())
        .apply()
        .await
        .unwrap();
    assert_eq!(plan.changes[0].field, "network");
    assert_eq!(plan.changes[0].applies, Applies::Live);
    let rest = tokio::time::timeout(Duration::from_secs(20), read_until(&mut held, "closed\n"))
        .await
        .expect("the forbidden connection was closed");
    assert_eq!(rest, "closed\n");
    assert_eq!(nc(&sb, s.a).await, "A");
    // `none`: nothing at all any more.
    sb.modify().network(Network::None).apply().await.unwrap();
    assert_eq!(nc(&sb, s.a).await, "!1");
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_policy_is_a_typed_error_and_creates_nothing() {
    use burrow::Backend;
    let home = TestHome::new().await;
    assert!(NetworkPolicy::allow(["tcp:"]).is_err());
    assert!(serde_json::from_value::<Network>(serde_json::json!({"allow": ["*.*.x"]})).is_err());
    assert!(serde_json::from_value::<Network>(serde_json::json!("some")).is_err());
    // Past the limit of rules: refused by the config's validation.
    let many: Vec<String> = (0..300).map(|i| format!("h{i}.test")).collect();
    let policy = NetworkPolicy {
        allow: many.iter().map(|r| r.parse().unwrap()).collect(),
        deny: Vec::new(),
    };
    let err = home
        .builder("many")
        .network(policy)
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), burrow::ErrorCode::InvalidConfig);
    let all = home
        .backend
        .list(&burrow::ListFilter::default())
        .await
        .unwrap();
    assert!(all.is_empty());
}
