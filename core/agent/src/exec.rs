//! `Exec`: run a process and stream its output.
//!
//! One thread per exec runs a small `poll` loop over the process's output
//! fds, its stdin (while input is pending) and the request's mailbox
//! (host input, and the exit status from the reaper). The final `Response`
//! goes out only after the exit status arrived and the output was drained
//! (everything the process wrote is in the pipe when it exits; output still
//! flowing from background processes that inherited the pipe is read for a
//! short while and then dropped, so a daemonised child never holds the
//! request open forever). With flow control ([`crate::flow`]) an output
//! leaves the poll set while the request has no credit: the pipe fills
//! and the process blocks writing, and the time after exit counts only
//! while there is credit, so a slow reader gets the whole output.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use burrow_protocol::{ExecRequest, ExitStatus, GuestError, GuestErrorCode, Response};

use crate::agent::Ctx;
use crate::log::{info, warning};
use crate::mailbox::{Event, Input};
use crate::spawn::{self, Plan, Stdio};
use crate::{pty, sys};

/// How long output is still read after the process exited, for pipes held
/// open by processes it left behind.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

/// Highest valid signal number on Linux.
const MAX_SIGNAL: i32 = 64;

fn invalid(msg: impl Into<String>) -> GuestError {
    GuestError::new(GuestErrorCode::InvalidArgument, msg)
}

/// The process environment: the agent's own, overridden by the request's.
fn environment(
    base: &[(OsString, OsString)],
    req: &ExecRequest,
) -> Result<Vec<(OsString, OsString)>, GuestError> {
    let mut env: Vec<(OsString, OsString)> = base.to_vec();
    let mut set = |k: &str, v: &str| {
        env.retain(|(key, _)| key != k);
        env.push((k.into(), v.into()));
    };
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(invalid(format!("invalid environment variable name {k:?}")));
        }
        set(k, v);
    }
    if req.tty.is_some() && !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), "xterm-256color".into()));
    }
    Ok(env)
}

/// Serves an `Exec` request.
pub fn run(ctx: &Ctx, req: ExecRequest) -> Result<Response, GuestError> {
    if let Some(cwd) = &req.cwd {
        if !cwd.starts_with('/') {
            return Err(invalid(format!("cwd must be absolute: {cwd:?}")));
        }
    }
    let env = environment(&ctx.agent.env, &req)?;
    let plan = Plan::new(&req.argv, &env, req.cwd.as_deref(), ctx.agent.user).map_err(invalid)?;
    let program = req.argv.first().map(String::as_str).unwrap_or_default();
    let spawn_err = |e: io::Error| GuestError::from_io(&e, &format!("starting {program}"));

    let mut session = match req.tty {
        Some(size) => {
            let pty = pty::open(size).map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    GuestError::new(
                        GuestErrorCode::Unsupported,
                        "this guest has no pseudo-terminals (/dev/ptmx is missing)",
                    )
                } else {
                    GuestError::from_io(&e, "opening a pty")
                }
            })?;
            start_pty(ctx, &plan, pty).map_err(spawn_err)?
        }
        None => start_pipes(ctx, &plan, req.stdin).map_err(spawn_err)?,
    };
    if let Some(ms) = req.timeout_ms {
        // An absurdly large timeout (overflowing Instant) means none.
        session.deadline = Instant::now().checked_add(Duration::from_millis(ms));
    }
    let pid = session.pid;
    info!("exec {}: started {program:?} as pid {pid}", ctx.id);
    let (status, dropped_output) = session.run();
    info!("exec {}: pid {pid} ended: {status:?}", ctx.id);
    if dropped_output {
        // Cancelled (its caller went away, or the agent is shutting down
        // for a stop) after the process exited but before its output was
        // all read: an error, never a success without its output.
        return Err(GuestError::new(
            GuestErrorCode::Aborted,
            "the exec was cancelled before its output was read",
        ));
    }
    Ok(Response::Exit(status))
}

fn start_pipes<'a>(ctx: &'a Ctx, plan: &Plan, with_stdin: bool) -> io::Result<Session<'a>> {
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let (in_child, in_ours) = if with_stdin {
        let (r, w) = sys::pipe()?;
        (r, Some(w))
    } else {
        (sys::dev_null()?, None)
    };
    // Only our ends (separate open file descriptions from the child's ends)
    // become non-blocking. Everything that can fail happens before the
    // spawn, so an error never leaves a process behind.
    for fd in [Some(&out_r), Some(&err_r), in_ours.as_ref()]
        .into_iter()
        .flatten()
    {
        sys::set_nonblocking(fd.as_fd(), true)?;
        sys::grow_pipe(fd.as_fd());
    }
    let stdio = Stdio::Fds {
        stdin: in_child.as_fd(),
        stdout: out_w.as_fd(),
        stderr: err_w.as_fd(),
    };
    let pid = spawn::spawn(&ctx.agent.procs, ctx.mailbox(), plan, stdio)?;
    // Our copies of the child's ends must go, or the pipes never reach EOF.
    drop((in_child, out_w, err_w));
    Ok(Session::new(
        ctx,
        pid,
        vec![(out_r, false), (err_r, true)],
        in_ours.map(|fd| Sink::new(fd, None)),
        None,
    ))
}

