//! The outbound guard: every connection a server makes for its tenants
//! (a URL gateway target, a webhook, the pull of a tenant's image) goes
//! through [`Guard::connect`], which resolves the name, vets every
//! address it got with the one classification of [`crate::ceiling`], and
//! connects only to those addresses — the ones it vetted, just now, so a
//! name that answers differently on a second lookup (DNS rebinding) gains
//! nothing. A denied address is reached only where an operator's allow
//! rule names it (`[outbound] allow` of `burrow serve`, in the rule form
//! of [`crate::policy`]: `10.0.0.0/8`, `registry.internal`,
//! `tcp:127.0.0.1:5000`).
//!
//! A name is resolved by the name servers of `BURROW_DNS_SERVERS` when it
//! is set (as the sandboxes' stacks are), else by the system's resolver;
//! an address in any spelling (`2130706433`, `0x7f.1`, `[::ffff:7f00:1]`)
//! is read as the address it is, never handed to a resolver.
//!
//! Clients that cannot be given a connector (the registry client) are
//! given a [`proxy::GuardProxy`] instead: a loopback HTTP proxy that makes
//! each of its connections through the guard.

pub mod proxy;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::ceiling::{denied, is_host_own, parse_ip};
use crate::policy::{Proto, Rule};

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most addresses of one name tried.
const MAX_ADDRESSES: usize = 8;

/// Why an outbound connection was not made. Its text names the address
/// and the range: for the server's log, never for a tenant (who gets one
/// generic answer for both).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// An address of the host is denied and no allow rule names it.
    #[error("{host}:{port}: {address} is in {range}, which no outbound allow rule names")]
    Refused {
        /// The host asked for.
        host: String,
        /// The port.
        port: u16,
        /// The denied address.
        address: IpAddr,
        /// Its range (`127.0.0.0/8`, `host`).
        range: String,
    },
    /// The name did not resolve, or no address answered.
    #[error("{host}:{port}: {reason}")]
    Failed {
        /// The host asked for.
        host: String,
        /// The port.
        port: u16,
        /// What went wrong.
        reason: String,
    },
}

impl OutboundError {
    /// Whether the guard refused it (rather than the network failing).
    pub fn is_refused(&self) -> bool {
        matches!(self, OutboundError::Refused { .. })
    }
}

/// The guard: the operator's allow rules and the name servers to ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guard {
    allow: Vec<Rule>,
    servers: Vec<SocketAddr>,
}

impl Guard {
    /// A guard admitting the denied addresses `allow` names, resolving
    /// with `BURROW_DNS_SERVERS` if it is set.
    pub fn new(allow: Vec<Rule>) -> Guard {
        Guard {
            allow,
            servers: servers_from_env(),
        }
    }

    /// The same, asking `servers` for names (empty: the system's
    /// resolver).
    #[must_use]
    pub fn with_servers(mut self, servers: Vec<SocketAddr>) -> Guard {
        self.servers = servers;
        self
    }

    /// The operator's allow rules.
    pub fn allow(&self) -> &[Rule] {
        &self.allow
    }

    /// Vets a connection to `addr` for `host` (the name asked for, or the
    /// address itself): a denied address only where an allow rule names
    /// it (by address, or by the name asked for).
    pub fn vet(&self, host: &str, addr: SocketAddr) -> Result<(), OutboundError> {
        let ip = addr.ip().to_canonical();
        let Some(range) = denied(ip, is_host_own(ip)) else {
            return Ok(());
        };
        let name = host_name(host);
        let names: Vec<&str> = name.as_deref().into_iter().collect();
        if self
            .allow
            .iter()
            .any(|r| r.matches(ip, &names, Proto::Tcp, addr.port()))
        {
            return Ok(());
        }
        Err(OutboundError::Refused {
            host: host.to_owned(),
            port: addr.port(),
            address: ip,
            range,
        })
    }

    /// The refusal of `host:port` that needs no lookup: `host` is an
    /// address (in any spelling) that is denied and not allowed, or a
    /// `localhost` name. For refusing at once what is refused anyway when
    /// a connection is made (a target's or a webhook's URL).
    pub fn refuses_literal(&self, host: &str, port: u16) -> Option<OutboundError> {
        if crate::ceiling::is_local_name(host) {
            let loopback = IpAddr::from([127, 0, 0, 1]);
            let name = host_name(host);
            let names: Vec<&str> = name.as_deref().into_iter().collect();
            if self
                .allow
                .iter()
                .any(|r| r.matches(loopback, &names, Proto::Tcp, port))
            {
                return None;
            }
            return Some(OutboundError::Refused {
                host: host.to_owned(),
                port,
                address: loopback,
                range: "127.0.0.0/8".to_owned(),
            });
        }
        let ip = parse_ip(host)?;
        self.vet(host, SocketAddr::new(ip, port)).err()
    }

    /// The addresses of `host:port`, every one vetted: a name with any
    /// denied address among its answers is refused whole.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, OutboundError> {
        let failed = |reason: String| OutboundError::Failed {
            host: host.to_owned(),
            port,
            reason,
        };
        let addrs: Vec<SocketAddr> = if let Some(ip) = parse_ip(host) {
            vec![SocketAddr::new(ip, port)]
        } else if self.servers.is_empty() {
            tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| failed(format!("resolving: {e}")))?
                .take(MAX_ADDRESSES)
                .collect()
        } else {
            let answer = crate::stack::resolver::lookup(&self.servers, host)
                .await
                .ok_or_else(|| failed("no name server answered".into()))?;
            answer
                .answers
                .iter()
                .filter_map(|r| match r.data {
                    crate::dns::RData::A(ip) => Some(SocketAddr::new(IpAddr::V4(ip), port)),
                    _ => None,
                })
                .take(MAX_ADDRESSES)
                .collect()
        };
        if addrs.is_empty() {
            return Err(failed("the name has no address".into()));
        }
        for a in &addrs {
            self.vet(host, *a)?;
        }
        Ok(addrs)
    }

    /// A TCP connection to `host:port`: resolved, every address vetted,
    /// then the vetted addresses tried in turn.
    pub async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, OutboundError> {
        let addrs = self.resolve(host, port).await?;
        let mut last = String::new();
        for addr in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
                Err(_) => {
                    last = format!("connecting to {addr}: no answer within {CONNECT_TIMEOUT:?}")
                }
            }
        }
        Err(OutboundError::Failed {
            host: host.to_owned(),
            port,
            reason: last,
        })
    }
}

/// `host` as a name an allow rule's domain can match (lower case, no
/// trailing dot), or `None` when it is an address.
fn host_name(host: &str) -> Option<String> {
    if parse_ip(host).is_some() {
        return None;
    }
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    (!h.is_empty()).then_some(h)
}

/// The name servers of `BURROW_DNS_SERVERS` (comma-separated `IP` or
/// `IP:PORT`); empty when it is unset.
pub fn servers_from_env() -> Vec<SocketAddr> {
    std::env::var("BURROW_DNS_SERVERS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|s| {
                    let s = s.trim();
                    s.parse::<SocketAddr>()
                        .ok()
                        .or_else(|| s.parse::<IpAddr>().ok().map(|ip| (ip, 53).into()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
