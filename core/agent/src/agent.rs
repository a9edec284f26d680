//! The agent proper: handshake, the main read loop, and request dispatch.
//!
//! The main thread only reads host frames and routes them; every request
//! except `Ping` runs on its own worker thread with a [`Ctx`]. A request id
//! is in the [`Registry`] from the moment it is accepted until right before
//! its final `Response` is queued, so the host may reuse an id as soon as it
//! has seen that response.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burrow_protocol::vm::VmResume;
use burrow_protocol::{
    GuestError, GuestErrorCode, GuestMsg, HostMsg, Request, Response, OLDEST_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};

use crate::calls::CallsLock;
use crate::channel::{self, Incoming, Outbox};
use crate::flow::Flow;
use crate::log::{info, warning};
use crate::mailbox::{self, Event, Inbox, Input, Mailbox};
use crate::reaper::{self, Processes, Signals};
use crate::shutdown::{self, ShutdownState};
use crate::spawn::Credentials;
use crate::{archive, exec, files, fs, tunnel};

/// Locks a mutex, ignoring poisoning: every critical section in the agent
/// leaves its data consistent, and a panicked worker must not wedge the rest.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// State shared by all threads.
#[derive(Debug)]
pub struct Agent {
    /// Frames to the host.
    pub out: Outbox,
    /// Requests in flight.
    pub requests: Registry,
    /// Processes spawned for requests.
    pub procs: Processes,
    /// The base of every exec's environment: the agent's own environment
    /// at startup (set by the runtime from the sandbox configuration), or in
    /// a microVM the boot configuration's.
    pub env: Vec<(OsString, OsString)>,
    /// Who processes run as, when not as the agent itself (microVM).
    pub user: Option<Credentials>,
    /// Whether the agent is PID 1 of its PID namespace (container or VM init).
    pub pid1: bool,
    /// Shutdown coordination.
    pub shutdown: ShutdownState,
}

/// Requests in flight, by id; in a pod's session agent, also held as the
/// shared lock a reclaim respects ([`crate::calls`]).
#[derive(Debug, Default)]
pub struct Registry {
    map: Mutex<HashMap<u64, Mailbox>>,
    calls: Option<CallsLock>,
}

impl Registry {
    /// The registry of a session whose requests in flight hold `calls`.
    pub fn new(calls: Option<CallsLock>) -> Registry {
        Registry {
            map: Mutex::default(),
            calls,
        }
    }

    /// Admits a request: refused if its id is in flight, or while a
    /// reclaim holds the calls lock (taken with the first request in
    /// flight, under the map's lock).
    fn insert(&self, id: u64, mailbox: Mailbox) -> Result<(), GuestError> {
        let mut map = lock(&self.map);
        if map.contains_key(&id) {
            return Err(GuestError::new(
                GuestErrorCode::InvalidArgument,
                format!("request id {id} is already in flight"),
            ));
        }
        if let Some(calls) = self.calls.as_ref().filter(|_| map.is_empty()) {
            match calls.take() {
                Ok(true) => {}
                Ok(false) => {
                    return Err(GuestError::new(
                        GuestErrorCode::Unavailable,
                        "the sandbox is being reclaimed",
                    ))
                }
                Err(e) => return Err(GuestError::from_io(&e, "the calls lock")),
            }
        }
        map.insert(id, mailbox);
        Ok(())
    }

    /// Forgets a request (right before its final response is queued); the
    /// last one in flight lets the calls lock go.
    pub fn remove(&self, id: u64) {
        let mut map = lock(&self.map);
        if map.remove(&id).is_some() && map.is_empty() {
            if let Some(calls) = &self.calls {
                calls.release();
            }
        }
    }

    fn contains(&self, id: u64) -> bool {
        lock(&self.map).contains_key(&id)
    }

    /// Routes host input; false when no such request is in flight.
    fn route(&self, id: u64, input: Input) -> bool {
        let map = lock(&self.map);
        match map.get(&id) {
            Some(mailbox) => mailbox.send(Event::Input(input)),
            None => false,
        }
    }

    /// Ids in flight.
    pub fn ids(&self) -> Vec<u64> {
        lock(&self.map).keys().copied().collect()
    }

