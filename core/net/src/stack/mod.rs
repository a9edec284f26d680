//! The stack: one per sandbox, in its supervisor. It is the guest's
//! gateway and DNS server; it terminates each of the guest's connections
//! and opens the host-side socket only after the policy allowed it, and it
//! counts what went through and what was refused.

mod frames;
mod guarded;
mod io;
pub(crate) mod resolver;
mod tcp;
mod udp;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use smoltcp::iface::{Config, Interface};
use smoltcp::wire::{HardwareAddress, IpCidr};
use tokio::sync::watch;

use crate::addrs;
use crate::policy::{Policy, Proto, Verdict, Why};

pub use io::{packet_link, stream_link, Link};
pub use resolver::upstream_from_resolv_conf;

use frames::{classify, Class, Queues, STACK_MAC};

/// What went through a sandbox's network, since its stack started.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes the guest sent (TCP payload and UDP datagrams).
    pub bytes_out: AtomicU64,
    /// Bytes the guest received.
    pub bytes_in: AtomicU64,
    /// Connections and UDP flows opened.
    pub connections: AtomicU64,
    /// Connections, flows, names and answers refused.
    pub refusals: AtomicU64,
    /// DNS questions asked.
    pub dns_queries: AtomicU64,
}

/// A reading of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CounterValues {
    /// Bytes the guest sent.
    pub bytes_out: u64,
    /// Bytes the guest received.
    pub bytes_in: u64,
    /// Connections and UDP flows opened.
    pub connections: u64,
    /// Connections, flows, names and answers refused.
    pub refusals: u64,
    /// DNS questions asked.
    pub dns_queries: u64,
}

impl Counters {
    /// The values now.
    pub fn read(&self) -> CounterValues {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterValues {
            bytes_out: r(&self.bytes_out),
            bytes_in: r(&self.bytes_in),
            connections: r(&self.connections),
            refusals: r(&self.refusals),
            dns_queries: r(&self.dns_queries),
        }
    }
}

/// What was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A connection (TCP) or flow (UDP), with the names its address was
    /// resolved from.
    Connection {
        /// TCP or UDP.
        proto: Proto,
        /// The destination.
        dst: SocketAddrV4,
        /// The names the guest resolved to this address.
        names: Vec<String>,
    },
    /// A name the guest asked for.
    Name(String),
    /// An address an allowed name resolved to (rebinding).
    Answer(String, Ipv4Addr),
    /// A secret's placeholder on its way where the secret may not go.
    Secret(Box<SecretTarget>),
    /// An intercepted HTTPS connection to `name` at `dst`.
    Tls {
        /// The name the guest asked for.
        name: String,
        /// The destination.
        dst: SocketAddrV4,
    },
}

/// Where a secret's placeholder was going.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretTarget {
    /// The secret's name.
    pub name: String,
    /// The host the request named (`None`: outside a request head, or a
    /// head without a host).
    pub host: Option<String>,
    /// The connection's destination (the host side's).
    pub dst: SocketAddrV4,
    /// Where in the request (or the answer) it was.
    pub place: crate::secrets::http::Place,
}

impl fmt::Display for SecretTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::secrets::http::Place;
        let (name, dst) = (&self.name, self.dst);
        let host = self.host.as_deref().unwrap_or("a request without a host");
        match (&self.place, &self.host) {
            (Place::Elsewhere, Some(host)) => write!(f, "refused secret {name} to {host} ({dst})"),
            (Place::Elsewhere, None) => write!(f, "refused secret {name} to {dst}"),
            (Place::RequestLine, _) => write!(
                f,
                "refused secret {name} in the request line to {host} ({dst})"
            ),
            (Place::Header(header), _) => write!(
                f,
                "refused secret {name} in header {header} to {host} ({dst})"
            ),
            (Place::Misdirected(connection), _) => write!(
                f,
                "refused secret {name} to {host} on a connection to {connection} ({dst})"
            ),
            (Place::Coded(coding), _) => write!(
                f,
                "refused secret {name} back from {host} in an answer coded {coding} ({dst})"
            ),
            (Place::Backlog, _) => write!(
                f,
                "refused secret {name} to {host} behind too many requests waiting for answers ({dst})"
            ),
        }
    }
}

