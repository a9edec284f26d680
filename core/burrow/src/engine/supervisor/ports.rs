//! A run's published ports: host listeners bound before the guest is
//! launched (a taken address fails the start before anything boots), then
//! served through the agent's channel for as long as the run lasts. A TCP
//! connection is a `Tunnel` request; the datagrams of one UDP client
//! address are a `UdpTunnel`, ended after [`UDP_IDLE`] without traffic.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow_protocol::{GuestMsg, Request};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;

use crate::channel::client::AgentClient;
use crate::error::{Error, Result};
use crate::model::{PortMapping, PortProtocol};

/// A UDP client address's tunnel ends after this long without a datagram
/// either way.
const UDP_IDLE: Duration = Duration::from_secs(60);
/// UDP client addresses served at once per port; datagrams of more are
/// dropped.
const UDP_FLOWS: usize = 256;
/// Datagrams queued toward the guest per UDP client address; more are
/// dropped (as a full socket buffer would).
const UDP_QUEUE: usize = 64;

/// The bound host sockets of a run's ports.
pub(super) struct Bound(Vec<(PortMapping, Socket)>);

enum Socket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// What serves the ports; dropping it stops every listener.
pub(super) struct Served(Vec<JoinHandle<()>>);

impl Served {
    /// Stops every listener and waits until their sockets are closed: a
    /// run that ended listens on nothing.
    pub(super) async fn close(mut self) {
        for t in std::mem::take(&mut self.0) {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The typed error of a host address that cannot be listened on.
pub(crate) fn unavailable(p: &PortMapping, e: &std::io::Error) -> Error {
    Error::PortUnavailable {
        address: format!("{}/{}", p.host_addr(), p.protocol.as_str()),
        reason: match e.kind() {
            std::io::ErrorKind::AddrInUse => "another process has it".into(),
            std::io::ErrorKind::AddrNotAvailable => "the address is not this host's".into(),
            std::io::ErrorKind::PermissionDenied => {
                "a port below 1024 needs privileges this user lacks".into()
            }
            _ => e.to_string(),
        },
    }
}

/// The [`Error::PortUnavailable`] a supervisor's start failure `detail`
/// (the error's text, which is what reaches the starter) says, if it is
/// one.
pub(crate) fn from_start_detail(detail: &str) -> Option<Error> {
    let (address, reason) = detail
        .strip_prefix("host port ")?
        .split_once(" cannot be published: ")?;
    Some(Error::PortUnavailable {
        address: address.into(),
        reason: reason.into(),
    })
}

/// Binds every port (nonblocking sockets, ready for tokio).
pub(super) fn bind(ports: &[PortMapping]) -> Result<Bound> {
    let mut bound = Vec::with_capacity(ports.len());
    for p in ports {
        let addr = p.host_addr();
        let socket = match p.protocol {
            PortProtocol::Tcp => std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| Socket::Tcp(l))),
            PortProtocol::Udp => std::net::UdpSocket::bind(addr)
                .and_then(|s| s.set_nonblocking(true).map(|()| Socket::Udp(s))),
        }
        .map_err(|e| unavailable(p, &e))?;
        bound.push((*p, socket));
    }
    Ok(Bound(bound))
}

impl Bound {
    /// Serves every port through `agent`.
    pub(super) fn serve(self, agent: &AgentClient) -> Result<Served> {
        let mut tasks = Vec::with_capacity(self.0.len());
        for (p, socket) in self.0 {
            let agent = agent.clone();
            let port = p.guest_port;
            let registered = match socket {
                Socket::Tcp(l) => {
                    TcpListener::from_std(l).map(|l| tokio::spawn(tcp(l, agent, port)))
                }
                Socket::Udp(s) => UdpSocket::from_std(s).map(|s| tokio::spawn(udp(s, agent, port))),
            };
            tasks.push(registered.map_err(|e| Error::io("serving a published port", None, e))?);
        }
        Ok(Served(tasks))
    }
}

async fn tcp(listener: TcpListener, agent: AgentClient, port: u16) {
    while let Ok((conn, _)) = listener.accept().await {
        let _ = conn.set_nodelay(true);
        let Ok(mut handle) = agent.request(Request::Tunnel { port }) else {
            return;
        };
        tokio::spawn(async move {
            // An empty first chunk says connected; an error answer (nothing
            // listens in the guest) closes the host's connection.
            let first = match handle.next().await {
                Some(GuestMsg::Response { result, .. }) => {
                    if let Err(e) = result {
                        tracing::debug!(port, error = %e.message, "published port: the guest refused");
                    }
                    return;
                }
                None => return,
                first => first,
            };
            let (rd, wr) = conn.into_split();
            crate::sandbox::tunnel::relay(handle, first, rd, wr);
        });
    }
}

/// One UDP client address: its queue toward the guest and when it was
/// last heard of.
struct Flow {
    tx: mpsc::Sender<Vec<u8>>,
    last: Arc<std::sync::Mutex<Instant>>,
}

async fn udp(sock: UdpSocket, agent: AgentClient, port: u16) {
    let sock = Arc::new(sock);
    let flows: Arc<Mutex<HashMap<SocketAddr, Flow>>> = Arc::default();
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let mut map = flows.lock().await;
        if !map.contains_key(&from) {
            if map.len() >= UDP_FLOWS {
                continue;
            }
            match open_flow(&agent, port, from, &sock, &flows) {
                Some(flow) => {
                    map.insert(from, flow);
                }
                None => return,
            }
        }
        let flow = &map[&from];
        *flow.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let _ = flow.tx.try_send(buf[..n].to_vec());
    }
}