    /// Sends `Cancel` to every request whose id is not in `except`.
    pub fn cancel_all(&self, except: &[u64]) {
        let map = lock(&self.map);
        for (id, mailbox) in map.iter() {
            if !except.contains(id) {
                mailbox.send(Event::Input(Input::Cancel));
            }
        }
    }
}

/// What a request's worker gets.
#[derive(Debug)]
pub struct Ctx {
    /// Request id.
    pub id: u64,
    /// Shared state.
    pub agent: Arc<Agent>,
    /// Host input and exit statuses for this request.
    pub inbox: Inbox,
    mailbox: Mailbox,
    /// The request's credit ([`crate::flow`]).
    pub flow: Flow,
}

impl Ctx {
    /// A sender into this request's inbox (for the process table).
    pub fn mailbox(&self) -> Mailbox {
        self.mailbox.clone()
    }
}

/// The error for a request that was abandoned with `Cancel`.
pub fn cancelled() -> GuestError {
    GuestError::new(GuestErrorCode::Io, "request cancelled")
}

/// What every process the agent starts is based on.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessBase {
    /// The base environment.
    pub env: Vec<(OsString, OsString)>,
    /// Who processes run as (`None`: as the agent).
    pub user: Option<Credentials>,
}

impl ProcessBase {
    /// The agent's own environment and identity (container, or a plain
    /// process): the runtime set them up from the sandbox configuration.
    pub fn inherited() -> ProcessBase {
        ProcessBase {
            env: std::env::vars_os().collect(),
            user: None,
        }
    }
}

/// What the agent does with the [`VmResume`] a restored VM gets after a
/// `Suspend` (a VM's agent applies its entropy and clock; without one,
/// `Suspend` is unsupported).
pub type ResumeHook = fn(&VmResume) -> Result<(), String>;

/// Runs the agent on the channel (host frames from `reader`, guest frames
/// through `out`) until it shuts down; returns the exit code. `notes` are
/// logged once the host's hello came.
pub fn run(
    reader: std::fs::File,
    out: Outbox,
    signals: Signals,
    base: ProcessBase,
    on_resume: Option<ResumeHook>,
    calls: Option<CallsLock>,
    notes: &[&dyn std::fmt::Display],
) -> i32 {
    out.send(hello());
    // The hello first: the writer thread sends it while nothing else runs.
    std::thread::yield_now();
    // Header and body of a frame usually arrive in one read.
    let mut reader = std::io::BufReader::with_capacity(128 * 1024, reader);
    // SAFETY: getpid has no preconditions.
    let pid1 = unsafe { libc::getpid() } == 1;
    let agent = Arc::new(Agent {
        out,
        requests: Registry::new(calls),
        procs: Processes::default(),
        env: base.env,
        user: base.user,
        pid1,
        shutdown: ShutdownState::default(),
    });
    if let Err(e) = reaper::start(agent.clone(), signals) {
        crate::log::error!("cannot start the signal thread: {e}");
        return 1;
    }
    await_hello(&agent, &mut reader);
    // Logged once the session is open: under emulation each console line
    // costs the serial port's time, which the host would wait for.
    for note in notes {
        info!("{note}");
    }
    info!(
        "agent {} started (pid {}, protocol {PROTOCOL_VERSION})",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );

    let mut dispatch = Dispatcher {
        agent: agent.clone(),
        ignored: VecDeque::new(),
        on_resume,
        suspended: false,
    };
    loop {
        let next = if std::mem::take(&mut dispatch.suspended) {
            resume_session(&agent, &mut reader, on_resume)
        } else {
            None
        };
        let next = match next {
            Some(frame) => Ok(Some(frame)),
            None => channel::read_frame(&mut reader),
        };
        match next {
            Ok(Some(Incoming::Msg(msg))) => dispatch.handle(msg),
            Ok(Some(Incoming::Malformed { body, error })) => dispatch.malformed(&body, &error),
            Ok(None) => {
                info!("channel closed by the host: shutting down");
                shutdown::run(&agent, shutdown::EOF_GRACE, None, 0)
            }
            // The length prefix was bad or the stream broke mid-frame: we
            // cannot find the next frame boundary again.
            Err(e) => fatal(&agent, &format!("unrecoverable channel error: {e}")),
        }
    }
}

