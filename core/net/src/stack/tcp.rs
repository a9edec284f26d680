//! The guest's TCP connections. A SYN is held while the policy is asked
//! and the host-side connection is made; only then does a socket listen on
//! the destination and take the SYN, so the guest's handshake completes
//! exactly when the far end answered (refused or failed: a reset). Data
//! moves between the smoltcp socket and the host socket through bounded
//! queues: a side that stops reading closes the other side's window.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::IpListenEndpoint;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::addrs;
use crate::policy::Proto;

use super::{resolver, Ctx, Refusal, Target};

/// Bytes per queued chunk, and chunks queued per direction.
const CHUNK: usize = 32 * 1024;
const CHUNKS: usize = 4;
/// smoltcp's buffers per connection, each way.
const SOCKET_BUFFER: usize = 256 * 1024;
/// Connections (open and being opened) per sandbox at most.
pub(crate) const MAX_CONNECTIONS: usize = 1024;
/// How long the host side gets to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type Key = (SocketAddrV4, SocketAddrV4);

/// A host-side connection made (or not) for a held SYN.
#[derive(Debug)]
pub(crate) struct Connected {
    key: Key,
    /// Where the host side connected (the guest's destination, or the
    /// host's loopback for the gateway's address).
    target: SocketAddrV4,
    stream: std::io::Result<TcpStream>,
}

#[derive(Debug)]
struct Conn {
    key: Key,
    /// Guest to host; `None` once the guest sent its FIN.
    to_host: Option<mpsc::Sender<Vec<u8>>>,
    from_host: mpsc::Receiver<Vec<u8>>,
    /// A chunk from the host not yet all in the socket.
    out: Option<(Vec<u8>, usize)>,
    host_eof: bool,
    closing: bool,
    /// The host side's address, checked again when the policy changes
    /// (`None`: the stack's own DNS server).
    checked: Option<SocketAddrV4>,
    since: Instant,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The connections of one stack.
#[derive(Debug)]
pub(crate) struct Tcp {
    pub(crate) sockets: SocketSet<'static>,
    conns: HashMap<SocketHandle, Conn>,
    by_key: HashMap<Key, SocketHandle>,
    held: HashMap<Key, Vec<u8>>,
    done_tx: mpsc::UnboundedSender<Connected>,
    pub(crate) done_rx: mpsc::UnboundedReceiver<Connected>,
    pub(crate) wake: Arc<Notify>,
}

impl Tcp {
    pub(crate) fn new() -> Tcp {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Tcp {
            sockets: SocketSet::new(Vec::new()),
            conns: HashMap::new(),
            by_key: HashMap::new(),
            held: HashMap::new(),
            done_tx,
            done_rx,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Takes the guest's SYN `frame` from `src` to `dst`; returns it when
    /// smoltcp is to have it now (a connection it knows, or one it is to
    /// reset), `None` when held or dropped.
    pub(crate) fn syn(
        &mut self,
        ctx: &Arc<Ctx>,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        frame: Vec<u8>,
    ) -> Option<Vec<u8>> {
        let key = (src, dst);
        if self.by_key.contains_key(&key) {
            return Some(frame);
        }
        if self.held.contains_key(&key) {
            // The guest's retransmission of a held SYN.
            return None;
        }
        if *dst.ip() == addrs::DNS && dst.port() == 53 {
            self.accept_dns(ctx, key);
            return Some(frame);
        }
        // Anything else on the guest's own network: reset.
        let Some(target) = host_side(dst) else {
            return Some(frame);
        };
        if self.conns.len() + self.held.len() >= MAX_CONNECTIONS {
            ctx.refused(Refusal {
                target: Target::Connection {
                    proto: Proto::Tcp,
                    dst: target,
                    names: Vec::new(),
                },
                verdict: super::limit_verdict("connections"),
            });
            return Some(frame);
        }
        if let Err(refusal) = ctx.check(Proto::Tcp, target) {
            ctx.refused(refusal);
            return Some(frame);
        }
        self.held.insert(key, frame);
        let done = self.done_tx.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(
                CONNECT_TIMEOUT,
                TcpStream::connect(SocketAddr::V4(target)),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
            };
            let _ = done.send(Connected {
                key,
                target,
                stream,
            });
        });
        None
    }

