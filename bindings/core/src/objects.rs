//! The opaque objects a language holds: a sandbox (live, or a metadata
//! handle), a streaming process, a followed log and files read or written
//! as streams, each a pull cursor where it streams.
//!
//! Each holds its core object tagged with the pid that made it. In a fork
//! child a sandbox is re-bound to the same id on the child's own backend
//! on first use; a process or log stream (a live stream of the parent's
//! connection) cannot move and says so (`invalid_argument`).

use std::sync::Arc;

use burrow::{ExecEvent, LogLine, LogStream, Sandbox, SandboxHandle, SandboxId, Status};
use tokio::sync::{mpsc, oneshot};

use crate::failure::Failure;
use crate::files::{FileReadObj, FileWriteObj};
use crate::process::{backend, Owned, Slot};

/// What a sandbox object is bound to in the process that made it.
#[derive(Debug, Clone)]
pub(crate) enum Bound {
    /// A live sandbox (exec, files, processes; bound to a run).
    Live(Sandbox),
    /// A metadata handle (lifecycle only; the sandbox may be stopped).
    Handle(SandboxHandle),
}

/// A sandbox: live (from a create, a start, a connect) or a metadata
/// handle (from a lookup or a define). One object type for both: what a
/// handle cannot do itself, it does through the sandbox's current run.
#[derive(Debug)]
pub struct SandboxObj {
    id: SandboxId,
    name: String,
    live: bool,
    generation: u64,
    /// The status it was made with.
    status: Status,
    bound: Slot<Bound>,
}

impl SandboxObj {
    pub(crate) fn live(sb: Sandbox) -> SandboxObj {
        SandboxObj {
            id: sb.id().clone(),
            name: sb.name().to_owned(),
            live: true,
            generation: sb.generation(),
            status: sb.handle().status_snapshot(),
            bound: Slot::new(Bound::Live(sb)),
        }
    }

    pub(crate) fn handle(h: SandboxHandle) -> SandboxObj {
        SandboxObj {
            id: h.id().clone(),
            name: h.name().to_owned(),
            live: false,
            generation: 0,
            status: h.status_snapshot(),
            bound: Slot::new(Bound::Handle(h)),
        }
    }

    /// The sandbox id (`sb_...`).
    pub fn id(&self) -> &SandboxId {
        &self.id
    }

    /// The name it was bound by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The status it was made with (a lookup's, a list's, a start's).
    pub fn status(&self) -> Status {
        self.status
    }

    /// Whether this is a live sandbox (else a metadata handle).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The run generation a live sandbox is bound to (0 for a handle).
    pub fn generation(&self) -> u64 {
        match self.bound.current() {
            Some(Bound::Live(sb)) => sb.generation(),
            Some(Bound::Handle(_)) => 0,
            None => self.generation,
        }
    }

    /// What this object is bound to in this process: the inherited
    /// binding of a fork child is replaced by one to the same id on this
    /// process's backend.
    pub(crate) async fn bound(&self) -> burrow::Result<Bound> {
        if let Some(b) = self.bound.current() {
            return Ok(b);
        }
        let h = SandboxHandle::get_by_id_in(backend().await?, &self.id).await?;
        let b = if self.live {
            Bound::Live(h.sandbox().await?)
        } else {
            Bound::Handle(h)
        };
        self.bound.refill(b.clone());
        Ok(b)
    }
}

const MOVED: &str = "this object belongs to the process that made it (before a fork)";

pub(crate) fn moved() -> Failure {
    Failure::argument("object", MOVED)
}

fn gone() -> Failure {
    Failure::argument("process", "the process's task is gone")
}

/// A command to the task that owns a process.
enum Cmd {
    Write(Vec<u8>, oneshot::Sender<burrow::Result<()>>),
    CloseStdin(oneshot::Sender<burrow::Result<()>>),
    Signal(i32, oneshot::Sender<burrow::Result<()>>),
}

type Events = Arc<tokio::sync::Mutex<mpsc::Receiver<burrow::Result<ExecEvent>>>>;

/// A process with streamed output: a pull cursor of events (`next`), and
/// stdin and signals as commands. A task owns the core process; dropping
/// the object ends the task and cancels the process in the guest.
#[derive(Debug)]
pub struct ProcessObj {
    cmds: Owned<mpsc::UnboundedSender<Cmd>>,
    events: Owned<Events>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cmd::Write(..) => "Write",
            Cmd::CloseStdin(_) => "CloseStdin",
            Cmd::Signal(..) => "Signal",
        })
    }
}

impl ProcessObj {
    /// Starts the task that owns `process` (on the current runtime).
    pub(crate) fn start(process: burrow::Process) -> Self {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        // A few events: the output's credit follows the language's reads.
        let (ev_tx, ev_rx) = mpsc::channel(4);
        tokio::spawn(pump(process, cmd_rx, ev_tx));
        ProcessObj {
            cmds: Owned::new(cmd_tx),
            events: Owned::new(Arc::new(tokio::sync::Mutex::new(ev_rx))),
        }
    }

