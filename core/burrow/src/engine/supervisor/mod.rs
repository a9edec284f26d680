//! The per-sandbox supervisor: one host process per running sandbox.
//!
//! Spawned by the library (as the internal `burrow __supervise` command), it
//! takes ownership of one start claim, holds the name's runtime-lifetime lock
//! for as long as the runtime lives (the runtime process inherits it, so the
//! lock outlives a killed supervisor until the runtime is really gone),
//! launches the guest through a driver, waits for the agent's hello, and only
//! then publishes Running. It relays client connections on a unix socket to
//! the agent, watches the owner of an attached sandbox, and records why the
//! run ended.

mod main_process;
mod pages;
mod ports;
pub(crate) use ports::from_start_detail as port_failure;
mod run;
mod serve;
mod trust;

use serve::serve;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use burrow_protocol::{Control, GuestError, Identity, Response};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};

use crate::channel::client::{AgentClient, Handshake};
use crate::engine::driver::SupervisorAid;
use crate::engine::driver::{GuestExit, GuestProcess, LaunchSpec, ResolvedMount};
use crate::engine::fault::Fault;
use crate::engine::locks::FileLock;
use crate::engine::logs::RotatingFile;
use crate::engine::paths::Home;
use crate::engine::procs::ProcIdentity;
use crate::engine::store::Store;
use crate::error::{Error, Result};
use crate::logs::LogSource;
use crate::model::{DriverKind, ExitReason, MountSource, OciRuntime, SandboxId, Status};

/// Arguments of the internal supervisor command.
#[derive(Debug, Clone)]
pub struct SuperviseArgs {
    /// Burrow home.
    pub home: PathBuf,
    /// Sandbox to run.
    pub id: SandboxId,
    /// Generation claimed by the starter.
    pub generation: u64,
    /// OCI runtime (needed before the async runtime exists).
    pub runtime: OciRuntime,
    /// Driver (the container driver prepares the process before the async
    /// runtime exists).
    pub driver: DriverKind,
    /// Owner of an attached sandbox (None: detached).
    pub owner_pid: Option<u32>,
    /// Pipe to report readiness (or the start error) on.
    pub ready_fd: Option<RawFd>,
    /// When the starter spawned this process (microseconds since the Unix
    /// epoch): the start's `spawn` phase runs from there to our entry.
    pub spawned_at_us: Option<u64>,
}

