//! The public runtime relay (`burrow::relay`) over a transport of a
//! backend's own: `HostAgents`, a test backend whose runs are the real
//! `burrow-agent` as a host process on a pipe pair, each behind a `Relay`
//! served on a loopback TCP port. Its handles get the local backend's exec,
//! fs and process behaviour, the identity check at hello, requests refused
//! unrun while a run ends (and the handle settling on what it ends in), and
//! cancellation of what a departed client left running.
//!
//! Only harmless commands run here: the agent is a plain host process.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use burrow::model::RunInfo;
use burrow::protocol::{
    decode_frame, decode_header, encode, encode_for, Control, ExecRequest, GuestErrorCode,
    GuestMsg, HostMsg, Identity, Request, Response, PROTOCOL_VERSION,
};
use burrow::relay::{Relay, RelayControl};
use burrow::{
    ensure_identity, Backend, Capabilities, CreateRequest, Error, ExecOptions, ListFilter,
    RuntimeStream, Sandbox, SandboxConfig, SandboxId, SandboxInfo, StartOptions, Status,
    StopOptions,
};
use burrow_test_support::agent_bin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The real agent as a host process on a pipe pair: (the child, its
/// stdout, its stdin); killed when the child is dropped.
fn spawn_agent() -> (
    tokio::process::Child,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
) {
    let mut agent = tokio::process::Command::new(agent_bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (rd, wr) = (agent.stdout.take().unwrap(), agent.stdin.take().unwrap());
    (agent, rd, wr)
}

/// One run: the agent process, its relay, and the TCP server of the relay.
struct Run {
    relay: Relay,
    addr: SocketAddr,
    agent: tokio::process::Child,
    server: tokio::task::JoinHandle<()>,
}

struct Entry {
    info: SandboxInfo,
    run: Option<Run>,
}

/// Sandboxes in memory, each run a host `burrow-agent` behind a relay.
#[derive(Default)]
struct HostAgents {
    entries: Mutex<HashMap<SandboxId, Entry>>,
    /// When set, a stop holds here after refusing new requests and before
    /// it ends the run: the window a call can land in, held open.
    hold_stop: Mutex<Option<Arc<Notify>>>,
    /// Told when a stop has refused new requests (it is then holding).
    stop_closing: Notify,
}

impl std::fmt::Debug for HostAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAgents").finish_non_exhaustive()
    }
}

fn not_found(id: &SandboxId) -> Error {
    Error::NotFound {
        what: format!("sandbox {id}"),
        name: None,
        id: Some(id.clone()),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

impl HostAgents {
    fn exactly(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        let entries = self.entries.lock().unwrap();
        if let Some(e) = entries.get(id) {
            return Ok(e.info.clone());
        }
        match entries.values().find(|e| e.info.name == name) {
            Some(other) => {
                ensure_identity(name, id, &other.info)?;
                unreachable!("another id holds the name")
            }
            None => Err(not_found(id)),
        }
    }

    fn relay(&self, id: &SandboxId) -> Relay {
        self.entries.lock().unwrap()[id]
            .run
            .as_ref()
            .unwrap()
            .relay
            .clone()
    }

    fn addr(&self, id: &SandboxId) -> SocketAddr {
        self.entries.lock().unwrap()[id].run.as_ref().unwrap().addr
    }

    /// Launches the agent and serves its relay on a loopback port.
    async fn launch(id: &SandboxId, generation: u64, config: &SandboxConfig) -> Run {
        let (agent, rd, wr) = spawn_agent();
        let relay = Relay::builder(id, generation)
            .env(config.env.clone())
            .connect(rd, wr)
            .await
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = relay.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let relay = served.clone();
                tokio::spawn(async move {
                    let (rd, wr) = stream.into_split();
                    relay.serve(rd, wr).await;
                });
            }
        });
        Run {
            relay,
            addr,
            agent,
            server,
        }
    }

    /// Ends the run of `id` (if any) and records `status`.
    async fn end_run(&self, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        let relay = {
            let entries = self.entries.lock().unwrap();
            let e = entries.get(id).ok_or_else(|| not_found(id))?;
            e.run.as_ref().map(|r| r.relay.clone())
        };
        if let Some(relay) = relay {
            relay.set_closing(true);
            let hold = self.hold_stop.lock().unwrap().clone();
            if let Some(hold) = hold {
                self.stop_closing.notify_one();
                hold.notified().await;
            }
        }
        let run = {
            let mut entries = self.entries.lock().unwrap();
            let e = entries.get_mut(id).ok_or_else(|| not_found(id))?;
            e.info.status = Status::Stopped;
            e.run.take()
        };
        if let Some(mut run) = run {
            run.server.abort();
            let _ = run.agent.kill().await;
        }
        Ok(self.entries.lock().unwrap()[id].info.clone())
    }
}

