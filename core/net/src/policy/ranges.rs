//! Address ranges: containment, and the special ranges a policy refuses
//! unless a rule names them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 ranges that are not the public internet: this network, private
/// (RFC 1918), shared address space (CGNAT), loopback, link-local (cloud
/// metadata services live here), IETF protocol assignments, multicast,
/// reserved and broadcast.
const V4: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24),
    ([192, 168, 0, 0], 16),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
];

/// IPv6 ranges that are not the public internet: unspecified, loopback,
/// the deprecated IPv4-compatible addresses (`::a.b.c.d`), the discard
/// prefix, local-use NAT64, unique local, site-local (deprecated),
/// link-local and multicast. (IPv4-mapped, NAT64 and 6to4 addresses are
/// judged by the IPv4 address they carry.)
const V6: &[([u16; 8], u8)] = &[
    ([0, 0, 0, 0, 0, 0, 0, 0], 128),
    ([0, 0, 0, 0, 0, 0, 0, 1], 128),
    ([0, 0, 0, 0, 0, 0, 0, 0], 96),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64),
    ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
];

/// Whether `ip` lies in the network `net`/`prefix` (never across
/// families).
pub(crate) fn within(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            mask_eq(u32::from(a).into(), u32::from(n).into(), prefix, 32)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => mask_eq(u128::from(a), u128::from(n), prefix, 128),
        _ => false,
    }
}

fn mask_eq(a: u128, n: u128, prefix: u8, bits: u32) -> bool {
    let prefix = u32::from(prefix).min(bits);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix;
    (a >> shift) == (n >> shift)
}

/// The address with its bits past `prefix` cleared.
pub(crate) fn network_of(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let kept = if prefix == 0 {
                0
            } else {
                bits & (u32::MAX << (32 - u32::from(prefix).min(32)))
            };
            IpAddr::V4(Ipv4Addr::from(kept))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let kept = if prefix == 0 {
                0
            } else {
                bits & (u128::MAX << (128 - u32::from(prefix).min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(kept))
        }
    }
}

/// The special range `ip` lies in, as (network, prefix), or `None` for a
/// public address. An IPv4-mapped (`::ffff:0:0/96`), NAT64
/// (`64:ff9b::/96`) or 6to4 (`2002::/16`) address is judged by the IPv4
/// address it carries.
///
/// This is the one classification of addresses burrow has: a sandbox's
/// stack refuses these unless a rule names them (and always, under an
/// egress ceiling, see [`crate::ceiling`]), and the server's outbound
/// calls refuse them unless the operator allows them.
pub fn special_range(ip: IpAddr) -> Option<(IpAddr, u8)> {
    match ip {
        IpAddr::V4(a) => V4
            .iter()
            .map(|&(n, p)| (IpAddr::V4(Ipv4Addr::from(n)), p))
            .find(|&(n, p)| within(IpAddr::V4(a), n, p))
            .or_else(|| (a == Ipv4Addr::BROADCAST).then_some((IpAddr::V4(a), 32))),
        IpAddr::V6(a) => {
            if let Some(v4) = embedded_v4(a) {
                return special_range(IpAddr::V4(v4));
            }
            V6.iter()
                .map(|&(n, p)| (IpAddr::V6(Ipv6Addr::from(n)), p))
                .find(|&(n, p)| within(ip, n, p))
        }
    }
}

/// The IPv4 address an IPv4-mapped, NAT64 or 6to4 address carries.
pub(crate) fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
        return Some(v4(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(v4(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(v4(s[1], s[2]));
    }
    None
}

/// The IPv4 network an IPv6 network within one of the embedding prefixes
/// (IPv4-mapped, NAT64: /96; 6to4: /16) stands for, when it is at least
/// as long as that prefix.
pub(crate) fn embedded_v4_net(addr: Ipv6Addr, prefix: u8) -> Option<(Ipv4Addr, u8)> {
    let s = addr.segments();
    let v4 = embedded_v4(addr)?;
    let base = if s[0] == 0x2002 { 16 } else { 96 };
    (prefix >= base).then(|| (v4, (prefix - base).min(32)))
}
