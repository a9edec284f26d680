//! Every call of every binding: an operation (JSON, tagged by `op`) on a
//! target (the module, or an object), with an optional byte argument
//! (stdin data, file content) and an optional `call_timeout` (seconds or
//! duration text) bounding the whole call. [`call`] parses it and returns
//! the future that runs it; a language adapter runs that future (as a
//! promise, an awaitable, a blocking call) and converts the [`Output`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use burrow::internal::fault::Fault;
use burrow::{
    BackendExt, DirEntry, ExecEvent, ExecOutput, FileStat, LogLine, OciRuntime, Sandbox,
    SandboxHandle, SandboxId, Status,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::failure::Failure;
use crate::files::{FileReadObj, FileWriteObj};
use crate::input::{
    statuses, stop_options, BuildInput, BuildMode, ExecInput, ListInput, LogInput, ModifyInput,
    PoolInput, Seconds,
};
use crate::objects::{Bound, LogCursor, Object, ProcessObj, SandboxObj};
use crate::process::backend;
use crate::run::bounded;

/// Calls on the module (no object).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModuleOp {
    /// Create, replace, converge on or define a sandbox.
    Build(Box<BuildInput>),
    /// A handle of the sandbox currently named `name`.
    Get {
        /// The name.
        name: String,
    },
    /// A handle of exactly `id`.
    GetById {
        /// The id.
        id: String,
    },
    /// Snapshots of the sandboxes matching a filter.
    List(ListInput),
    /// Starts the sandbox now named `name` (a live sandbox).
    Start {
        /// The name.
        name: String,
    },
    /// A handle of exactly `id` known by `name`, with `status` as its
    /// snapshot, made without a lookup (the SDKs make a listed sandbox's
    /// handle with it; every call on it checks the identity).
    Bind {
        /// The id.
        id: String,
        /// The name.
        name: String,
        /// The status it was listed with.
        status: String,
    },
    /// Removes the stopped sandbox `name`.
    Remove {
        /// The name.
        name: String,
    },
    /// What the backend can do beyond the lifecycle every backend has
    /// (`burrow::Capabilities`): pause, live changes, metrics, logs, ...
    Capabilities,
    /// The stored snapshots, by name.
    ListSnapshots,
    /// One stored snapshot.
    GetSnapshot {
        /// Its name.
        name: String,
    },
    /// Removes a stored snapshot (`snapshot_in_use` while sandboxes use it).
    RemoveSnapshot {
        /// Its name.
        name: String,
    },
    /// Defines a warm pool and fills it (`burrow::Backend::create_pool`):
    /// its `name`, its `size` and its sandboxes' options (a build's).
    CreatePool(Box<PoolInput>),
    /// One pool, its sandboxes counted.
    GetPool {
        /// Its name.
        name: String,
    },
    /// Every pool, by name.
    ListPools,
    /// Sets how many warm sandboxes a pool keeps (returns once it does).
    ScalePool {
        /// Its name.
        name: String,
        /// 0 to `burrow::MAX_POOL_SIZE`.
        size: u32,
    },
    /// Removes a pool and its warm sandboxes (claimed ones stay).
    RemovePool {
        /// Its name.
        name: String,
    },
}

