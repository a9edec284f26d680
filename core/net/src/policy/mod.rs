//! A sandbox's network setting and the verdict on each connection.
//!
//! A sandbox's network is `none` (no interface but loopback), `all`
//! (anything public), or a [`Policy`]: allow and deny [`Rule`]s. A rule
//! names a host (a domain, a `*.` wildcard of its subdomains, `*` for any,
//! an IP or a CIDR), optionally a protocol and ports; its text form is
//! `[tcp:|udp:]HOST[:PORTS]` (`pypi.org:443`, `*.github.com`,
//! `udp:10.0.0.0/8:53`, `[2001:db8::/32]:80-90,443`).
//!
//! A connection is checked with the names the sandbox's own DNS lookups
//! resolved to its address ([`Policy::check`]):
//! 1. a deny rule that matches refuses it (deny wins over allow);
//! 2. a private, link-local, loopback or otherwise special address, or an
//!    address of the host itself, is refused unless an IP or CIDR rule
//!    *names* it (a rule no wider than the special range: `10.0.0.0/8`
//!    names `10.1.2.3`, `*` and `0.0.0.0/0` do not; the host's own
//!    addresses are named only by their exact IP);
//! 3. an allow rule that matches admits it: an IP rule by the address, a
//!    domain rule by a name that resolved to the address (a connection to
//!    an IP literal that no allowed name resolved to matches no domain
//!    rule);
//! 4. nothing matched: refused.
//!
//! A name resolves only if [`Policy::resolves`] admits it (an allow rule's
//! domain matches it and no deny rule for all ports and protocols does).

mod parse;
pub(crate) mod ranges;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub(crate) use parse::domain;
pub use parse::RuleError;
pub use ranges::special_range;

/// Most rules in each of a policy's lists.
pub const MAX_RULES: usize = 256;

/// A transport protocol a rule can be limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// The protocol's name in rules and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// What a rule's host part names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// Any host (`*`).
    Any,
    /// Exactly this domain (lower case, no trailing dot).
    Domain(String),
    /// Any subdomain of this domain, at any depth (`*.example.com`), not
    /// the domain itself.
    Subdomains(String),
    /// An address or a network (an address is a /32 or /128 network).
    Net {
        /// The network address (host bits zero).
        addr: IpAddr,
        /// The prefix length.
        prefix: u8,
    },
}

impl Host {
    /// Whether this host part matches `name` (a domain rule).
    fn matches_name(&self, name: &str) -> bool {
        match self {
            Host::Any => true,
            Host::Domain(d) => d == name,
            Host::Subdomains(d) => {
                name.len() > d.len() + 1
                    && name.ends_with(d.as_str())
                    && name.as_bytes()[name.len() - d.len() - 1] == b'.'
            }
            Host::Net { .. } => false,
        }
    }

    /// Whether this host part's network contains `ip`.
    fn contains(&self, ip: IpAddr) -> bool {
        match *self {
            Host::Net { addr, prefix } => ranges::within(ip, addr, prefix),
            _ => false,
        }
    }
}

/// An inclusive range of ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (at least `first`).
    pub last: u16,
}

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The protocol it is limited to (`None`: TCP and UDP).
    pub proto: Option<Proto>,
    /// The host part.
    pub host: Host,
    /// The ports it is limited to (empty: every port).
    pub ports: Vec<PortRange>,
}

impl Rule {
    /// Whether the rule covers every port and protocol of its host.
    fn is_whole_host(&self) -> bool {
        self.proto.is_none() && self.ports.is_empty()
    }

    fn covers(&self, proto: Proto, port: u16) -> bool {
        self.proto.is_none_or(|p| p == proto)
            && (self.ports.is_empty()
                || self
                    .ports
                    .iter()
                    .any(|r| (r.first..=r.last).contains(&port)))
    }

    /// Whether the rule matches a connection to `ip` that `names`
    /// resolved to.
    pub(crate) fn matches(&self, ip: IpAddr, names: &[&str], proto: Proto, port: u16) -> bool {
        self.covers(proto, port)
            && match &self.host {
                Host::Net { .. } => self.host.contains(ip),
                Host::Any => true,
                host => names.iter().any(|n| host.matches_name(n)),
            }
    }

