//! Running processes in a sandbox.

use std::collections::BTreeMap;
use std::time::Duration;

use burrow_protocol::{ExecRequest, GuestMsg, Request, Response, TtySize};

use super::Sandbox;
use crate::error::{Error, Result};
use crate::runtime::client::RequestHandle;

/// How a process ended.
pub type ExitStatus = burrow_protocol::ExitStatus;

/// What to run.
#[derive(Debug, Clone, Default, PartialEq)]
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

/// A process running in a sandbox, with streamed output.
#[derive(Debug)]
pub struct Process {
    handle: RequestHandle,
    sandbox: Sandbox,
    done: bool,
    /// The supervisor refused the request without running it.
    refused: bool,
    /// Any frame of this request arrived.
    got_frame: bool,
}

impl Process {
    /// Writes to the process's stdin.
    pub fn write_stdin(&self, data: &[u8]) -> Result<()> {
        self.handle.send_data(data)
    }
    /// Closes the process's stdin.
    pub fn close_stdin(&self) -> Result<()> {
        self.handle.send_eof()
    }
    /// Sends a signal to the process group.
    pub fn signal(&self, signal: i32) -> Result<()> {
        self.handle.signal(signal)
    }
    /// Resizes the pty of a shell.
    pub fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.handle.resize(TtySize { rows, cols })
    }

    /// The next output event; `Ok(None)` after [`ExecEvent::Exit`].
    pub async fn next_event(&mut self) -> Result<Option<ExecEvent>> {
        if self.done {
            return Ok(None);
        }
        loop {
            let Some(msg) = self.handle.next().await else {
                self.done = true;
                // Lost before any answer: the supervisor went away before it
                // took the request (it answers Unavailable or Aborted otherwise).
                self.refused = !self.got_frame;
                let res = self
                    .sandbox
                    .settle(
                        "exec",
                        Err(Error::protocol("the connection to the sandbox was lost")),
                    )
                    .await;
                return res.map(|_| None);
            };
            self.got_frame = true;
            match msg {
                GuestMsg::Stdout { data, .. } => return Ok(Some(ExecEvent::Stdout(data.0))),
                GuestMsg::Stderr { data, .. } => return Ok(Some(ExecEvent::Stderr(data.0))),
                GuestMsg::Response { result, .. } => {
                    self.done = true;
                    if let Err(g) = &result {
                        self.refused = g.code == burrow_protocol::GuestErrorCode::Unavailable;
                    }
                    return match self.sandbox.settle("exec", Ok(result)).await? {
                        Response::Exit(status) => Ok(Some(ExecEvent::Exit(status))),
                        other => Err(Error::protocol(format!(
                            "unexpected answer to exec: {other:?}"
                        ))),
                    };
                }
                _ => continue,
            }
        }
    }

    /// Collects all output until the process ends.
    pub async fn wait(mut self) -> Result<ExecOutput> {
        self.collect().await
    }

    async fn collect(&mut self) -> Result<ExecOutput> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while let Some(ev) = self.next_event().await? {
            match ev {
                ExecEvent::Stdout(d) => stdout.extend_from_slice(&d),
                ExecEvent::Stderr(d) => stderr.extend_from_slice(&d),
                ExecEvent::Exit(status) => {
                    return Ok(ExecOutput {
                        status,
                        stdout,
                        stderr,
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
        let mut process = self.start_process(opts.clone(), keep).await?;
        match process.collect().await {
            // Refused unrun because an idle reclaim began just as it arrived:
            // run it once more, which starts the sandbox again on demand.
            Err(_) if process.refused && self.reclaimed_and_wakeable().await => {
                self.forget_connection().await;
                self.start_process(opts, keep).await?.wait().await
            }
            other => other,
        }
    }

    /// Starts a process and returns it for streaming. Stdin stays open for
    /// [`Process::write_stdin`] until [`Process::close_stdin`] unless
    /// `opts.stdin` was given (then it is written and closed).
    pub async fn spawn(&self, opts: ExecOptions) -> Result<Process> {
        self.start_process(opts, true).await
    }

    async fn start_process(&self, opts: ExecOptions, keep: bool) -> Result<Process> {
        opts.validate()?;
        let handle = self.request(opts.to_request(keep, None)).await?;
        if let Some(data) = &opts.stdin {
            handle.send_data(data)?;
            handle.send_eof()?;
        }
        Ok(Process {
            handle,
            sandbox: self.clone(),
            done: false,
            refused: false,
            got_frame: false,
        })
    }

    /// Starts an interactive shell (`argv`, default `/bin/sh`) on a pty.
    pub async fn shell(&self, argv: Option<Vec<String>>, rows: u16, cols: u16) -> Result<Process> {
        let opts = ExecOptions::new(argv.unwrap_or_else(|| vec!["/bin/sh".into()]));
        opts.validate()?;
        let handle = self
            .request(opts.to_request(true, Some(TtySize { rows, cols })))
            .await?;
        Ok(Process {
            handle,
            sandbox: self.clone(),
            done: false,
            refused: false,
            got_frame: false,
        })
    }
}
