//! A network lab for the stack's tests, all in namespaces the test makes:
//! each test runs again inside a user and network namespace of its own
//! (`unshare -rn`, rootless or root alike), which plays the host; a "far"
//! namespace behind a veth pair holds the servers (198.18.0.2-4 and the
//! private 10.9.0.2), and a "guest" namespace gets the stack's link.
//! Nothing reaches past this machine.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod far_http;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use burrow_net::dns::{self, RData, Record};
use burrow_net::stack::{self, Counters, Refusal, StackConfig};
use burrow_net::Policy;
use tokio::sync::watch;

/// Bytes the bulk server (198.18.0.2:82) sends.
pub const BULK: usize = 64 << 20;

/// Runs the named test again inside a fresh user and network namespace
/// unless this is that run; returns whether the caller is inside.
pub fn inside(test: &str) -> bool {
    if std::env::var_os("BURROW_NET_LAB").is_some() {
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("BURROW_NET_LAB", "1")
        .output()
        .expect("running unshare");
    std::io::stdout().write_all(&out.stdout).unwrap();
    std::io::stderr().write_all(&out.stderr).unwrap();
    assert!(out.status.success(), "{test} failed in its lab");
    // The inner run must have run the test, not filtered it away.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{test} did not run in its lab"
    );
    false
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-ec", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

fn holder() -> Child {
    Command::new("unshare")
        .args(["--net", "sleep", "600"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `pid` is in a network namespace other than ours.
fn wait_own_netns(pid: u32) {
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    for _ in 0..500 {
        if let Ok(l) = std::fs::read_link(format!("/proc/{pid}/ns/net")) {
            if l != own {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("{pid} never got its network namespace");
}

/// The lab: the far namespace with its servers, the guest namespace, and
/// the stack on the guest's link.
pub struct Lab {
    far: Child,
    pub guest: Child,
    pub policy: watch::Sender<Policy>,
    pub counters: Arc<Counters>,
    pub refusals: Arc<Mutex<Vec<Refusal>>>,
    _stack: tokio::task::JoinHandle<()>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.far.kill();
        let _ = self.guest.kill();
        let _ = self.far.wait();
        let _ = self.guest.wait();
    }
}

impl Lab {
    /// Builds the lab and starts a stack with `policy` (inside a tokio
    /// runtime).
    pub fn new(policy: Policy) -> Lab {
        Lab::with_secrets(policy, None)
    }

    /// As [`Lab::new`], with the stack keeping `secrets`.
    pub fn with_secrets(policy: Policy, secrets: Option<Arc<burrow_net::secrets::Secrets>>) -> Lab {
        Lab::build(policy, secrets, None)
    }

    /// As [`Lab::new`], under an egress ceiling.
    pub fn with_ceiling(policy: Policy) -> Lab {
        Lab::build(policy, None, Some(burrow_net::Ceiling::default()))
    }

    fn build(
        policy: Policy,
        secrets: Option<Arc<burrow_net::secrets::Secrets>>,
        ceiling: Option<burrow_net::Ceiling>,
    ) -> Lab {
        sh("ip link set lo up");
        let far = holder();
        wait_own_netns(far.id());
        let f = far.id();
        sh(&format!(
            "ip link add hostv type veth peer name farv
             ip link set farv netns {f}
             ip addr add 198.18.0.1/24 dev hostv
             ip link set hostv up
             ip route add 10.9.0.0/24 dev hostv
             nsenter -t {f} -n sh -ec '
               ip link set lo up
               for a in 198.18.0.2/24 198.18.0.3/24 198.18.0.4/24 10.9.0.2/24; do ip addr add $a dev farv; done
               ip link set farv up
               ip route add default dev farv'"
        ));
        serve_far(f);
        let guest = holder();
        wait_own_netns(guest.id());
        let link = make_link(guest.id() as i32);
        let (policy_tx, policy_rx) = watch::channel(policy);
        let counters = Arc::new(Counters::default());
        let refusals = Arc::new(Mutex::new(Vec::new()));
        let seen = refusals.clone();
        let cfg = StackConfig {
            policy: policy_rx,
            upstream: vec!["198.18.0.4:53".parse().unwrap()],
            counters: counters.clone(),
            on_refusal: Arc::new(move |r: &Refusal| seen.lock().unwrap().push(r.clone())),
            mtu: burrow_net::addrs::MTU,
            secrets,
            ceiling,
        };
        let link = stack::packet_link(link, burrow_net::addrs::MTU).unwrap();
        let stack = tokio::spawn(stack::run(link, cfg));
        Lab {
            far,
            guest,
            policy: policy_tx,
            counters,
            refusals,
            _stack: stack,
        }
    }

    /// guest.py with `args`, in the guest's namespace.
    fn guest_cmd(&self, args: &[&str]) -> tokio::process::Command {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lab/guest.py");
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.args([
            "-t",
            &self.guest.id().to_string(),
            "-n",
            "/usr/bin/python3",
            script,
        ])
        .args(args);
        cmd
    }

    /// Runs guest.py with `args` in the guest's namespace; its one line.
    pub async fn guest(&self, args: &[&str]) -> String {
        let out = self.guest_cmd(args).output().await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Runs guest.py in the background.
    pub fn guest_bg(&self, args: &[&str]) -> tokio::process::Child {
        self.guest_cmd(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    pub fn refusals(&self) -> Vec<Refusal> {
        self.refusals.lock().unwrap().clone()
    }
}

/// The stack's link into the guest's namespace, made on a thread of its
/// own (it changes that thread's network namespace; the lab's user
/// namespace is the guest's, so no process of its own is needed).
fn make_link(pid: i32) -> OwnedFd {
    std::thread::spawn(move || burrow_net::link::make_link(pid))
        .join()
        .unwrap()
        .expect("making the link")
}

/// Starts the far servers on threads in the far namespace.
fn serve_far(pid: u32) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).unwrap();
        // SAFETY: setns on an open namespace file; only this thread moves.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        for (ip, name) in [("198.18.0.2", "A"), ("198.18.0.3", "B"), ("10.9.0.2", "P")] {
            let l = TcpListener::bind((ip.parse::<Ipv4Addr>().unwrap(), 80)).unwrap();
            std::thread::spawn(move || greet(l, name));
        }
        let hold = TcpListener::bind("198.18.0.2:81").unwrap();
        std::thread::spawn(move || {
            for c in hold.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let mut buf = [0u8; 1024];
                    while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        let bulk = TcpListener::bind("198.18.0.2:82").unwrap();
        std::thread::spawn(move || {
            for c in bulk.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let chunk = vec![7u8; 1 << 16];
                    for _ in 0..BULK / chunk.len() {
                        if c.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let echo = UdpSocket::bind("198.18.0.2:7").unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..n], from);
            }
        });
        far_http::serve();
        let dns_sock = UdpSocket::bind("198.18.0.4:53").unwrap();
        std::thread::spawn(move || serve_dns(dns_sock));
        tx.send(()).unwrap();
    });
    rx.recv().unwrap();
}

fn greet(l: TcpListener, name: &'static str) {
    for c in l.incoming().flatten() {
        let mut c = c;
        let _ = c.write_all(name.as_bytes());
    }
}

/// The far DNS server's zone.
fn zone(name: &str) -> Option<Vec<RData>> {
    let a = |s: &str| RData::A(s.parse().unwrap());
    Some(match name {
        "a.test" | "c.test" => vec![a("198.18.0.2")],
        "b.test" | "x.c.test" => vec![a("198.18.0.3")],
        "rebind.test" => vec![a("10.9.0.2")],
        "mixed.test" => vec![a("10.9.0.2"), a("198.18.0.3")],
        "alias.test" => vec![RData::Cname("a.test".into()), a("198.18.0.2")],
        _ => return None,
    })
}

fn serve_dns(sock: UdpSocket) {
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        let Ok(q) = dns::parse(&buf[..n]) else {
            continue;
        };
        let Some(question) = q.questions.first() else {
            continue;
        };
        let reply = match zone(&question.lower_name()) {
            Some(data) => {
                let answers: Vec<Record> = data
                    .into_iter()
                    .map(|data| Record {
                        name: question.name.clone(),
                        ttl: 30,
                        data,
                    })
                    .collect();
                dns::response(&q, dns::NOERROR, &answers)
            }
            None => dns::response(&q, dns::NXDOMAIN, &[]),
        };
        let _ = sock.send_to(&reply, from);
    }
}

pub fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy {
        allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
        deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
    }
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