/// Grace period of a stop requested by a signal or the owner's exit.
pub(super) const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// First thing in the supervisor process, before anything opens a file:
/// leaves the starter's session (terminal signals aimed at the
/// application's process group never reach the supervisor once it runs)
/// and closes every descriptor beyond stdio the application left
/// inheritable, but `ready_fd`. The starter spawns without a `pre_exec`
/// hook (a vfork-style spawn), so both happen here.
pub fn detach_from_starter(ready_fd: Option<RawFd>) {
    // SAFETY: setsid and close_range on integers; nothing of this process
    // is open beyond stdio yet (and `ready_fd`, kept).
    unsafe {
        libc::setsid();
        match ready_fd.filter(|fd| *fd > 2) {
            Some(keep) => {
                if keep > 3 {
                    libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
            }
            None => {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            }
        }
    }
}

/// Entry point; returns the process exit code.
pub fn main(args: SuperviseArgs) -> i32 {
    let entered = Instant::now();
    crate::engine::procs::mark_supervisor();
    let spawn_ms = args.spawned_at_us.map(|at| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        now.saturating_sub(at) as f64 / 1000.0
    });
    let ready = args.ready_fd.and_then(|fd| {
        // A standard stream (the starter passes the pipe as stdout): move
        // the pipe to a descriptor of its own, close-on-exec, and point the
        // stream at stderr (the supervisor's stderr log).
        let fd = if fd <= 2 {
            // SAFETY: fcntl/dup2 on descriptors this process holds.
            let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            // SAFETY: as above.
            if moved < 0 || unsafe { libc::dup2(2, fd) } < 0 {
                return None;
            }
            moved
        } else {
            // No child of ours (the runtime) may inherit the readiness pipe.
            // SAFETY: fcntl on a descriptor the starter handed to us.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            fd
        };
        // SAFETY: the starter passes a pipe write end it does not use
        // itself; we take sole ownership of it here, exactly once.
        Some(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    });
    let mut ready = Ready(ready);
    // Must run while single-threaded: mount namespace changes apply per thread.
    let aid = match crate::engine::driver::for_kind(args.driver, args.runtime).prepare_supervisor()
    {
        Ok(aid) => aid,
        Err(e) => {
            ready.fail(&e.to_string());
            tracing::error!(error = %e, "supervisor setup failed");
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            ready.fail(&format!("starting the async runtime: {e}"));
            return 1;
        }
    };
    let code = rt.block_on(run(args, ready, entered, spawn_ms, aid));
    // Not a plain drop, which waits for every blocking task: the watch of
    // a living owner (an attached sandbox whose run ended by itself)
    // blocks until the owner exits, and this process would linger with
    // its sockets open until then.
    rt.shutdown_background();
    code
}

/// The readiness pipe back to the starter.
struct Ready(Option<std::fs::File>);

impl Ready {
    fn send(&mut self, line: serde_json::Value) {
        use std::io::Write;
        if let Some(mut f) = self.0.take() {
            // One write: the starter wakes once, for the whole line.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
    fn ok(&mut self) {
        self.send(serde_json::json!({ "ok": true }));
    }
    fn fail(&mut self, error: &str) {
        self.send(serde_json::json!({ "ok": false, "error": error }));
    }
}

/// Answer channel of a command.
pub(crate) type Reply = oneshot::Sender<std::result::Result<Response, GuestError>>;

/// Requests from connection handlers to the main loop.
#[derive(Debug)]
pub(crate) enum Command {
    Stop {
        grace: Duration,
        reason: ExitReason,
        reply: Option<Reply>,
    },
    Kill {
        reply: Option<Reply>,
    },
    Drain {
        reply: Reply,
    },
    Detach {
        reply: Reply,
    },
    Claim {
        name: String,
        owner: Option<ProcIdentity>,
        reply: Reply,
    },
    Touch {
        reply: Reply,
    },
    Pause {
        reply: Reply,
    },
    Resume {
        reply: Reply,
    },
    Reload {
        reply: Reply,
    },
    Metrics {
        reply: Reply,
    },
    Snapshot {
        layer: std::path::PathBuf,
        reply: Reply,
    },
    SaveGuest {
        dir: std::path::PathBuf,
        reply: Reply,
    },
}

/// The relay's control: each control request becomes a [`Command`] of the
/// main loop, answered when the loop has acted on it.
#[derive(Debug)]
struct Controls {
    commands: mpsc::UnboundedSender<Command>,
}

#[async_trait::async_trait]
impl crate::channel::relay::RelayControl for Controls {
    async fn control(&self, body: Control) -> std::result::Result<Response, GuestError> {
        let (tx, rx) = oneshot::channel();
        // A save must say whether it was made: if the run ends first, the
        // file or directory it was to write is not there.
        let saves = matches!(body, Control::Snapshot { .. } | Control::SaveGuest { .. });
        let cmd = match body {
            // Answered by the relay itself.
            Control::Status => return Ok(Response::Done),
            Control::Stop {
                grace_ms,
                owner_exited,
            } => Command::Stop {
                grace: Duration::from_millis(grace_ms),
                reason: if owner_exited {
                    ExitReason::OwnerExited
                } else {
                    ExitReason::Stopped
                },
                reply: Some(tx),
            },
            Control::Kill => Command::Kill { reply: Some(tx) },
            Control::Drain => Command::Drain { reply: tx },
            Control::Detach => Command::Detach { reply: tx },
            Control::Claim { name, owner } => Command::Claim {
                name,
                owner: owner.map(|o| ProcIdentity {
                    pid: o.pid,
                    start: o.start,
                }),
                reply: tx,
            },
            Control::Touch => Command::Touch { reply: tx },
            Control::Pause => Command::Pause { reply: tx },
            Control::Resume => Command::Resume { reply: tx },
            Control::Reload => Command::Reload { reply: tx },
            Control::Metrics => Command::Metrics { reply: tx },
            Control::Snapshot { layer } => Command::Snapshot {
                layer: layer.into(),
                reply: tx,
            },
            Control::SaveGuest { dir } => Command::SaveGuest {
                dir: dir.into(),
                reply: tx,
            },
        };
        let _ = self.commands.send(cmd);
        // A dropped reply means the run ended meanwhile: for a stop or kill
        // that is success, for a save it is cut off, for anything else the
        // sandbox is gone.
        match rx.await {
            Ok(answer) => answer,
            Err(_) if saves => Err(GuestError::new(
                burrow_protocol::GuestErrorCode::Aborted,
                "the run ended before the save was made",
            )),
            Err(_) => Ok(Response::Done),
        }
    }
}

async fn run(
    args: SuperviseArgs,
    mut ready: Ready,
    started: Instant,
    spawn_ms: Option<f64>,
    aid: Option<SupervisorAid>,
) -> i32 {
    let home = match Home::at(&args.home) {
        Ok(h) => h,
        Err(e) => {
            ready.fail(&e.to_string());
            return 1;
        }
    };
    let store = match Store::open(&home).await {
        Ok(s) => s,
        Err(e) => {
            ready.fail(&e.to_string());
            return 1;
        }
    };
    let me = ProcIdentity::current();
    crate::engine::fault::point(Fault::SupervisorBeforeHandoff);
    let record = match store.handoff(&args.id, args.generation, me).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            ready.fail("the start was abandoned before the supervisor took it over");
            return 1;
        }
        Err(e) => {
            ready.fail(&e.to_string());
            return 1;
        }
    };
    // From here on this process owns the run: every exit path records it.
    let mut guest_log = None;
    let start = Start {
        record,
        started,
        spawn_ms,
        aid,
    };
    match boot(&args, &home, start, &store, &mut guest_log).await {
        Ok(booted) => {
            ready.ok();
            // Once the starter has its answer and has moved on: reading
            // smaps costs a millisecond of CPU its next steps would
            // otherwise compete with.
            tokio::spawn(async {
                tokio::time::sleep(RELEASE_PAGES_AFTER).await;
                let released = tokio::task::spawn_blocking(pages::release_start_pages)
                    .await
                    .unwrap_or(0);
                tracing::debug!(
                    kib = released / 1024,
                    "released the start's read-only mappings"
                );
            });
            let code = serve(args, home, store, booted).await;
            finish_guest_log(guest_log).await;
            code
        }
        Err(e) => {
            tracing::error!(error = %e, "start failed");
            let detail = e.to_string();
            let _ = store
                .finish_run(
                    &args.id,
                    args.generation,
                    Status::Crashed,
                    ExitReason::StartFailed,
                    Some(&detail),
                )
                .await;
            // The guest (if it was launched) is gone: its last words are
            // in the log before the starter hears of the failure.
            finish_guest_log(guest_log).await;
            ready.fail(&detail);
            1
        }
    }
}

/// When, after reporting Running, the start's read-only pages go.
const RELEASE_PAGES_AFTER: Duration = Duration::from_millis(250);

/// How long the end of a run waits for the guest log to reach EOF.
const GUEST_LOG_DRAIN: Duration = Duration::from_secs(2);

/// Copies the guest's log into `logs/guest.log` until the guest closes it.
fn spawn_guest_log(
    log: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    sink: RotatingFile,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = crate::engine::logs::capture(log, &sink).await {
            tracing::warn!(error = %e, path = %sink.path().display(), "copying the guest log failed");
        }
    })
}

