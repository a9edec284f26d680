//! A multiplexed client of the agent protocol. Many requests share one
//! channel; each gets its own id and its own stream of frames (see
//! [`super::request`] for one request's end, and its flow control).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burrow_protocol::{
    Control, GuestError, GuestErrorCode, GuestMsg, HostMsg, Identity, Request, Response,
    DEFAULT_WINDOW, FLOW_CONTROL_VERSION, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::frames::{read_frame, write_frame, write_message};
pub use super::health::ChannelEnd;
use super::health::{Counted, ReadProgress};
pub use super::request::RequestHandle;
use super::request::{lost, Credit, Mode};
use crate::error::{Error, Result};

/// Where the reader task delivers one request's frames.
#[derive(Debug)]
pub(super) struct Route {
    pub(super) tx: mpsc::UnboundedSender<GuestMsg>,
    pub(super) credit: Option<Arc<Credit>>,
    /// Deliver the peer's `Window` frames too (a relay forwards them).
    pub(super) windows: bool,
}

pub(super) type Pending = Arc<Mutex<HashMap<u64, Route>>>;

/// What the other side said in its hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHello {
    /// Agent build version.
    pub agent_version: String,
    /// Runtime identity (set by supervisors).
    pub identity: Option<Identity>,
}

/// How the hello exchange goes.
#[derive(Debug, Clone)]
pub enum Handshake {
    /// A client of a relay (a supervisor's socket, a server's runtime
    /// stream): says hello first, offering `version` and stating the
    /// runtime it expects; the relay answers with the version they use.
    Client {
        /// The runtime the client means to reach.
        expect: Option<Identity>,
        /// The highest version offered ([`PROTOCOL_VERSION`]; 1 to reach
        /// a supervisor of a build that speaks only protocol 1).
        version: u32,
    },
    /// The guest agent, which says hello first: answered with the lower
    /// of its version and this build's (an agent saved in a hibernated
    /// VM by an older build speaks its own).
    Agent,
}

impl Handshake {
    /// A client of this build's protocol expecting `expect`.
    // Used by the supervisor (feature `local`) and the tests.
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub fn client(expect: Option<Identity>) -> Handshake {
        Handshake::Client {
            expect,
            version: PROTOCOL_VERSION,
        }
    }
}

/// A connected, multiplexed protocol client.
#[derive(Debug, Clone)]
pub struct AgentClient {
    pub(super) inner: Arc<Inner>,
}

/// What the writer task is handed.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// A frame to write.
    Msg(HostMsg),
    /// A frame after which nothing more is written until the sender of
    /// the receiver is released or dropped ([`Hold`]).
    ThenHold(HostMsg, oneshot::Receiver<()>),
}

/// Keeps a client from writing anything more to its peer (see
/// [`AgentClient::call_then_hold`]) until it is released or dropped.
#[derive(Debug)]
pub struct Hold(#[allow(dead_code)] oneshot::Sender<()>);

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) tx: mpsc::UnboundedSender<Outgoing>,
    pub(super) pending: Pending,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    /// How the channel ended, once the reader has stopped.
    #[cfg_attr(not(feature = "local"), allow(dead_code))] // read by the supervisor
    ended: watch::Receiver<Option<ChannelEnd>>,
    /// What the reader has consumed.
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    progress: Arc<ReadProgress>,
    /// The protocol version of the channel.
    version: u32,
    // Read by the supervisor (feature `local`), which checks the agent's hello.
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    hello: PeerHello,
}

/// Why the connection refused us at hello time.
#[derive(Debug)]
pub enum ConnectError {
    /// The peer sent `Fatal` (e.g. identity mismatch).
    Refused(GuestError),
    /// Anything else.
    Other(Error),
}

impl ConnectError {
    /// Whether the peer refused the protocol version offered (a relay of
    /// an older build refuses any version but its own).
    pub fn version_refused(&self) -> bool {
        matches!(self, ConnectError::Refused(g) if g.code == GuestErrorCode::Protocol)
    }
}

fn protocol(why: String) -> ConnectError {
    ConnectError::Other(Error::protocol(why))
}