    /// The next event; `None` after the exit.
    pub(crate) async fn next(&self) -> Result<Option<ExecEvent>, Failure> {
        let events = self.events.get().cloned().ok_or_else(moved)?;
        let ev = events.lock().await.recv().await;
        Ok(ev.transpose()?)
    }

    async fn command(
        &self,
        make: impl FnOnce(oneshot::Sender<burrow::Result<()>>) -> Cmd,
    ) -> Result<(), Failure> {
        let tx = self.cmds.get().ok_or_else(moved)?;
        let (reply_tx, reply_rx) = oneshot::channel();
        tx.send(make(reply_tx)).map_err(|_| gone())?;
        Ok(reply_rx.await.map_err(|_| gone())??)
    }

    pub(crate) async fn write(&self, data: Vec<u8>) -> Result<(), Failure> {
        self.command(|r| Cmd::Write(data, r)).await
    }

    pub(crate) async fn close_stdin(&self) -> Result<(), Failure> {
        self.command(Cmd::CloseStdin).await
    }

    pub(crate) async fn signal(&self, signal: i32) -> Result<(), Failure> {
        self.command(|r| Cmd::Signal(signal, r)).await
    }
}

/// Owns the core process: output events out, commands in. After the exit
/// event it keeps answering commands (with the core's errors) until the
/// object is gone; dropping the process then cancels the request.
///
/// Stdin goes in from a task of its own, in the order written: a write
/// waits for the sandbox to take the input before it (flow control), and
/// the output must keep flowing meanwhile.
async fn pump(
    mut process: burrow::Process,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    events: mpsc::Sender<burrow::Result<ExecEvent>>,
) {
    let (stdin_tx, stdin_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_stdin(process.stdin(), stdin_rx));
    let apply = |process: &burrow::Process, cmd: Cmd| match cmd {
        Cmd::Write(..) | Cmd::CloseStdin(_) => {
            let _ = stdin_tx.send(cmd);
        }
        Cmd::Signal(n, reply) => {
            let _ = reply.send(process.signal(n));
        }
    };
    let mut streaming = true;
    while streaming {
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                Some(cmd) => apply(&process, cmd),
                None => break,
            },
            ev = process.next_event() => {
                let last = !matches!(ev, Ok(Some(ExecEvent::Stdout(_) | ExecEvent::Stderr(_))));
                if let Some(ev) = ev.transpose() {
                    if events.send(ev).await.is_err() {
                        break;
                    }
                }
                streaming = !last;
            }
        }
    }
    drop(events);
    if streaming {
        writer.abort();
        return;
    }
    while let Some(cmd) = cmds.recv().await {
        apply(&process, cmd);
    }
    writer.abort();
}

/// Writes a process's stdin commands in order.
async fn write_stdin(stdin: burrow::ProcessStdin, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
    while let Some(cmd) = cmds.recv().await {
        match cmd {
            Cmd::Write(data, reply) => {
                let _ = reply.send(stdin.write(&data).await);
            }
            Cmd::CloseStdin(reply) => {
                let _ = reply.send(stdin.close().await);
            }
            Cmd::Signal(..) => {}
        }
    }
}

/// A followed log: a pull cursor of lines as they are written, until the
/// object is dropped.
#[derive(Debug)]
pub struct LogCursor {
    stream: Owned<Arc<tokio::sync::Mutex<LogStream>>>,
}

impl LogCursor {
    pub(crate) fn new(stream: LogStream) -> Self {
        LogCursor {
            stream: Owned::new(Arc::new(tokio::sync::Mutex::new(stream))),
        }
    }

    /// The next line, or `None` at the end. Cancelling this (a timeout)
    /// loses no line.
    pub(crate) async fn next(&self) -> Result<Option<LogLine>, Failure> {
        let stream = self.stream.get().cloned().ok_or_else(moved)?;
        let mut stream = stream.lock().await;
        Ok(stream.next().await.transpose()?)
    }
}

/// Any object a language holds: what a call acts on.
#[derive(Debug, Clone)]
pub enum Object {
    /// A sandbox or handle.
    Sandbox(Arc<SandboxObj>),
    /// A streaming process.
    Process(Arc<ProcessObj>),
    /// A followed log.
    Logs(Arc<LogCursor>),
    /// A file being read as a stream.
    FileRead(Arc<FileReadObj>),
    /// A file being written as a stream.
    FileWrite(Arc<FileWriteObj>),
}

impl Object {
    /// The object as the adapters describe it: `{"kind", "id", "name",
    /// "live", "generation", "status"}` (the last five for sandboxes only;
    /// `status` is the one it was made with).
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Object::Sandbox(sb) => serde_json::json!({
                "kind": "sandbox",
                "id": sb.id().to_string(),
                "name": sb.name(),
                "live": sb.is_live(),
                "generation": sb.generation(),
                "status": sb.status().as_str(),
            }),
            Object::Process(_) => serde_json::json!({"kind": "process"}),
            Object::Logs(_) => serde_json::json!({"kind": "logs"}),
            Object::FileRead(_) => serde_json::json!({"kind": "file_reader"}),
            Object::FileWrite(_) => serde_json::json!({"kind": "file_writer"}),
        }
    }
}
