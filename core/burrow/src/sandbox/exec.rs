//! Running processes in a sandbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use burrow_protocol::{ExecRequest, GuestMsg, Request, Response, TtySize};

use super::attempt::Attempt;
use super::input::InputSide;
use super::Sandbox;
use crate::error::{Error, Result};

/// How a process ended.
pub type ExitStatus = burrow_protocol::ExitStatus;

/// What to run.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ExecOptions {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Working directory (absolute).
    pub cwd: Option<String>,
    /// Data written to stdin, then closed. `None`: stdin is empty.
    pub stdin: Option<Vec<u8>>,
    /// Kill the process after this long.
    pub timeout: Option<Duration>,
    /// The collected forms ([`Sandbox::exec_with`], [`Process::wait`])
    /// keep at most this many bytes of each of stdout and stderr, and say
    /// so in [`ExecOutput::truncated`]; the rest is read and dropped (the
    /// process runs to its end). `None`: everything is kept.
    pub output_limit: Option<usize>,
}

impl ExecOptions {
    /// Options for `argv`.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecOptions {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Feeds `data` to stdin.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Sets a timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Keeps at most `bytes` of each output stream in the collected
    /// result (see [`ExecOptions::output_limit`]).
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = Some(bytes);
        self
    }

    fn validate(&self) -> Result<()> {
        let bad = |argument: &str, reason: &str| {
            Err(Error::InvalidArgument {
                argument: argument.into(),
                reason: reason.into(),
            })
        };
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return bad("argv", "no program given");
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return bad("argv", "arguments may not contain NUL");
        }
        if self
            .env
            .keys()
            .any(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
            || self.env.values().any(|v| v.contains('\0'))
        {
            return bad("env", "invalid environment variable");
        }
        if let Some(c) = &self.cwd {
            if !c.starts_with('/') || c.contains('\0') {
                return bad("cwd", "the working directory must be an absolute path");
            }
        }
        Ok(())
    }

    fn to_request(&self, keep_stdin: bool, tty: Option<TtySize>) -> Request {
        Request::Exec(ExecRequest {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            stdin: keep_stdin,
            timeout_ms: self.timeout.map(|t| t.as_millis() as u64),
            tty,
        })
    }
}

/// Collected result of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// Output went past the [`ExecOptions::output_limit`]: `stdout` or
    /// `stderr` holds only its first bytes.
    pub truncated: bool,
}

impl ExecOutput {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.status.code == Some(0)
    }
    /// Stdout as (lossy) UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    /// Stderr as (lossy) UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// One event of a streaming process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Output on stdout (or the pty).
    Stdout(Vec<u8>),
    /// Output on stderr.
    Stderr(Vec<u8>),
    /// The process ended; no more events follow.
    Exit(ExitStatus),
}

/// The stdin of a [`Process`] (see [`Process::stdin`]); cheap to clone.
/// Writes from clones go in the order they are made.
#[derive(Debug, Clone)]
pub struct ProcessStdin {
    input: Arc<InputSide>,
}

impl ProcessStdin {
    /// Writes to the process's stdin; see [`Process::write_stdin`].
    pub async fn write(&self, data: &[u8]) -> Result<()> {
        self.input.send_data(data).await
    }
    /// Closes the process's stdin.
    pub async fn close(&self) -> Result<()> {
        self.input.send_eof().await
    }
    /// Resizes the pty of a shell.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.input.resize(TtySize { rows, cols }).await
    }
}

/// A process running in a sandbox, with streamed output.
///
/// If the run ends before it takes the process (an idle reclaim, a restart),
/// the process is started again where the sandbox runs then, with the stdin
/// written so far (up to 1 MiB) sent again; output only ever comes from the
/// one run that took it.
#[derive(Debug)]
pub struct Process {
    attempt: Attempt,
    /// What the collected form keeps of each stream.
    output_limit: Option<usize>,
}

