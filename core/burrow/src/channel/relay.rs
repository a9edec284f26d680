//! The server side of the runtime stream: a [`Relay`] sits between one
//! connection to a sandbox's guest agent and any number of clients.
//!
//! The local engine's supervisor is one: its Unix socket is served by a
//! relay. A backend that reaches its guest another way (a pod's exec or
//! port-forward stream, a vsock, TCP) builds a `Relay` over that connection
//! and hands out [`Relay::connect`] streams from [`Backend::open_runtime`]:
//! its handles then get the same exec, file and tunnel behaviour, and the
//! same checks, as the local backend's:
//!
//! - **Identity at hello.** A client states the sandbox id and run
//!   generation it expects; a relay of another run refuses it with
//!   `identity_mismatch`, so a handle never acts on a successor of its
//!   sandbox (see `docs/backends.md`, "The runtime stream").
//! - **Per-client request ids.** Each client numbers its requests itself;
//!   the relay maps them onto the one agent channel, and a client that goes
//!   away has its unfinished requests cancelled in the guest.
//! - **Refusal, not loss, at a boundary.** After [`Relay::set_closing`]
//!   (a drain, a stop, an idle reclaim) or [`Relay::set_paused`], new
//!   requests are answered `unavailable` without being run, which the
//!   handles treat as "retry on what the sandbox becomes". A request counts
//!   as in flight from the moment it is read, before the closing flag is
//!   looked at: a reclaimer that sets the flag and then sees no request in
//!   flight knows none will run.
//! - **Activity.** Every request but `ping` restarts the idle clock
//!   ([`Relay::idle_for`]).
//!
//! Control requests (stop, drain, pause, metrics, ...) are the backend's
//! business: the relay passes them to its [`RelayControl`] and answers the
//! status request itself.
//!
//! [`Backend::open_runtime`]: crate::Backend::open_runtime

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use burrow_protocol::{
    Control, GuestError, GuestErrorCode, GuestMsg, HostMsg, Identity, Request, Response,
    OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, watch};
// tokio's clock: the idle clock follows a paused test clock.
use tokio::time::Instant;

use crate::backend::RuntimeStream;
use crate::channel::client::{AgentClient, ConnectError, Handshake};
use crate::channel::frames::{read_frame, write_message};
#[cfg(feature = "local")]
use crate::engine::logs::output::{OutputLog, Stream};
use crate::error::{Error, Result};
use crate::model::SandboxId;

/// How long a client has to send its hello.
const CLIENT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound of the agent's hello in [`RelayBuilder::connect`].
const AGENT_HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// Buffer of each in-process connection ([`Relay::connect`]).
const DUPLEX_BUFFER: usize = 256 * 1024;

/// Answers the control requests (`stop`, `kill`, `drain`, `detach`, `touch`,
/// `pause`, `resume`, `reload`, `metrics`) that reach a [`Relay`]: the
/// backend decides what they mean for its sandbox. `status` never reaches
/// it (the relay answers with its own pid and requests in flight).
#[async_trait]
pub trait RelayControl: Send + Sync + Debug + 'static {
    /// The answer to `request`. A stop or kill may end the run before it
    /// answers; the relay then answers `Done` for it.
    async fn control(&self, request: Control) -> std::result::Result<Response, GuestError>;
}

/// The [`RelayControl`] of a relay that takes no control requests: every
/// one is answered `unsupported` (the backend acts on its sandbox by other
/// means, such as its own API).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoControl;

#[async_trait]
impl RelayControl for NoControl {
    async fn control(&self, request: Control) -> std::result::Result<Response, GuestError> {
        Err(GuestError::new(
            GuestErrorCode::Unsupported,
            format!("{request:?} is not served by this runtime"),
        ))
    }
}

/// Builds a [`Relay`]: the run it serves, its control, the environment.
#[derive(Debug)]
#[must_use]
pub struct RelayBuilder {
    identity: Identity,
    control: Arc<dyn RelayControl>,
    env: BTreeMap<String, String>,
    hello_timeout: Duration,
    /// Where the output of execs is copied (the sandbox's logs).
    #[cfg(feature = "local")]
    output: Option<Arc<OutputLog>>,
}