/// Lets the guest log copy reach EOF (the guest has exited by now), within
/// a bound: the runtime is shut down right after, which would cut it off.
async fn finish_guest_log(task: Option<tokio::task::JoinHandle<()>>) {
    if let Some(task) = task {
        if tokio::time::timeout(GUEST_LOG_DRAIN, task).await.is_err() {
            tracing::warn!(
                "the guest log was still open after the guest exited; its end may be missing"
            );
        }
    }
}

struct Booted {
    config: crate::model::SandboxConfig,
    guest: Box<dyn GuestProcess>,
    agent: AgentClient,
    listener: UnixListener,
    socket: PathBuf,
    _runtime_lock: FileLock,
    name: String,
    /// The main process to start, if the sandbox has one.
    main: Option<Vec<String>>,
    /// The published ports, served while the run lasts.
    ports: ports::Served,
}

/// What a start hands to [`boot`].
struct Start {
    /// The record, as owned since the handoff.
    record: crate::engine::store::Record,
    /// When this process was entered.
    started: Instant,
    /// From the starter's spawn to our entry, when known.
    spawn_ms: Option<f64>,
    /// What the driver's supervisor setup keeps running until the guest is
    /// launched (the container driver's cgroup lock warmer).
    aid: Option<SupervisorAid>,
}