#[async_trait]
impl Backend for HostAgents {
    async fn capabilities(&self) -> burrow::Result<Capabilities> {
        Ok(Capabilities::NONE)
    }
    async fn create(&self, req: CreateRequest) -> burrow::Result<SandboxInfo> {
        let mut entries = self.entries.lock().unwrap();
        if let Some(e) = entries.values().find(|e| e.info.name == req.name) {
            return Err(Error::AlreadyExists {
                name: req.name,
                id: e.info.id.clone(),
            });
        }
        let info = SandboxInfo::new(SandboxId::new(), req.name, req.config);
        entries.insert(
            info.id.clone(),
            Entry {
                info: info.clone(),
                run: None,
            },
        );
        Ok(info)
    }
    async fn get(&self, name: &str) -> burrow::Result<SandboxInfo> {
        let entries = self.entries.lock().unwrap();
        entries
            .values()
            .find(|e| e.info.name == name)
            .map(|e| e.info.clone())
            .ok_or_else(|| Error::NotFound {
                what: format!("sandbox named {name:?}"),
                name: Some(name.into()),
                id: None,
            })
    }
    async fn get_by_id(&self, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        let entries = self.entries.lock().unwrap();
        entries
            .get(id)
            .map(|e| e.info.clone())
            .ok_or_else(|| not_found(id))
    }
    async fn list(&self, filter: &ListFilter) -> burrow::Result<Vec<SandboxInfo>> {
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .values()
            .map(|e| e.info.clone())
            .filter(|i| filter.matches(i))
            .collect())
    }
    async fn status(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn start(
        &self,
        name: &str,
        id: &SandboxId,
        _: StartOptions,
    ) -> burrow::Result<SandboxInfo> {
        let info = self.exactly(name, id)?;
        if info.status == Status::Running {
            return Ok(info);
        }
        let generation = info.generation + 1;
        let run = HostAgents::launch(id, generation, &info.config).await;
        let mut entries = self.entries.lock().unwrap();
        let e = entries.get_mut(id).ok_or_else(|| not_found(id))?;
        e.info.status = Status::Running;
        e.info.generation = generation;
        e.info.last_run = Some(RunInfo::new(generation, now_ms()));
        e.run = Some(run);
        Ok(e.info.clone())
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.start(name, id, opts).await
    }
    async fn stop(
        &self,
        name: &str,
        id: &SandboxId,
        _: StopOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)?;
        self.end_run(id).await
    }
    async fn kill(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)?;
        self.end_run(id).await
    }
    async fn request_drain(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)?;
        self.end_run(id).await
    }
    async fn restart(
        &self,
        name: &str,
        id: &SandboxId,
        _: StopOptions,
    ) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)?;
        self.end_run(id).await?;
        self.start(name, id, StartOptions::default()).await
    }
    async fn remove(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        let info = self.exactly(name, id)?;
        if info.status == Status::Running {
            return Err(Error::InvalidState {
                operation: "remove".into(),
                name: info.name,
                id: info.id,
                status: info.status,
            });
        }
        self.entries.lock().unwrap().remove(id);
        Ok(())
    }
    async fn destroy(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        self.exactly(name, id)?;
        self.end_run(id).await?;
        self.entries.lock().unwrap().remove(id);
        Ok(())
    }
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        wanted: &[Status],
    ) -> burrow::Result<SandboxInfo> {
        loop {
            let info = self.exactly(name, id)?;
            if wanted.contains(&info.status) {
                return Ok(info);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    async fn open_runtime(
        &self,
        name: &str,
        id: &SandboxId,
        _wake: bool,
    ) -> burrow::Result<RuntimeStream> {
        let info = self.exactly(name, id)?;
        let addr = {
            let entries = self.entries.lock().unwrap();
            entries[id].run.as_ref().map(|r| r.addr)
        };
        let Some(addr) = addr else {
            return Err(Error::InvalidState {
                operation: "exec".into(),
                name: info.name,
                id: info.id,
                status: info.status,
            });
        };
        let stream = TcpStream::connect(addr).await.map_err(|source| Error::Io {
            context: format!("connecting to the relay at {addr}"),
            path: None,
            source,
        })?;
        let (rd, wr) = stream.into_split();
        Ok(RuntimeStream::new(rd, wr, info.generation))
    }
    async fn detach(&self, name: &str, id: &SandboxId) -> burrow::Result<SandboxInfo> {
        self.exactly(name, id)
    }
    async fn touch(&self, name: &str, id: &SandboxId) -> burrow::Result<()> {
        self.exactly(name, id)?;
        self.relay(id).touch();
        Ok(())
    }
}

async fn sandbox(backend: &Arc<HostAgents>, name: &str, config: SandboxConfig) -> Sandbox {
    Sandbox::builder(name)
        .config(config)
        .backend(backend.clone())
        .create()
        .await
        .unwrap()
}

/// A raw client connection speaking frames (for what a handle never sends).
struct Raw(TcpStream);

impl Raw {
    async fn connect(addr: SocketAddr, expect: Option<Identity>) -> (Raw, GuestMsg) {
        let mut raw = Raw(TcpStream::connect(addr).await.unwrap());
        raw.send(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect,
        })
        .await;
        let hello = raw.recv().await.expect("an answer to hello");
        (raw, hello)
    }
    async fn send(&mut self, msg: &HostMsg) {
        self.0
            .write_all(&encode_for(msg, PROTOCOL_VERSION))
            .await
            .unwrap();
    }
    async fn recv(&mut self) -> Option<GuestMsg> {
        let mut header = [0u8; 4];
        let read = tokio::time::timeout(Duration::from_secs(20), self.0.read_exact(&mut header))
            .await
            .expect("a frame within 20 s");
        if read.is_err() {
            return None;
        }
        let header = decode_header(header).unwrap();
        let mut body = vec![0u8; header.len];
        self.0.read_exact(&mut body).await.unwrap();
        Some(decode_frame(header, body).unwrap())
    }
    /// Sends request `id` and waits for its response.
    async fn call(
        &mut self,
        id: u64,
        body: Request,
    ) -> Result<Response, burrow::protocol::GuestError> {
        self.send(&HostMsg::Request {
            id,
            body,
            window: None,
        })
        .await;
        self.response(id).await
    }
    /// The response to request `id`, skipping its streamed frames.
    async fn response(&mut self, id: u64) -> Result<Response, burrow::protocol::GuestError> {
        loop {
            match self.recv().await.expect("the connection stays open") {
                GuestMsg::Response { id: got, result } if got == id => return result,
                _ => continue,
            }
        }
    }
}

fn exec(argv: &[&str]) -> Request {
    Request::Exec(ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecRequest::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_run_commands_files_and_processes_through_a_tcp_relay() {
    let backend = Arc::new(HostAgents::default());
    let mut config = SandboxConfig::new("host");
    config
        .env
        .insert("GREETING".into(), "hello from the config".into());
    let sb = sandbox(&backend, "relayed", config).await;

    let out = sb.exec(["sh", "-c", "echo $GREETING"]).await.unwrap();
    assert_eq!(out.stdout_str(), "hello from the config\n");
    // The request's own environment wins over the configured one.
    let out = sb
        .exec_with(ExecOptions::new(["sh", "-c", "echo $GREETING"]).env("GREETING", "mine"))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "mine\n");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("note.txt").display().to_string();
    sb.fs()
        .write(&file, b"written through the relay")
        .await
        .unwrap();
    assert_eq!(
        sb.fs().read_to_string(&file).await.unwrap(),
        "written through the relay"
    );
    assert!(sb.fs().exists(&file).await.unwrap());
    match sb.fs().read(&format!("{file}.missing")).await {
        Err(Error::Guest { failure, .. }) => assert_eq!(failure.code(), GuestErrorCode::NotFound),
        other => panic!("expected a guest not_found, got {other:?}"),
    }

    let proc = sb.spawn(ExecOptions::new(["cat"])).await.unwrap();
    proc.write_stdin(b"through stdin").await.unwrap();
    proc.close_stdin().await.unwrap();
    let out = proc.wait().await.unwrap();
    assert!(out.success());
    assert_eq!(out.stdout_str(), "through stdin");

    // Ping is not activity; a command is (its end restarts the clock).
    let relay = backend.relay(sb.id());
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.ping().await.unwrap();
    assert!(relay.idle_for() >= Duration::from_millis(300));
    sb.exec(["true"]).await.unwrap();
    assert!(relay.idle_for() < Duration::from_millis(300));
    assert_eq!(relay.in_flight(), 0);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_expecting_another_run_is_refused_at_hello() {
    let backend = Arc::new(HostAgents::default());
    let sb = sandbox(&backend, "identity", SandboxConfig::new("host")).await;
    let addr = backend.addr(sb.id());
    let me = Identity {
        sandbox_id: sb.id().to_string(),
        generation: sb.generation(),
    };
    let (_, hello) = Raw::connect(addr, Some(me.clone())).await;
    match hello {
        GuestMsg::Hello { identity, .. } => assert_eq!(identity, Some(me.clone())),
        other => panic!("expected hello, got {other:?}"),
    }
    let others = [
        Identity {
            generation: me.generation + 1,
            ..me.clone()
        },
        Identity {
            sandbox_id: SandboxId::new().to_string(),
            ..me.clone()
        },
    ];
    for other in others {
        let (mut raw, answer) = Raw::connect(addr, Some(other)).await;
        match answer {
            GuestMsg::Fatal { error } => assert_eq!(error.code, GuestErrorCode::IdentityMismatch),
            other => panic!("expected an identity_mismatch refusal, got {other:?}"),
        }
        assert!(
            raw.recv().await.is_none(),
            "the relay closes a refused client"
        );
    }
    // A restart makes a new run: the old handle follows it, by id.
    let before = sb.generation();
    let info = sb.restart().await.unwrap();
    assert_eq!(info.generation, before + 1);
    assert_eq!(
        sb.exec(["echo", "again"]).await.unwrap().stdout_str(),
        "again\n"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_the_window_of_a_stop_is_refused_unrun_and_ends_in_invalid_state() {
    let backend = Arc::new(HostAgents::default());
    let sb = sandbox(&backend, "window", SandboxConfig::new("host")).await;
    sb.exec(["true"]).await.unwrap(); // the handle's connection is open
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran").display().to_string();

    let release = Arc::new(Notify::new());
    *backend.hold_stop.lock().unwrap() = Some(release.clone());
    let stopper = {
        let handle = sb.handle();
        tokio::spawn(async move { handle.stop().await })
    };
    // The stop has set the relay closing and holds before it ends the run.
    backend.stop_closing.notified().await;
    let call = {
        let sb = sb.clone();
        let marker = marker.clone();
        tokio::spawn(async move { sb.exec(["touch", &marker]).await })
    };
    // While the run is ending the call waits for it to settle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !call.is_finished(),
        "the call settles on the end of the run"
    );
    release.notify_one();
    let info = stopper.await.unwrap().unwrap();
    assert_eq!(info.status, Status::Stopped);
    match call.await.unwrap() {
        Err(Error::InvalidState { status, .. }) => assert_eq!(status, Status::Stopped),
        other => panic!("expected invalid_state (stopped), got {other:?}"),
    }
    assert!(
        !std::path::Path::new(&marker).exists(),
        "a refused request never runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_departed_client_left_running_is_cancelled() {
    let backend = Arc::new(HostAgents::default());
    let sb = sandbox(&backend, "departed", SandboxConfig::new("host")).await;
    let me = Identity {
        sandbox_id: sb.id().to_string(),
        generation: sb.generation(),
    };
    let (mut raw, _) = Raw::connect(backend.addr(sb.id()), Some(me)).await;
    raw.send(&HostMsg::Request {
        id: 7,
        body: exec(&["sh", "-c", "echo $$; exec sleep 60"]),
        window: None,
    })
    .await;
    let pid: i32 = loop {
        match raw.recv().await.unwrap() {
            GuestMsg::Stdout { id: 7, data } => {
                break String::from_utf8_lossy(&data.0).trim().parse().unwrap()
            }
            _ => continue,
        }
    };
    let relay = backend.relay(sb.id());
    assert_eq!(relay.in_flight(), 1);
    drop(raw);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} outlived its client by 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while relay.in_flight() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request stayed in flight"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sb.destroy().await.unwrap();
}

/// Counts the control requests it is given and answers them done.
#[derive(Debug, Default, Clone)]
struct Counting(Arc<Mutex<Vec<Control>>>);

#[async_trait]
impl RelayControl for Counting {
    async fn control(&self, request: Control) -> Result<Response, burrow::protocol::GuestError> {
        self.0.lock().unwrap().push(request);
        Ok(Response::Done)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_requests_reach_the_relay_control_and_the_relay_answers_status() {
    let id = SandboxId::new();
    let (_agent, rd, wr) = spawn_agent();
    let counting = Counting::default();
    let relay = Relay::builder(&id, 3)
        .control(counting.clone())
        .env(BTreeMap::new())
        .connect(rd, wr)
        .await
        .unwrap();
    assert!(!relay.agent_version().is_empty());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = relay.clone();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (rd, wr) = stream.into_split();
        served.serve(rd, wr).await;
    });
    // No expectation stated: any run will do.
    let (mut raw, hello) = Raw::connect(addr, None).await;
    assert!(matches!(hello, GuestMsg::Hello { .. }));
    raw.send(&HostMsg::Control {
        id: 1,
        body: Control::Status,
    })
    .await;
    match raw.response(1).await {
        Ok(Response::Supervisor { pid, in_flight }) => {
            assert_eq!(pid, std::process::id());
            assert_eq!(in_flight, 0);
        }
        other => panic!("expected the relay's status, got {other:?}"),
    }
    raw.send(&HostMsg::Control {
        id: 2,
        body: Control::Touch,
    })
    .await;
    assert_eq!(raw.response(2).await, Ok(Response::Done));
    assert_eq!(*counting.0.lock().unwrap(), vec![Control::Touch]);

    // Closed: refused unrun with `unavailable`; open again: served.
    relay.set_closing(true);
    let refused = raw.call(3, exec(&["true"])).await.unwrap_err();
    assert_eq!(refused.code, GuestErrorCode::Unavailable);
    relay.set_closing(false);
    relay.set_paused(true);
    let refused = raw.call(4, exec(&["true"])).await.unwrap_err();
    assert_eq!(refused.code, GuestErrorCode::Unavailable);
    relay.set_paused(false);
    assert!(matches!(
        raw.call(5, exec(&["true"])).await,
        Ok(Response::Exit(_))
    ));
    assert_eq!(relay.in_flight(), 0);

    // An in-process connection of the same relay (`Relay::connect`).
    let stream = relay.connect();
    assert_eq!(stream.generation, 3);
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_control_the_relay_answers_unsupported() {
    let id = SandboxId::new();
    let (_agent, rd, wr) = spawn_agent();
    let relay = Relay::builder(&id, 1).connect(rd, wr).await.unwrap();
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let served = relay.clone();
    tokio::spawn(async move {
        let (rd, wr) = tokio::io::split(server);
        served.serve(rd, wr).await;
    });
    client
        .write_all(&encode(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect: None,
        }))
        .await
        .unwrap();
    client
        .write_all(&encode(&HostMsg::Control {
            id: 1,
            body: Control::Pause,
        }))
        .await
        .unwrap();
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut header = [0u8; 4];
        client.read_exact(&mut header).await.unwrap();
        let header = decode_header(header).unwrap();
        let mut body = vec![0u8; header.len];
        client.read_exact(&mut body).await.unwrap();
        answers.push(decode_frame::<GuestMsg>(header, body).unwrap());
    }
    assert!(matches!(answers[0], GuestMsg::Hello { .. }));
    match &answers[1] {
        GuestMsg::Response {
            id: 1,
            result: Err(e),
        } => {
            assert_eq!(e.code, GuestErrorCode::Unsupported)
        }
        other => panic!("expected unsupported, got {other:?}"),
    }
}