/// Calls on a sandbox object.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum SandboxOp {
    /// The current record.
    Info,
    /// The current status.
    Status,
    /// A round trip to the guest (seconds); not activity.
    Ping,
    /// Activity now (keeps an idle timeout off).
    Touch,
    /// Starts it (a live sandbox).
    Start,
    /// The live sandbox of its current run.
    Connect,
    /// Connects, starting it if needed (a live sandbox).
    ConnectOrStart,
    /// The metadata handle of the same sandbox.
    Handle,
    /// Runs a command to its end.
    Exec(ExecInput),
    /// Starts a command with streamed output (a process).
    Spawn(ExecInput),
    /// Reads a file.
    FsRead {
        /// Absolute path.
        path: String,
    },
    /// Writes a file (the call's data).
    FsWrite {
        /// Absolute path.
        path: String,
        /// Permission bits.
        #[serde(default)]
        mode: Option<u32>,
    },
    /// Opens a file to read as a stream (a file reader object).
    FsOpenRead {
        /// Absolute path.
        path: String,
    },
    /// Opens a file to write as a stream (a file writer object).
    FsOpenWrite {
        /// Absolute path.
        path: String,
        /// Permission bits of a new file.
        #[serde(default)]
        mode: Option<u32>,
        /// Append instead of truncating.
        #[serde(default)]
        append: bool,
    },
    /// Lists a directory.
    FsList {
        /// Absolute path.
        path: String,
    },
    /// Metadata of a path.
    FsStat {
        /// Absolute path.
        path: String,
    },
    /// Whether a path exists.
    FsExists {
        /// Absolute path.
        path: String,
    },
    /// Makes a directory.
    FsMkdir {
        /// Absolute path.
        path: String,
        /// With its parents.
        #[serde(default)]
        parents: bool,
    },
    /// Removes a path.
    FsRemove {
        /// Absolute path.
        path: String,
        /// A directory with its contents.
        #[serde(default)]
        recursive: bool,
    },
    /// Renames a path.
    FsRename {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Graceful stop.
    Stop {
        /// Grace before SIGKILL.
        #[serde(default)]
        grace: Option<Seconds>,
    },
    /// Immediate stop.
    Kill,
    /// Refuse new work, stop when what runs has finished.
    RequestDrain,
    /// Waits for the run to end.
    WaitUntilStopped,
    /// Waits for one of the statuses.
    WaitForStatus {
        /// Status names.
        statuses: Vec<String>,
    },
    /// Stop, then start again (same id, next generation).
    Restart,
    /// Freeze.
    Pause,
    /// Thaw.
    Resume,
    /// Changes configuration (live where the backend can).
    Modify(ModifyInput),
    /// Resource usage.
    Metrics,
    /// Saves it under a name (`burrow::SandboxHandle::snapshot_with`).
    Snapshot {
        /// The snapshot's name.
        name: String,
        /// `filesystem` (the default) or `full`.
        #[serde(default)]
        kind: Option<burrow::SnapshotKind>,
    },
    /// Copies the running sandbox into new ones, each started
    /// (`burrow::SandboxHandle::fork`): `count` copies (default 1, or one
    /// per name) named `names` (default `<name>-fork-<n>`). Answers their
    /// records, in order.
    Fork {
        /// How many.
        #[serde(default)]
        count: Option<u32>,
        /// Their names.
        #[serde(default)]
        names: Vec<String>,
        /// They survive the forking process.
        #[serde(default)]
        detached: bool,
    },
    /// Log lines written so far.
    Logs(LogInput),
    /// A followed log (a cursor).
    FollowLogs(LogInput),
    /// Survive the owner process from now on.
    Detach,
    /// An owner lets go of the run it started: stops it (default grace)
    /// if run `generation` is still the current one and still attached,
    /// else does nothing. What an SDK does when its owning object is
    /// garbage collected.
    Release {
        /// The run the owner started.
        generation: u64,
    },
    /// Removes it (must be stopped).
    Remove,
    /// Stops it if needed and removes it.
    Destroy,
}

/// Calls on a process object.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessOp {
    /// The next event, `None` after the exit.
    Next,
    /// Writes the call's data to stdin.
    Write,
    /// Closes stdin.
    CloseStdin,
    /// Sends a signal.
    Signal {
        /// Signal number.
        signal: i32,
    },
}

/// Calls on a followed log.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum LogOp {
    /// The next line, `None` at the end.
    Next,
}

/// Calls on a file reader.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileReadOp {
    /// The next chunk (bytes), `None` at the end of the file (and after
    /// `close`).
    Next,
    /// Abandons the rest of the read (a pending `next` ends with `None`).
    Close,
}

/// Calls on a file writer.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileWriteOp {
    /// Appends the call's data.
    Write,
    /// Ends the file: the number of bytes written (JSON).
    Finish,
    /// Abandons the write (what was written stays); later calls fail.
    Close,
}