fn hello() -> GuestMsg {
    GuestMsg::Hello {
        version: PROTOCOL_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        identity: None,
    }
}

/// Reads the host's hello (the first frame of a session), which answers
/// ours with the version the session speaks; the writer follows it.
fn await_hello(agent: &Arc<Agent>, reader: &mut channel::Reader) {
    match channel::read_frame(reader) {
        Ok(Some(Incoming::Msg(HostMsg::Hello { version, .. })))
            if (OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) =>
        {
            agent.out.set_version(version);
        }
        Ok(Some(Incoming::Msg(HostMsg::Hello { version, .. }))) => fatal(
            agent,
            &format!(
                "host speaks protocol {version}, agent speaks {OLDEST_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
            ),
        ),
        Ok(Some(_)) => fatal(agent, "the first host frame must be a hello"),
        Ok(None) => {
            info!("channel closed before the hello");
            shutdown::run(agent, shutdown::EOF_GRACE, None, 1)
        }
        Err(e) => fatal(agent, &format!("reading the hello: {e}")),
    }
}

/// After a `Suspend`: waits (the host saves the VM meanwhile) for the
/// [`VmResume`] of whichever host restores it, applies it, and opens a new
/// session with that host. A frame of the session instead is the host that
/// suspended this guest going on with it (it saved a copy of the VM and let
/// this one run on): returned, to be handled as any other.
fn resume_session(
    agent: &Arc<Agent>,
    reader: &mut channel::Reader,
    on_resume: Option<ResumeHook>,
) -> Option<Incoming> {
    info!("suspended: waiting to be resumed");
    let (header, body) = match channel::read_raw(reader) {
        Ok(Some(frame)) => frame,
        Ok(None) => {
            info!("channel closed while suspended: shutting down");
            shutdown::run(agent, shutdown::EOF_GRACE, None, 0)
        }
        Err(e) => fatal(agent, &format!("reading the resume frame: {e}")),
    };
    let resumed = (!header.binary).then(|| burrow_protocol::decode::<VmResume>(&body));
    let Some(Ok(resume)) = resumed else {
        info!("the same host goes on with the session");
        return Some(channel::incoming(header, body));
    };
    if let Some(apply) = on_resume {
        if let Err(e) = apply(&resume) {
            fatal(agent, &format!("resuming: {e}"));
        }
    }
    info!("resumed: new session");
    agent.out.send(hello());
    await_hello(agent, reader);
    None
}

/// Reports a protocol violation to the host and shuts down.
fn fatal(agent: &Arc<Agent>, why: &str) -> ! {
    warning!("fatal protocol error: {why}");
    agent.out.send(GuestMsg::Fatal {
        error: GuestError::new(GuestErrorCode::Protocol, why),
    });
    shutdown::run(agent, shutdown::EOF_GRACE, None, 1)
}

/// Request ops this agent serves; a request naming another op is answered
/// `Unsupported` rather than `InvalidArgument`.
const KNOWN_OPS: &[&str] = &[
    "ping",
    "exec",
    "read_file",
    "write_file",
    "list_dir",
    "stat",
    "exists",
    "mkdir",
    "remove",
    "rename",
    "copy_in",
    "copy_out",
    "tunnel",
    "sync",
    "suspend",
    "write_layer",
    "shutdown",
];

/// How many recently ignored ids to remember, to log each only once.
const IGNORED_MEMORY: usize = 64;

struct Dispatcher {
    agent: Arc<Agent>,
    ignored: VecDeque<u64>,
    on_resume: Option<ResumeHook>,
    /// A `Suspend` was answered: the next frame is a `VmResume`.
    suspended: bool,
}

impl Dispatcher {
    fn respond(&self, id: u64, result: Result<Response, GuestError>) {
        self.agent.out.send(GuestMsg::Response { id, result });
    }