    /// A host-side connection is made or failed: the held SYN goes to
    /// smoltcp, to a socket that now listens for it, or to none (a reset).
    pub(crate) fn connected(&mut self, ctx: &Arc<Ctx>, done: Connected) -> Option<Vec<u8>> {
        let frame = self.held.remove(&done.key)?;
        let dst = done.target;
        let stream = match done.stream {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%dst, error = %e, "host-side connection failed");
                return Some(frame);
            }
        };
        // The policy may have changed while connecting.
        if let Err(refusal) = ctx.check(Proto::Tcp, dst) {
            ctx.refused(refusal);
            return Some(frame);
        }
        let _ = stream.set_nodelay(true);
        ctx.counters.connections.fetch_add(1, Ordering::Relaxed);
        let wake = self.wake.clone();
        let (ctx, guest_dst) = (ctx.clone(), done.key.1);
        self.listen(done.key, Some(dst), frame, |up, down| {
            match ctx.secrets.clone() {
                Some(secrets) => tokio::spawn(super::guarded::run(
                    ctx, secrets, stream, guest_dst, dst, up, down, wake,
                )),
                None => tokio::spawn(pump(stream, up, down, wake)),
            }
        })
    }

    /// A connection to the stack's own DNS server (DNS over TCP).
    fn accept_dns(&mut self, ctx: &Arc<Ctx>, key: Key) {
        let (ctx, wake) = (ctx.clone(), self.wake.clone());
        // The SYN itself goes to smoltcp by the caller.
        let _ = self.listen(key, None, Vec::new(), |up, down| {
            tokio::spawn(dns_over_tcp(ctx, up, down, wake))
        });
    }

    fn listen(
        &mut self,
        key: Key,
        checked: Option<SocketAddrV4>,
        frame: Vec<u8>,
        start: impl FnOnce(mpsc::Receiver<Vec<u8>>, mpsc::Sender<Vec<u8>>) -> JoinHandle<()>,
    ) -> Option<Vec<u8>> {
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        let (_, dst) = key;
        if socket
            .listen(IpListenEndpoint {
                addr: Some((*dst.ip()).into()),
                port: dst.port(),
            })
            .is_err()
        {
            return Some(frame);
        }
        let (up_tx, up_rx) = mpsc::channel(CHUNKS);
        let (down_tx, down_rx) = mpsc::channel(CHUNKS);
        let handle = self.sockets.add(socket);
        self.by_key.insert(key, handle);
        self.conns.insert(
            handle,
            Conn {
                key,
                to_host: Some(up_tx),
                from_host: down_rx,
                out: None,
                host_eof: false,
                closing: false,
                checked,
                since: Instant::now(),
                task: start(up_rx, down_tx),
            },
        );
        Some(frame)
    }

    /// Moves data between the sockets and the host side, closes what is
    /// done. Returns whether anything moved.
    pub(crate) fn service(&mut self, ctx: &Ctx) -> bool {
        self.remove_finished();
        let mut progress = false;
        for (handle, conn) in &mut self.conns {
            let s = self.sockets.get_mut::<tcp::Socket>(*handle);
            progress |= to_host(s, conn, ctx);
            progress |= from_host(s, conn, ctx);
            if conn.host_eof
                && conn.out.is_none()
                && !conn.closing
                && s.state() != tcp::State::Listen
            {
                s.close();
                conn.closing = true;
                progress = true;
            }
        }
        progress
    }

    fn remove_finished(&mut self) {
        let sockets = &mut self.sockets;
        let by_key = &mut self.by_key;
        self.conns.retain(|handle, conn| {
            let state = sockets.get::<tcp::Socket>(*handle).state();
            let done = matches!(state, tcp::State::Closed | tcp::State::TimeWait)
                || (state == tcp::State::Listen && conn.since.elapsed() > Duration::from_secs(10));
            if done {
                sockets.remove(*handle);
                by_key.remove(&conn.key);
            }
            !done
        });
    }

    /// Resets the connections the policy no longer allows.
    pub(crate) fn recheck(&mut self, ctx: &Ctx) {
        for (handle, conn) in &self.conns {
            let Some(target) = conn.checked else {
                continue;
            };
            if let Err(refusal) = ctx.check(Proto::Tcp, target) {
                ctx.refused(refusal);
                self.sockets.get_mut::<tcp::Socket>(*handle).abort();
            }
        }
    }
}

