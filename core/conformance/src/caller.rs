//! Callers of races in processes: each in its own OS process, started by the
//! kit's process spawner and released together.
//!
//! The exchange, one line each, on the caller's stdin and stdout:
//!
//! 1. kit -> caller: the request, `{"step": {...}, "keys": [...]}` (the step
//!    with its values resolved and its create options complete);
//! 2. caller -> kit: `burrow-conformance: ready {"pid": N}` once its backend
//!    is open;
//! 3. kit -> caller: `go`, to every caller at once when all are ready;
//! 4. caller -> kit: `burrow-conformance: outcome {...}` (ok or the error
//!    code, and the fields asked for); then the caller exits, which is what
//!    stops an attached sandbox it started.
//!
//! Other lines on the caller's stdout are ignored; its stderr is kept for
//! the failure message.

use std::future::Future;
use std::io::{BufRead, Write};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use burrow::Backend;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use crate::interp::{Ctx, Stop};
use crate::kit::{BoxError, Caller};
use crate::race::{self, CallerReport, CallerRequest};

const PREFIX: &str = "burrow-conformance:";

/// Serves one caller of a race in this process: reads the request on stdin,
/// says it is ready, waits for the kit's `go`, runs the step on `backend`
/// and prints its outcome. Call it from the program the kit's
/// [process spawner](crate::Kit::process_spawner) starts, then exit.
pub async fn serve(backend: Arc<dyn Backend>) -> Result<(), BoxError> {
    let request = read_stdin_line().await?;
    let request: CallerRequest = serde_json::from_str(&request)
        .map_err(|e| format!("the kit's request is not understood: {e}"))?;
    emit("ready", &json!({ "pid": std::process::id() }))?;
    let go = read_stdin_line().await?;
    if go.trim() != "go" {
        return Err(format!("expected go from the kit, got {go:?}").into());
    }
    let ctx = Ctx::new(backend, None, 1.0);
    let mut report = race::call(&ctx, &request.step, &request.keys).await;
    report.pid = Some(std::process::id());
    emit("outcome", &serde_json::to_value(&report)?)?;
    Ok(())
}

/// A whole caller program: opens the backend with `open` on a new runtime
/// and [serves](serve) one caller.
///
/// ```no_run
/// use std::sync::Arc;
///
/// fn main() -> std::process::ExitCode {
///     let home = std::env::args().nth(1).unwrap_or_default();
///     burrow_conformance::caller::main(|| async move {
///         Ok(Arc::new(burrow::LocalBackend::open_at(home).await?) as Arc<dyn burrow::Backend>)
///     })
/// }
/// ```
pub fn main<F, Fut>(open: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, BoxError>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("burrow-conformance caller: starting a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let backend = open().await?;
        serve(backend).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow-conformance caller: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn read_stdin_line() -> Result<String, BoxError> {
    // A blocking read that always completes before the next step, so no
    // read is left pending when the caller's runtime shuts down.
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await??;
    if line.is_empty() {
        return Err("stdin closed before the kit's message".into());
    }
    Ok(line)
}

fn emit(kind: &str, body: &serde_json::Value) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{PREFIX} {kind} {body}")?;
    out.flush()
}

/// Keeps the last 8 KiB of a caller's stderr.
async fn tail_of(mut stderr: tokio::process::ChildStderr) -> String {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
        if all.len() > 16 * 1024 {
            all.drain(..all.len() - 8 * 1024);
        }
    }
    String::from_utf8_lossy(&all[all.len().saturating_sub(8 * 1024)..]).into_owned()
}

/// Why a caller went wrong: `what`, its exit status and its stderr.
async fn died(
    what: &str,
    stderr: tokio::task::JoinHandle<String>,
    child: &mut tokio::process::Child,
) -> String {
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let text = tokio::time::timeout(Duration::from_secs(5), stderr)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    format!("the caller {what} (exit {status:?}); its stderr:\n{text}")
}