/// Opens the tunnel of client `from`: datagrams from its queue go to the
/// guest, the guest's answers to `from`; it ends after [`UDP_IDLE`]
/// without traffic, or when the guest's side ends. None: the agent's
/// channel is gone.
fn open_flow(
    agent: &AgentClient,
    port: u16,
    from: SocketAddr,
    sock: &Arc<UdpSocket>,
    flows: &Arc<Mutex<HashMap<SocketAddr, Flow>>>,
) -> Option<Flow> {
    let mut handle = agent.request(Request::UdpTunnel { port }).ok()?;
    let input = handle.input();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(UDP_QUEUE);
    // Datagrams go once the guest's socket is ready (its request taken).
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let last = Arc::new(std::sync::Mutex::new(Instant::now()));
    let seen = last.clone();
    let to_guest = tokio::spawn(async move {
        if ready_rx.await.is_err() {
            return;
        }
        while let Some(d) = rx.recv().await {
            if input.send_data(&d).await.is_err() {
                return;
            }
        }
        let _ = input.send_eof();
    });
    let (sock, flows) = (sock.clone(), flows.clone());
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        loop {
            let idle = {
                let last = *seen.lock().unwrap_or_else(|p| p.into_inner());
                (last + UDP_IDLE).saturating_duration_since(Instant::now())
            };
            let msg = tokio::select! {
                m = handle.next() => m,
                () = tokio::time::sleep(idle) => {
                    let quiet = seen.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                    if quiet < UDP_IDLE { continue }
                    None
                }
            };
            match msg {
                Some(GuestMsg::Stdout { data, .. }) => {
                    // The first, empty, says the guest's socket is ready.
                    match ready.take() {
                        Some(r) => {
                            let _ = r.send(());
                        }
                        None => {
                            *seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                            let _ = sock.send_to(&data.0, from).await;
                        }
                    }
                }
                Some(GuestMsg::Response { .. }) | None => break,
                Some(_) => {}
            }
        }
        flows.lock().await.remove(&from);
        to_guest.abort();
        // Dropping the handle cancels the request in the guest.
    });
    Some(Flow { tx, last })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_typed_and_survives_the_trip_to_the_starter() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = PortMapping::tcp(held.local_addr().unwrap().port(), 80);
        let Err(e) = bind(&[p]) else {
            panic!("a taken port was bound")
        };
        assert_eq!(e.code(), crate::ErrorCode::PortUnavailable);
        let back = from_start_detail(&e.to_string()).unwrap();
        assert_eq!(back.to_string(), e.to_string());
        assert!(from_start_detail("runtime exited with code 1").is_none());
        // UDP and TCP of one port are separate addresses.
        let udp = PortMapping::udp(p.host_port, 80);
        assert!(bind(&[udp]).is_ok());
    }
}