/// What a call returns, for the adapter to convert.
#[derive(Debug)]
pub enum Output {
    /// Nothing.
    Unit,
    /// A yes or no (`fs_exists`).
    Bool(bool),
    /// A duration in seconds (`ping`).
    Seconds(f64),
    /// Bytes (`fs_read`).
    Bytes(Vec<u8>),
    /// A status name (`status`).
    Status(&'static str),
    /// A structured value as JSON text: a sandbox record or a list of
    /// them, a modify plan, metrics, file metadata, directory entries, log
    /// lines.
    Json(String),
    /// The result of an exec.
    Exec(ExecOutput),
    /// A process event, `None` after the exit.
    Event(Option<ExecEvent>),
    /// A new object.
    Object(Object),
}

/// A call's future.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Output, Failure>> + Send>>;

/// Parses call `op` (JSON) on `target` (`None`: the module) with the byte
/// argument `data`, and returns the future that runs it. A malformed call
/// fails in that future with `invalid_argument` (and runs nothing).
pub fn call(target: Option<&Object>, op: &str, data: Option<Vec<u8>>) -> CallFuture {
    let target = target.cloned();
    let op = op.to_owned();
    Box::pin(async move {
        // Fault point of the SDKs' tests: a panic of the core must reach the
        // caller as an error (debug builds only).
        if burrow::internal::fault::enabled(Fault::BindingPanic) {
            panic!("fault point {}", Fault::BindingPanic.as_str());
        }
        let (name, timeout, value) = envelope(&op)?;
        let run = async {
            match target {
                None => module(parse(&name, value)?).await,
                Some(Object::Sandbox(sb)) => sandbox(&sb, parse(&name, value)?, data).await,
                Some(Object::Process(p)) => process(&p, parse(&name, value)?, data).await,
                Some(Object::Logs(l)) => logs(&l, parse(&name, value)?).await,
                Some(Object::FileRead(f)) => match parse(&name, value)? {
                    FileReadOp::Next => Ok(match f.next().await? {
                        Some(chunk) => Output::Bytes(chunk),
                        None => Output::Unit,
                    }),
                    FileReadOp::Close => f.close().await.map(|()| Output::Unit),
                },
                Some(Object::FileWrite(f)) => match parse(&name, value)? {
                    FileWriteOp::Write => {
                        f.write(&data.unwrap_or_default()).await?;
                        Ok(Output::Unit)
                    }
                    FileWriteOp::Finish => json(&f.finish().await?),
                    FileWriteOp::Close => f.close().await.map(|()| Output::Unit),
                },
            }
        };
        bounded(&name, timeout, run).await
    })
}

/// Splits a call into its op name, its `call_timeout` and the rest.
fn envelope(op: &str) -> Result<(String, Option<Duration>, serde_json::Value), Failure> {
    let mut value: serde_json::Value = serde_json::from_str(op)
        .map_err(|e| Failure::argument("call", format!("not a JSON object: {e}")))?;
    let map = value
        .as_object_mut()
        .ok_or_else(|| Failure::argument("call", "not a JSON object"))?;
    let name = map
        .get("op")
        .and_then(|v| v.as_str())
        .ok_or_else(|| Failure::argument("op", "missing (a string naming the call)"))?
        .to_owned();
    let timeout = match map.remove("call_timeout") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<Seconds>(v)
                .map_err(|e| Failure::argument("call_timeout", e.to_string()))?
                .0,
        ),
    };
    Ok((name, timeout, value))
}

fn parse<T: for<'de> Deserialize<'de>>(name: &str, value: serde_json::Value) -> Result<T, Failure> {
    serde_json::from_value(value).map_err(|e| Failure::argument(name, e.to_string()))
}

fn json<T: serde::Serialize>(value: &T) -> Result<Output, Failure> {
    serde_json::to_string(value)
        .map(Output::Json)
        .map_err(|e| Failure::internal(format!("cannot encode a result: {e}")))
}

fn object_sandbox(sb: Sandbox) -> Output {
    Output::Object(Object::Sandbox(Arc::new(SandboxObj::live(sb))))
}

fn object_handle(h: SandboxHandle) -> Output {
    Output::Object(Object::Sandbox(Arc::new(SandboxObj::handle(h))))
}