/// Drives one caller process through the exchange; sends one message on
/// `ready` (ok, or why it never got ready).
async fn drive(
    mut child: tokio::process::Child,
    request: String,
    ready: mpsc::Sender<Result<(), String>>,
    mut go: watch::Receiver<bool>,
) -> Result<CallerReport, String> {
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = ready
            .send(Err("the caller's stdio is not piped".into()))
            .await;
        return Err("the caller's stdio is not piped".into());
    };
    let stderr = tokio::spawn(tail_of(stderr));
    let mut lines = BufReader::new(stdout).lines();
    // The request, then wait for `ready`.
    let sent = stdin.write_all(format!("{request}\n").as_bytes()).await;
    let mut got_ready = false;
    if sent.is_ok() {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with(&format!("{PREFIX} ready")) {
                got_ready = true;
                break;
            }
        }
    }
    if !got_ready {
        let why = died("ended before it was ready", stderr, &mut child).await;
        let _ = ready.send(Err(why.clone())).await;
        return Err(why);
    }
    let _ = ready.send(Ok(())).await;
    // Released with every other caller.
    while !*go.borrow_and_update() {
        if go.changed().await.is_err() {
            return Err("the race was abandoned".into());
        }
    }
    if stdin.write_all(b"go\n").await.is_err() {
        return Err(died("closed its stdin before the go", stderr, &mut child).await);
    }
    let outcome_prefix = format!("{PREFIX} outcome ");
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(body) = line.strip_prefix(&outcome_prefix) {
            let report: CallerReport = serde_json::from_str(body)
                .map_err(|e| format!("the caller's outcome is not understood ({e}): {body}"))?;
            // Its exit is part of the race (an attached sandbox's owner).
            let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
            return Ok(report);
        }
    }
    Err(died("ended without an outcome", stderr, &mut child).await)
}

/// Starts `n` caller processes with `spawner`, releases them together and
/// collects their reports.
pub(crate) async fn spawn_all<'a>(
    spawner: &(dyn Fn(&Caller<'_>) -> std::process::Command + Send + Sync),
    caller: impl Fn(usize) -> Caller<'a>,
    n: usize,
    request: &CallerRequest,
    timeout: Duration,
    at: &str,
) -> Result<Vec<CallerReport>, Stop> {
    let request = serde_json::to_string(request)
        .map_err(|e| Stop::fail(format!("{at}: encoding the callers' request: {e}")))?;
    let (ready_tx, mut ready_rx) = mpsc::channel(n);
    let (go_tx, go_rx) = watch::channel(false);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let mut cmd = spawner(&caller(i));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| Stop::fail(format!("{at}: starting caller {i}: {e}")))?;
        tasks.push(tokio::spawn(drive(
            child,
            request.clone(),
            ready_tx.clone(),
            go_rx.clone(),
        )));
    }
    drop(ready_tx);
    let abort_all = |tasks: &[tokio::task::JoinHandle<_>]| tasks.iter().for_each(|t| t.abort());
    let wait_ready = async {
        for _ in 0..n {
            match ready_rx.recv().await {
                Some(Ok(())) => {}
                Some(Err(why)) => return Err(why),
                None => return Err("a caller went away".to_owned()),
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, wait_ready).await {
        Ok(Ok(())) => {}
        Ok(Err(why)) => {
            abort_all(&tasks);
            return Err(Stop::fail(format!("{at}: a caller process failed: {why}")));
        }
        Err(_) => {
            abort_all(&tasks);
            return Err(Stop::fail(format!(
                "{at}: the callers were not ready within {timeout:?}"
            )));
        }
    }
    let _ = go_tx.send(true);
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let results = match tokio::time::timeout(timeout, futures_util::future::join_all(tasks)).await {
        Ok(r) => r,
        Err(_) => {
            aborts.iter().for_each(|a| a.abort());
            return Err(Stop::fail(format!(
                "{at}: the callers did not finish within {timeout:?}"
            )));
        }
    };
    let mut reports = Vec::with_capacity(n);
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(Ok(report)) => reports.push(report),
            Ok(Err(why)) => return Err(Stop::fail(format!("{at}: caller {i}: {why}"))),
            Err(e) => return Err(Stop::fail(format!("{at}: caller {i}: {e}"))),
        }
    }
    Ok(reports)
}
