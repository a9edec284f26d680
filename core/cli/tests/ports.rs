#![allow(clippy::unwrap_used)]
//! Published ports end to end, through real sandboxes (whichever driver
//! `BURROW_DRIVER` names): a host port whose connections reach a service
//! on the sandbox's loopback, kept across restarts, listed by `inspect`
//! and `ls`; a taken host port is `port_unavailable` and the next start,
//! once it is free, serves it; UDP datagrams reach the guest's port; a
//! bad `-p` is `invalid_config` and creates nothing. Only 127.0.0.1.

use burrow_cli_testkit as common;

use std::io::Read;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use burrow::{ErrorCode, PortMapping, Sandbox};
use common::TestHome;

/// A host port nobody listens on (right now).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a server in the guest answering every connection to its port
/// 8000 with `hi`.
async fn serve_hi(sb: &Sandbox) {
    let out = sb
        .exec([
            "sh",
            "-c",
            "setsid nc -ll -p 8000 -e echo hi </dev/null >/dev/null 2>&1 &",
        ])
        .await
        .unwrap();
    assert_eq!(out.status.code, Some(0), "{}", out.stderr_str());
}

/// What a connection to host `port` reads, once the guest's server is up
/// (a connection made before it is closed at once: the tunnel's connect
/// was refused).
async fn fetch(port: u16) -> String {
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut got = String::new();
            if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let _ = c.read_to_string(&mut got);
            }
            if !got.is_empty() || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_tcp_port_reaches_the_guest_across_restarts() {
    let home = TestHome::new().await;
    let port = free_port();
    let sb = home
        .builder("web")
        .port(PortMapping::tcp(port, 8000))
        .create()
        .await
        .unwrap();
    serve_hi(&sb).await;
    assert_eq!(fetch(port).await, "hi\n");
    let info = sb.info().await.unwrap();
    assert_eq!(info.config.ports, vec![PortMapping::tcp(port, 8000)]);

    // inspect and ls say it; the JSON keeps the text form.
    let out = home.cli().args(["inspect", "web"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["config"]["ports"],
        serde_json::json!([format!("127.0.0.1:{port}:8000")])
    );
    let out = home.cli().args(["ls"]).output().unwrap();
    let ls = String::from_utf8_lossy(&out.stdout);
    assert!(ls.contains(&format!("127.0.0.1:{port}->8000/tcp")), "{ls}");

    // Stopped: nothing listens on the host port. Started again: served.
    sb.stop().await.unwrap();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let sb = sb.handle().start().await.unwrap();
    serve_hi(&sb).await;
    assert_eq!(fetch(port).await, "hi\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_host_port_is_port_unavailable_until_it_is_free() {
    let home = TestHome::new().await;
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let h = home
        .builder("clash")
        .port(PortMapping::tcp(port, 8000))
        .define()
        .await
        .unwrap();
    let e = h.start().await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::PortUnavailable, "{e}");
    // The CLI says so with its own exit code (5, a state of the host).
    let out = home.cli().args(["start", "clash"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(taken);
    let sb = h.start().await.unwrap();
    serve_hi(&sb).await;
    assert_eq!(fetch(port).await, "hi\n");
    sb.destroy().await.unwrap();
}

/// `Udp: NoPorts` of the guest's `/proc/net/snmp`: datagrams that reached
/// a port nothing listens on.
async fn udp_no_ports(sb: &Sandbox) -> u64 {
    let out = sb
        .exec([
            "awk",
            "/^Udp:/ { if (seen) print $3; seen = 1 }",
            "/proc/net/snmp",
        ])
        .await
        .unwrap();
    out.stdout_str().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_udp_datagrams_reach_the_guests_port() {
    let home = TestHome::new().await;
    let port = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let sb = home
        .builder("dgram")
        .port(PortMapping::udp(port, 9999))
        .create()
        .await
        .unwrap();
    let before = udp_no_ports(&sb).await;
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in [&b"a"[..], b"bb", b"ccc"] {
        client.send_to(d, ("127.0.0.1", port)).unwrap();
    }
    // Nothing listens on the guest's 9999: each datagram the tunnel
    // delivered is counted there.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut now = before;
    while now < before + 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = udp_no_ports(&sb).await;
    }
    assert_eq!(now, before + 3);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_publish_is_invalid_config_and_creates_nothing() {
    let home = TestHome::new().await;
    let image = common::busybox_rootfs();
    let image = image.to_str().unwrap();
    let create = |publish: &[&str]| {
        let mut c = home.cli();
        c.args(["create", "--name", "pub"]);
        for p in publish {
            c.args(["-p", p]);
        }
        c.arg(image).output().unwrap()
    };
    let p = free_port();
    let (a, b) = (format!("{p}:80"), format!("{p}:81"));
    for bad in [
        &["80"][..],
        &["0:80"],
        &["8080:80/sctp"],
        &["::1:80:80"],
        &[&a, &b],
    ] {
        let out = create(bad);
        assert_eq!(
            out.status.code(),
            Some(6),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = home.cli().args(["--json", "ls"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(0), "{v}");
    // The same command with good ports creates it.
    let out = create(&[&a, &format!("{p}:53/udp")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = home.cli().args(["--json", "ls"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v[0]["config"]["ports"],
        serde_json::json!([format!("127.0.0.1:{p}:80"), format!("127.0.0.1:{p}:53/udp")])
    );
}