    fn handle(&mut self, msg: HostMsg) {
        let (id, input) = match msg {
            HostMsg::Hello { .. } => {
                warning!("ignoring a repeated hello");
                return;
            }
            HostMsg::Request { id, body, window } => return self.start(id, body, window),
            HostMsg::Control { id, .. } => {
                return self.respond(
                    id,
                    Err(GuestError::new(
                        GuestErrorCode::Unsupported,
                        "control requests are served by the supervisor",
                    )),
                )
            }
            HostMsg::Data { id, data } => (id, Input::Data(data.0)),
            HostMsg::Eof { id } => (id, Input::Eof),
            HostMsg::Signal { id, signal } => (id, Input::Signal(signal)),
            HostMsg::Resize { id, size } => (id, Input::Resize(size)),
            HostMsg::Cancel { id } => (id, Input::Cancel),
            HostMsg::Window { id, bytes } => {
                // Credit for a request that just ended is normal: no log.
                self.agent.requests.route(id, Input::Window(bytes));
                return;
            }
        };
        if !self.agent.requests.route(id, input) && !self.ignored.contains(&id) {
            // Normal after a request failed early (e.g. the rest of a
            // WriteFile's data); log once per id.
            info!("ignoring input for request {id}, which is not in flight");
            if self.ignored.len() == IGNORED_MEMORY {
                self.ignored.pop_front();
            }
            self.ignored.push_back(id);
        }
    }

    /// A complete frame that did not parse. If it looks like a request, the
    /// host is waiting for an answer: give it one.
    fn malformed(&self, body: &[u8], error: &burrow_protocol::FrameError) {
        warning!(
            "ignoring a malformed frame of {} bytes: {error}",
            body.len()
        );
        let Ok(serde_json::Value::Object(obj)) = serde_json::from_slice(body) else {
            return;
        };
        if obj.get("t").and_then(|t| t.as_str()) != Some("request") {
            return;
        }
        let Some(id) = obj.get("id").and_then(|id| id.as_u64()) else {
            return;
        };
        if self.agent.requests.contains(id) {
            return; // never answer for a request that is in flight
        }
        let op = obj
            .get("body")
            .and_then(|b| b.get("op"))
            .and_then(|op| op.as_str());
        let code = match op {
            Some(op) if !KNOWN_OPS.contains(&op) => GuestErrorCode::Unsupported,
            _ => GuestErrorCode::InvalidArgument,
        };
        self.respond(
            id,
            Err(GuestError::new(code, format!("bad request: {error}"))),
        );
    }

    fn start(&mut self, id: u64, body: Request, window: Option<u32>) {
        let agent = &self.agent;
        if agent.requests.contains(id) {
            return self.respond(
                id,
                Err(GuestError::new(
                    GuestErrorCode::InvalidArgument,
                    format!("request id {id} is already in flight"),
                )),
            );
        }
        if agent.shutdown.started() && !matches!(body, Request::Shutdown { .. }) {
            return self.respond(
                id,
                Err(GuestError::new(
                    GuestErrorCode::Unavailable,
                    "the agent is shutting down",
                )),
            );
        }
        if body == Request::Ping {
            return self.respond(id, Ok(Response::Pong));
        }
        if body == Request::Suspend {
            // On this thread: nothing may be read until the VM is restored.
            let result = if self.on_resume.is_none() {
                Err(GuestError::new(
                    GuestErrorCode::Unsupported,
                    "only a VM's agent can be suspended",
                ))
            } else if !agent.requests.ids().is_empty() {
                Err(GuestError::new(
                    GuestErrorCode::Unavailable,
                    "requests are in flight",
                ))
            } else {
                fs::sync();
                self.suspended = true;
                Ok(Response::Done)
            };
            return self.respond(id, result);
        }
        if matches!(body, Request::Shutdown { .. }) {
            agent.shutdown.refuse_new();
        }
        let (mailbox, inbox) = match mailbox::new() {
            Ok(pair) => pair,
            Err(e) => return self.respond(id, Err(GuestError::from_io(&e, "mailbox"))),
        };
        if let Err(e) = self.agent.requests.insert(id, mailbox.clone()) {
            return self.respond(id, Err(e));
        }
        let ctx = Ctx {
            id,
            agent: agent.clone(),
            inbox,
            mailbox,
            flow: Flow::new(window),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("req-{id}"))
            .spawn(move || serve(ctx, body));
        if let Err(e) = spawned {
            agent.requests.remove(id);
            self.respond(id, Err(GuestError::from_io(&e, "starting a worker")));
        }
    }
}

