//! Published ports: a host address whose connections (TCP) or datagrams
//! (UDP) reach a port of the sandbox's loopback, through the agent's
//! channel (no network is needed inside the sandbox).
//!
//! The text form, which the configuration's JSON keeps too, is
//! `[HOST_IP:]HOST_PORT:GUEST_PORT[/tcp|/udp]`: `8080:80`,
//! `0.0.0.0:5353:53/udp`, `[::1]:8443:443`. The host address defaults to
//! 127.0.0.1, the protocol to TCP.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

/// Most ports one sandbox publishes.
pub const MAX_PORTS: usize = 64;

/// The transport of a published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PortProtocol {
    /// TCP (the default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl PortProtocol {
    /// `tcp` or `udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            PortProtocol::Tcp => "tcp",
            PortProtocol::Udp => "udp",
        }
    }
}

/// One published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMapping {
    /// The host address listened on (127.0.0.1 unless given).
    pub host_ip: IpAddr,
    /// The host port (1-65535).
    pub host_port: u16,
    /// The port on the sandbox's loopback (1-65535).
    pub guest_port: u16,
    /// TCP or UDP.
    pub protocol: PortProtocol,
}

impl PortMapping {
    /// `host_port` on 127.0.0.1 to TCP `guest_port`.
    pub fn tcp(host_port: u16, guest_port: u16) -> PortMapping {
        PortMapping {
            host_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            host_port,
            guest_port,
            protocol: PortProtocol::Tcp,
        }
    }

    /// `host_port` on 127.0.0.1 to UDP `guest_port`.
    pub fn udp(host_port: u16, guest_port: u16) -> PortMapping {
        PortMapping {
            protocol: PortProtocol::Udp,
            ..PortMapping::tcp(host_port, guest_port)
        }
    }

    /// The same, on `ip` of the host.
    pub fn on(self, ip: IpAddr) -> PortMapping {
        PortMapping {
            host_ip: ip,
            ..self
        }
    }

    /// The host socket address.
    pub fn host_addr(&self) -> std::net::SocketAddr {
        (self.host_ip, self.host_port).into()
    }
}

/// A published port that does not parse: the text and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("published port {text:?}: {reason}")]
pub struct PortMappingError {
    /// The text given (cut to 80 characters).
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

impl From<PortMappingError> for crate::error::Error {
    fn from(e: PortMappingError) -> Self {
        crate::error::Error::InvalidConfig {
            field: "ports".into(),
            reason: e.to_string(),
        }
    }
}

impl FromStr for PortMapping {
    type Err = PortMappingError;

    fn from_str(text: &str) -> Result<PortMapping, PortMappingError> {
        let bad = |reason: &str| PortMappingError {
            text: text.chars().take(80).collect(),
            reason: reason.into(),
        };
        let (rest, protocol) = match text.rsplit_once('/') {
            Some((r, p)) if p.eq_ignore_ascii_case("tcp") => (r, PortProtocol::Tcp),
            Some((r, p)) if p.eq_ignore_ascii_case("udp") => (r, PortProtocol::Udp),
            Some(_) => return Err(bad("the protocol after / is tcp or udp")),
            None => (text, PortProtocol::Tcp),
        };
        let (host_ip, ports) = if let Some(inner) = rest.strip_prefix('[') {
            let (ip, after) = inner
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address opened with [ is not closed with ]"))?;
            let ip: std::net::Ipv6Addr = ip
                .parse()
                .map_err(|_| bad("the brackets do not hold an IPv6 address"))?;
            let ports = after
                .strip_prefix(':')
                .ok_or_else(|| bad("expected :HOST_PORT:GUEST_PORT after ]"))?;
            (IpAddr::V6(ip), ports)
        } else {
            match rest.split(':').count() {
                2 => (IpAddr::V4(Ipv4Addr::LOCALHOST), rest),
                3 => {
                    let (ip, ports) = rest.split_once(':').expect("three parts");
                    let ip: Ipv4Addr = ip.parse().map_err(|_| {
                        bad("the host address is not an IPv4 address (IPv6 goes in brackets)")
                    })?;
                    (IpAddr::V4(ip), ports)
                }
                _ => return Err(bad("expected [HOST_IP:]HOST_PORT:GUEST_PORT[/udp]")),
            }
        };
        let (host, guest) = ports
            .split_once(':')
            .ok_or_else(|| bad("expected HOST_PORT:GUEST_PORT"))?;
        let port = |p: &str, which: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(bad(&format!("the {which} port {p:?} is not 1..=65535"))),
        };
        Ok(PortMapping {
            host_ip,
            host_port: port(host, "host")?,
            guest_port: port(guest, "guest")?,
            protocol,
        })
    }
}