impl Process {
    /// Writes to the process's stdin. Waits while the sandbox has not yet
    /// taken the previous input (flow control: at most 1 MiB in flight):
    /// a process that does not read its stdin holds its writer, not
    /// memory. A process whose output fills while it reads its stdin needs
    /// its output read meanwhile: write from another task through
    /// [`Process::stdin`], or with [`tokio::join!`].
    pub async fn write_stdin(&self, data: &[u8]) -> Result<()> {
        self.attempt.send_data(data).await
    }
    /// Closes the process's stdin (after the input written before).
    pub async fn close_stdin(&self) -> Result<()> {
        self.attempt.send_eof().await
    }
    /// The process's stdin, as a handle that writes while the output is
    /// read elsewhere ([`Process::next_event`] takes `&mut self`).
    pub fn stdin(&self) -> ProcessStdin {
        ProcessStdin {
            input: self.attempt.input(),
        }
    }
    /// Sends a signal to the process group.
    pub fn signal(&self, signal: i32) -> Result<()> {
        self.attempt.signal(signal)
    }
    /// Resizes the pty of a shell.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.attempt.resize(TtySize { rows, cols }).await
    }

    /// The next output event; `Ok(None)` after [`ExecEvent::Exit`].
    pub async fn next_event(&mut self) -> Result<Option<ExecEvent>> {
        loop {
            match self.attempt.next().await? {
                None => return Ok(None),
                Some(GuestMsg::Stdout { data, .. }) => return Ok(Some(ExecEvent::Stdout(data.0))),
                Some(GuestMsg::Stderr { data, .. }) => return Ok(Some(ExecEvent::Stderr(data.0))),
                Some(GuestMsg::Response {
                    result: Ok(Response::Exit(status)),
                    ..
                }) => return Ok(Some(ExecEvent::Exit(status))),
                Some(GuestMsg::Response {
                    result: Ok(other), ..
                }) => {
                    return Err(Error::protocol(format!(
                        "unexpected answer to exec: {other:?}"
                    )))
                }
                Some(_) => continue,
            }
        }
    }

    /// Collects all output until the process ends.
    pub async fn wait(mut self) -> Result<ExecOutput> {
        self.collect().await
    }

    async fn collect(&mut self) -> Result<ExecOutput> {
        let limit = self.output_limit.unwrap_or(usize::MAX);
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut truncated = false;
        let mut keep = |into: &mut Vec<u8>, d: &[u8]| {
            let room = limit.saturating_sub(into.len());
            truncated |= d.len() > room;
            into.extend_from_slice(&d[..d.len().min(room)]);
        };
        while let Some(ev) = self.next_event().await? {
            match ev {
                ExecEvent::Stdout(d) => keep(&mut stdout, &d),
                ExecEvent::Stderr(d) => keep(&mut stderr, &d),
                ExecEvent::Exit(status) => {
                    return Ok(ExecOutput {
                        status,
                        stdout,
                        stderr,
                        truncated,
                    })
                }
            }
        }
        Err(Error::protocol("the process ended without an exit status"))
    }
}

impl Sandbox {
    /// Runs `argv` and collects its output.
    pub async fn exec<I, S>(&self, argv: I) -> Result<ExecOutput>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.exec_with(ExecOptions::new(argv)).await
    }

    /// Runs a process described by `opts` and collects its output.
    pub async fn exec_with(&self, opts: ExecOptions) -> Result<ExecOutput> {
        let keep = opts.stdin.is_some();
        self.start_process(opts, keep).await?.wait().await
    }

    /// Starts a process and returns it for streaming. Stdin stays open for
    /// [`Process::write_stdin`] until [`Process::close_stdin`] unless
    /// `opts.stdin` was given (then it is written and closed).
    ///
    /// Returns once the sandbox's run has the request: a
    /// [`Sandbox::request_drain`] made after it waits for the process, and
    /// the idle timeout does not reclaim the sandbox under it.
    pub async fn spawn(&self, opts: ExecOptions) -> Result<Process> {
        let process = self.start_process(opts, true).await?;
        process.attempt.delivered().await;
        Ok(process)
    }

    async fn start_process(&self, opts: ExecOptions, keep: bool) -> Result<Process> {
        opts.validate()?;
        let attempt = Attempt::start(self, "exec", opts.to_request(keep, None)).await?;
        if let Some(data) = opts.stdin.clone() {
            // From a task: the output is read while the input goes in.
            let input = attempt.input();
            tokio::spawn(async move {
                if input.send_data(&data).await.is_ok() {
                    let _ = input.send_eof().await;
                }
            });
        }
        Ok(Process {
            attempt,
            output_limit: opts.output_limit,
        })
    }

    /// Starts an interactive shell (`argv`, default `/bin/sh`) on a pty.
    pub async fn shell(&self, argv: Option<Vec<String>>, rows: u16, cols: u16) -> Result<Process> {
        let opts = ExecOptions::new(argv.unwrap_or_else(|| vec!["/bin/sh".into()]));
        opts.validate()?;
        let body = opts.to_request(true, Some(TtySize { rows, cols }));
        let attempt = Attempt::start(self, "shell", body).await?;
        attempt.delivered().await;
        Ok(Process {
            attempt,
            output_limit: None,
        })
    }
}
