//! `UdpTunnel`: datagrams to and from `127.0.0.1:port` inside the guest,
//! one `Data` frame per datagram sent and one `Stdout` frame per datagram
//! received, from a socket of the tunnel's own (so a service's answers
//! come back to it). One thread per tunnel polls the socket and the
//! request's mailbox; it ends at `Eof` or `Cancel`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use burrow_protocol::{GuestError, Response};

use crate::agent::Ctx;
use crate::log::warning;
use crate::mailbox::{Event, Input};
use crate::sys;

/// The largest UDP payload.
const MAX_DATAGRAM: usize = 65_507;

/// Serves a `UdpTunnel` request.
pub fn run(ctx: &Ctx, port: u16) -> Result<Response, GuestError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let sock = UdpSocket::bind(("127.0.0.1", 0))
        .and_then(|s| s.connect(addr).map(|()| s))
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .map_err(|e| GuestError::from_io(&e, &format!("udp tunnel to {addr}")))?;
    // An empty first datagram says "ready".
    ctx.stdout(Vec::new());
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        // A datagram is read only when the host has credit for any size
        // of one: it cannot be cut.
        let can_read = ctx.out_credit(MAX_DATAGRAM) == MAX_DATAGRAM;
        let mut fds = [
            sys::pollfd(Some(ctx.inbox.wake_fd()), libc::POLLIN),
            sys::pollfd(can_read.then(|| sock.as_raw_fd()), libc::POLLIN),
        ];
        if let Err(e) = sys::poll(&mut fds, None) {
            warning!("udp tunnel {}: poll failed: {e}", ctx.id);
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if sys::readable(&fds[0]) {
            for event in ctx.inbox.drain() {
                match event {
                    Event::Input(Input::Data(data)) => {
                        if let Some(data) = ctx.admit(data) {
                            // An earlier datagram's ICMP refusal is
                            // reported by this send, which then sent
                            // nothing: once more. Other failures (a full
                            // buffer) drop it, as a network would.
                            if let Err(e) = sock.send(&data) {
                                if e.kind() == io::ErrorKind::ConnectionRefused {
                                    let _ = sock.send(&data);
                                }
                            }
                            ctx.consumed(data.len());
                        }
                    }
                    Event::Input(Input::Window(bytes)) => ctx.granted(bytes),
                    Event::Input(Input::Eof | Input::Cancel) => return Ok(Response::Done),
                    _ => {}
                }
            }
        }
        if can_read && sys::readable(&fds[1]) {
            match sock.recv(&mut buf) {
                Ok(n) => ctx.stdout(buf[..n].to_vec()),
                Err(e) if sys::would_block(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                // The port refused an earlier datagram: nothing to read.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(GuestError::from_io(&e, &format!("udp tunnel to {addr}"))),
            }
        }
    }
}