/// The hello exchange; the version the channel speaks, and the peer's hello.
async fn handshake<R, W>(
    reader: &mut R,
    writer: &mut W,
    how: Handshake,
) -> std::result::Result<(u32, PeerHello), ConnectError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let send = |version, expect| HostMsg::Hello { version, expect };
    let (offered, expect) = match how {
        Handshake::Client { expect, version } => (version, Some(expect)),
        Handshake::Agent => (PROTOCOL_VERSION, None),
    };
    if let Some(expect) = &expect {
        write_frame(writer, &send(offered, expect.clone()))
            .await
            .map_err(|e| protocol(format!("sending hello: {e}")))?;
    }
    let (version, hello) = match read_frame::<_, GuestMsg>(reader).await {
        Ok(Some(GuestMsg::Hello {
            version,
            agent_version,
            identity,
        })) => (
            version,
            PeerHello {
                agent_version,
                identity,
            },
        ),
        Ok(Some(GuestMsg::Fatal { error })) => return Err(ConnectError::Refused(error)),
        Ok(Some(other)) => return Err(protocol(format!("expected hello, got {other:?}"))),
        Ok(None) => return Err(protocol("channel closed during hello".into())),
        Err(e) => return Err(protocol(format!("reading hello: {e}"))),
    };
    // A relay answers with a version it chose from what was offered; an
    // agent states its own, and the channel speaks the lower one.
    let version = if expect.is_some() {
        version
    } else {
        version.min(PROTOCOL_VERSION)
    };
    if !(OLDEST_PROTOCOL_VERSION..=offered).contains(&version) {
        return Err(protocol(format!(
            "peer speaks protocol {version}, this build speaks {OLDEST_PROTOCOL_VERSION} to {offered}"
        )));
    }
    if expect.is_none() {
        write_frame(writer, &send(version, None))
            .await
            .map_err(|e| protocol(format!("sending hello: {e}")))?;
    }
    Ok((version, hello))
}