fn to_host(s: &mut tcp::Socket, conn: &mut Conn, ctx: &Ctx) -> bool {
    let Some(tx) = &conn.to_host else {
        return false;
    };
    let mut progress = false;
    while s.can_recv() {
        match tx.try_reserve() {
            Ok(permit) => {
                let data = s
                    .recv(|b| {
                        let n = b.len().min(CHUNK);
                        (n, b[..n].to_vec())
                    })
                    .unwrap_or_default();
                ctx.counters
                    .bytes_out
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                permit.send(data);
                progress = true;
            }
            Err(mpsc::error::TrySendError::Full(())) => break,
            Err(mpsc::error::TrySendError::Closed(())) => {
                s.abort();
                return true;
            }
        }
    }
    let guest_done = matches!(
        s.state(),
        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing | tcp::State::TimeWait
    );
    if guest_done && !s.may_recv() {
        conn.to_host = None;
        progress = true;
    }
    progress
}

fn from_host(s: &mut tcp::Socket, conn: &mut Conn, ctx: &Ctx) -> bool {
    let mut progress = false;
    loop {
        if conn.out.is_none() {
            match conn.from_host.try_recv() {
                Ok(b) => conn.out = Some((b, 0)),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    conn.host_eof = true;
                    break;
                }
            }
        }
        let Some((buf, off)) = conn.out.as_mut() else {
            break;
        };
        if !s.may_send() {
            if !s.is_open() {
                conn.out = None;
            }
            break;
        }
        let n = s.send_slice(&buf[*off..]).unwrap_or(0);
        ctx.counters.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        *off += n;
        progress |= n > 0;
        if *off < buf.len() {
            break;
        }
        conn.out = None;
    }
    progress
}

/// Copies between the host socket and the stack's queues until both
/// directions are done.
async fn pump(
    stream: TcpStream,
    mut up: mpsc::Receiver<Vec<u8>>,
    down: mpsc::Sender<Vec<u8>>,
    wake: Arc<Notify>,
) {
    let (mut r, mut w) = stream.into_split();
    let upward = async {
        while let Some(b) = up.recv().await {
            wake.notify_one();
            if w.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    let downward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if down.send(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                    wake.notify_one();
                }
            }
        }
        drop(down);
        wake.notify_one();
    };
    tokio::join!(upward, downward);
}

/// The stack's DNS server over TCP: messages each after a two-byte length.
async fn dns_over_tcp(
    ctx: Arc<Ctx>,
    mut up: mpsc::Receiver<Vec<u8>>,
    down: mpsc::Sender<Vec<u8>>,
    wake: Arc<Notify>,
) {
    let mut buf = Vec::new();
    while let Some(b) = up.recv().await {
        wake.notify_one();
        buf.extend_from_slice(&b);
        if buf.len() > 2 + crate::dns::MAX_MESSAGE {
            break;
        }
        while let Some(query) = resolver::take_tcp_message(&mut buf) {
            ctx.counters.dns_queries.fetch_add(1, Ordering::Relaxed);
            let Some(reply) = resolver::answer(&ctx, &query).await else {
                continue;
            };
            let mut out = Vec::with_capacity(2 + reply.len());
            out.extend_from_slice(&(reply.len() as u16).to_be_bytes());
            out.extend_from_slice(&reply);
            if down.send(out).await.is_err() {
                return;
            }
            wake.notify_one();
        }
    }
    drop(down);
    wake.notify_one();
}

/// Where the host side of a connection to `dst` goes: `dst` itself, the
/// host's loopback for the gateway's address (so the host's own services
/// are reachable where a rule names 127.0.0.1), or nowhere for the rest
/// of the guest's own network.
pub(crate) fn host_side(dst: SocketAddrV4) -> Option<SocketAddrV4> {
    if *dst.ip() == addrs::GATEWAY {
        return Some(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, dst.port()));
    }
    (!in_guest_net(dst)).then_some(dst)
}

/// Whether `dst` is on the guest's own network (the stack's addresses).
pub(crate) fn in_guest_net(dst: SocketAddrV4) -> bool {
    let mask = u32::MAX << (32 - u32::from(addrs::GUEST_PREFIX));
    (u32::from(*dst.ip()) & mask) == (u32::from(addrs::GATEWAY) & mask)
        || dst.ip().is_broadcast()
        || dst.ip().is_unspecified()
}
