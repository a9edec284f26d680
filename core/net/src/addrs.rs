//! The addresses of a sandbox's network, the same in every sandbox (each
//! has its own stack): the guest, the gateway (the stack itself) and the
//! DNS server (the stack's resolver).

use std::net::Ipv4Addr;

/// The guest's address.
pub const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The gateway: the stack's own address, the guest's default route.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The DNS server the guest is given (answered by the stack).
pub const DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// The prefix length of the guest's network.
pub const GUEST_PREFIX: u8 = 24;
/// The link MTU.
pub const MTU: usize = 65520;
