//! `burrow exec`: run a command in a running sandbox, streaming its output
//! as it arrives. The streaming loop is shared with `run` and `shell`.

use std::io::{Read, Write};

use burrow::{ExecEvent, ExecOptions, ProcessStdin, Sandbox};
use clap::Args;
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::common::{exit_code_of, parse_pairs, resolve, seconds};
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// Sandbox name or id. It must be running, or reclaimed for idleness
    /// with demand start on (it is then started again first).
    sandbox: String,
    /// Environment variable (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Working directory (absolute guest path).
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    workdir: Option<String>,
    /// Forward this command's stdin to the process.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Kill the process after this many seconds (exit code 124).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
}

pub(crate) async fn exec(ctx: Ctx, args: ExecArgs) -> anyhow::Result<u8> {
    let mut opts = ExecOptions::new(args.cmd);
    opts.env = parse_pairs("--env", &args.env)?;
    opts.cwd = args.workdir;
    opts.timeout = args.timeout.map(|s| seconds("--timeout", s)).transpose()?;
    let sandbox = resolve(&ctx.backend().await?, &args.sandbox)
        .await?
        .sandbox()
        .await?;
    stream(ctx, &sandbox, opts, args.interactive).await
}

/// Runs `opts` in `sandbox`: streams output to ours (or collects it into
/// one JSON object with `--json`), forwards our stdin when `stdin`, and
/// forwards SIGINT/SIGTERM/SIGHUP. Returns the process's exit code.
pub(crate) async fn stream(
    ctx: Ctx,
    sandbox: &Sandbox,
    opts: ExecOptions,
    stdin: bool,
) -> anyhow::Result<u8> {
    let mut process = sandbox.spawn(opts).await?;
    if stdin {
        feed_stdin(process.stdin());
    } else {
        process.close_stdin().await?;
    }
    let mut out = Sink {
        json: ctx.json,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let (mut int, mut term, mut hup) = (
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
        signal(SignalKind::hangup())?,
    );
    let mut interrupts = 0;
    let status = loop {
        tokio::select! {
            ev = process.next_event() => match ev? {
                Some(ExecEvent::Stdout(d)) => out.stdout(&d),
                Some(ExecEvent::Stderr(d)) => out.stderr(&d),
                Some(ExecEvent::Exit(status)) => break status,
                None => anyhow::bail!("the process ended without an exit status"),
            },
            _ = int.recv() => {
                // Ctrl-C: interrupt, then kill, then give up waiting.
                interrupts += 1;
                match interrupts {
                    1 => process.signal(libc::SIGINT)?,
                    2 => process.signal(libc::SIGKILL)?,
                    _ => return Ok(130),
                }
            }
            _ = term.recv() => process.signal(libc::SIGTERM)?,
            _ = hup.recv() => process.signal(libc::SIGHUP)?,
        }
    };
    let code = exit_code_of(&status);
    if ctx.json {
        ctx.print_json(&json!({
            "sandbox_id": sandbox.id(),
            "name": sandbox.name(),
            "exit_code": code,
            "status": {"code": status.code, "signal": status.signal, "timed_out": status.timed_out},
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
        }))?;
    }
    Ok(code)
}

/// Where process output goes: straight to our stdout/stderr, or collected.
struct Sink {
    json: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Sink {
    fn stdout(&mut self, data: &[u8]) {
        if self.json {
            self.stdout.extend_from_slice(data);
        } else {
            write_all(&mut std::io::stdout().lock(), data);
        }
    }
    fn stderr(&mut self, data: &[u8]) {
        if self.json {
            self.stderr.extend_from_slice(data);
        } else {
            write_all(&mut std::io::stderr().lock(), data);
        }
    }
}

/// Writes and flushes; a closed reader (EPIPE) is not our failure, so
/// errors are dropped and the process keeps being drained.
pub(crate) fn write_all(w: &mut impl Write, data: &[u8]) {
    let _ = w.write_all(data).and_then(|()| w.flush());
}

/// Feeds our stdin to the process, closing its stdin at our EOF, from a
/// task of its own: a write may wait for the sandbox to take the input
/// before it while the output must go on flowing. Our stdin is read on a
/// plain thread (a blocked read must not hold up the runtime's shutdown).
pub(crate) fn feed_stdin(stdin: ProcessStdin) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(2);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        let mut ours = std::io::stdin().lock();
        loop {
            match ours.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    });
    tokio::spawn(async move {
        while let Some(data) = rx.recv().await {
            if stdin.write(&data).await.is_err() {
                return;
            }
        }
        let _ = stdin.close().await;
    });
}