impl RelayBuilder {
    /// Copies the stdout and stderr of every exec and shell into `log`.
    #[cfg(feature = "local")]
    pub(crate) fn output(mut self, log: Arc<OutputLog>) -> Self {
        self.output = Some(log);
        self
    }

    /// Who answers control requests (default: [`NoControl`]).
    pub fn control(mut self, control: impl RelayControl) -> Self {
        self.control = Arc::new(control);
        self
    }

    /// Environment added to every exec under the request's own (a
    /// sandbox's configured `env`); see also [`Relay::set_env`].
    pub fn env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Bound of the agent's hello in [`RelayBuilder::connect`] (default 30 s).
    pub fn hello_timeout(mut self, timeout: Duration) -> Self {
        self.hello_timeout = timeout;
        self
    }

    /// Connects to the guest agent over `reader`/`writer` (any byte stream
    /// whose other end is `burrow-agent`'s channel) and returns the relay.
    /// Errors: `timeout` if the agent does not say hello in time,
    /// `protocol` if it speaks another protocol or refuses.
    pub async fn connect<R, W>(self, reader: R, writer: W) -> Result<Relay>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let agent = AgentClient::connect(reader, writer, Handshake::Agent, self.hello_timeout)
            .await
            .map_err(|e| match e {
                ConnectError::Refused(g) => {
                    Error::protocol(format!("the guest agent refused the connection: {g}"))
                }
                ConnectError::Other(e) => e,
            })?;
        Ok(self.with_agent(agent))
    }

    /// The relay over an agent connection already made (the supervisor
    /// checks the agent's hello while it boots).
    pub(crate) fn with_agent(self, agent: AgentClient) -> Relay {
        let (idle, _) = watch::channel(0);
        Relay {
            state: Arc::new(State {
                identity: self.identity,
                agent,
                control: self.control,
                in_flight: AtomicU32::new(0),
                closing: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                idle,
                activity: Mutex::new(Instant::now()),
                env: RwLock::new(self.env),
                #[cfg(feature = "local")]
                output: self.output,
            }),
        }
    }
}

/// The server side of the runtime stream over one agent connection; cheap
/// to clone (clones share the connection and the counters). See the
/// [module documentation](self).
#[derive(Debug, Clone)]
pub struct Relay {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    identity: Identity,
    agent: AgentClient,
    control: Arc<dyn RelayControl>,
    in_flight: AtomicU32,
    /// No new requests (draining or stopping).
    closing: AtomicBool,
    /// No new requests while frozen.
    paused: AtomicBool,
    /// Sent the number in flight whenever a request ends.
    idle: watch::Sender<u32>,
    /// Last activity (a request's start or end, touch). Ping is not activity.
    activity: Mutex<Instant>,
    /// Environment added to every exec.
    env: RwLock<BTreeMap<String, String>>,
    /// Where the output of execs is copied.
    #[cfg(feature = "local")]
    output: Option<Arc<OutputLog>>,
}

impl Relay {
    /// A relay for run `generation` of sandbox `id`: the identity its
    /// clients must expect.
    pub fn builder(id: &SandboxId, generation: u64) -> RelayBuilder {
        RelayBuilder {
            identity: Identity {
                sandbox_id: id.to_string(),
                generation,
            },
            control: Arc::new(NoControl),
            env: BTreeMap::new(),
            hello_timeout: AGENT_HELLO_TIMEOUT,
            #[cfg(feature = "local")]
            output: None,
        }
    }

    /// The run generation this relay serves.
    pub fn generation(&self) -> u64 {
        self.state.identity.generation
    }

    /// The client of the agent this relay serves (for the supervisor's own
    /// requests).
    #[cfg(feature = "local")]
    pub(crate) fn agent(&self) -> &AgentClient {
        &self.state.agent
    }

    /// The agent's build version, from its hello.
    pub fn agent_version(&self) -> &str {
        &self.state.agent.hello().agent_version
    }