async fn module(op: ModuleOp) -> Result<Output, Failure> {
    let backend = backend().await?;
    match op {
        ModuleOp::Build(input) => {
            let mut builder = Sandbox::builder(input.name.clone())
                .backend(backend)
                .detached(input.detached)
                .config(input.config()?);
            // No driver: the backend's default (the server's with BURROW_URL).
            if let Some(d) = &input.driver {
                builder = builder.driver(d);
            }
            if let Some(r) = &input.runtime {
                builder = builder.runtime(r.parse::<OciRuntime>()?);
            }
            Ok(match input.mode {
                BuildMode::Create => object_sandbox(builder.create().await?),
                BuildMode::Replace => object_sandbox(builder.replace().create().await?),
                BuildMode::ConnectOrCreate => object_sandbox(builder.connect_or_create().await?),
                BuildMode::Define => object_handle(builder.define().await?),
            })
        }
        ModuleOp::Get { name } => Ok(object_handle(SandboxHandle::get_in(backend, &name).await?)),
        ModuleOp::GetById { id } => {
            let id: SandboxId = id.parse()?;
            Ok(object_handle(
                SandboxHandle::get_by_id_in(backend, &id).await?,
            ))
        }
        ModuleOp::List(input) => json(&backend.list(&input.filter()?).await?),
        ModuleOp::Start { name } => Ok(object_sandbox(
            SandboxHandle::start_by_name_in(backend, &name).await?,
        )),
        ModuleOp::Bind { id, name, status } => {
            let id: SandboxId = id.parse()?;
            let status: Status = status.parse()?;
            Ok(object_handle(SandboxHandle::new(backend, id, name, status)))
        }
        ModuleOp::Remove { name } => {
            backend.remove_by_name(&name).await?;
            Ok(Output::Unit)
        }
        ModuleOp::Capabilities => json(&backend.capabilities().await?),
        ModuleOp::ListSnapshots => json(&backend.list_snapshots().await?),
        ModuleOp::GetSnapshot { name } => json(&backend.get_snapshot(&name).await?),
        ModuleOp::RemoveSnapshot { name } => {
            backend.remove_snapshot(&name).await?;
            Ok(Output::Unit)
        }
        ModuleOp::CreatePool(input) => json(&backend.create_pool(input.spec()?).await?),
        ModuleOp::GetPool { name } => json(&backend.get_pool(&name).await?),
        ModuleOp::ListPools => json(&backend.list_pools().await?),
        ModuleOp::ScalePool { name, size } => json(&backend.scale_pool(&name, size).await?),
        ModuleOp::RemovePool { name } => {
            backend.remove_pool(&name).await?;
            Ok(Output::Unit)
        }
    }
}

/// `$e` with `$x` bound to the live sandbox or the handle, whichever the
/// object is (both have the lifecycle methods, under the same names: a
/// live sandbox's own also drop its cached connection to an ended run).
macro_rules! either {
    ($bound:expr, $x:ident => $e:expr) => {
        match $bound {
            Bound::Live($x) => $e,
            Bound::Handle($x) => $e,
        }
    };
}