impl AgentClient {
    /// Performs the hello exchange (bounded by `timeout`) and starts the
    /// reader and writer tasks.
    pub async fn connect<R, W>(
        mut reader: R,
        mut writer: W,
        how: Handshake,
        timeout: Duration,
    ) -> std::result::Result<AgentClient, ConnectError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (version, hello) =
            match tokio::time::timeout(timeout, handshake(&mut reader, &mut writer, how)).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(ConnectError::Other(Error::Timeout {
                        operation: "protocol hello".into(),
                        after: timeout,
                    }))
                }
            };
        let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let (ended_tx, ended) = watch::channel(None);
        let progress = Arc::new(ReadProgress::default());
        tokio::spawn(write_loop(writer, rx, version, closed.clone()));
        tokio::spawn(read_loop(
            Counted::new(reader, progress.clone()),
            Reader {
                pending: pending.clone(),
                tx: tx.clone(),
                closed: closed.clone(),
                ended: ended_tx,
                progress: progress.clone(),
            },
        ));
        Ok(AgentClient {
            inner: Arc::new(Inner {
                tx,
                pending,
                next_id: AtomicU64::new(1),
                closed,
                ended,
                progress,
                version,
                hello,
            }),
        })
    }

    /// The peer's hello.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub fn hello(&self) -> &PeerHello {
        &self.inner.hello
    }

    /// The protocol version of the channel.
    pub fn version(&self) -> u32 {
        self.inner.version
    }

    /// Whether the channel is gone.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst) || self.inner.tx.is_closed()
    }

    /// Waits until the reader has stopped, and says why: the peer closed
    /// the channel, or broke it with bytes that are not the protocol (see
    /// [`super::health`]). Every request pending then has ended.
    #[cfg_attr(not(feature = "local"), allow(dead_code))] // the supervisor's
    pub async fn ended(&self) -> ChannelEnd {
        let mut rx = self.inner.ended.clone();
        let end = match rx.wait_for(Option::is_some).await {
            Ok(end) => end.clone(),
            Err(_) => None,
        };
        end.unwrap_or_else(|| ChannelEnd::Closed("the channel's reader stopped".into()))
    }

    /// Bytes read from the peer so far, and whether the last of them
    /// began a frame that has not arrived whole.
    #[cfg_attr(not(feature = "local"), allow(dead_code))] // the supervisor's
    pub fn read_progress(&self) -> (u64, bool) {
        self.inner.progress.get()
    }

    fn open(&self, mode: Mode, make: impl FnOnce(u64) -> HostMsg) -> Result<RequestHandle> {
        self.open_holding(mode, make, None)
    }

    fn open_holding(
        &self,
        mode: Mode,
        make: impl FnOnce(u64) -> HostMsg,
        hold: Option<oneshot::Receiver<()>>,
    ) -> Result<RequestHandle> {
        #[cfg(test)]
        tests_hook::before_open();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let credit = mode.window().map(|w| {
            Arc::new(Credit {
                out_left: AtomicI64::new(i64::from(w)),
                input: Semaphore::new(w as usize),
            })
        });
        {
            // Looked at under the lock the reader holds to close the
            // channel and end its requests: a request is either refused
            // here or registered before that end, never after it (it then
            // waited forever for an answer).
            let mut pending = self.inner.pending.lock().unwrap_or_else(|p| p.into_inner());
            if self.is_closed() {
                return Err(lost());
            }
            pending.insert(
                id,
                Route {
                    tx,
                    credit: credit.clone(),
                    windows: matches!(mode, Mode::Relayed(_)),
                },
            );
        }
        let handle = RequestHandle::new(id, rx, self.clone(), mode, credit);
        let msg = make(id);
        let out = match hold {
            Some(hold) => Outgoing::ThenHold(msg, hold),
            None => Outgoing::Msg(msg),
        };
        self.inner.tx.send(out).map_err(|_| lost())?;
        Ok(handle)
    }

    /// Starts an agent request; on a channel of protocol 2 it is flow
    /// controlled with [`DEFAULT_WINDOW`], its credit granted back as
    /// [`RequestHandle::next`] hands out output.
    pub fn request(&self, body: Request) -> Result<RequestHandle> {
        let window = (self.inner.version >= FLOW_CONTROL_VERSION).then_some(DEFAULT_WINDOW);
        self.open(Mode::Auto(window), |id| HostMsg::Request {
            id,
            body,
            window,
        })
    }

    /// Starts an agent request on behalf of a relay's client, whose
    /// `window` it carries: the client grants the credit
    /// ([`RequestHandle::grant`]), and the peer's `Window` frames come out
    /// of [`RequestHandle::next`] for the client.
    pub fn request_relayed(&self, body: Request, window: Option<u32>) -> Result<RequestHandle> {
        let window = window.filter(|_| self.inner.version >= FLOW_CONTROL_VERSION);
        self.open(Mode::Relayed(window), |id| HostMsg::Request {
            id,
            body,
            window,
        })
    }

    /// Starts a supervisor control request.
    pub fn control(&self, body: Control) -> Result<RequestHandle> {
        self.open(Mode::Auto(None), |id| HostMsg::Control { id, body })
    }

    /// Grants the peer `bytes` more output credit for request `id` (a
    /// relay passing its client's grant on); nothing for a request that
    /// has ended or is not flow controlled.
    pub fn grant(&self, id: u64, bytes: u32) {
        let credit = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .and_then(|r| r.credit.clone());
        if let Some(c) = credit {
            // Counted before the peer can act on it.
            c.out_left.fetch_add(i64::from(bytes), Ordering::SeqCst);
            let _ = self.send(HostMsg::Window { id, bytes });
        }
    }

    /// Sends a raw frame (used by relays).
    pub fn send(&self, msg: HostMsg) -> Result<()> {
        self.inner.tx.send(Outgoing::Msg(msg)).map_err(|_| lost())
    }

    /// Runs a request that streams nothing, after which this client writes
    /// nothing more to the peer until the returned [`Hold`] is released:
    /// what is sent meanwhile waits, in order. For `Suspend`, which a VM's
    /// agent answers and then waits for its VM to be saved: no frame may
    /// reach the saved guest.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub async fn call_then_hold(
        &self,
        body: Request,
    ) -> Result<(std::result::Result<Response, GuestError>, Hold)> {
        let (release, held) = oneshot::channel();
        let handle = self.open_holding(
            Mode::Auto(None),
            |id| HostMsg::Request {
                id,
                body,
                window: None,
            },
            Some(held),
        )?;
        Ok((handle.response().await?, Hold(release)))
    }

    /// Runs a request that streams nothing and returns its response.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub async fn call(&self, body: Request) -> Result<std::result::Result<Response, GuestError>> {
        self.request(body)?.response().await
    }
}

/// Writer: one task owns the write half so frames never interleave.
async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    version: u32,
    closed: Arc<AtomicBool>,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, writer);
    'frames: while let Some(mut next) = rx.recv().await {
        // Batch whatever is already queued, then flush once (and hold
        // after a frame that asks for it).
        loop {
            let (msg, hold) = match next {
                Outgoing::Msg(msg) => (msg, None),
                Outgoing::ThenHold(msg, hold) => (msg, Some(hold)),
            };
            if write_message(&mut w, &msg, version).await.is_err() {
                break 'frames;
            }
            if let Some(hold) = hold {
                if w.flush().await.is_err() {
                    break 'frames;
                }
                let _ = hold.await;
            }
            match rx.try_recv() {
                Ok(more) => next = more,
                Err(_) => break,
            }
        }
        if w.flush().await.is_err() {
            break;
        }
    }
    closed.store(true, Ordering::SeqCst);
    let _ = w.shutdown().await;
}

