//! The guest's DNS server: answers on the host side, only for names the
//! policy allows, with the answers' addresses checked (a public name that
//! resolves to a private address is refused) and remembered, so that a
//! connection's check knows by which names the guest reached its address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;

use crate::dns::{self, Message, RData, Record};

use super::{Ctx, Refusal, Target};

/// How long an upstream server gets to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a name is remembered for its address at least (connections
/// often follow a lookup by more than its TTL).
const MIN_REMEMBER: Duration = Duration::from_secs(300);
/// At most this many addresses remembered; the oldest go first.
const MAX_ADDRESSES: usize = 4096;
/// At most this many names per address.
const MAX_NAMES_PER_ADDRESS: usize = 16;

/// The names each address was resolved from, with when each is forgotten.
#[derive(Debug, Default)]
pub(crate) struct Names {
    by_ip: Mutex<HashMap<Ipv4Addr, Vec<(String, Instant)>>>,
}

impl Names {
    /// Remembers that `name` resolved to `ip` for `ttl`.
    pub(crate) fn record(&self, ip: Ipv4Addr, name: &str, ttl: Duration) {
        let until = Instant::now() + ttl.max(MIN_REMEMBER);
        let mut map = self.by_ip.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&ip) {
            let now = Instant::now();
            map.retain(|_, names| {
                names.retain(|(_, t)| *t > now);
                !names.is_empty()
            });
            if map.len() >= MAX_ADDRESSES {
                // All still live: forget the one that expires first.
                let first = map
                    .iter()
                    .min_by_key(|(_, n)| n.iter().map(|(_, t)| *t).max())
                    .map(|(ip, _)| *ip);
                if let Some(first) = first {
                    map.remove(&first);
                }
            }
        }
        let names = map.entry(ip).or_default();
        match names.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = entry.1.max(until),
            None => {
                if names.len() >= MAX_NAMES_PER_ADDRESS {
                    names.remove(0);
                }
                names.push((name.to_owned(), until));
            }
        }
    }

    /// The names `ip` was resolved from and still is.
    pub(crate) fn of(&self, ip: Ipv4Addr) -> Vec<String> {
        let now = Instant::now();
        let map = self.by_ip.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&ip)
            .map(|names| {
                names
                    .iter()
                    .filter(|(_, t)| *t > now)
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The name servers of the host's `/etc/resolv.conf` text (loopback ones
/// too: the stack asks from the host).
pub fn upstream_from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
                .and_then(|a| a.parse::<IpAddr>().ok())
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .collect()
}

/// The answer to the guest's DNS message `query` (`None`: no answer at
/// all, for a message without even an id).
pub(crate) async fn answer(ctx: &Ctx, query: &[u8]) -> Option<Vec<u8>> {
    let q = match dns::parse(query) {
        Ok(m) if m.is_response() => return None,
        Ok(m) if m.opcode() != 0 => return Some(dns::response(&m, dns::NOTIMP, &[])),
        Ok(m) if m.questions.len() != 1 => return Some(dns::response(&m, dns::FORMERR, &[])),
        Ok(m) => m,
        Err(_) => return dns::id_of(query).map(|id| dns::error_response(id, dns::FORMERR)),
    };
    let question = &q.questions[0];
    let name = question.lower_name();
    let verdict = ctx.policy().resolves(&name);
    if !verdict.allowed {
        ctx.refused(Refusal {
            target: Target::Name(name),
            verdict,
        });
        return Some(dns::response(&q, dns::NXDOMAIN, &[]));
    }
    // The guest is IPv4-only: an AAAA question gets an empty answer (so
    // that resolvers fall back at once), other types too.
    if question.qtype != dns::TYPE_A {
        return Some(dns::response(&q, dns::NOERROR, &[]));
    }
    let upstream = match lookup(&ctx.upstream, &question.name).await {
        Some(m) => m,
        None => return Some(dns::response(&q, dns::SERVFAIL, &[])),
    };
    if upstream.rcode() != dns::NOERROR {
        return Some(dns::response(&q, upstream.rcode(), &[]));
    }
    Some(dns::response(
        &q,
        dns::NOERROR,
        &admitted(ctx, &name, upstream),
    ))
}

/// The answers of `upstream` the guest may see: CNAMEs, and A records
/// whose address the policy admits, remembered for `name`.
fn admitted(ctx: &Ctx, name: &str, upstream: Message) -> Vec<Record> {
    let policy = ctx.policy();
    let mut kept = Vec::new();
    for rec in upstream.answers {
        match rec.data {
            RData::Cname(_) => kept.push(rec),
            RData::A(ip) => {
                let host_own = ctx.host_own(IpAddr::V4(ip));
                let verdict = ctx
                    .above_ceiling(IpAddr::V4(ip), host_own)
                    .unwrap_or_else(|| policy.answer_admits(IpAddr::V4(ip), host_own));
                if verdict.allowed {
                    ctx.names
                        .record(ip, name, Duration::from_secs(u64::from(rec.ttl)));
                    kept.push(rec);
                } else {
                    ctx.refused(Refusal {
                        target: Target::Answer(name.to_owned(), ip),
                        verdict,
                    });
                }
            }
            RData::Aaaa(_) => {}
        }
    }
    kept
}

/// Asks the upstream servers in turn for the A records of `name`.
pub(crate) async fn lookup(servers: &[SocketAddr], name: &str) -> Option<Message> {
    for server in servers {
        let id: u16 = rand::random();
        let bind: SocketAddr = if server.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let Ok(sock) = UdpSocket::bind(bind).await else {
            continue;
        };
        if sock.connect(server).await.is_err()
            || sock.send(&dns::query(id, name, dns::TYPE_A)).await.is_err()
        {
            continue;
        }
        let mut buf = vec![0u8; 4096];
        let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
        // Datagrams of other ids (late answers, spoofs) are skipped.
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            match dns::parse(&buf[..n]) {
                Ok(m)
                    if m.id == id
                        && m.is_response()
                        && m.questions
                            .first()
                            .map(|q| q.name.eq_ignore_ascii_case(name))
                            == Some(true) =>
                {
                    return Some(m)
                }
                _ => continue,
            }
        }
    }
    None
}

