//! The text form of a rule: `[tcp:|udp:]HOST[:PORTS]`.
//!
//! HOST is `*`, a domain (`pypi.org`), a wildcard of its subdomains
//! (`*.pypi.org`), an IPv4 address or CIDR (`10.0.0.0/8`), or an IPv6
//! address or CIDR in brackets (`[2001:db8::/32]`). PORTS is a comma
//! separated list of ports and ranges (`80,443,8000-8100`).

use std::fmt;
use std::net::IpAddr;

use super::ranges::network_of;
use super::{Host, PortRange, Proto, Rule};

/// Longest rule text.
const MAX_RULE: usize = 300;
/// Most port ranges in one rule.
const MAX_PORT_RANGES: usize = 64;

/// A rule that does not parse: the text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RuleError {
    /// The rule as given (cut to 80 characters).
    pub rule: String,
    /// What is wrong.
    pub reason: String,
}

impl RuleError {
    pub(crate) fn new(rule: &str, reason: impl Into<String>) -> RuleError {
        RuleError {
            rule: rule.chars().take(80).collect(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rule.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "network rule {:?}: {}", self.rule, self.reason)
        }
    }
}

/// Parses one rule.
pub(crate) fn rule(text: &str) -> Result<Rule, RuleError> {
    let bad = |reason: &str| RuleError::new(text, reason);
    if text.len() > MAX_RULE {
        return Err(bad("longer than 300 bytes"));
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut proto = None;
    for p in [Proto::Tcp, Proto::Udp] {
        // Any case, as the host that follows (`TCP:example.com`).
        if let Some(r) = rest
            .get(..4)
            .filter(|head| head.eq_ignore_ascii_case(&format!("{}:", p.as_str())))
            .map(|_| &rest[4..])
        {
            proto = Some(p);
            rest = r;
            break;
        }
    }
    let (host, ports) = if let Some(inner) = rest.strip_prefix('[') {
        let end = inner
            .find(']')
            .ok_or_else(|| bad("an IPv6 address opened with [ is not closed with ]"))?;
        let after = &inner[end + 1..];
        let ports = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad("expected :PORTS after ]"))?,
            ),
        };
        let host = net(&inner[..end], true).map_err(|r| bad(&r))?;
        (host, ports)
    } else {
        let (h, p) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        (host(h).map_err(|r| bad(&r))?, p)
    };
    let ports = match ports {
        None => Vec::new(),
        Some(p) => port_list(p).map_err(|r| bad(&r))?,
    };
    Ok(Rule { proto, host, ports })
}

fn host(h: &str) -> Result<Host, String> {
    if h == "*" {
        return Ok(Host::Any);
    }
    if h.starts_with(|c: char| c.is_ascii_digit())
        && h.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'/')
    {
        return net(h, false);
    }
    if h.contains(':') {
        return Err("an IPv6 address goes in brackets: [2001:db8::1]:443".into());
    }
    match h.strip_prefix("*.") {
        Some(d) => Ok(Host::Subdomains(domain(d)?)),
        None => {
            let d = domain(h)?;
            if d == "tcp" || d == "udp" {
                // Its text (`tcp:443`) would read back as the protocol.
                return Err(format!("a host named {d:?} reads as a protocol"));
            }
            Ok(Host::Domain(d))
        }
    }
}

/// An address or a CIDR (`v6`: the inside of brackets).
fn net(text: &str, v6: bool) -> Result<Host, String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    if addr.is_ipv6() != v6 {
        return Err(if v6 {
            "brackets hold an IPv6 address".into()
        } else {
            "an IPv6 address goes in brackets".into()
        });
    }
    let full = if v6 { 128 } else { 32 };
    let prefix = match prefix {
        None => full,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= full && !p.starts_with('+') => n,
            _ => return Err(format!("prefix length {p:?} is not 0..={full}")),
        },
    };
    Ok(Host::Net {
        addr: network_of(addr, prefix),
        prefix,
    })
}

/// A domain: lower-cased, without a trailing dot; labels of letters,
/// digits, `-` and `_`, 1 to 63 long, not starting or ending with `-`;
/// at most 253 in all; the last label not all digits.
pub(crate) fn domain(d: &str) -> Result<String, String> {
    let d = d.strip_suffix('.').unwrap_or(d).to_ascii_lowercase();
    if d.is_empty() || d.len() > 253 {
        return Err("a domain is 1 to 253 characters".into());
    }
    for label in d.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("label {label:?} is not 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "label {label:?} has a character other than a letter, digit, - or _ (a wildcard is only *. at the start)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with -"));
        }
    }
    if d.rsplit('.')
        .next()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "{d:?} is neither a domain nor a whole IPv4 address"
        ));
    }
    Ok(d)
}

fn port_list(text: &str) -> Result<Vec<PortRange>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        if out.len() == MAX_PORT_RANGES {
            return Err(format!("more than {MAX_PORT_RANGES} port ranges"));
        }
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (first, last) = (port(a)?, port(b)?);
        if first > last {
            return Err(format!("port range {part:?} ends before it starts"));
        }
        out.push(PortRange { first, last });
    }
    Ok(out)
}

fn port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("port {p:?} is not 1..=65535")),
    }
}