/// What the reader task shares with the client.
struct Reader {
    pending: Pending,
    tx: mpsc::UnboundedSender<Outgoing>,
    closed: Arc<AtomicBool>,
    ended: watch::Sender<Option<ChannelEnd>>,
    progress: Arc<ReadProgress>,
}

/// Reader: dispatches frames by request id, applies the peer's windows
/// and enforces ours; on EOF or an error every pending request sees its
/// stream end, and [`AgentClient::ended`] says how.
async fn read_loop<R: AsyncRead + Unpin>(mut reader: R, shared: Reader) {
    let Reader {
        pending,
        tx,
        closed,
        ended,
        progress,
    } = shared;
    let lock = || pending.lock().unwrap_or_else(|p| p.into_inner());
    let end = loop {
        let msg = match read_frame::<_, GuestMsg>(&mut reader).await {
            Ok(Some(msg)) => msg,
            Ok(None) => break ChannelEnd::Closed("the peer closed the channel".into()),
            Err(e) => {
                tracing::warn!(error = %e, "reading from the sandbox channel failed");
                break ChannelEnd::of(&e);
            }
        };
        progress.frame_done();
        let id = match &msg {
            GuestMsg::Stdout { id, data } | GuestMsg::Stderr { id, data } => {
                let mut map = lock();
                let Some(route) = map.get(id) else { continue };
                let overran = route.credit.as_ref().is_some_and(|c| {
                    let n = data.0.len() as i64;
                    c.out_left.fetch_sub(n, Ordering::SeqCst) < n
                });
                if overran {
                    // A peer that ignores the window would grow this
                    // process's memory: the request fails instead.
                    let Some(route) = map.remove(id) else {
                        continue;
                    };
                    drop(map);
                    overrun(*id, route, &tx);
                    continue;
                }
                let _ = route.tx.send(msg);
                continue;
            }
            GuestMsg::Window { id, bytes } => {
                let map = lock();
                if let Some(route) = map.get(id) {
                    if let Some(c) = &route.credit {
                        c.input.add_permits(*bytes as usize);
                    }
                    if route.windows {
                        let _ = route.tx.send(msg);
                    }
                }
                continue;
            }
            GuestMsg::Eof { id } => *id,
            GuestMsg::Response { id, .. } => {
                let route = lock().remove(id);
                if let Some(route) = route {
                    if let Some(c) = &route.credit {
                        c.input.close();
                    }
                    let _ = route.tx.send(msg);
                }
                continue;
            }
            GuestMsg::Fatal { error } => {
                tracing::warn!(%error, "peer closed the channel");
                break ChannelEnd::Closed(format!("the peer gave up: {error}"));
            }
            GuestMsg::Hello { .. } => continue,
        };
        if let Some(route) = lock().get(&id) {
            let _ = route.tx.send(msg);
        }
    };
    let mut map = lock();
    closed.store(true, Ordering::SeqCst);
    for (_, route) in map.drain() {
        if let Some(c) = &route.credit {
            c.input.close();
        }
    }
    drop(map);
    ended.send_replace(Some(end));
}

/// The peer sent more output than request `id` had credit for: the
/// request ends with a protocol error and is cancelled in the peer.
fn overrun(id: u64, route: Route, tx: &mpsc::UnboundedSender<Outgoing>) {
    tracing::warn!(id, "the peer overran a request's flow-control window");
    if let Some(c) = &route.credit {
        c.input.close();
    }
    let _ = tx.send(Outgoing::Msg(HostMsg::Cancel { id }));
    let _ = route.tx.send(GuestMsg::Response {
        id,
        result: Err(GuestError::new(
            GuestErrorCode::Protocol,
            "the sandbox sent more output than the request's window allows",
        )),
    });
}

/// A hook of the tests, run where a request starts to be opened.
#[cfg(test)]
pub(super) mod tests_hook {
    use std::cell::RefCell;

    thread_local! {
        static BEFORE_OPEN: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    /// Runs `f` the next time this thread starts opening a request.
    pub(in crate::channel) fn set_before_open(f: impl FnOnce() + 'static) {
        BEFORE_OPEN.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub(super) fn before_open() {
        if let Some(f) = BEFORE_OPEN.with(|h| h.borrow_mut().take()) {
            f();
        }
    }
}
