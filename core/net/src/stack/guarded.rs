//! The guest's TCP connections in a sandbox with secrets: instead of a
//! plain copy, the guest's bytes go through the secrets' filter (its
//! requests get their values, a placeholder going elsewhere closes the
//! connection as a refusal), and HTTPS to a host a secret is for is
//! intercepted so that its requests can be read.

use std::io;
use std::net::SocketAddrV4;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::PollSender;

use crate::policy::{Verdict, Why};
use crate::secrets::http::{Filter, Leak, Peer};
use crate::secrets::tls::{client_hello, Hello, MAX_HELLO};
use crate::secrets::Secrets;

use super::{Ctx, Refusal, SecretTarget, Target};

/// Bytes read at once.
const CHUNK: usize = 32 * 1024;

/// Runs one connection from the guest (to `dst`) whose host side is
/// `stream` (to `target`), until both directions are done or a
/// placeholder was refused.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    ctx: Arc<Ctx>,
    secrets: Arc<Secrets>,
    stream: TcpStream,
    dst: SocketAddrV4,
    target: SocketAddrV4,
    up: mpsc::Receiver<Vec<u8>>,
    down: mpsc::Sender<Vec<u8>>,
    wake: Arc<Notify>,
) {
    let mut guest = GuestStream {
        rx: up,
        pending: Vec::new(),
        tx: PollSender::new(down),
        wake,
    };
    let (first, hello) = first_bytes(&mut guest, &stream).await;
    let guest = Prefixed {
        prefix: first,
        at: 0,
        inner: guest,
    };
    let outcome = match (hello, &secrets.tls) {
        (Hello::Tls(Some(name)), Some(tls)) if secrets.for_host(&name) => {
            let server_name = match rustls::pki_types::ServerName::try_from(name.clone()) {
                Ok(n) => n,
                Err(_) => return,
            };
            let far = match tokio_rustls::TlsConnector::from(tls.client())
                .connect(server_name, stream)
                .await
            {
                Ok(far) => far,
                Err(e) => {
                    ctx.refused(Refusal {
                        target: Target::Tls { name, dst: target },
                        verdict: Verdict {
                            allowed: false,
                            why: Why::Untrusted(e.to_string()),
                        },
                    });
                    return;
                }
            };
            let Ok(server) = tls.server(&name) else {
                return;
            };
            let Ok(near) = tokio_rustls::TlsAcceptor::from(server).accept(guest).await else {
                return;
            };
            let filter = Filter::new(secrets.list.clone(), Peer::Tls(name));
            relay(near, far, filter).await
        }
        _ => {
            let names = ctx.names.of(*dst.ip());
            let peer = Peer::Plain {
                dst: *dst.ip(),
                host_ip: *target.ip(),
                names,
            };
            relay(guest, stream, Filter::new(secrets.list.clone(), peer)).await
        }
    };
    if let Err(leak) = outcome {
        let hosts = secrets
            .list
            .iter()
            .find(|s| s.name == leak.secret)
            .map(|s| {
                let hosts: Vec<String> = s.hosts.iter().map(ToString::to_string).collect();
                hosts.join(", ")
            })
            .unwrap_or_default();
        ctx.refused(Refusal {
            target: Target::Secret(Box::new(SecretTarget {
                name: leak.secret,
                host: leak.host,
                dst: target,
            })),
            verdict: Verdict {
                allowed: false,
                why: Why::SecretHosts(hosts),
            },
        });
    }
}

/// The guest's first bytes, as far as needed to tell a TLS ClientHello
/// (and its name) from anything else. A far end that speaks first (a
/// protocol where the server does) is not TLS from the guest.
async fn first_bytes(guest: &mut GuestStream, far: &TcpStream) -> (Vec<u8>, Hello) {
    let mut first = Vec::new();
    loop {
        let hello = client_hello(&first);
        if hello != Hello::Incomplete || first.len() >= MAX_HELLO {
            let hello = if hello == Hello::Incomplete {
                Hello::NotTls
            } else {
                hello
            };
            return (first, hello);
        }
        let mut buf = vec![0u8; CHUNK];
        tokio::select! {
            n = guest.read(&mut buf) => match n {
                Ok(0) | Err(_) => return (first, Hello::NotTls),
                Ok(n) => first.extend_from_slice(&buf[..n]),
            },
            _ = far.readable() => return (first, Hello::NotTls),
        }
    }
}

/// Copies both ways, the guest's bytes through `filter`; a leak ends both
/// at once.
async fn relay<G, F>(guest: G, far: F, mut filter: Filter) -> Result<(), Leak>
where
    G: AsyncRead + AsyncWrite + Unpin,
    F: AsyncRead + AsyncWrite + Unpin,
{
    let (mut gr, mut gw) = tokio::io::split(guest);
    let (mut fr, mut fw) = tokio::io::split(far);
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        let mut out = Vec::with_capacity(CHUNK);
        loop {
            out.clear();
            let n = match gr.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    filter.finish(&mut out)?;
                    let _ = fw.write_all(&out).await;
                    let _ = fw.shutdown().await;
                    return Ok(());
                }
                Ok(n) => n,
            };
            filter.push(&buf[..n], &mut out)?;
            if fw.write_all(&out).await.is_err() {
                return Ok(());
            }
        }
    };
    let downward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match fr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if gw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = gw.shutdown().await;
    };
    tokio::pin!(upward, downward);
    tokio::select! {
        r = &mut upward => {
            r?;
            downward.await;
        }
        () = &mut downward => upward.await?,
    }
    Ok(())
}

/// The guest's side of a connection as a byte stream: what the stack's
/// socket received, and what goes back to it.
struct GuestStream {
    rx: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    tx: PollSender<Vec<u8>>,
    wake: Arc<Notify>,
}

impl AsyncRead for GuestStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending.is_empty() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => {
                    self.pending = b;
                    // Room in the queue: the stack may take more.
                    self.wake.notify_one();
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for GuestStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.tx.poll_reserve(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            Poll::Pending => return Poll::Pending,
        }
        let n = buf.len().min(CHUNK);
        if self.tx.send_item(buf[..n].to_vec()).is_err() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        self.wake.notify_one();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tx.close();
        self.wake.notify_one();
        Poll::Ready(Ok(()))
    }
}

/// A stream whose first bytes were read already.
struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
