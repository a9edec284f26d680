//! `burrow shell`: an interactive shell on a pty in a running sandbox. Our
//! terminal goes into raw mode (restored on every way out), keystrokes are
//! forwarded as they come, and window size changes follow SIGWINCH.

use std::io::IsTerminal;

use burrow::{ExecEvent, ExecOptions, Process};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use super::common::{exit_code_of, resolve};
use super::exec::{feed_stdin, stream, write_all};
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    /// Sandbox name or id (running, or reclaimed for idleness with demand
    /// start on).
    sandbox: String,
    /// The program to run instead of /bin/sh.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
}

pub(crate) async fn shell(ctx: Ctx, args: ShellArgs) -> anyhow::Result<u8> {
    let sandbox = resolve(&ctx.backend().await?, &args.sandbox)
        .await?
        .sandbox()
        .await?;
    let argv = if args.cmd.is_empty() {
        vec!["/bin/sh".to_owned()]
    } else {
        args.cmd
    };
    if !std::io::stdin().is_terminal() {
        // No terminal to put in raw mode: a plain exec with our stdin.
        return stream(ctx, &sandbox, ExecOptions::new(argv), true).await;
    }
    let (rows, cols) = window_size();
    let mut process = sandbox.shell(Some(argv), rows, cols).await?;
    let _raw = RawMode::enter(libc::STDIN_FILENO)?;
    pump(&mut process).await
}

/// Moves bytes until the shell exits.
async fn pump(process: &mut Process) -> anyhow::Result<u8> {
    feed_stdin(process.stdin());
    let mut winch = signal(SignalKind::window_change())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            ev = process.next_event() => match ev? {
                Some(ExecEvent::Stdout(d)) => write_all(&mut std::io::stdout().lock(), &d),
                Some(ExecEvent::Stderr(d)) => write_all(&mut std::io::stderr().lock(), &d),
                Some(ExecEvent::Exit(status)) => return Ok(exit_code_of(&status)),
                None => anyhow::bail!("the shell ended without an exit status"),
            },
            _ = winch.recv() => {
                // In order with the input, which may be waiting for the
                // output this loop reads: from a task.
                let (rows, cols) = window_size();
                let stdin = process.stdin();
                tokio::spawn(async move { stdin.resize(rows, cols).await });
            }
            _ = term.recv() => process.signal(libc::SIGTERM)?,
            _ = hup.recv() => process.signal(libc::SIGHUP)?,
        }
    }
}

/// Rows and columns of our terminal (24x80 when unknown).
fn window_size() -> (u16, u16) {
    // SAFETY: winsize is plain old data; all-zero is a valid value.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid pointer we pass.
    let ok = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_row > 0 && ws.ws_col > 0 {
        (ws.ws_row, ws.ws_col)
    } else {
        (24, 80)
    }
}

/// Raw mode on a terminal for as long as this value lives.
struct RawMode {
    fd: i32,
    saved: libc::termios,
}

impl RawMode {
    fn enter(fd: i32) -> std::io::Result<RawMode> {
        // SAFETY: termios is plain old data; all-zero is a valid value.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills the termios we point to.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw only edits the termios we point to.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr reads the valid termios we point to.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter` on the same fd.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

impl std::fmt::Debug for RawMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawMode")
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}
