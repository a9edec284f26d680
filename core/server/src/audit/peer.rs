//! The client's address of an audit entry: the peer of the connection, as
//! the listener accepted it (axum's `ConnectInfo` of a [`Peered`]
//! listener, which [`crate::serve`] makes of every listener). A `X-Forwarded-For` header is
//! never read: any client can write one, so a proxy in front of the
//! server is the client the log names.

use std::net::{IpAddr, SocketAddr};

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::Extensions;
use axum::serve::{IncomingStream, Listener};

/// The peer of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A TCP peer, by its IP address (an IPv4 one mapped into IPv6 as
    /// IPv4).
    Ip(IpAddr),
    /// The unix socket (no address).
    Unix,
}

impl Peer {
    /// The peer as the log shows it: the IP address, or `unix`.
    pub fn client(&self) -> String {
        match self {
            Peer::Ip(ip) => ip.to_string(),
            Peer::Unix => "unix".to_owned(),
        }
    }
}

/// The address type of a listener, as a [`Peer`].
pub trait PeerAddr {
    /// The peer.
    fn peer(&self) -> Peer;
}

impl PeerAddr for SocketAddr {
    fn peer(&self) -> Peer {
        Peer::Ip(self.ip().to_canonical())
    }
}

impl PeerAddr for tokio::net::unix::SocketAddr {
    fn peer(&self) -> Peer {
        Peer::Unix
    }
}

/// A listener whose connections' addresses are [`Peer`]s: what
/// [`crate::serve`] serves, with `into_make_service_with_connect_info::<Peer>()`.
#[derive(Debug)]
pub struct Peered<L>(pub L);

impl<L> Listener for Peered<L>
where
    L: Listener,
    L::Addr: PeerAddr,
{
    type Io = L::Io;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (io, addr.peer())
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr().map(|a| a.peer())
    }
}

impl<L> Connected<IncomingStream<'_, Peered<L>>> for Peer
where
    L: Listener,
    L::Addr: PeerAddr,
{
    fn connect_info(stream: IncomingStream<'_, Peered<L>>) -> Self {
        *stream.remote_addr()
    }
}

/// The client's address of a request (none when its connection was not
/// served with [`Peer`]s, as in tests that build the router alone).
pub fn client_of(extensions: &Extensions) -> Option<String> {
    extensions
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(p)| p.client())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_shown_by_address() {
        let v4: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(v4.peer().client(), "127.0.0.1");
        let mapped: SocketAddr = "[::ffff:10.1.2.3]:1".parse().unwrap();
        assert_eq!(mapped.peer().client(), "10.1.2.3");
        let v6: SocketAddr = "[::1]:1".parse().unwrap();
        assert_eq!(v6.peer().client(), "::1");
        assert_eq!(Peer::Unix.client(), "unix");
        let mut ext = Extensions::new();
        assert_eq!(client_of(&ext), None);
        ext.insert(ConnectInfo(Peer::Ip(v4.ip())));
        assert_eq!(client_of(&ext).as_deref(), Some("127.0.0.1"));
    }
}
