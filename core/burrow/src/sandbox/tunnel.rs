//! TCP tunnels to ports inside the sandbox, carried on the agent channel:
//! publishing a port needs no host network setup and opens nothing else.

use std::net::SocketAddr;

use burrow_protocol::{GuestMsg, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::attempt::Attempt;
use super::Sandbox;
use crate::channel::request::RequestHandle;
use crate::error::{Error, Result};

/// A byte stream to `127.0.0.1:port` inside the sandbox.
pub type Tunnel = DuplexStream;

/// Relays a connected tunnel request and a byte stream both ways, on tasks
/// of their own, until both directions ended; `first` is a frame of the
/// request already read. The host-to-guest side waits for credit without
/// stopping the other direction; the guest-to-host side waits while `wr`
/// is not written (the window then holds the guest's side).
pub(crate) fn relay<R, W>(mut handle: RequestHandle, first: Option<GuestMsg>, mut rd: R, mut wr: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let input = handle.input();
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; burrow_protocol::MAX_CHUNK];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = input.send_eof();
                    return;
                }
                Ok(n) => {
                    if input.send_data(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut msg = first;
        loop {
            let m = match msg.take() {
                Some(m) => m,
                None => match handle.next().await {
                    Some(m) => m,
                    None => break,
                },
            };
            match m {
                GuestMsg::Stdout { data, .. } if wr.write_all(&data.0).await.is_err() => break,
                GuestMsg::Eof { .. } => {
                    let _ = wr.shutdown().await;
                }
                GuestMsg::Response { .. } => break,
                _ => {}
            }
        }
        upstream.abort();
        let _ = wr.shutdown().await;
    });
}

/// A guest port published on a host loopback address. Dropping it stops
/// accepting new connections.
#[derive(Debug)]
pub struct PublishedPort {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl PublishedPort {
    /// The host address (127.0.0.1:<ephemeral>).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PublishedPort {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sandbox {
    /// Opens a TCP connection to `port` inside the sandbox. Fails with a
    /// guest `connection_refused` error when nothing listens there.
    pub async fn tunnel(&self, port: u16) -> Result<Tunnel> {
        let mut attempt = Attempt::start(self, "tunnel", Request::Tunnel { port }).await?;
        // The agent answers an error right away when the connect fails, and
        // an empty first chunk when it succeeded; data may flow before the
        // final response. A run that ends first is ridden through (the
        // request is sent again where the sandbox runs then).
        let (mine, theirs) = tokio::io::duplex(256 * 1024);
        let (rd, wr) = tokio::io::split(mine);
        let pending_first = match attempt.next().await? {
            Some(GuestMsg::Response { .. }) | None => {
                return Err(Error::protocol("the tunnel ended before it was connected"))
            }
            first => first,
        };
        relay(attempt.into_handle(), pending_first, rd, wr);
        Ok(theirs)
    }

    /// Publishes guest `port` on `127.0.0.1:<ephemeral>` of the host; every
    /// accepted connection is tunnelled through the agent channel.
    pub async fn publish(&self, port: u16) -> Result<PublishedPort> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::io("binding a loopback port", None, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the bound address", None, e))?;
        let sandbox = self.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                // A relay: the application's own writes decide the
                // segments, no Nagle delay on top (it met the peer's
                // delayed ACK: 40 ms on small request/answer exchanges).
                let _ = conn.set_nodelay(true);
                let sandbox = sandbox.clone();
                tokio::spawn(async move {
                    match sandbox.tunnel(port).await {
                        Ok(mut t) => {
                            let _ = tokio::io::copy_bidirectional(&mut conn, &mut t).await;
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, port, "tunnel for a published port failed")
                        }
                    }
                });
            }
        });
        Ok(PublishedPort { addr, task })
    }
}