fn start_pty<'a>(ctx: &'a Ctx, plan: &Plan, pty: pty::Pty) -> io::Result<Session<'a>> {
    // Duplicates first: nothing may fail once the process runs.
    let output = pty.master.try_clone()?;
    let input = pty.master.try_clone()?;
    let eof = pty::eof_char(pty.master.as_fd());
    let pid = spawn::spawn(
        &ctx.agent.procs,
        ctx.mailbox(),
        plan,
        Stdio::Pty(pty.slave.as_fd()),
    )?;
    // Once the process side closes the slave, reads on the master fail with
    // EIO: that is the end of output.
    drop(pty.slave);
    Ok(Session::new(
        ctx,
        pid,
        vec![(output, false)],
        Some(Sink::new(input, Some(eof))),
        Some(pty.master),
    ))
}

/// Where host `Data` goes: the stdin pipe, or the pty master.
struct Sink {
    fd: OwnedFd,
    pending: Vec<u8>,
    /// The host sent `Eof`.
    eof: bool,
    /// For a pty: the character that says EOF (the master stays open).
    pty_eof: Option<u8>,
}

impl Sink {
    fn new(fd: OwnedFd, pty_eof: Option<u8>) -> Sink {
        Sink {
            fd,
            pending: Vec::new(),
            eof: false,
            pty_eof,
        }
    }
}

struct Session<'a> {
    ctx: &'a Ctx,
    pid: libc::pid_t,
    /// Open output streams: (fd, is stderr).
    outputs: Vec<(OwnedFd, bool)>,
    input: Option<Sink>,
    pty: Option<OwnedFd>,
    deadline: Option<Instant>,
    timed_out: bool,
    status: Option<libc::c_int>,
    drain_until: Option<Instant>,
    /// Since when the output waits for credit (the drain clock stops).
    stalled_since: Option<Instant>,
    /// The host abandoned the request: its output goes nowhere.
    cancelled: bool,
    /// Output still unread was dropped by a cancel after the exit: the
    /// exit status alone would read as a success without its output.
    dropped_output: bool,
    buf: Vec<u8>,
}

impl<'a> Session<'a> {
    fn new(
        ctx: &'a Ctx,
        pid: libc::pid_t,
        outputs: Vec<(OwnedFd, bool)>,
        input: Option<Sink>,
        pty: Option<OwnedFd>,
    ) -> Self {
        Session {
            ctx,
            pid,
            outputs,
            input,
            pty,
            deadline: None,
            timed_out: false,
            status: None,
            drain_until: None,
            stalled_since: None,
            cancelled: false,
            dropped_output: false,
            buf: ctx.agent.out.buffer(),
        }
    }

    /// The exit status, and whether a cancel dropped output still unread.
    fn run(mut self) -> (ExitStatus, bool) {
        loop {
            let now = Instant::now();
            if self.status.is_none() && self.deadline.is_some_and(|d| now >= d) {
                self.deadline = None;
                self.timed_out = true;
                self.signal(libc::SIGKILL);
            }
            let stalled = self.track_stall(now);
            if let Some(status) = self.status {
                if self.outputs.is_empty()
                    || (!stalled && self.drain_until.is_some_and(|d| now >= d))
                {
                    return (exit_status(status, self.timed_out), self.dropped_output);
                }
            }

            let mut fds = vec![sys::pollfd(Some(self.ctx.inbox.wake_fd()), libc::POLLIN)];
            fds.extend(
                self.outputs
                    .iter()
                    .map(|(fd, _)| sys::pollfd((!stalled).then(|| fd.as_raw_fd()), libc::POLLIN)),
            );
            let sink = self.input.as_ref().filter(|s| !s.pending.is_empty());
            fds.push(sys::pollfd(sink.map(|s| s.fd.as_raw_fd()), libc::POLLOUT));
            let wake_at = match (self.status, self.deadline) {
                (Some(_), _) if stalled => None,
                (Some(_), _) => self.drain_until,
                (None, deadline) => deadline,
            };
            if let Err(e) = sys::poll(&mut fds, wake_at) {
                warning!("exec {}: poll failed: {e}", self.ctx.id);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }

            if sys::readable(&fds[0]) {
                for event in self.ctx.inbox.drain() {
                    self.on_event(event);
                }
            }
            // Read each ready stream once per round, so stdout and stderr
            // interleave fairly; iterate backwards to remove closed ones.
            let ready: Vec<bool> = fds[1..=self.outputs.len()]
                .iter()
                .map(sys::readable)
                .collect();
            for i in (0..ready.len()).rev() {
                if ready[i] && i < self.outputs.len() {
                    self.read_output(i);
                }
            }
            if fds.last().is_some_and(sys::writable) {
                self.write_input();
            }
        }
    }

