//! The guest's TCP connections in a sandbox with secrets: instead of a
//! plain copy, the guest's bytes go through the secrets' filter (its
//! requests get their values, a placeholder going elsewhere closes the
//! connection as a refusal), the far end's through the reader of answers
//! where a value may have gone out (the values masked), and HTTPS to a
//! host a secret is for is intercepted so that both can be read.

use std::io;
use std::net::SocketAddrV4;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::PollSender;

use crate::policy::{Verdict, Why};
use crate::secrets::answer::{pair, Answers};
use crate::secrets::http::{Filter, Leak, Peer, Place};
use crate::secrets::tls::{client_hello, Hello, MAX_HELLO};
use crate::secrets::{Secret, Secrets};

use super::{Ctx, Refusal, SecretTarget, Target};

/// Bytes read at once.
const CHUNK: usize = 32 * 1024;
/// How long the far end may pause before the bytes the answers' matcher
/// holds go on anyway (the guest may wait for them before it sends more).
const RELEASE_AFTER: Duration = Duration::from_millis(50);

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
            let (filter, answers) = pair(secrets.list.clone(), Peer::Tls(name), secrets.forms());
            relay(near, far, filter, answers).await
        }
        (hello, _) => {
            let names = ctx.names.of(*dst.ip());
            let peer = Peer::Plain {
                dst: *dst.ip(),
                host_ip: *target.ip(),
                names,
            };
            let (filter, answers) = pair(secrets.list.clone(), peer, secrets.forms());
            // TLS the stack does not intercept carries no value (the
            // filter cannot put one in), and its answers cannot be read.
            let answers = answers.filter(|_| !matches!(hello, Hello::Tls(_)));
            relay(guest, stream, filter, answers).await
        }
    };
    if let Err(leak) = outcome {
        ctx.refused(refusal(&secrets.list, leak, target));
    }
}

/// The refusal a leak is: which secret, where it was, and where it may go.
fn refusal(list: &[Secret], leak: Leak, dst: SocketAddrV4) -> Refusal {
    let secret = list.iter().find(|s| s.name == leak.secret);
    let hosts = secret
        .map(|s| {
            let hosts: Vec<String> = s.hosts.iter().map(ToString::to_string).collect();
            hosts.join(", ")
        })
        .unwrap_or_default();
    let only_for = match &leak.place {
        Place::RequestLine | Place::Header(_) => {
            let headers = secret.map(Secret::header_names).unwrap_or_default();
            format!("its headers ({headers}) of requests to {hosts}")
        }
        _ => hosts,
    };
    Refusal {
        target: Target::Secret(Box::new(SecretTarget {
            name: leak.secret,
            host: leak.host,
            dst,
            place: leak.place,
        })),
        verdict: Verdict {
            allowed: false,
            why: Why::SecretHosts(only_for),
        },
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

/// Copies both ways, the guest's bytes through `filter` and the far
/// end's through `answers` (where there are); a leak either way ends both
/// at once.
async fn relay<G, F>(
    guest: G,
    far: F,
    mut filter: Filter,
    mut answers: Option<Answers>,
) -> Result<(), Leak>
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
        let mut out = Vec::with_capacity(CHUNK);
        loop {
            out.clear();
            let held = answers.as_ref().is_some_and(|a| a.releasable() > 0);
            let read = if held {
                match tokio::time::timeout(RELEASE_AFTER, fr.read(&mut buf)).await {
                    Ok(read) => read,
                    Err(_) => {
                        if let Some(a) = answers.as_mut() {
                            a.release(&mut out);
                        }
                        if gw.write_all(&out).await.is_err() {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                fr.read(&mut buf).await
            };
            let n = match read {
                Ok(0) | Err(_) => {
                    if let Some(a) = answers.as_mut() {
                        a.finish(&mut out);
                        let _ = gw.write_all(&out).await;
                    }
                    break;
                }
                Ok(n) => n,
            };
            let bytes = match answers.as_mut() {
                Some(a) => {
                    a.push(&buf[..n], &mut out)?;
                    &out[..]
                }
                None => &buf[..n],
            };
            if gw.write_all(bytes).await.is_err() {
                break;
            }
        }
        let _ = gw.shutdown().await;
        Ok::<(), Leak>(())
    };
    tokio::pin!(upward, downward);
    tokio::select! {
        r = &mut upward => {
            r?;
            downward.await
        }
        r = &mut downward => {
            r?;
            upward.await
        }
    }
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
