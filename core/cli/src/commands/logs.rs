//! `burrow logs`: print (or follow) a sandbox's captured logs through the
//! library (`SandboxHandle::logs`): the output of the programs that ran in
//! it (stdout, stderr), the guest's log and the supervisor's events, for
//! running, stopped and crashed sandboxes alike.

use std::io::Write;
use std::time::SystemTime;

use burrow::{LogLine, LogOptions, LogSource};
use clap::Args;
use serde_json::json;

use super::common::resolve;
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// Sandbox name or id.
    sandbox: String,
    /// Keep printing new lines until the current run ends (or until
    /// interrupted); for a sandbox that does not run, the lines so far.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Only the last N lines of each log (then follow, with -f).
    #[arg(short = 'n', long, value_name = "N")]
    tail: Option<usize>,
    /// Only this log (repeatable); default: all of them, each line
    /// prefixed with its source.
    #[arg(long, value_name = "SOURCE", value_parser = ["stdout", "stderr", "guest", "supervisor"])]
    source: Vec<String>,
    /// Only lines written since then: a duration ago (`10m`, `1h30m`, `30`
    /// seconds) or an RFC 3339 time (`2026-12-03T17:40:00Z`). The guest's
    /// log has no times and is left out.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    since: Option<SystemTime>,
}

/// `--since`: a duration ago, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<SystemTime, String> {
    if let Some(t) = burrow::logs::parse_rfc3339(text) {
        return Ok(t);
    }
    let ago = burrow::parse_duration(text)
        .map_err(|e| format!("{e}; or give an RFC 3339 time such as 2026-12-03T17:40:00Z"))?;
    Ok(SystemTime::now()
        .checked_sub(ago)
        .unwrap_or(SystemTime::UNIX_EPOCH))
}

pub(crate) async fn logs(ctx: Ctx, args: LogsArgs) -> anyhow::Result<u8> {
    let mut sources: Vec<LogSource> = Vec::new();
    for s in &args.source {
        let s = s.parse()?;
        if !sources.contains(&s) {
            sources.push(s);
        }
    }
    let mut opts = LogOptions::default();
    opts.sources = sources.clone();
    opts.follow = args.follow;
    opts.tail = args.tail;
    opts.since = args.since;
    let handle = resolve(&ctx.backend().await?, &args.sandbox).await?;
    let mut stream = handle.logs(&opts).await?;
    // With a single source the lines are printed as they are.
    let prefixed = sources.len() != 1;
    loop {
        let line = tokio::select! {
            line = stream.next() => line,
            _ = tokio::signal::ctrl_c() => return Ok(0),
        };
        let Some(line) = line else {
            return Ok(0);
        };
        // Stop once nobody reads our output (`| head`).
        if !print(ctx, &line?, prefixed) {
            return Ok(0);
        }
    }
}

/// One line: `{"source": .., "text": .., "time_ms": ..}` with --json (no
/// `time_ms` for the guest's log), else the text (after `source | ` when
/// several sources are printed). False once stdout is closed.
fn print(ctx: Ctx, line: &LogLine, prefixed: bool) -> bool {
    let text = if ctx.json {
        serde_json::to_value(line)
            .unwrap_or_else(|_| json!({"source": line.source, "text": line.text}))
            .to_string()
    } else if prefixed {
        format!("{:<10} | {}", line.source.as_str(), line.text)
    } else {
        line.text.clone()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}