    /// Whether the rule names `ip` although it lies in a special range of
    /// prefix `special` (an IP or CIDR rule no wider than that range).
    fn names(&self, ip: IpAddr, special: u8) -> bool {
        matches!(self.host, Host::Net { prefix, .. } if prefix >= special) && self.host.contains(ip)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.proto {
            write!(f, "{}:", p.as_str())?;
        }
        match &self.host {
            Host::Any => f.write_str("*")?,
            Host::Domain(d) => f.write_str(d)?,
            Host::Subdomains(d) => write!(f, "*.{d}")?,
            Host::Net { addr, prefix } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                match (addr, *prefix == full) {
                    (IpAddr::V4(a), true) => write!(f, "{a}")?,
                    (IpAddr::V4(a), false) => write!(f, "{a}/{prefix}")?,
                    (IpAddr::V6(a), true) => write!(f, "[{a}]")?,
                    (IpAddr::V6(a), false) => write!(f, "[{a}/{prefix}]")?,
                }
            }
        }
        for (i, r) in self.ports.iter().enumerate() {
            f.write_str(if i == 0 { ":" } else { "," })?;
            if r.first == r.last {
                write!(f, "{}", r.first)?;
            } else {
                write!(f, "{}-{}", r.first, r.last)?;
            }
        }
        Ok(())
    }
}

impl std::str::FromStr for Rule {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Rule, RuleError> {
        parse::rule(s)
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rule, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Allow and deny rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// What may be reached.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// What may not, even where an allow rule matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Rule>,
}

/// Why a connection or a name was admitted or refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// This allow rule matched.
    Allowed(Rule),
    /// This deny rule matched.
    Denied(Rule),
    /// The address is private, link-local, loopback, special or the
    /// host's own, and no rule names it: the range (`10.0.0.0/8`,
    /// `host`).
    Special(String),
    /// No allow rule matched.
    NoRule,
    /// A secret's placeholder went to a host the secret is not for (the
    /// hosts it is for).
    SecretHosts(String),
    /// The far end of an intercepted HTTPS connection did not prove the
    /// name (why).
    Untrusted(String),
    /// The address is above the sandbox's egress ceiling (see
    /// [`crate::ceiling`]), whatever the rules say: the range
    /// (`127.0.0.0/8`, `host`).
    Ceiling(String),
}

/// A verdict of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Admitted.
    pub allowed: bool,
    /// What decided it.
    pub why: Why,
}

impl Verdict {
    fn allow(rule: &Rule) -> Verdict {
        Verdict {
            allowed: true,
            why: Why::Allowed(rule.clone()),
        }
    }

    fn refuse(why: Why) -> Verdict {
        Verdict {
            allowed: false,
            why,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            Why::Allowed(r) => write!(f, "allowed by rule {r}"),
            Why::Denied(r) => write!(f, "denied by rule {r}"),
            Why::Special(range) => write!(f, "denied: {range} is not named by any rule"),
            Why::NoRule => f.write_str("denied: no allow rule matches"),
            Why::SecretHosts(hosts) => write!(f, "denied: the secret is only for {hosts}"),
            Why::Untrusted(why) => write!(f, "denied: the far end is not trusted ({why})"),
            Why::Ceiling(range) => write!(f, "denied: {range} is above the egress ceiling"),
        }
    }
}

impl Policy {
    /// The policy of `all`: anything public, by name or address.
    pub fn all() -> Policy {
        Policy {
            allow: vec![Rule {
                proto: None,
                host: Host::Any,
                ports: Vec::new(),
            }],
            deny: Vec::new(),
        }
    }