/// Worker thread body: serve one request and send its final response.
fn serve(ctx: Ctx, body: Request) {
    if let Some(user) = ctx.agent.user.filter(|_| touches_files(&body)) {
        // In a VM the agent is root but the sandbox's processes run as the
        // image's user: file requests act as that user too (permission
        // checks, ownership of what they create), as in a container, where
        // the whole agent runs as the user. Per thread, and this thread
        // serves only this request.
        crate::sys::set_fs_identity(user.uid, user.gid);
    }
    // A bug in one request must neither take the agent down nor leave the
    // host waiting forever: a panic becomes an error response.
    let result =
        std::panic::catch_unwind(AssertUnwindSafe(|| handle(&ctx, body))).unwrap_or_else(|_| {
            Err(GuestError::new(
                GuestErrorCode::Io,
                "internal error while serving the request",
            ))
        });
    // Leave the registry first: once the host sees the response it may reuse the id.
    ctx.agent.requests.remove(ctx.id);
    ctx.agent
        .out
        .send(GuestMsg::Response { id: ctx.id, result });
}

/// Requests that read or write guest files on the host's behalf.
fn touches_files(body: &Request) -> bool {
    matches!(
        body,
        Request::ReadFile { .. }
            | Request::WriteFile { .. }
            | Request::ListDir { .. }
            | Request::Stat { .. }
            | Request::Exists { .. }
            | Request::Mkdir { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::CopyIn { .. }
            | Request::CopyOut { .. }
    )
}

fn handle(ctx: &Ctx, body: Request) -> Result<Response, GuestError> {
    match body {
        Request::Shutdown { grace_ms } => {
            let grace = std::time::Duration::from_millis(grace_ms);
            shutdown::run(&ctx.agent, grace, Some(ctx.id), 0)
        }
        Request::Ping => Ok(Response::Pong),
        Request::Exec(req) => exec::run(ctx, req),
        Request::ReadFile { path } => files::read(ctx, &path),
        Request::WriteFile { path, mode, append } => files::write(ctx, &path, mode, append),
        Request::ListDir { path } => fs::list_dir(&path),
        Request::Stat { path } => fs::stat(&path),
        Request::Exists { path } => fs::exists(&path),
        Request::Mkdir { path, parents } => fs::mkdir(&path, parents),
        Request::Remove { path, recursive } => fs::remove(&path, recursive),
        Request::Rename { from, to } => fs::rename(&from, &to),
        Request::CopyIn { path } => archive::copy_in(ctx, &path),
        Request::CopyOut { path } => archive::copy_out(ctx, &path),
        Request::Tunnel { port } => tunnel::run(ctx, port),
        Request::UdpTunnel { port } => crate::udp_tunnel::run(ctx, port),
        Request::Sync => {
            fs::sync();
            Ok(Response::Done)
        }
        Request::WriteLayer => crate::layer::write(ctx),
        // Served by the dispatcher itself.
        Request::Suspend => Err(GuestError::new(
            GuestErrorCode::InvalidArgument,
            "suspend is served by the read loop",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::KNOWN_OPS;
    use burrow_protocol::{ExecRequest, Request};

    /// Every op of the protocol's `Request` is listed in `KNOWN_OPS`.
    #[test]
    fn known_ops_cover_the_protocol() {
        let p = || "/".to_string();
        let all = [
            Request::Ping,
            Request::Exec(ExecRequest::default()),
            Request::ReadFile { path: p() },
            Request::WriteFile {
                path: p(),
                mode: None,
                append: false,
            },
            Request::ListDir { path: p() },
            Request::Stat { path: p() },
            Request::Exists { path: p() },
            Request::Mkdir {
                path: p(),
                parents: false,
            },
            Request::Remove {
                path: p(),
                recursive: false,
            },
            Request::Rename { from: p(), to: p() },
            Request::CopyIn { path: p() },
            Request::CopyOut { path: p() },
            Request::Tunnel { port: 1 },
            Request::Sync,
            Request::Suspend,
            Request::WriteLayer,
            Request::Shutdown { grace_ms: 0 },
        ];
        assert_eq!(all.len(), KNOWN_OPS.len());
        for req in all {
            let v = serde_json::to_value(&req).expect("serialises");
            let op = v["op"].as_str().expect("has an op");
            assert!(KNOWN_OPS.contains(&op), "{op} missing");
        }
    }
}
