#![allow(clippy::unwrap_used)]
//! Sandboxes' networks end to end: real containers whose traffic goes
//! through their stack, to servers in a network namespace this test makes
//! (198.18.10.0/24 behind a veth pair; never anything past this machine).
//! Root only: the far namespace hangs off the host's own namespace (the
//! stack's own tests in core/net run the same rules rootless).

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use burrow::{Applies, Network, NetworkPolicy, Sandbox};
use common::TestHome;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The far namespace (once per test binary): servers at 198.18.10.2 (A),
/// .3 (B), a DNS server at .4 for a.test/b.test/rebind.test, and the
/// private 10.9.10.2 (P).
fn far() -> &'static Child {
    static FAR: OnceLock<Child> = OnceLock::new();
    FAR.get_or_init(|| {
        // A lab an earlier run left (its holder outlives a killed run
        // by at most ten minutes): its host end goes, and the pair with it.
        let _ = Command::new("sh")
            .args(["-c", "for i in $(ip -o addr show to 198.18.10.1/24 | cut -d' ' -f2); do ip link del \"$i\"; done"])
            .status();
        let far = Command::new("unshare")
            .args(["--net", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let f = far.id();
        std::thread::sleep(Duration::from_millis(100));
        let host_if = format!("bh{}", std::process::id() % 100000);
        let st = Command::new("sh")
            .args(["-ec", &format!(
                "ip link add {host_if} type veth peer name farv netns {f}
                 ip addr add 198.18.10.1/24 dev {host_if}
                 ip link set {host_if} up
                 ip route replace 10.9.10.0/24 dev {host_if}
                 nsenter -t {f} -n sh -ec '
                   ip link set lo up
                   for a in 198.18.10.2/24 198.18.10.3/24 198.18.10.4/24 10.9.10.2/24; do ip addr add $a dev farv; done
                   ip link set farv up
                   ip route add default dev farv'"
            )])
            .status()
            .unwrap();
        assert!(st.success());
        serve(f);
        far
    })
}

fn serve(pid: u32) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).unwrap();
        // SAFETY: setns on an open namespace file; only this thread moves.
        assert_eq!(
            unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        for (ip, name) in [
            ("198.18.10.2", "A"),
            ("198.18.10.3", "B"),
            ("10.9.10.2", "P"),
        ] {
            let l = TcpListener::bind((ip, 80)).unwrap();
            std::thread::spawn(move || {
                for c in l.incoming().flatten() {
                    let mut c = c;
                    let _ = c.write_all(name.as_bytes());
                }
            });
        }
        let hold = TcpListener::bind("198.18.10.2:81").unwrap();
        std::thread::spawn(move || {
            for c in hold.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let _ = c.write_all(b"held\n");
                    let mut buf = [0u8; 64];
                    while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        let dns = UdpSocket::bind("198.18.10.4:53").unwrap();
        std::thread::spawn(move || serve_dns(dns));
        tx.send(()).unwrap();
    });
    rx.recv().unwrap();
}

fn serve_dns(sock: UdpSocket) {
    use burrow_net::dns::{parse, response, RData, Record, NOERROR, NXDOMAIN};
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        let Ok(q) = parse(&buf[..n]) else { continue };
        let Some(question) = q.questions.first() else {
            continue;
        };
        let ip = match question.lower_name().as_str() {
            "a.test" => Some("198.18.10.2"),
            "b.test" => Some("198.18.10.3"),
            "rebind.test" => Some("10.9.10.2"),
            _ => None,
        };
        let reply = match ip {
            Some(ip) => response(
                &q,
                NOERROR,
                &[Record {
                    name: question.name.clone(),
                    ttl: 30,
                    data: RData::A(ip.parse().unwrap()),
                }],
            ),
            None => response(&q, NXDOMAIN, &[]),
        };
        let _ = sock.send_to(&reply, from);
    }
}

async fn home() -> TestHome {
    far();
    // The stacks ask the far DNS server (the supervisors inherit this).
    std::env::set_var("BURROW_DNS_SERVERS", "198.18.10.4");
    TestHome::new().await
}

async fn sh(sb: &Sandbox, script: &str) -> String {
    let out = sb.exec(["sh", "-c", script]).await.unwrap();
    out.stdout_str().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_lets_through_what_it_allows_and_logs_what_it_refuses() {
    if !root() {
        return;
    }
    let home = home().await;
    let policy = NetworkPolicy::allow(["a.test"])
        .unwrap()
        .and_deny(["rebind.test"])
        .unwrap();
    let sb = home
        .builder("policy")
        .network(policy)
        .create()
        .await
        .unwrap();
    assert_eq!(sh(&sb, "cat /etc/resolv.conf").await, "nameserver 10.0.2.3");
    // By name: resolved by the stack, connected through it.
    assert_eq!(sh(&sb, "nc a.test 80 </dev/null").await, "A");
    // A name not allowed does not resolve; its address is not reachable.
    let lookup = sh(&sb, "nslookup b.test 2>&1").await;
    assert!(!lookup.contains("198.18.10.3"), "{lookup}");
    let lookup = sh(&sb, "nslookup a.test 2>&1").await;
    assert!(lookup.contains("198.18.10.2"), "{lookup}");
    assert_eq!(
        sh(&sb, "nc -w 5 198.18.10.3 80 </dev/null; echo $?").await,
        "1"
    );
    // Private ranges stay closed.
    assert_eq!(
        sh(&sb, "nc -w 5 10.9.10.2 80 </dev/null; echo $?").await,
        "1"
    );
    let m = sb.metrics().await.unwrap();
    let net = m.network.expect("network counters");
    assert_eq!(net.connections, 1);
    assert!(net.refusals >= 3, "{net:?}");
    assert!(net.dns_queries >= 2, "{net:?}");
    assert_eq!(net.bytes_in, 1);
    let logs = burrow_test_support::logs_of(home.dir.path());
    assert!(
        logs.contains("refused tcp 198.18.10.3:80: denied: no allow rule matches"),
        "{logs}"
    );
    assert!(logs.contains("refused name b.test"), "{logs}");
    sb.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_changes_the_policy_live_and_closes_what_it_forbids() {
    if !root() {
        return;
    }
    let home = home().await;
    let sb = home
        .builder("live")
        .network(NetworkPolicy::allow(["198.18.10.2"]).unwrap())
        .create()
        .await
        .unwrap();
    // A connection held open, then forbidden.
    let held = sb
        .spawn(burrow::ExecOptions::new([
            "sh",
            "-c",
            "nc 198.18.10.2 81 </dev/null; echo closed",
        ]))
        .await
        .unwrap();
    assert_eq!(
        sh(&sb, "nc -w 5 198.18.10.3 80 </dev/null; echo $?").await,
        "1"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let plan = sb
        .modify()
        .network(NetworkPolicy::allow(["198.18.10.3"]).unwrap())
        .apply()
        .await
        .unwrap();
    assert_eq!(plan.changes[0].field, "network");
    assert_eq!(plan.changes[0].applies, Applies::Live);
    let out = tokio::time::timeout(Duration::from_secs(20), held.wait())
        .await
        .expect("the forbidden connection was closed")
        .unwrap();
    assert!(
        out.stdout_str().ends_with("closed\n"),
        "{:?}",
        out.stdout_str()
    );
    assert_eq!(sh(&sb, "nc -w 5 198.18.10.3 80 </dev/null").await, "B");
    // `none`: nothing at all any more.
    sb.modify().network(Network::None).apply().await.unwrap();
    assert_eq!(
        sh(&sb, "nc -w 5 198.18.10.3 80 </dev/null; echo $?").await,
        "1"
    );
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
