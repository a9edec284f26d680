#![allow(clippy::unwrap_used)]
//! Test harness: runs the real `burrow-agent` binary as a child process with
//! piped stdin/stdout and speaks the framed protocol to it. The agent's
//! stderr is captured and printed when a test fails.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow_protocol::{
    decode_frame, encode_for, read_raw, ExecRequest, ExitStatus, GuestError, GuestMsg, Header,
    HostMsg, Request, Response, PROTOCOL_VERSION,
};

/// The agent binary under test.
pub const AGENT_BIN: &str = env!("CARGO_BIN_EXE_burrow-agent");

/// How long any single expected frame may take.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// A running agent.
pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Raw frame bodies from the agent.
    frames: Receiver<(Header, Vec<u8>)>,
    /// Frames read while looking for another request's frames.
    stash: HashMap<u64, VecDeque<GuestMsg>>,
    /// Frames without a request id (Fatal, Hello).
    unaddressed: VecDeque<GuestMsg>,
    log: Arc<Mutex<Vec<u8>>>,
    next_id: u64,
}

/// Everything a request produced.
#[derive(Debug)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Whether the guest sent `Eof` for this id.
    pub eof: bool,
    pub result: Result<Response, GuestError>,
}

impl Outcome {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The exit status of an exec, panicking on anything else.
    pub fn exit(&self) -> ExitStatus {
        match &self.result {
            Ok(Response::Exit(status)) => *status,
            other => panic!("expected an exit status, got {other:?}"),
        }
    }

    /// The error, panicking on success.
    pub fn error(&self) -> &GuestError {
        match &self.result {
            Err(e) => e,
            Ok(r) => panic!("expected an error, got {r:?}"),
        }
    }
}

impl Agent {
    /// Starts an agent and does the handshake.
    pub fn start() -> Agent {
        Agent::start_with(|_| {})
    }

    /// Starts an agent with a customised command, and does the handshake.
    pub fn start_with(configure: impl FnOnce(&mut Command)) -> Agent {
        let mut agent = Agent::spawn(configure);
        agent.handshake();
        agent
    }

    /// Starts an agent without any handshake.
    pub fn spawn(configure: impl FnOnce(&mut Command)) -> Agent {
        let mut cmd = Command::new(AGENT_BIN);
        configure(&mut cmd);
        Agent::spawn_command(cmd).expect("spawn burrow-agent")
    }

