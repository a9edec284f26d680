//! A DNS server on this host's loopback for the sandboxes' stacks to ask
//! (their `BURROW_DNS_SERVERS`): A records from a fixed zone, NXDOMAIN for
//! the rest.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use burrow_net::dns::{parse, response, RData, Record, NOERROR, NXDOMAIN};

/// Serves `zone` (a lower-case name to its address) on a loopback port
/// until the process ends, and points the stacks that supervisors of this
/// process start at it (`BURROW_DNS_SERVERS`). Call it before any thread
/// reads the environment (first thing in a test binary's setup).
pub fn serve(zone: fn(&str) -> Option<Ipv4Addr>) -> SocketAddr {
    let addr = start(zone);
    std::env::set_var("BURROW_DNS_SERVERS", addr.to_string());
    addr
}

/// Serves `zone` (which may answer differently each time it is asked) on a
/// loopback port until the process ends, without touching the
/// environment: the address is for a `burrow serve` (and its stacks) the
/// test starts with `BURROW_DNS_SERVERS` set to it.
pub fn start(zone: impl Fn(&str) -> Option<Ipv4Addr> + Send + 'static) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("binding the DNS server");
    let addr = sock.local_addr().expect("the DNS server's address");
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Ok(q) = parse(&buf[..n]) else { continue };
            let Some(question) = q.questions.first() else {
                continue;
            };
            let reply = match zone(&question.lower_name()) {
                Some(ip) => response(
                    &q,
                    NOERROR,
                    &[Record {
                        name: question.name.clone(),
                        ttl: 30,
                        data: RData::A(ip),
                    }],
                ),
                None => response(&q, NXDOMAIN, &[]),
            };
            let _ = sock.send_to(&reply, from);
        }
    });
    addr
}