    /// Whether the output waits for credit; keeps the drain clock stopped
    /// meanwhile.
    fn track_stall(&mut self, now: Instant) -> bool {
        let stalled = !self.outputs.is_empty() && self.ctx.out_credit(1) == 0;
        match (stalled, self.stalled_since) {
            (true, None) => self.stalled_since = Some(now),
            (false, Some(since)) => {
                self.stalled_since = None;
                if let Some(d) = self.drain_until.as_mut() {
                    *d += now - since;
                }
            }
            _ => {}
        }
        stalled
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Exited(status) => {
                self.status = Some(status);
                self.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
                self.input = None;
                if self.cancelled {
                    // Killed by the cancel: its status says so.
                    self.outputs.clear();
                }
            }
            Event::Input(Input::Data(data)) => {
                let Some(data) = self.ctx.admit(data) else {
                    return;
                };
                match self.input.as_mut().filter(|s| !s.eof) {
                    Some(sink) => sink.pending.extend_from_slice(&data),
                    // Nowhere to go (stdin closed): dropped, and its credit
                    // handed back so the host's writer is not stuck.
                    None => self.ctx.consumed(data.len()),
                }
            }
            Event::Input(Input::Window(bytes)) => self.ctx.granted(bytes),
            Event::Input(Input::Eof) => {
                if let Some(sink) = self.input.as_mut().filter(|s| !s.eof) {
                    sink.eof = true;
                    match sink.pty_eof {
                        Some(c) => sink.pending.push(c),
                        None if sink.pending.is_empty() => self.input = None,
                        None => {}
                    }
                }
            }
            Event::Input(Input::Signal(sig)) => {
                if (1..=MAX_SIGNAL).contains(&sig) {
                    self.signal(sig);
                } else {
                    warning!("exec {}: ignoring invalid signal {sig}", self.ctx.id);
                }
            }
            Event::Input(Input::Resize(size)) => {
                if let Some(master) = &self.pty {
                    if let Err(e) = pty::set_size(master.as_fd(), size) {
                        warning!("exec {}: resize failed: {e}", self.ctx.id);
                    }
                }
            }
            Event::Input(Input::Cancel) => {
                self.cancelled = true;
                if self.status.is_some() {
                    self.dropped_output |= !self.outputs.is_empty();
                    self.outputs.clear();
                } else {
                    self.signal(libc::SIGKILL);
                }
            }
        }
    }

    /// Signals the process group while the process has not been reaped.
    fn signal(&self, sig: libc::c_int) {
        if self.status.is_some() {
            return;
        }
        match self.ctx.agent.procs.signal_group(self.pid, sig) {
            Ok(()) => {}
            // Exited a moment ago; the status is on its way.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => warning!("exec {}: signal {sig} failed: {e}", self.ctx.id),
        }
    }

    fn read_output(&mut self, i: usize) {
        let (fd, stderr) = &self.outputs[i];
        let room = self.ctx.out_credit(self.buf.len());
        if room == 0 {
            return; // the other stream spent the credit this round
        }
        match sys::read(fd.as_fd(), &mut self.buf[..room]) {
            Ok(0) => {
                self.outputs.remove(i);
            }
            Ok(n) => {
                // The buffer goes out whole; a pooled one takes its place.
                let mut data = std::mem::replace(&mut self.buf, self.ctx.agent.out.buffer());
                data.truncate(n);
                if *stderr {
                    self.ctx.stderr(data);
                } else {
                    self.ctx.stdout(data);
                }
            }
            Err(e) if sys::would_block(&e) => {}
            Err(e) => {
                // EIO on a pty master: the process side is closed.
                if e.raw_os_error() != Some(libc::EIO) {
                    warning!("exec {}: reading output failed: {e}", self.ctx.id);
                }
                self.outputs.remove(i);
            }
        }
    }

    fn write_input(&mut self) {
        let Some(sink) = self.input.as_mut() else {
            return;
        };
        match sys::write(sink.fd.as_fd(), &sink.pending) {
            Ok(n) => {
                sink.pending.drain(..n);
                self.ctx.consumed(n);
            }
            Err(e) if sys::would_block(&e) => {}
            Err(_) => {
                // EPIPE: the process closed its stdin. Drop what is left
                // (and hand its credit back).
                self.ctx.consumed(sink.pending.len());
                self.input = None;
                return;
            }
        }
        if sink.pending.is_empty() && sink.eof && sink.pty_eof.is_none() {
            self.input = None; // closing the pipe is the child's EOF
        }
    }
}

fn exit_status(raw: libc::c_int, timed_out: bool) -> ExitStatus {
    let (code, signal) = if libc::WIFEXITED(raw) {
        (Some(libc::WEXITSTATUS(raw)), None)
    } else if libc::WIFSIGNALED(raw) {
        (None, Some(libc::WTERMSIG(raw)))
    } else {
        (None, None)
    };
    ExitStatus {
        code,
        signal,
        timed_out,
    }
}
