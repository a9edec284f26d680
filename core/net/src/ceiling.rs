//! The egress ceiling: the addresses a tenant's sandbox, and the server's
//! outbound calls, never reach whatever a rule or a name says.
//!
//! One classification decides, for both: [`denied`] — loopback, private
//! (RFC 1918), CGNAT, link-local (cloud metadata), multicast, unspecified,
//! broadcast and reserved IPv4; IPv6 loopback, unique local, link-local,
//! site-local, multicast and the IPv4-compatible form; IPv4-mapped, NAT64
//! and 6to4 addresses judged by the IPv4 address they carry (the ranges
//! are [`special_range`]'s); and the host's own addresses, read from its
//! interfaces. An address comes in any spelling ([`parse_ip`] reads the
//! forms `inet_aton` takes: `127.1`, `0x7f.1`, `0177.0.0.1`,
//! `2130706433`), but the check is always made on the address a
//! connection is about to be made to.
//!
//! A sandbox's configuration carries a [`Ceiling`] (`egress_ceiling`, set
//! by `burrow serve` for every tenant but the default one): its stack then
//! refuses these addresses even where a rule names them, and drops DNS
//! answers that lead to them; the pulls of its image reach them only
//! where [`Ceiling::pull_allow`] says.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::policy::{special_range, Host, Rule, Verdict, Why};

/// The ceiling a sandbox's configuration carries (`egress_ceiling`): its
/// network, and the pulls of its image, reach no [`denied`] address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    /// What the pulls of the sandbox's image may reach all the same (the
    /// operator's `[outbound] allow` of `burrow serve`), as rules:
    /// `10.0.0.0/8`, `registry.internal`, `tcp:127.0.0.1:5000`. The
    /// sandbox's own connections never.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_allow: Vec<Rule>,
}

impl Ceiling {
    /// The refusal of a connection to (or a DNS answer of) `ip` under the
    /// ceiling, if it is a denied address.
    pub fn refuses(&self, ip: IpAddr, host_own: bool) -> Option<Verdict> {
        denied(ip, host_own).map(|range| Verdict {
            allowed: false,
            why: Why::Ceiling(range),
        })
    }
}

/// The denied range `ip` lies in, named (`127.0.0.0/8`, `fc00::/7`, or
/// `host` for one of the host's own addresses, `host_own`), or `None` for
/// a public address. The one classification of the sandboxes' ceiling and
/// the server's outbound guard.
pub fn denied(ip: IpAddr, host_own: bool) -> Option<String> {
    let ip = ip.to_canonical();
    if host_own {
        return Some("host".to_owned());
    }
    special_range(ip).map(|(net, prefix)| match net {
        IpAddr::V4(n) => format!("{n}/{prefix}"),
        IpAddr::V6(n) => format!("{n}/{prefix}"),
    })
}

/// Reads an address in any spelling a resolver or an HTTP client would
/// take for one: IPv4 as `inet_aton` reads it (one to four parts, each
/// decimal, octal with a leading `0` or hexadecimal with `0x`: `127.1`,
/// `0x7f.1`, `0177.0.0.1`, `2130706433`), IPv6 with or without brackets
/// and with a zone (`[fe80::1%eth0]`), IPv4-mapped and -compatible forms
/// (`::ffff:127.0.0.1`). `None`: a name, not an address.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    let t = text.trim();
    let t = t.strip_suffix('.').unwrap_or(t);
    let inner = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(t);
    let no_zone = inner.split_once('%').map_or(inner, |(a, _)| a);
    if let Ok(v6) = no_zone.parse::<Ipv6Addr>() {
        return Some(IpAddr::V6(v6));
    }
    parse_ipv4_loose(t).map(IpAddr::V4)
}