/// How long a start waits for the previous runtime of its name to exit by
/// itself before it kills a VM's (see `boot`).
const STALE_RUNTIME_GRACE: Duration = Duration::from_secs(5);

/// Launches the guest and publishes Running. `guest_log` receives the task
/// copying the guest's log as soon as the guest is launched, so the caller
/// can let it finish however the boot (or later the run) ends.
async fn boot(
    args: &SuperviseArgs,
    home: &Home,
    start: Start,
    store: &Store,
    guest_log: &mut Option<tokio::task::JoinHandle<()>>,
) -> Result<Booted> {
    let Start {
        record: rec,
        started,
        spawn_ms,
        aid,
    } = start;
    let config = rec.info.config.clone();
    let driver = crate::engine::driver::for_config(&config);
    let name = rec.info.name.clone();
    let deadline = started + config.startup_timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut timings = serde_json::Map::new();
    if let Some(ms) = spawn_ms {
        // From the starter's spawn to this process's entry (exec, loading).
        timings.insert("spawn".into(), serde_json::json!(ms));
    }
    let mut mark = |phase: &str, since: &mut Instant| {
        timings.insert(
            phase.into(),
            serde_json::json!(since.elapsed().as_secs_f64() * 1000.0),
        );
        *since = Instant::now();
    };
    let mut t = started;
    mark("supervisor_init", &mut t);

    // A successor never reuses the name's runtime resources until the
    // previous runtime (which inherited this lock) has fully exited.
    let lock_path = home.runtime_lock_path(&name);
    let mut runtime_lock =
        FileLock::acquire_within(&lock_path, left().min(STALE_RUNTIME_GRACE)).await?;
    if runtime_lock.is_none() && driver.reclaims_a_stuck_run() {
        // A guest whose CPUs were stopped (a VM paused, or saved by a
        // hibernation whose supervisor died) never powers itself off: after
        // a grace for an orderly exit, the driver reclaims it.
        let runtime_dir = home.sandbox_dir(&args.id).join("runtime");
        tracing::warn!(sandbox = %args.id, driver = driver.name(), "the previous run is still there; reclaiming it");
        driver.reclaim_stale(&args.id, &runtime_dir).await?;
        runtime_lock = FileLock::acquire_within(&lock_path, left()).await?;
    }
    let runtime_lock = runtime_lock.ok_or_else(|| Error::Timeout {
        operation: "waiting for the previous runtime of this name to exit".into(),
        after: config.startup_timeout,
    })?;
    mark("runtime_lock", &mut t);
    crate::engine::fault::point(Fault::SupervisorAfterLock);

    let image =
        crate::engine::image::prepare_under(home, &config.image, config.egress_ceiling.as_ref())
            .await?;
    let main = main_process::argv(&config, &image.config)?;
    mark("image", &mut t);

    let mut mounts = Vec::new();
    for m in &config.mounts {
        let (host_path, volume) = match &m.source {
            MountSource::Host(p) => (p.clone(), false),
            MountSource::Volume(v) => {
                let p = home.volume_path(v);
                std::fs::create_dir_all(&p)
                    .map_err(|e| Error::io("creating volume", Some(&p), e))?;
                (p, true)
            }
        };
        mounts.push(ResolvedMount {
            host_path,
            target: m.target.clone(),
            read_only: m.read_only,
            volume,
        });
    }
    let sandbox_dir = home.sandbox_dir(&args.id);
    let logs = sandbox_dir.join("logs");
    std::fs::create_dir_all(&logs)
        .map_err(|e| Error::io("creating the sandbox directory", Some(&logs), e))?;
    let agent_log = logs.join(LogSource::Guest.file_name());
    let guest_log_file = RotatingFile::open(&agent_log)?;
    let agent_bin = crate::engine::procs::locate_agent()?.path;
    let secrets = match store.sealed_secrets(&args.id).await? {
        Some(sealed) => Some(crate::engine::secrets::open(
            home, &args.id, &config, &sealed,
        )?),
        None => None,
    };
    let spec = LaunchSpec {
        sandbox_id: args.id.clone(),
        name: name.clone(),
        generation: args.generation,
        config: config.clone(),
        image,
        sandbox_dir: sandbox_dir.clone(),
        runtime_dir: sandbox_dir.join("runtime"),
        images_dir: home.images_dir(),
        agent_bin,
        mounts,
        agent_log,
        inherit_fds: vec![runtime_lock.raw_fd()],
        secrets: secrets.as_ref().map(|s| s.stack.clone()),
    };
    // Published ports first: a host address another process has fails
    // the start before anything boots.
    let ports = ports::bind(&config.ports)?;
    // The run is Starting: a window for calls that meet a start.
    crate::engine::fault::hold(Fault::SupervisorBeforeLaunch).await;
    let launched = tokio::time::timeout(left(), driver.launch(&spec))
        .await
        .map_err(|_| Error::Timeout {
            operation: "launching the guest".into(),
            after: config.startup_timeout,
        })??;
    if let Some(log) = launched.log {
        *guest_log = Some(spawn_guest_log(log, guest_log_file));
    }
    for note in &launched.notes {
        tracing::warn!(sandbox = %args.id, "{note}");
    }
    // The guest is placed (a container in its cgroups).
    drop(aid);
    mark("launch", &mut t);
    crate::engine::fault::point(Fault::SupervisorAfterLaunch);
    let mut guest = launched.guest;

    let identity = Identity {
        sandbox_id: args.id.to_string(),
        generation: args.generation,
    };
    let agent = match AgentClient::connect(
        launched.reader,
        launched.writer,
        Handshake::Agent,
        left(),
    )
    .await
    {
        Ok(a) => a,
        Err(e) => {
            let _ = guest.kill().await;
            let _ = guest.cleanup().await;
            return Err(match e {
                crate::channel::client::ConnectError::Refused(g) => {
                    Error::protocol(format!("agent refused: {g}"))
                }
                crate::channel::client::ConnectError::Other(e) => e,
            });
        }
    };
    mark("agent_hello", &mut t);
    // The agent proves itself by what the kernel says its process runs,
    // not by anything it says.
    if let Err(e) = guest.verify_agent() {
        let _ = guest.kill().await;
        let _ = guest.cleanup().await;
        return Err(e);
    }
    let _ = identity;
    if let Some(s) = &secrets {
        // Before anything runs in the guest: its trust store has the CA.
        if let Err(e) = trust::install_ca(&agent, &s.ca_cert).await {
            tracing::warn!(
                sandbox = %args.id,
                "the sandbox's CA is not in its trust store, so its HTTPS to a secret's hosts \
                 will not be trusted: {e}"
            );
        }
        mark("trust_store", &mut t);
    }
    let ports = match ports.serve(&agent) {
        Ok(p) => p,
        Err(e) => {
            let _ = guest.kill().await;
            let _ = guest.cleanup().await;
            return Err(e);
        }
    };

    let socket = home.socket_path(&args.id);
    let published = async {
        // Stale socket files of this id can only be from a dead earlier
        // generation: we hold the name's runtime lock.
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .map_err(|e| Error::io("binding the supervisor socket", Some(&socket), e))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io("restricting the supervisor socket", Some(&socket), e))?;
        crate::engine::fault::point(Fault::SupervisorBeforeRunning);
        timings.insert(
            "total".into(),
            serde_json::json!(started.elapsed().as_secs_f64() * 1000.0),
        );
        if !store
            .set_running(
                &args.id,
                args.generation,
                &serde_json::Value::Object(timings),
            )
            .await?
        {
            return Err(Error::protocol("the start was superseded while booting"));
        }
        Ok(listener)
    }
    .await;
    let listener = match published {
        Ok(l) => l,
        Err(e) => {
            // Nothing of this generation may outlive a failed start.
            let _ = guest.kill().await;
            let _ = guest.cleanup().await;
            let _ = std::fs::remove_file(&socket);
            return Err(e);
        }
    };
    tracing::info!(sandbox = %args.id, generation = args.generation, "running");
    Ok(Booted {
        config,
        guest,
        agent,
        listener,
        socket,
        _runtime_lock: runtime_lock,
        name,
        main,
        ports,
    })
}

