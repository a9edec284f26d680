//! The stack's speed (issue 38), beside pasta (the container driver's
//! network before the stack) measured in the same run on the same
//! machine, with the same client (python3 in the guest's namespace) and
//! the same server (a thread of this process on the host's loopback,
//! which both map to the guest's gateway address):
//!
//! - a download of BENCH_BYTES (default 1 GiB) from the server, MB/s;
//! - connection setup: the median of 200 connects (each reading the
//!   server's one-byte greeting), microseconds;
//!
//! and both again through a stack with a secret, whose connections go
//! through the secrets' filter (plain bytes, not intercepted).
//!
//! Run: `cargo bench -p burrow-net --bench stack` (root or not: it runs in
//! a user and network namespace of its own, made with `unshare`; pasta
//! from Debian's `passt`). Each rate is the best of BENCH_ITERS (default 3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_net::stack::{self, Counters, StackConfig};
use burrow_net::Policy;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-ec", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

#[allow(clippy::zombie_processes)] // killed and waited for by main
fn holder() -> Child {
    let c = Command::new("unshare")
        .args(["--net", "sleep", "600"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    for _ in 0..500 {
        if std::fs::read_link(format!("/proc/{}/ns/net", c.id())).is_ok_and(|l| l != own) {
            return c;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("no namespace for the guest");
}

/// Runs guest.py after `via` (what puts it in the guest's namespace); its
/// one line.
fn guest(via: &[String], args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lab/guest.py");
    let out = Command::new(&via[0])
        .args(&via[1..])
        .args(["/usr/bin/python3", script])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A server on the loopback: `bytes` to each connection on one port, a
/// one-byte greeting on the other.
fn servers(bytes: u64) -> (u16, u16) {
    let bulk = TcpListener::bind("127.0.0.1:0").unwrap();
    let greet = TcpListener::bind("127.0.0.1:0").unwrap();
    let ports = (
        bulk.local_addr().unwrap().port(),
        greet.local_addr().unwrap().port(),
    );
    std::thread::spawn(move || {
        for c in bulk.incoming().flatten() {
            let mut c = c;
            let chunk = vec![7u8; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if c.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
        }
    });
    std::thread::spawn(move || {
        for c in greet.incoming().flatten() {
            let mut c = c;
            let _ = c.write_all(b"g");
            let mut b = [0u8; 1];
            let _ = c.read(&mut b);
        }
    });
    ports
}

/// Download rate (best of `iters`) and median connect time of a guest
/// reached `via` a command prefix, which reaches the host's loopback at
/// `gw`.
fn measure(via: &[String], gw: &str, ports: (u16, u16), bytes: u64, iters: u64) -> (f64, u64) {
    let mut best: f64 = 0.0;
    for _ in 0..iters {
        let t = Instant::now();
        let got = guest(via, &["bulk", gw, &ports.0.to_string()]);
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(got, bytes.to_string(), "the whole download");
        best = best.max(bytes as f64 / secs / 1e6);
    }
    let us = guest(via, &["connects", gw, &ports.1.to_string(), "200"])
        .parse()
        .unwrap();
    (best, us)
}

fn main() {
    if std::env::var_os("BURROW_NET_LAB").is_none() {
        // Again, inside a user and network namespace of its own.
        let st = Command::new("unshare")
            .args(["--user", "--map-root-user", "--net", "--"])
            .arg(std::env::current_exe().unwrap())
            .env("BURROW_NET_LAB", "1")
            .status()
            .expect("running unshare");
        std::process::exit(st.code().unwrap_or(1));
    }
    let bytes = env_num("BENCH_BYTES", 1 << 30);
    let iters = env_num("BENCH_ITERS", 3);
    // The "host": loopback, and an interface with a default route for
    // pasta to copy (nothing is behind it).
    sh("ip link set lo up
        ip link add host0 type veth peer name host1
        ip link set host1 up
        ip addr add 198.18.20.1/24 dev host0
        ip link set host0 up
        ip route add default via 198.18.20.254 dev host0");
    let ports = servers(bytes);

    // The stack, and a second one with a secret (its connections read
    // by the secrets' filter).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (g1, nsenter) = start_stack(&rt, ports, None);
    let ours = measure(&nsenter, "10.0.2.2", ports, bytes, iters);
    let secrets = Arc::new(burrow_net::secrets::Secrets::new(
        vec![burrow_net::secrets::Secret {
            name: "TOKEN".into(),
            placeholder: burrow_net::secrets::placeholder_from([1; 16]),
            value: "bench".into(),
            hosts: vec![burrow_net::secrets::SecretHost::parse("api.example.com").unwrap()],
            headers: Vec::new(),
        }],
        None,
    ));
    let (g2, nsenter2) = start_stack(&rt, ports, Some(secrets));
    let guarded = measure(&nsenter2, "10.0.2.2", ports, bytes, iters);

    // pasta, running the client in a namespace of its own, its gateway
    // (the host's, copied) mapped to the host's loopback (its default).
    let pasta: Vec<String> = ["pasta", "--config-net", "--quiet", "--"]
        .map(String::from)
        .to_vec();
    let theirs = measure(&pasta, "198.18.20.254", ports, bytes, iters);

    let mib = bytes >> 20;
    // Ratios: pasta's beside the stack's, the stack with a secret beside
    // the stack without.
    println!("download {mib} MiB, best of {iters}:");
    println!(
        "  burrow stack  {:8.1} MB/s   ({:.2}x pasta)",
        ours.0,
        ours.0 / theirs.0
    );
    println!(
        "  with secrets  {:8.1} MB/s   ({:.2}x the stack)",
        guarded.0,
        guarded.0 / ours.0
    );
    println!("  pasta         {:8.1} MB/s", theirs.0);
    println!("connection setup, median of 200:");
    println!(
        "  burrow stack  {:8} us   ({:.2}x pasta)",
        ours.1,
        ours.1 as f64 / theirs.1 as f64
    );
    println!(
        "  with secrets  {:8} us   ({:.2}x the stack)",
        guarded.1,
        guarded.1 as f64 / ours.1 as f64
    );
    println!("  pasta         {:8} us", theirs.1);
    for mut g in [g1, g2] {
        let _ = g.kill();
        let _ = g.wait();
    }
}

/// A guest namespace whose link goes to a stack (with `secrets`) allowing
/// the two servers; its holder and the prefix that runs a command in it.
fn start_stack(
    rt: &tokio::runtime::Runtime,
    ports: (u16, u16),
    secrets: Option<Arc<burrow_net::secrets::Secrets>>,
) -> (Child, Vec<String>) {
    let g = holder();
    let pid = g.id() as i32;
    let fd = std::thread::spawn(move || burrow_net::link::make_link(pid))
        .join()
        .unwrap()
        .unwrap();
    let policy = Policy::allow([
        format!("tcp:127.0.0.1:{}", ports.0),
        format!("tcp:127.0.0.1:{}", ports.1),
    ])
    .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(policy);
    rt.spawn(async move {
        let _policy = tx;
        let link = stack::packet_link(fd, burrow_net::addrs::MTU).unwrap();
        stack::run(
            link,
            StackConfig {
                policy: rx,
                upstream: Vec::new(),
                counters: Arc::new(Counters::default()),
                on_refusal: Arc::new(|_| {}),
                mtu: burrow_net::addrs::MTU,
                secrets,
                ceiling: None,
            },
        )
        .await
    });
    let nsenter = ["nsenter", "-t", &g.id().to_string(), "-n"]
        .map(String::from)
        .to_vec();
    (g, nsenter)
}