async fn sandbox(
    obj: &SandboxObj,
    op: SandboxOp,
    data: Option<Vec<u8>>,
) -> Result<Output, Failure> {
    use SandboxOp as Op;
    let bound = obj.bound().await?;
    match op {
        Op::Info => json(&either!(bound, x => x.info().await?)),
        Op::Status => Ok(Output::Status(
            either!(bound, x => x.status().await?).as_str(),
        )),
        Op::Touch => done(either!(bound, x => x.touch().await)),
        Op::Stop { grace } => json(&either!(bound, x => x.stop_with(stop_options(grace)).await?)),
        Op::Kill => json(&either!(bound, x => x.kill().await?)),
        Op::RequestDrain => json(&either!(bound, x => x.request_drain().await?)),
        Op::Pause => json(&either!(bound, x => x.pause().await?)),
        Op::Resume => json(&either!(bound, x => x.resume().await?)),
        Op::Modify(changes) => json(&either!(bound, x => x.modify_with(&changes.modify()?).await?)),
        Op::Metrics => json(&either!(bound, x => x.metrics().await?)),
        Op::Snapshot { name, kind } => {
            let opts = match kind {
                Some(burrow::SnapshotKind::Full) => burrow::SnapshotOptions::full(),
                _ => burrow::SnapshotOptions::filesystem(),
            };
            json(&either!(bound, x => x.snapshot_with(&name, &opts).await?))
        }
        Op::Fork {
            count,
            names,
            detached,
        } => {
            let mut opts = if names.is_empty() {
                burrow::ForkOptions::count(count.unwrap_or(1))
            } else {
                burrow::ForkOptions::named(names)
            };
            if let Some(count) = count {
                opts.count = count;
            }
            let handle = handle_of(bound);
            let copies = handle.fork(&opts.detached(detached)).await?;
            let mut infos = Vec::with_capacity(copies.len());
            for copy in &copies {
                infos.push(copy.info().await?);
            }
            json(&infos)
        }
        Op::Destroy => done(either!(bound, x => x.destroy().await)),
        Op::Logs(input) => {
            let opts = input.options(false)?;
            let lines: Vec<LogLine> = either!(bound, x => x.logs(&opts).await?).collect().await?;
            json(&lines)
        }
        Op::FollowLogs(input) => {
            let opts = input.options(true)?;
            let stream = either!(bound, x => x.logs(&opts).await?);
            Ok(Output::Object(Object::Logs(Arc::new(LogCursor::new(
                stream,
            )))))
        }
        Op::Handle => Ok(object_handle(handle_of(bound))),
        Op::Release { generation } => {
            let info = either!(&bound, x => x.info().await?);
            if info.generation == generation && !info.detached && info.status.has_runtime() {
                either!(bound, x => x.stop().await?);
            }
            Ok(Output::Unit)
        }
        Op::WaitForStatus { statuses: names } => {
            let wanted = statuses(&names)?;
            json(&handle_of(bound).wait_for_status(&wanted).await?)
        }
        Op::Start => Ok(object_sandbox(handle_of(bound).start().await?)),
        Op::Connect => Ok(object_sandbox(handle_of(bound).connect().await?)),
        Op::ConnectOrStart => Ok(object_sandbox(handle_of(bound).connect_or_start().await?)),
        Op::Remove => done(handle_of(bound).remove().await),
        // A live sandbox follows its id into the new run; a handle's
        // restart gives the live sandbox of that run.
        Op::Restart => match bound {
            Bound::Live(sb) => json(&sb.restart().await?),
            Bound::Handle(h) => Ok(object_sandbox(h.restart().await?)),
        },
        Op::WaitUntilStopped => match bound {
            Bound::Live(sb) => json(&sb.wait_until_stopped().await?),
            Bound::Handle(h) => json(
                &h.wait_for_status(&[Status::Stopped, Status::Crashed])
                    .await?,
            ),
        },
        op => live(live_of(bound).await?, op, data).await,
    }
}

/// The calls that need a run: on a live sandbox, or a handle's current run.
async fn live(sb: Sandbox, op: SandboxOp, data: Option<Vec<u8>>) -> Result<Output, Failure> {
    use SandboxOp as Op;
    let fs = sb.fs();
    match op {
        Op::Detach => json(&sb.detach().await?),
        Op::Ping => Ok(Output::Seconds(sb.ping().await?.latency.as_secs_f64())),
        Op::Exec(input) => Ok(Output::Exec(
            sb.exec_with(input.options(data, false)).await?,
        )),
        Op::Spawn(input) => {
            let process = sb.spawn(input.options(data, true)).await?;
            Ok(Output::Object(Object::Process(Arc::new(
                ProcessObj::start(process),
            ))))
        }
        Op::FsRead { path } => Ok(Output::Bytes(fs.read(&path).await?)),
        Op::FsOpenRead { path } => Ok(Output::Object(Object::FileRead(Arc::new(
            FileReadObj::new(fs.open_read(&path).await?),
        )))),
        Op::FsOpenWrite { path, mode, append } => Ok(Output::Object(Object::FileWrite(Arc::new(
            FileWriteObj::new(fs.open_write(&path, mode, append).await?),
        )))),
        Op::FsWrite { path, mode } => {
            let data = data.unwrap_or_default();
            done(fs.write_with(&path, &data, mode, false).await)
        }
        Op::FsList { path } => {
            let entries: Vec<DirEntry> = fs.list(&path).await?;
            json(&entries)
        }
        Op::FsStat { path } => {
            let stat: FileStat = fs.stat(&path).await?;
            json(&stat)
        }
        Op::FsExists { path } => Ok(Output::Bool(fs.exists(&path).await?)),
        Op::FsMkdir { path, parents } => done(fs.mkdir(&path, parents).await),
        Op::FsRemove { path, recursive } => done(fs.remove(&path, recursive).await),
        Op::FsRename { from, to } => done(fs.rename(&from, &to).await),
        other => Err(Failure::internal(format!(
            "{other:?} is not a call on a run"
        ))),
    }
}