/// A refusal, with the rule or range that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What was refused.
    pub target: Target,
    /// Why.
    pub verdict: Verdict,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Connection { proto, dst, names } if names.is_empty() => {
                write!(f, "refused {} {dst}", proto.as_str())?
            }
            Target::Connection { proto, dst, names } => {
                write!(f, "refused {} {dst} ({})", proto.as_str(), names.join(", "))?
            }
            Target::Name(n) => write!(f, "refused name {n}")?,
            Target::Answer(n, ip) => write!(f, "refused answer {ip} for {n}")?,
            Target::Secret(s) => s.fmt(f)?,
            Target::Tls { name, dst } => write!(f, "refused https {name} ({dst})")?,
        }
        write!(f, ": {}", self.verdict)
    }
}

/// A refusal of a limit rather than of a rule.
pub(crate) fn limit_verdict(what: &str) -> Verdict {
    Verdict {
        allowed: false,
        why: Why::Special(format!("the limit of {what}")),
    }
}

/// Called with each refusal (the supervisor writes it to the sandbox's
/// log).
pub type OnRefusal = Arc<dyn Fn(&Refusal) + Send + Sync>;

/// What a stack is given.
pub struct StackConfig {
    /// The rules; a new value applies at once, closing what it forbids.
    pub policy: watch::Receiver<Policy>,
    /// The name servers the stack asks.
    pub upstream: Vec<SocketAddr>,
    /// The counters it keeps.
    pub counters: Arc<Counters>,
    /// Told of each refusal.
    pub on_refusal: OnRefusal,
    /// The link's MTU (IP bytes per frame).
    pub mtu: usize,
    /// The sandbox's secrets (`None`: it has none; its connections are
    /// copied as they are).
    pub secrets: Option<Arc<crate::secrets::Secrets>>,
    /// The egress ceiling (a tenant's sandbox): the denied addresses of
    /// [`crate::ceiling`] are refused whatever the policy names, and DNS
    /// answers leading to them dropped. `None`: the policy alone decides.
    pub ceiling: Option<crate::ceiling::Ceiling>,
}

impl fmt::Debug for StackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackConfig")
            .field("policy", &*self.policy.borrow())
            .field("upstream", &self.upstream)
            .field("mtu", &self.mtu)
            .field("secrets", &self.secrets)
            .field("ceiling", &self.ceiling)
            .finish_non_exhaustive()
    }
}

/// What the stack's tasks share.
pub(crate) struct Ctx {
    policy: watch::Receiver<Policy>,
    upstream: Vec<SocketAddr>,
    names: resolver::Names,
    counters: Arc<Counters>,
    on_refusal: OnRefusal,
    mtu: usize,
    secrets: Option<Arc<crate::secrets::Secrets>>,
    ceiling: Option<crate::ceiling::Ceiling>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

impl Ctx {
    fn policy(&self) -> Policy {
        self.policy.borrow().clone()
    }

    fn refused(&self, refusal: Refusal) {
        self.counters.refusals.fetch_add(1, Ordering::Relaxed);
        (self.on_refusal)(&refusal);
    }

    /// Checks a connection to `dst` (with the names the guest resolved it
    /// from); the refusal to report otherwise.
    fn check(&self, proto: Proto, dst: SocketAddrV4) -> Result<(), Refusal> {
        let names = self.names.of(*dst.ip());
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let ip = IpAddr::V4(*dst.ip());
        let host_own = self.host_own(ip);
        let verdict = match self.above_ceiling(ip, host_own) {
            Some(refused) => refused,
            None => self
                .policy
                .borrow()
                .check(ip, dst.port(), proto, &refs, host_own),
        };
        if verdict.allowed {
            Ok(())
        } else {
            Err(Refusal {
                target: Target::Connection { proto, dst, names },
                verdict,
            })
        }
    }