    /// Runs `cmd` (which runs the agent somehow) with piped stdio, without
    /// any handshake.
    pub fn spawn_command(mut cmd: Command) -> std::io::Result<Agent> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            while let Ok(Some(frame)) = read_raw(&mut stdout) {
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log2.lock().expect("log").extend_from_slice(&buf[..n]);
            }
        });
        Ok(Agent {
            child,
            stdin,
            frames,
            stash: HashMap::new(),
            unaddressed: VecDeque::new(),
            log,
            next_id: 1,
        })
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().expect("log")).into_owned()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads the agent's hello and answers it.
    pub fn handshake(&mut self) {
        self.expect_hello();
        self.send(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect: None,
        });
    }

    fn expect_hello(&mut self) {
        match self.next_frame() {
            Some(GuestMsg::Hello {
                version,
                agent_version,
                identity,
            }) => {
                assert_eq!(version, PROTOCOL_VERSION);
                assert!(!agent_version.is_empty());
                assert_eq!(identity, None);
            }
            other => panic!("expected hello, got {other:?}"),
        }
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &HostMsg) {
        self.send_raw(&encode_for(msg, PROTOCOL_VERSION));
    }

    /// Writes raw bytes to the channel.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(bytes).expect("write to agent");
        stdin.flush().expect("flush");
    }

    /// Closes the channel (EOF for the agent).
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// Sends a request under a fresh id.
    pub fn request(&mut self, body: Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&HostMsg::Request {
            id,
            body,
            window: None,
        });
        id
    }

    /// Sends a flow-controlled request (initial credit `window`) under a
    /// fresh id.
    pub fn request_windowed(&mut self, body: Request, window: u32) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&HostMsg::Request {
            id,
            body,
            window: Some(window),
        });
        id
    }

    /// Grants request `id` more output credit.
    pub fn window(&mut self, id: u64, bytes: u32) {
        self.send(&HostMsg::Window { id, bytes });
    }

    /// Sends a request and collects everything it produced.
    pub fn call(&mut self, body: Request) -> Outcome {
        let id = self.request(body);
        self.collect(id)
    }

    /// Runs a command to completion.
    pub fn exec(&mut self, argv: &[&str]) -> Outcome {
        self.call(Request::Exec(exec_req(argv)))
    }

    pub fn data(&mut self, id: u64, data: &[u8]) {
        self.send(&HostMsg::Data {
            id,
            data: data.into(),
        });
    }

    pub fn eof(&mut self, id: u64) {
        self.send(&HostMsg::Eof { id });
    }

    /// Next raw frame from the agent, `None` when the channel closed.
    pub fn next_raw(&mut self) -> Option<(Header, Vec<u8>)> {
        match self.frames.recv_timeout(FRAME_TIMEOUT) {
            Ok(frame) => Some(frame),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no frame from the agent in time"),
        }
    }

    /// Next frame from the agent within `wait`: `Some(None)` when the
    /// channel closed, `None` when nothing came.
    pub fn next_within(&mut self, wait: Duration) -> Option<Option<GuestMsg>> {
        match self.frames.recv_timeout(wait) {
            Ok((header, body)) => Some(Some(decode_frame(header, body).expect("a frame"))),
            Err(RecvTimeoutError::Disconnected) => Some(None),
            Err(RecvTimeoutError::Timeout) => None,
        }
    }

    /// Next frame from the agent, `None` when the channel closed.
    fn next_frame(&mut self) -> Option<GuestMsg> {
        let (header, body) = self.next_raw()?;
        match decode_frame(header, body.clone()) {
            Ok(msg) => Some(msg),
            Err(e) => panic!(
                "undecodable frame from the agent ({e}): {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }

    /// Next frame that belongs to `id` (others are stashed).
    pub fn next_for(&mut self, id: u64) -> GuestMsg {
        if let Some(msg) = self.stash.get_mut(&id).and_then(VecDeque::pop_front) {
            return msg;
        }
        loop {
            let msg = self.next_frame().expect("agent closed the channel");
            match frame_id(&msg) {
                Some(got) if got == id => return msg,
                Some(got) => self.stash.entry(got).or_default().push_back(msg),
                None => self.unaddressed.push_back(msg),
            }
        }
    }

    /// Collects the frames of `id` until its final response.
    pub fn collect(&mut self, id: u64) -> Outcome {
        let mut out = Outcome {
            stdout: Vec::new(),
            stderr: Vec::new(),
            eof: false,
            result: Ok(Response::Done),
        };
        loop {
            match self.next_for(id) {
                GuestMsg::Stdout { data, .. } => {
                    assert!(data.0.len() <= burrow_protocol::MAX_CHUNK);
                    out.stdout.extend_from_slice(&data.0);
                }
                GuestMsg::Stderr { data, .. } => out.stderr.extend_from_slice(&data.0),
                GuestMsg::Eof { .. } => out.eof = true,
                GuestMsg::Response { result, .. } => {
                    out.result = result;
                    return out;
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// Reads until a frame without a request id arrives (or the channel closes).
    pub fn next_unaddressed(&mut self) -> Option<GuestMsg> {
        if let Some(msg) = self.unaddressed.pop_front() {
            return Some(msg);
        }
        loop {
            let msg = self.next_frame()?;
            match frame_id(&msg) {
                Some(got) => self.stash.entry(got).or_default().push_back(msg),
                None => return Some(msg),
            }
        }
    }

    /// Waits for the agent process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // Closing the channel makes the agent terminate what it spawned;
        // kill it only if it does not exit by itself.
        self.stdin = None;
        if self.wait_exit(Duration::from_secs(3)).is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- burrow-agent log ----\n{}", self.log());
        }
    }
}

/// The request id a frame belongs to.
pub fn frame_id(msg: &GuestMsg) -> Option<u64> {
    match msg {
        GuestMsg::Stdout { id, .. }
        | GuestMsg::Stderr { id, .. }
        | GuestMsg::Eof { id }
        | GuestMsg::Window { id, .. }
        | GuestMsg::Response { id, .. } => Some(*id),
        GuestMsg::Hello { .. } | GuestMsg::Fatal { .. } => None,
    }
}

/// An exec request for `argv` with defaults.
pub fn exec_req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecRequest::default()
    }
}

/// A raw frame with an arbitrary body.
pub fn raw_frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Whether process `pid` is gone (or a zombie).
pub fn process_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if !alive {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Polls `cond` until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}
