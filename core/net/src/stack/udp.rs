//! The guest's UDP: each (source, destination) pair the policy allows is a
//! flow with a connected host socket of its own; replies come back as
//! frames the stack builds. Datagrams to the stack's DNS server are
//! answered by its resolver. Idle flows expire.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use smoltcp::wire::EthernetAddress;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use crate::addrs;
use crate::policy::Proto;

use super::frames::udp_frame;
use super::tcp::host_side;
use super::{resolver, Ctx};

/// Flows per sandbox at most (the least recently used goes).
const MAX_FLOWS: usize = 256;
/// A flow without traffic this long is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(60);
/// DNS questions being answered at once at most (more are dropped, as a
/// busy server would).
const DNS_IN_FLIGHT: usize = 64;

type Key = (SocketAddrV4, SocketAddrV4);

#[derive(Debug)]
struct Flow {
    /// Sends (non-blocking); a tokio socket's `try_send` would refuse
    /// until the reactor saw the socket writable.
    send: std::net::UdpSocket,
    last: Instant,
    task: JoinHandle<()>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The UDP flows of one stack.
#[derive(Debug)]
pub(crate) struct Udp {
    flows: HashMap<Key, Flow>,
    dns: Arc<Semaphore>,
}

impl Udp {
    pub(crate) fn new() -> Udp {
        Udp {
            flows: HashMap::new(),
            dns: Arc::new(Semaphore::new(DNS_IN_FLIGHT)),
        }
    }

    /// A datagram from the guest (at `mac`).
    pub(crate) fn datagram(
        &mut self,
        ctx: &Arc<Ctx>,
        out: &mpsc::Sender<Vec<u8>>,
        mac: EthernetAddress,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) {
        if *dst.ip() == addrs::DNS && dst.port() == 53 {
            self.dns_question(ctx, out, mac, src, dst, payload);
            return;
        }
        if dst.ip().is_multicast() {
            return;
        }
        let Some(target) = host_side(dst) else {
            return;
        };
        let key = (src, dst);
        if let Some(flow) = self.flows.get_mut(&key) {
            flow.last = Instant::now();
            // A full socket buffer loses the datagram, as a wire would.
            if let Ok(n) = flow.send.send(payload) {
                ctx.counters
                    .bytes_out
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            return;
        }
        if let Err(refusal) = ctx.check(Proto::Udp, target) {
            ctx.refused(refusal);
            return;
        }
        let (send, recv) = match open(target) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%target, error = %e, "host-side UDP socket failed");
                return;
            }
        };
        if let Ok(n) = send.send(payload) {
            ctx.counters
                .bytes_out
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        if self.flows.len() >= MAX_FLOWS {
            if let Some(oldest) = self
                .flows
                .iter()
                .min_by_key(|(_, f)| f.last)
                .map(|(k, _)| *k)
            {
                self.flows.remove(&oldest);
            }
        }
        ctx.counters.connections.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(replies(ctx.clone(), recv, out.clone(), mac, src, dst));
        self.flows.insert(
            key,
            Flow {
                send,
                last: Instant::now(),
                task,
            },
        );
    }

    fn dns_question(
        &self,
        ctx: &Arc<Ctx>,
        out: &mpsc::Sender<Vec<u8>>,
        mac: EthernetAddress,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: &[u8],
    ) {
        let Ok(permit) = self.dns.clone().try_acquire_owned() else {
            return;
        };
        ctx.counters.dns_queries.fetch_add(1, Ordering::Relaxed);
        let (ctx, out, query) = (ctx.clone(), out.clone(), payload.to_vec());
        tokio::spawn(async move {
            let _permit = permit;
            if let Some(reply) = resolver::answer(&ctx, &query).await {
                if let Some(frame) = udp_frame(mac, dst, src, &reply, ctx.mtu) {
                    let _ = out.send(frame).await;
                }
            }
        });
    }

    /// Closes the flows idle for [`IDLE`].
    pub(crate) fn expire(&mut self) {
        self.flows.retain(|_, f| f.last.elapsed() < IDLE);
    }

    /// Closes the flows the policy no longer allows.
    pub(crate) fn recheck(&mut self, ctx: &Ctx) {
        self.flows.retain(
            |(_, dst), _| match host_side(*dst).map(|t| ctx.check(Proto::Udp, t)) {
                Some(Ok(())) => true,
                Some(Err(refusal)) => {
                    ctx.refused(refusal);
                    false
                }
                None => false,
            },
        );
    }
}

/// A host socket connected to `dst`: its sending half and its receiving
/// half.
fn open(dst: SocketAddrV4) -> std::io::Result<(std::net::UdpSocket, UdpSocket)> {
    let sock = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    sock.connect(SocketAddr::V4(dst))?;
    sock.set_nonblocking(true)?;
    Ok((sock.try_clone()?, UdpSocket::from_std(sock)?))
}

/// Frames the host socket's datagrams back to the guest.
async fn replies(
    ctx: Arc<Ctx>,
    sock: UdpSocket,
    out: mpsc::Sender<Vec<u8>>,
    mac: EthernetAddress,
    guest: SocketAddrV4,
    far: SocketAddrV4,
) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match sock.recv(&mut buf).await {
            Ok(n) => n,
            // An ICMP error of an earlier datagram: the flow goes on.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(_) => return,
        };
        let Some(frame) = udp_frame(mac, far, guest, &buf[..n], ctx.mtu) else {
            continue;
        };
        ctx.counters.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        if out.send(frame).await.is_err() {
            return;
        }
    }
}