/// Splits DNS-over-TCP messages (each after its two-byte length) off the
/// front of `buf`.
pub(crate) fn take_tcp_message(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let len = usize::from(u16::from_be_bytes([*buf.first()?, *buf.get(1)?]));
    if buf.len() < 2 + len {
        return None;
    }
    let msg = buf[2..2 + len].to_vec();
    buf.drain(..2 + len);
    Some(msg)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_remembered_per_address_and_bounded() {
        let names = Names::default();
        let ip = Ipv4Addr::new(198, 18, 0, 2);
        names.record(ip, "a.test", Duration::from_secs(1));
        names.record(ip, "b.test", Duration::from_secs(1));
        names.record(ip, "a.test", Duration::from_secs(1));
        assert_eq!(names.of(ip), vec!["a.test", "b.test"]);
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            names.record(Ipv4Addr::from(0x0a00_0000 + i), "x.test", Duration::ZERO);
        }
        assert!(names.by_ip.lock().unwrap().len() <= MAX_ADDRESSES);
    }

    #[test]
    fn resolv_conf_servers_include_loopback() {
        let text = "# c\nnameserver 127.0.0.53\nnameserver ::1\nsearch x\nnameserver bad\n";
        assert_eq!(
            upstream_from_resolv_conf(text),
            vec![
                "127.0.0.53:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
    }

    #[test]
    fn tcp_messages_split_on_their_lengths() {
        let mut buf = vec![0, 2, b'a', b'b', 0, 3, b'c'];
        assert_eq!(take_tcp_message(&mut buf), Some(b"ab".to_vec()));
        assert_eq!(take_tcp_message(&mut buf), None);
        buf.extend_from_slice(b"de");
        assert_eq!(take_tcp_message(&mut buf), Some(b"cde".to_vec()));
        assert!(buf.is_empty());
    }
}