fn handle_of(bound: Bound) -> SandboxHandle {
    match bound {
        Bound::Live(sb) => sb.handle(),
        Bound::Handle(h) => h,
    }
}

async fn live_of(bound: Bound) -> burrow::Result<Sandbox> {
    match bound {
        Bound::Live(sb) => Ok(sb),
        Bound::Handle(h) => h.sandbox().await,
    }
}

/// A call that returns nothing.
fn done(r: burrow::Result<()>) -> Result<Output, Failure> {
    r.map(|()| Output::Unit).map_err(Failure::from)
}

async fn process(p: &ProcessObj, op: ProcessOp, data: Option<Vec<u8>>) -> Result<Output, Failure> {
    match op {
        ProcessOp::Next => Ok(Output::Event(p.next().await?)),
        ProcessOp::Write => {
            p.write(data.unwrap_or_default()).await?;
            Ok(Output::Unit)
        }
        ProcessOp::CloseStdin => {
            p.close_stdin().await?;
            Ok(Output::Unit)
        }
        ProcessOp::Signal { signal } => {
            p.signal(signal).await?;
            Ok(Output::Unit)
        }
    }
}

async fn logs(l: &LogCursor, op: LogOp) -> Result<Output, Failure> {
    match op {
        LogOp::Next => match l.next().await? {
            Some(line) => json(&line),
            None => Ok(Output::Unit),
        },
    }
}

/// A call's outcome as the JSON answer of the byte-oriented adapters (the
/// C ABI, Ruby): `{"ok": VALUE}` or `{"error": BODY}`, bytes as base64, a
/// new object as `{"object": {...}}` and returned beside the text.
pub fn answer_json(outcome: Result<Output, Failure>) -> (String, Option<Object>) {
    let b64 =
        |data: Vec<u8>| serde_json::to_value(burrow::protocol::Bytes(data)).unwrap_or(Value::Null);
    let mut object = None;
    let body = match outcome {
        Err(f) => json!({ "error": serde_json::to_value(f.body()).unwrap_or(Value::Null) }),
        Ok(out) => {
            let value = match out {
                Output::Unit | Output::Event(None) => Value::Null,
                Output::Bool(b) => Value::Bool(b),
                Output::Seconds(s) => json!(s),
                Output::Bytes(b) => b64(b),
                Output::Status(s) => json!(s),
                Output::Json(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
                Output::Exec(e) => json!({
                    "stdout": b64(e.stdout),
                    "stderr": b64(e.stderr),
                    "truncated": e.truncated,
                    "exit_code": e.status.code,
                    "signal": e.status.signal,
                    "timed_out": e.status.timed_out,
                }),
                Output::Event(Some(ExecEvent::Stdout(d))) => {
                    json!({"kind": "stdout", "data": b64(d)})
                }
                Output::Event(Some(ExecEvent::Stderr(d))) => {
                    json!({"kind": "stderr", "data": b64(d)})
                }
                Output::Event(Some(ExecEvent::Exit(s))) => json!({
                    "kind": "exit",
                    "exit_code": s.code,
                    "signal": s.signal,
                    "timed_out": s.timed_out,
                }),
                Output::Object(o) => {
                    let described = o.describe();
                    object = Some(o);
                    json!({ "object": described })
                }
            };
            json!({ "ok": value })
        }
    };
    (body.to_string(), object)
}