pub(super) fn describe_exit(exit: &Result<GuestExit>) -> String {
    match exit {
        Ok(GuestExit {
            detail: Some(d), ..
        }) => (*d).to_owned(),
        Ok(GuestExit { code: Some(c), .. }) => format!("runtime exited with code {c}"),
        Ok(GuestExit {
            signal: Some(s), ..
        }) => format!("runtime killed by signal {s}"),
        Ok(_) => "runtime exited".into(),
        Err(e) => format!("waiting for the runtime failed: {e}"),
    }
}

pub(super) async fn recv_signal(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Watches the owner of an attached sandbox through a pidfd (exit of any
/// process, including SIGKILL, makes it readable). The owner is the process
/// that spawned us: if our parent is already someone else, the owner is gone
/// and the returned task finishes at once.
pub(super) fn owner_watch(owner: u32) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        if parent != owner {
            return;
        }
        let Some(identity) = ProcIdentity::of(owner) else {
            return;
        };
        // pidfds are always close-on-exec; the only valid flag is O_NONBLOCK.
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, owner as libc::pid_t, 0) };
        if fd < 0 {
            // No pidfd support: fall back to polling the owner's identity.
            while identity.is_alive() {
                std::thread::sleep(Duration::from_millis(200));
            }
            return;
        }
        // SAFETY: the syscall returned a fresh descriptor that we now own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        wait_readable(&owned);
    })
}

/// Watches an owner adopted after the start (not our parent): done when
/// it exits, at once if it is gone or its pid is another process's.
pub(super) fn adopted_owner_watch(owner: ProcIdentity) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, owner.pid as libc::pid_t, 0) };
        // Checked after the pidfd is open: the pidfd then refers to the
        // process this identity names, never to a later one of its pid.
        if fd < 0 || !owner.is_alive() {
            if fd >= 0 {
                // SAFETY: a fresh descriptor we own, closed once.
                drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
                return;
            }
            while owner.is_alive() {
                std::thread::sleep(Duration::from_millis(200));
            }
            return;
        }
        // SAFETY: the syscall returned a fresh descriptor that we now own.
        let owned = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        wait_readable(&owned);
    })
}

/// Blocks until `fd` (a pidfd) is readable: its process exited.
fn wait_readable(fd: &OwnedFd) {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(fd),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: pfd points to one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n > 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
}

pub(super) async fn wait_owner(w: &mut Option<tokio::task::JoinHandle<()>>) {
    match w {
        Some(task) => {
            let _ = task.await;
            // Fire once: afterwards this branch never completes again.
            *w = None;
        }
        // Detached (or already reported).
        None => std::future::pending().await,
    }
}