    /// A policy allowing `rules` (their text form: `pypi.org`,
    /// `*.github.com`, `tcp:10.0.0.0/8:5432`, ...).
    pub fn allow<I, S>(rules: I) -> Result<Policy, RuleError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let p = Policy {
            allow: parse_all(rules)?,
            deny: Vec::new(),
        };
        p.validate()?;
        Ok(p)
    }

    /// This policy, denying `rules` as well (deny wins over allow).
    pub fn and_deny<I, S>(mut self, rules: I) -> Result<Policy, RuleError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.deny.extend(parse_all(rules)?);
        self.validate()?;
        Ok(self)
    }

    /// Checks the policy's own limits (the rules parsed already).
    pub fn validate(&self) -> Result<(), RuleError> {
        if self.allow.len() > MAX_RULES || self.deny.len() > MAX_RULES {
            return Err(RuleError::new(
                "",
                format!("more than {MAX_RULES} allow or deny rules"),
            ));
        }
        Ok(())
    }

    /// The verdict on a connection to `ip:port` over `proto`, which the
    /// sandbox's DNS lookups resolved from `names`; `host_own` says
    /// whether `ip` is one of the host's own addresses.
    pub fn check(
        &self,
        ip: IpAddr,
        port: u16,
        proto: Proto,
        names: &[&str],
        host_own: bool,
    ) -> Verdict {
        let ip = ip.to_canonical();
        if let Some(r) = self.deny.iter().find(|r| r.matches(ip, names, proto, port)) {
            return Verdict::refuse(Why::Denied(r.clone()));
        }
        let special = if host_own {
            Some(("host".to_owned(), if ip.is_ipv4() { 32 } else { 128 }))
        } else {
            special_range(ip).map(|(net, prefix)| (format!("{net}/{prefix}"), prefix))
        };
        if let Some((range, prefix)) = special {
            return match self
                .allow
                .iter()
                .find(|r| r.covers(proto, port) && r.names(ip, prefix))
            {
                Some(r) => Verdict::allow(r),
                None => Verdict::refuse(Why::Special(range)),
            };
        }
        match self
            .allow
            .iter()
            .find(|r| r.matches(ip, names, proto, port))
        {
            Some(r) => Verdict::allow(r),
            None => Verdict::refuse(Why::NoRule),
        }
    }

    /// The verdict on resolving `name` (lower case, no trailing dot).
    pub fn resolves(&self, name: &str) -> Verdict {
        if let Some(r) = self
            .deny
            .iter()
            .find(|r| r.is_whole_host() && r.host.matches_name(name))
        {
            return Verdict::refuse(Why::Denied(r.clone()));
        }
        match self.allow.iter().find(|r| r.host.matches_name(name)) {
            Some(r) => Verdict::allow(r),
            None => Verdict::refuse(Why::NoRule),
        }
    }

    /// Whether an answer of `name` may carry `ip`: a special address only
    /// where a rule names it (rebinding a public name to a private
    /// address is refused).
    pub fn answer_admits(&self, ip: IpAddr, host_own: bool) -> Verdict {
        let ip = ip.to_canonical();
        let special = if host_own {
            Some(("host".to_owned(), if ip.is_ipv4() { 32 } else { 128 }))
        } else {
            special_range(ip).map(|(net, prefix)| (format!("{net}/{prefix}"), prefix))
        };
        match special {
            None => Verdict {
                allowed: true,
                why: Why::NoRule,
            },
            Some((range, prefix)) => match self.allow.iter().find(|r| r.names(ip, prefix)) {
                Some(r) => Verdict::allow(r),
                None => Verdict::refuse(Why::Special(range)),
            },
        }
    }
}

fn parse_all<I, S>(rules: I) -> Result<Vec<Rule>, RuleError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    rules.into_iter().map(|r| r.as_ref().parse()).collect()
}

/// A sandbox's network setting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Network {
    /// No network but loopback (the default).
    #[default]
    None,
    /// Anything public (private and special ranges, and the host, stay
    /// unreachable).
    All,
    /// Only what the rules allow.
    Policy(Policy),
}

impl Network {
    /// Whether the sandbox has a network interface at all.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Network::None)
    }

    /// The rules that decide (`all` as its one rule); `None` for `none`.
    pub fn policy(&self) -> Option<Policy> {
        match self {
            Network::None => None,
            Network::All => Some(Policy::all()),
            Network::Policy(p) => Some(p.clone()),
        }
    }
}

impl From<bool> for Network {
    /// `true`: [`Network::All`]; `false`: [`Network::None`].
    fn from(on: bool) -> Network {
        if on {
            Network::All
        } else {
            Network::None
        }
    }
}

impl From<Policy> for Network {
    fn from(p: Policy) -> Network {
        Network::Policy(p)
    }
}

impl Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            // As booleans, the form before policies, which every client
            // already reads.
            Network::None => s.serialize_bool(false),
            Network::All => s.serialize_bool(true),
            Network::Policy(p) => p.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    /// `"none"`, `"all"`, `false`/`true` (the same two, as before
    /// policies), or `{"allow": [RULE...], "deny": [RULE...]}`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = Network;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "\"none\", \"all\", true/false, or {\"allow\": [RULE...], \"deny\": [RULE...]}",
                )
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Network, E> {
                Ok(if on { Network::All } else { Network::None })
            }
            fn visit_str<E: serde::de::Error>(self, w: &str) -> Result<Network, E> {
                match w {
                    "none" => Ok(Network::None),
                    "all" => Ok(Network::All),
                    other => Err(E::custom(format!(
                        "unknown network setting {other:?} (expected none, all, or a policy)"
                    ))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Network, A::Error> {
                let p = Policy::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                p.validate().map_err(serde::de::Error::custom)?;
                Ok(Network::Policy(p))
            }
        }
        d.deserialize_any(Form)
    }
}