    /// Whether `ip` is one of the host's addresses (read again at most
    /// every two seconds).
    fn host_own(&self, ip: IpAddr) -> bool {
        crate::ceiling::is_host_own(ip)
    }

    /// The refusal of `ip` by the egress ceiling, if the sandbox has one
    /// and `ip` is above it.
    fn above_ceiling(&self, ip: IpAddr, host_own: bool) -> Option<Verdict> {
        self.ceiling.as_ref()?.refuses(ip, host_own)
    }
}

/// Runs a stack on `link` until the link closes (the sandbox stopped).
pub async fn run(mut link: Link, cfg: StackConfig) {
    let ctx = Arc::new(Ctx {
        policy: cfg.policy.clone(),
        upstream: cfg.upstream,
        names: resolver::Names::default(),
        counters: cfg.counters,
        on_refusal: cfg.on_refusal,
        mtu: cfg.mtu,
        secrets: cfg.secrets,
        ceiling: cfg.ceiling,
    });
    let mut policy = cfg.policy;
    let mut policy_open = true;
    let mut dev = Queues::new(cfg.mtu);
    let mut iface = Interface::new(
        Config::new(HardwareAddress::Ethernet(STACK_MAC)),
        &mut dev,
        smol_now(),
    );
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(addrs::GATEWAY.into(), addrs::GUEST_PREFIX));
    });
    iface.set_any_ip(true);
    let mut tcp = tcp::Tcp::new();
    let mut udp = udp::Udp::new();
    let mut last_expiry = Instant::now();
    loop {
        // Everything smoltcp and the connections can do now.
        loop {
            iface.poll(smol_now(), &mut dev, &mut tcp.sockets);
            if !tcp.service(&ctx) {
                break;
            }
        }
        while let Some(frame) = dev.tx.pop_front() {
            if link.tx.send(frame).await.is_err() {
                return;
            }
        }
        if last_expiry.elapsed() > Duration::from_secs(1) {
            udp.expire();
            last_expiry = Instant::now();
        }
        let delay = iface
            .poll_delay(smol_now(), &tcp.sockets)
            .map(|d| Duration::from_micros(d.total_micros()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        tokio::select! {
            frame = link.rx.recv() => {
                let Some(frame) = frame else { return };
                ingress(&ctx, &mut dev, &mut tcp, &mut udp, &link.tx, frame);
                // Take what else is queued, a bounded batch.
                for _ in 0..64 {
                    match link.rx.try_recv() {
                        Ok(frame) => ingress(&ctx, &mut dev, &mut tcp, &mut udp, &link.tx, frame),
                        Err(_) => break,
                    }
                }
            }
            Some(done) = tcp.done_rx.recv() => {
                if let Some(frame) = tcp.connected(&ctx, done) {
                    dev.rx.push_back(frame);
                }
            }
            () = tcp.wake.notified() => {}
            changed = policy.changed(), if policy_open => {
                if changed.is_err() {
                    policy_open = false;
                } else {
                    policy.borrow_and_update();
                    tcp.recheck(&ctx);
                    udp.recheck(&ctx);
                }
            }
            () = tokio::time::sleep(delay) => {}
        }
    }
}

fn ingress(
    ctx: &Arc<Ctx>,
    dev: &mut Queues,
    tcp: &mut tcp::Tcp,
    udp: &mut udp::Udp,
    out: &tokio::sync::mpsc::Sender<Vec<u8>>,
    frame: Vec<u8>,
) {
    match classify(&frame) {
        Class::Syn { src, dst } => {
            if let Some(frame) = tcp.syn(ctx, src, dst, frame) {
                dev.rx.push_back(frame);
            }
        }
        Class::Udp {
            mac,
            src,
            dst,
            payload,
        } => udp.datagram(ctx, out, mac, src, dst, &frame[payload]),
        Class::Stack => dev.rx.push_back(frame),
        Class::Drop => {}
    }
}

fn smol_now() -> smoltcp::time::Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    smoltcp::time::Instant::from_micros(start.elapsed().as_micros() as i64)
}