/// `inet_aton`'s reading of an IPv4 address.
fn parse_ipv4_loose(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let nums = parts
        .iter()
        .map(|p| number(p))
        .collect::<Option<Vec<u64>>>()?;
    let (last, head) = nums.split_last()?;
    if head.iter().any(|&n| n > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - head.len() as u32);
    if rest_bits < 64 && *last >= 1u64 << rest_bits {
        return None;
    }
    let mut v: u64 = 0;
    for (i, &n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    u32::try_from(v | last).ok().map(Ipv4Addr::from)
}

/// One part of an `inet_aton` address: decimal, `0`-octal or `0x`-hex.
fn number(p: &str) -> Option<u64> {
    if p.is_empty() || p.len() > 40 {
        return None;
    }
    let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        // `0x` alone is 0 to inet_aton.
        (if h.is_empty() { "0" } else { h }, 16)
    } else if p.len() > 1 && p.starts_with('0') {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    if !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Whether `name` is one of the names every resolver answers with the
/// host itself: `localhost` and its subdomains (RFC 6761), and
/// `localhost.localdomain`.
pub fn is_local_name(name: &str) -> bool {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    n == "localhost" || n.ends_with(".localhost") || n == "localhost.localdomain"
}

/// Why `rule` cannot stand under a ceiling, if it names a denied address:
/// an IP or CIDR rule inside a denied range (which the stack lets it
/// reach unless a ceiling holds: wider rules never name one), one of the
/// host's own addresses (`host`), in any family or embedded form; or a
/// domain rule whose name is an address in another spelling, or a
/// `localhost` name. Wider rules (`*`, `0.0.0.0/0`) stand: they never
/// name a denied address, and the stack refuses those at connect.
pub fn rule_reaches_denied(rule: &Rule, host: &HashSet<IpAddr>) -> Option<String> {
    match &rule.host {
        Host::Any => None,
        Host::Net { addr, prefix } => net_reaches_denied(*addr, *prefix, host),
        Host::Domain(name) | Host::Subdomains(name) => {
            if is_local_name(name) || is_local_name(&format!("x.{name}")) {
                return Some(format!("{name} (the host itself)"));
            }
            let ip = parse_ip(name)?;
            let full = if ip.is_ipv4() { 32 } else { 128 };
            net_reaches_denied(ip, full, host)
        }
    }
}

/// Whether the network `addr/prefix` lies inside a denied range (or is
/// one of `host`'s addresses).
fn net_reaches_denied(addr: IpAddr, prefix: u8, host: &HashSet<IpAddr>) -> Option<String> {
    if let IpAddr::V6(a) = addr {
        if let Some((v4, p4)) = crate::policy::ranges::embedded_v4_net(a, prefix) {
            return net_reaches_denied(IpAddr::V4(v4), p4, host);
        }
    }
    let full = if addr.is_ipv4() { 32 } else { 128 };
    if prefix == full && host.contains(&addr.to_canonical()) {
        return Some("host".to_owned());
    }
    let (net, range) = special_range(addr)?;
    (prefix >= range).then(|| format!("{net}/{range}"))
}

/// The host's own addresses (every interface's), read again at most every
/// two seconds.
#[cfg(feature = "stack")]
pub fn host_addresses() -> HashSet<IpAddr> {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static CACHE: Mutex<Option<(Instant, HashSet<IpAddr>)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    match &*cache {
        Some((at, set)) if at.elapsed() < Duration::from_secs(2) => set.clone(),
        _ => {
            let set = read_host_addresses();
            *cache = Some((Instant::now(), set.clone()));
            set
        }
    }
}

/// Whether `ip` is one of the host's own addresses.
#[cfg(feature = "stack")]
pub fn is_host_own(ip: IpAddr) -> bool {
    host_addresses().contains(&ip.to_canonical())
}

/// The addresses of the host's interfaces, now.
#[cfg(feature = "stack")]
fn read_host_addresses() -> HashSet<IpAddr> {
    let mut out = HashSet::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr points to a sockaddr of the
            // family it names.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: the family is AF_INET, so this is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                out.insert(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: the family is AF_INET6, so this is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                out.insert(IpAddr::V6(sin6.sin6_addr.s6_addr.into()).to_canonical());
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}

#[cfg(test)]
mod tests;