impl fmt::Display for PortMapping {
    /// The canonical text: the host address always, `/udp` only for UDP.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host_ip {
            IpAddr::V4(ip) => write!(f, "{ip}")?,
            IpAddr::V6(ip) => write!(f, "[{ip}]")?,
        }
        write!(f, ":{}:{}", self.host_port, self.guest_port)?;
        if self.protocol == PortProtocol::Udp {
            f.write_str("/udp")?;
        }
        Ok(())
    }
}

impl serde::Serialize for PortMapping {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PortMapping {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PortMapping, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Checks a configuration's ports: at most [`MAX_PORTS`], no host address
/// and protocol twice (what is listened on, whichever the address family).
pub(crate) fn validate(ports: &[PortMapping]) -> Result<(), String> {
    if ports.len() > MAX_PORTS {
        return Err(format!("more than {MAX_PORTS} published ports"));
    }
    for (i, p) in ports.iter().enumerate() {
        if let Some(q) = ports[..i].iter().find(|q| {
            q.protocol == p.protocol
                && q.host_port == p.host_port
                && (q.host_ip == p.host_ip
                    || q.host_ip.is_unspecified()
                    || p.host_ip.is_unspecified())
                && q.host_ip.is_ipv4() == p.host_ip.is_ipv4()
        }) {
            return Err(format!("{p} and {q} listen on the same host port"));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips() {
        for (text, canonical) in [
            ("8080:80", "127.0.0.1:8080:80"),
            ("8080:80/tcp", "127.0.0.1:8080:80"),
            ("0.0.0.0:5353:53/UDP", "0.0.0.0:5353:53/udp"),
            ("[::1]:8443:443", "[::1]:8443:443"),
            ("10.1.2.3:1:65535/udp", "10.1.2.3:1:65535/udp"),
        ] {
            let p: PortMapping = text.parse().unwrap();
            assert_eq!(p.to_string(), canonical, "{text}");
            assert_eq!(canonical.parse::<PortMapping>().unwrap(), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<PortMapping>(&json).unwrap(), p);
        }
        assert_eq!(
            "8080:80".parse::<PortMapping>().unwrap(),
            PortMapping::tcp(8080, 80)
        );
        assert_eq!(
            "53:53/udp".parse::<PortMapping>().unwrap(),
            PortMapping::udp(53, 53)
        );
    }

    #[test]
    fn bad_text_is_refused() {
        for text in [
            "",
            "80",
            "0:80",
            "80:0",
            "80:65536",
            "+80:80",
            "80:80/sctp",
            "a:80:80",
            "::1:80:80",
            "[::1:80:80",
            "[1.2.3.4]:80:80",
            "1.2.3.4:80",
            "1:2:3:4",
            "80:80/",
            " 80:80",
        ] {
            let e = text.parse::<PortMapping>().unwrap_err();
            assert!(!e.reason.is_empty(), "{text}");
        }
    }

    #[test]
    fn the_same_host_port_twice_is_refused() {
        let p = |s: &str| s.parse::<PortMapping>().unwrap();
        assert!(validate(&[p("8080:80"), p("8081:80"), p("8080:80/udp")]).is_ok());
        assert!(validate(&[p("8080:80"), p("127.0.0.2:8080:81")]).is_ok());
        assert!(validate(&[p("8080:80"), p("8080:81")]).is_err());
        assert!(validate(&[p("8080:80"), p("0.0.0.0:8080:81")]).is_err());
        assert!(validate(&[p("[::1]:8080:80"), p("8080:81")]).is_ok());
        let many: Vec<_> = (1..=65).map(|i| PortMapping::tcp(i, 80)).collect();
        assert!(validate(&many).is_err());
    }
}