    /// Whether the connection to the agent is gone (every new request is
    /// then answered `unavailable`).
    pub fn is_agent_gone(&self) -> bool {
        self.state.agent.is_closed()
    }

    /// A new in-process client connection, as a [`RuntimeStream`] for
    /// [`Backend::open_runtime`](crate::Backend::open_runtime): served by
    /// a task of the current tokio runtime until the client drops it.
    pub fn connect(&self) -> RuntimeStream {
        let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
        let (server_rd, server_wr) = tokio::io::split(server);
        let relay = self.clone();
        tokio::spawn(async move { relay.serve(server_rd, server_wr).await });
        let (client_rd, client_wr) = tokio::io::split(client);
        RuntimeStream::new(client_rd, client_wr, self.generation())
    }

    /// Serves one client connection (a Unix or TCP socket, a pipe pair)
    /// until the client closes it or breaks the protocol. On the way out,
    /// the client's unfinished requests are cancelled in the guest.
    pub async fn serve<R, W>(&self, mut reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::unbounded_channel::<GuestMsg>();
        // The connection's version, once the hello settled it; what is
        // written before (a refusal, the hello) is JSON in any version.
        let (version_tx, version_rx) = watch::channel(OLDEST_PROTOCOL_VERSION);
        let writer = tokio::spawn(write_frames(writer, out_rx, version_rx));
        let fatal = |code, msg: String| GuestMsg::Fatal {
            error: GuestError::new(code, msg),
        };
        // Hello: the client states which runtime it expects to reach, and
        // the highest protocol it speaks; the answer is the version used:
        // the lower of the client's, this build's and the agent channel's
        // (flow control needs both hops).
        let hello =
            tokio::time::timeout(CLIENT_HELLO_TIMEOUT, read_frame::<_, HostMsg>(&mut reader)).await;
        let mut version = OLDEST_PROTOCOL_VERSION;
        let refusal = match hello {
            Ok(Ok(Some(HostMsg::Hello {
                version: offered,
                expect,
            }))) => {
                version = offered
                    .min(PROTOCOL_VERSION)
                    .min(self.state.agent.version());
                if offered < OLDEST_PROTOCOL_VERSION {
                    Some(fatal(
                        GuestErrorCode::Protocol,
                        format!(
                            "protocol {offered} is older than {OLDEST_PROTOCOL_VERSION}, the oldest this supervisor speaks"
                        ),
                    ))
                } else if let Some(e) = expect.filter(|e| *e != self.state.identity) {
                    let me = &self.state.identity;
                    Some(fatal(
                        GuestErrorCode::IdentityMismatch,
                        format!(
                            "this is {} generation {}, not {} generation {}",
                            me.sandbox_id, me.generation, e.sandbox_id, e.generation
                        ),
                    ))
                } else {
                    None
                }
            }
            _ => Some(fatal(
                GuestErrorCode::Protocol,
                "expected a hello frame".into(),
            )),
        };
        if let Some(refusal) = refusal {
            let _ = out_tx.send(refusal);
            drop(out_tx);
            let _ = writer.await;
            return;
        }
        let _ = out_tx.send(GuestMsg::Hello {
            version,
            agent_version: self.agent_version().to_owned(),
            identity: Some(self.state.identity.clone()),
        });
        let _ = version_tx.send(version);

        let routes: Routes = Arc::default();
        loop {
            let msg = match read_frame::<_, HostMsg>(&mut reader).await {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    let _ = out_tx.send(fatal(GuestErrorCode::Protocol, format!("bad frame: {e}")));
                    break;
                }
            };
            let route = |id: u64| {
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&id)
                    .copied()
            };
            match msg {
                HostMsg::Hello { .. } => {
                    let _ = out_tx.send(fatal(GuestErrorCode::Protocol, "duplicate hello".into()));
                    break;
                }
                HostMsg::Request { id, body, window } => {
                    // Holds a request read off the connection and not yet
                    // taken (neither in flight nor refused).
                    #[cfg(feature = "local")]
                    crate::engine::fault::hold(crate::engine::fault::Fault::RelayBeforeRequest)
                        .await;
                    self.request(id, body, window, &routes, &out_tx)
                }
                HostMsg::Window { id, bytes } => {
                    if let Some(aid) = route(id) {
                        self.state.agent.grant(aid, bytes);
                    }
                }
                HostMsg::Control { id, body } => self.control(id, body, &out_tx),
                HostMsg::Data { id, data } => {
                    self.forward(route(id), |aid| HostMsg::Data { id: aid, data })
                }
                HostMsg::Eof { id } => self.forward(route(id), |aid| HostMsg::Eof { id: aid }),
                HostMsg::Signal { id, signal } => {
                    self.forward(route(id), |aid| HostMsg::Signal { id: aid, signal })
                }
                HostMsg::Resize { id, size } => {
                    self.forward(route(id), |aid| HostMsg::Resize { id: aid, size })
                }
                HostMsg::Cancel { id } => {
                    self.forward(route(id), |aid| HostMsg::Cancel { id: aid })
                }
            }
        }
        // The client went away: abandon whatever it still had running.
        let left: Vec<u64> = routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .copied()
            .collect();
        for aid in left {
            let _ = self.state.agent.send(HostMsg::Cancel { id: aid });
        }
        drop(out_tx);
        let _ = writer.await;
    }

    /// One request of a client: refused unrun at a boundary, else relayed
    /// to the agent under an id of the agent channel.
    fn request(
        &self,
        id: u64,
        mut body: Request,
        window: Option<u32>,
        routes: &Routes,
        out: &mpsc::UnboundedSender<GuestMsg>,
    ) {
        let state = &self.state;
        // Announce the request before looking at `closing`: a reclaimer
        // sets `closing` before it looks at `in_flight`, so either it sees
        // this request or this request sees the reclaim (then it is refused
        // unrun, and safe to retry).
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        let refusal = if body == Request::Suspend {
            // Only the supervisor suspends the agent (to hibernate it).
            Some((
                GuestErrorCode::Unsupported,
                "suspend is reserved to the supervisor".to_string(),
            ))
        } else if state.closing.load(Ordering::SeqCst) {
            Some((
                GuestErrorCode::Unavailable,
                "the sandbox is draining or stopping".to_string(),
            ))
        } else if state.paused.load(Ordering::SeqCst) {
            Some((
                GuestErrorCode::Unavailable,
                "the sandbox is paused".to_string(),
            ))
        } else if routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&id)
        {
            Some((
                GuestErrorCode::InvalidArgument,
                format!("request id {id} is already in flight"),
            ))
        } else {
            None
        };
        if let Some((code, why)) = refusal {
            self.release();
            let _ = out.send(GuestMsg::Response {
                id,
                result: Err(GuestError::new(code, why)),
            });
            return;
        }
        // Ping is a health check, not use; everything else is activity.
        let activity = !matches!(body, Request::Ping);
        if let Request::Exec(exec) = &mut body {
            // The configured environment under the request's own.
            for (k, v) in state.env.read().unwrap_or_else(|p| p.into_inner()).iter() {
                exec.env.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        #[cfg(feature = "local")]
        let mut tap = match (&body, &state.output) {
            (Request::Exec(_), Some(log)) => Some(log.tap()),
            _ => None,
        };
        let mut handle = match state.agent.request_relayed(body, window) {
            Ok(h) => h,
            Err(_) => {
                self.release();
                let _ = out.send(GuestMsg::Response {
                    id,
                    result: Err(GuestError::new(
                        GuestErrorCode::Unavailable,
                        "the guest agent is gone",
                    )),
                });
                return;
            }
        };
        if activity {
            self.touch();
        }
        routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, handle.id());
        let (out, relay, routes) = (out.clone(), self.clone(), routes.clone());
        tokio::spawn(async move {
            let mut answered = false;
            while let Some(m) = handle.next().await {
                #[cfg(feature = "local")]
                if let Some(tap) = tap.as_mut() {
                    match &m {
                        GuestMsg::Stdout { data, .. } => tap.feed(Stream::Stdout, &data.0),
                        GuestMsg::Stderr { data, .. } => tap.feed(Stream::Stderr, &data.0),
                        _ => {}
                    }
                }
                let m = match m {
                    GuestMsg::Stdout { data, .. } => GuestMsg::Stdout { id, data },
                    GuestMsg::Stderr { data, .. } => GuestMsg::Stderr { id, data },
                    GuestMsg::Eof { .. } => GuestMsg::Eof { id },
                    GuestMsg::Window { bytes, .. } => GuestMsg::Window { id, bytes },
                    GuestMsg::Response { result, .. } => {
                        answered = true;
                        GuestMsg::Response { id, result }
                    }
                    other => other,
                };
                let _ = out.send(m);
            }
            if !answered {
                let _ = out.send(GuestMsg::Response {
                    id,
                    result: Err(GuestError::new(
                        GuestErrorCode::Aborted,
                        "the guest agent went away",
                    )),
                });
            }
            routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            if activity {
                relay.touch();
            }
            relay.release();
        });
    }

    /// A request is over: one fewer in flight, and the watchers hear it.
    fn release(&self) {
        let left = self.state.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        let _ = self.state.idle.send(left);
    }

    fn forward(&self, agent_id: Option<u64>, make: impl FnOnce(u64) -> HostMsg) {
        // Frames for unknown or finished requests are dropped: the request
        // may have just ended, which is not an error.
        if let Some(aid) = agent_id {
            let _ = self.state.agent.send(make(aid));
        }
    }

    fn control(&self, id: u64, body: Control, out: &mpsc::UnboundedSender<GuestMsg>) {
        if let Control::Status = body {
            let _ = out.send(GuestMsg::Response {
                id,
                result: Ok(Response::Supervisor {
                    pid: std::process::id(),
                    in_flight: self.in_flight(),
                }),
            });
            return;
        }
        let (out, control) = (out.clone(), self.state.control.clone());
        tokio::spawn(async move {
            let result = control.control(body).await;
            let _ = out.send(GuestMsg::Response { id, result });
        });
    }

    /// Refuse (`true`) or take again (`false`) new requests: set before a
    /// drain, a stop or an idle reclaim. Requests already running go on.
    pub fn set_closing(&self, closing: bool) {
        self.state.closing.store(closing, Ordering::SeqCst);
    }

    /// Refuse (`true`) or take again (`false`) new requests while the
    /// guest is frozen.
    pub fn set_paused(&self, paused: bool) {
        self.state.paused.store(paused, Ordering::SeqCst);
    }

    /// Requests read and not yet answered, over every client.
    pub fn in_flight(&self) -> u32 {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// A receiver that wakes whenever a request ends, with the number then
    /// still in flight (a drain waits on it for zero).
    pub fn in_flight_changes(&self) -> watch::Receiver<u32> {
        self.state.idle.subscribe()
    }

    /// Records activity now (an explicit keepalive, a resume).
    pub fn touch(&self) {
        *self
            .state
            .activity
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Time since the last activity: the start or end of any request but
    /// `ping`, or [`Relay::touch`].
    pub fn idle_for(&self) -> Duration {
        self.state
            .activity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Replaces the environment added to every exec (a reloaded
    /// configuration).
    pub fn set_env(&self, env: BTreeMap<String, String>) {
        *self.state.env.write().unwrap_or_else(|p| p.into_inner()) = env;
    }
}

/// Client request id → agent request id, per client connection.
type Routes = Arc<Mutex<HashMap<u64, u64>>>;

/// Writes a client's frames, batching what is queued before each flush,
/// encoded for the connection's version (settled by the hello).
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::UnboundedReceiver<GuestMsg>,
    version: watch::Receiver<u32>,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, writer);
    while let Some(msg) = rx.recv().await {
        let v = *version.borrow();
        if write_message(&mut w, &msg, v).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if write_message(&mut w, &more, v).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}
