//! A sandbox's network stack (burrow-net), shared by both drivers: each
//! gives it a link (a veth pair's packet socket for a container, QEMU's
//! stream socket for a vm) and keeps the handle, through which `modify`
//! changes the policy live and `metrics` reads the counters. Refusals go
//! to the supervisor's log, at most [`LOG_BURST`] a second.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow_net::stack::{self, CounterValues, Counters, Link, Refusal, StackConfig};
use burrow_net::{Network, Policy};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Refusals logged per second at most; the rest are counted and said in
/// the next line.
const LOG_BURST: u32 = 20;

/// A running stack.
#[derive(Debug)]
pub(crate) struct NetStack {
    policy: watch::Sender<Policy>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Drop for NetStack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl NetStack {
    /// Starts a stack on `link` with the rules of `network`, under
    /// `ceiling` if the sandbox has one (it holds for the stack's life: a
    /// change of the rules never lifts it).
    pub(crate) fn start(
        link: Link,
        network: &Network,
        ceiling: Option<&burrow_net::Ceiling>,
        sandbox: &str,
        secrets: Option<Arc<burrow_net::secrets::Secrets>>,
    ) -> NetStack {
        let (policy, rx) = watch::channel(rules(network));
        let counters = Arc::new(Counters::default());
        let cfg = StackConfig {
            policy: rx,
            upstream: upstream(),
            counters: counters.clone(),
            on_refusal: refusal_log(sandbox.to_owned()),
            mtu: burrow_net::addrs::MTU,
            secrets,
            ceiling: ceiling.cloned(),
        };
        let task = tokio::spawn(stack::run(link, cfg));
        NetStack {
            policy,
            counters,
            task,
        }
    }

    /// Applies `network` to the running stack: what it no longer allows is
    /// closed (`none` closes everything).
    pub(crate) fn set(&self, network: &Network) {
        self.policy.send_replace(rules(network));
    }

    /// Applies `network` to a guest's stack, `stack` (None: the guest runs
    /// without a network, which a setting that enables one gets at its
    /// next start: the note says so).
    pub(crate) fn set_on(stack: Option<&NetStack>, network: &Network) -> Option<String> {
        match stack {
            Some(stack) => {
                stack.set(network);
                None
            }
            None if network.is_enabled() => Some(
                "the sandbox runs without a network: the setting applies at its next start".into(),
            ),
            None => None,
        }
    }

    /// The counters now.
    pub(crate) fn counters(&self) -> burrow_protocol::NetworkCounters {
        let CounterValues {
            bytes_out,
            bytes_in,
            connections,
            refusals,
            dns_queries,
        } = self.counters.read();
        burrow_protocol::NetworkCounters {
            bytes_out,
            bytes_in,
            connections,
            refusals,
            dns_queries,
        }
    }
}

fn rules(network: &Network) -> Policy {
    network.policy().unwrap_or_default()
}

/// The name servers the stacks ask: `BURROW_DNS_SERVERS` (comma-separated
/// `IP` or `IP:PORT`), else the host's `/etc/resolv.conf`.
fn upstream() -> Vec<SocketAddr> {
    if let Some(list) = std::env::var("BURROW_DNS_SERVERS")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return list
            .split(',')
            .filter_map(|s| {
                let s = s.trim();
                s.parse::<SocketAddr>()
                    .ok()
                    .or_else(|| s.parse::<std::net::IpAddr>().ok().map(|ip| (ip, 53).into()))
            })
            .collect();
    }
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    stack::upstream_from_resolv_conf(&text)
}

/// Logs refusals to the supervisor's log, rate-limited.
fn refusal_log(sandbox: String) -> stack::OnRefusal {
    let window = Mutex::new((Instant::now(), 0u32));
    let dropped = AtomicU64::new(0);
    Arc::new(move |r: &Refusal| {
        let mut w = window.lock().unwrap_or_else(|p| p.into_inner());
        if w.0.elapsed() >= Duration::from_secs(1) {
            *w = (Instant::now(), 0);
        }
        if w.1 >= LOG_BURST {
            dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        w.1 += 1;
        let skipped = dropped.swap(0, Ordering::Relaxed);
        if skipped > 0 {
            tracing::warn!(sandbox = %sandbox, "network: {r} ({skipped} earlier refusals not logged)");
        } else {
            tracing::warn!(sandbox = %sandbox, "network: {r}");
        }
    })
}
