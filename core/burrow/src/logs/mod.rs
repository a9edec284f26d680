//! Sandbox logs: the guest's output (the agent, PID 1, and what it reports)
//! and the supervisor's own events, kept per sandbox under
//! `sandboxes/<id>/logs/` with a size bound and rotation, readable whether
//! the sandbox is running, stopped or crashed, with a follow mode.
//!
//! Writing: every log is a `RotatingFile`: append-only, at most
//! `BURROW_LOG_MAX_BYTES` (default 8 MiB) per file, with one rotated
//! generation `<name>.1` kept beside it. The supervisor writes its `tracing`
//! output to `supervisor.log` and copies the guest's stderr into `guest.log`
//! line by line (`capture`).
//!
//! Reading: `open_local` reads the rotated generation, then the current
//! file, of each source; in follow mode it keeps polling and survives
//! rotations (a new inode, or a file that shrank, is read from its start),
//! until the followed run ends ([`followed_run`], [`run_has_ended`]).
//!
//! Public: the types every backend's [`LogStream`] carries. The files
//! themselves belong to the local engine (feature `local`).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Default size bound of one log file (the rotated generation doubles it).
pub const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Environment variable overriding [`DEFAULT_MAX_BYTES`] (a positive number
/// of bytes; anything else is ignored).
pub const MAX_BYTES_ENV: &str = "BURROW_LOG_MAX_BYTES";

/// Which log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// The standard output of the programs run in the sandbox (execs,
    /// shells), each line with its time.
    Stdout,
    /// Their standard error, each line with its time.
    Stderr,
    /// The guest: the agent (PID 1) and the guest processes' reports.
    Guest,
    /// The supervisor's own events (start phases, stop reasons, warnings).
    Supervisor,
}

impl LogSource {
    /// Every source, in the order a read of all of them returns them.
    pub const ALL: [LogSource; 4] = [
        LogSource::Stdout,
        LogSource::Stderr,
        LogSource::Supervisor,
        LogSource::Guest,
    ];

    /// File name of the current log of this source.
    pub fn file_name(self) -> &'static str {
        match self {
            LogSource::Stdout => "stdout.log",
            LogSource::Stderr => "stderr.log",
            LogSource::Guest => "guest.log",
            LogSource::Supervisor => "supervisor.log",
        }
    }

    /// `stdout`, `stderr`, `guest` or `supervisor`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
            LogSource::Guest => "guest",
            LogSource::Supervisor => "supervisor",
        }
    }

    /// Whether every line of this source carries its time (the program
    /// output and the supervisor's events; the guest's log does not).
    pub fn is_timed(self) -> bool {
        !matches!(self, LogSource::Guest)
    }
}

impl std::fmt::Display for LogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LogSource {
    type Err = Error;

    fn from_str(s: &str) -> Result<LogSource> {
        LogSource::ALL
            .into_iter()
            .find(|source| source.as_str() == s)
            .ok_or_else(|| Error::InvalidArgument {
                argument: "source".into(),
                reason: format!("{s:?} is not a log source (stdout, stderr, guest, supervisor)"),
            })
    }
}

/// What to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Sources to read (empty: all).
    pub sources: Vec<LogSource>,
    /// Keep reading as the logs grow, until the run that is current when
    /// the follow begins ends (see [`followed_run`]) or the stream is
    /// dropped.
    pub follow: bool,
    /// Only the last N lines of each source (before following).
    pub tail: Option<usize>,
    /// Only lines written at or after this time (the `tail` is of those).
    /// The guest's log has no times: with `since`, it is left out.
    pub since: Option<SystemTime>,
}

impl LogOptions {
    /// Only these sources (empty: all).
    #[must_use]
    pub fn sources(mut self, sources: impl IntoIterator<Item = LogSource>) -> Self {
        self.sources = sources.into_iter().collect();
        self
    }

    /// Keep reading as the logs grow, until the current run ends.
    #[must_use]
    pub fn follow(mut self, follow: bool) -> Self {
        self.follow = follow;
        self
    }

    /// Only the last `lines` lines of each source (before following).
    #[must_use]
    pub fn tail(mut self, lines: usize) -> Self {
        self.tail = Some(lines);
        self
    }

    /// Only lines written at or after `time`.
    #[must_use]
    pub fn since(mut self, time: SystemTime) -> Self {
        self.since = Some(time);
        self
    }
}

/// The run a follow that begins now follows: the current run's
/// generation while the sandbox has one (Starting through Paused), else
/// none, and the follow ends once the lines already written are read.
/// With [`run_has_ended`], the one rule of when a followed log ends, for
/// every backend and SDK.
pub fn followed_run(info: &crate::model::SandboxInfo) -> Option<u64> {
    info.status.has_runtime().then_some(info.generation)
}

/// Whether the run a follow follows (`followed`, from [`followed_run`])
/// has ended, given the sandbox as it is now (`None`: it is gone): it no
/// longer has a runtime, or a newer run replaced it.
pub fn run_has_ended(followed: Option<u64>, now: Option<&crate::model::SandboxInfo>) -> bool {
    match (followed, now) {
        (Some(generation), Some(info)) => {
            !info.status.has_runtime() || info.generation != generation
        }
        _ => true,
    }
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Where it came from.
    pub source: LogSource,
    /// The line, without its newline.
    pub text: String,
    /// When it was written, in milliseconds since the Unix epoch (`None`
    /// for a source without times, the guest's log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
}

impl LogLine {
    /// A line of `source` without a time.
    pub fn new(source: LogSource, text: impl Into<String>) -> LogLine {
        LogLine {
            source,
            text: text.into(),
            time_ms: None,
        }
    }
}

/// A stream of log lines. Lines of one source arrive in file order; lines
/// of different sources are not ordered against each other.
#[derive(Debug)]
pub struct LogStream {
    rx: mpsc::Receiver<Result<LogLine>>,
}

impl LogStream {
    /// A stream fed by `rx` (for backends that produce lines themselves).
    /// Whoever holds the sender should stop once it reports closed.
    pub fn from_channel(rx: mpsc::Receiver<Result<LogLine>>) -> LogStream {
        LogStream { rx }
    }

    /// The next line; `None` at the end (in follow mode: once the followed
    /// run has ended and its last lines were read).
    pub async fn next(&mut self) -> Option<Result<LogLine>> {
        self.rx.recv().await
    }

    /// Collects every line (not for follow mode).
    pub async fn collect(mut self) -> Result<Vec<LogLine>> {
        let mut out = Vec::new();
        while let Some(line) = self.next().await {
            out.push(line?);
        }
        Ok(out)
    }
}

/// A UTC time in RFC 3339 form as `tracing` and most tools write it:
/// `2026-12-03T17:40:01Z`, with optional fractional seconds
/// (`...01.123456Z`) and `Z` or a `+HH:MM`/`-HH:MM` offset. `None` for
/// anything else.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 9 {
                nanos = nanos * 10 + u64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..9 {
            nanos *= 10;
        }
    }
    let offset_s: i64 = match &text[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let secs = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if o.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos as u32))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{SandboxConfig, SandboxId, SandboxInfo, Status};

    #[test]
    fn a_follow_follows_the_current_run_until_it_ends() {
        let mut info = SandboxInfo::new(SandboxId::new(), "w", SandboxConfig::new("img"));
        info.generation = 3;
        for status in Status::ALL {
            info.status = status;
            let run = followed_run(&info);
            assert_eq!(run.is_some(), status.has_runtime(), "{status}");
            // Nothing to follow: over at once.
            assert_eq!(run_has_ended(run, Some(&info)), !status.has_runtime());
        }
        info.status = Status::Running;
        let run = followed_run(&info);
        info.status = Status::Draining;
        assert!(!run_has_ended(run, Some(&info)));
        info.status = Status::Stopped;
        assert!(run_has_ended(run, Some(&info)));
        // Restarted between two looks: a new run, not the followed one.
        info.status = Status::Running;
        info.generation = 4;
        assert!(run_has_ended(run, Some(&info)));
        // Removed.
        assert!(run_has_ended(run, None));
    }

    #[test]
    fn rfc3339_times_parse() {
        let at = |t: &str| {
            parse_rfc3339(t).map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis())
        };
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(at("2026-12-03T17:40:01.123456Z"), Some(1_796_319_601_123));
        assert_eq!(at("2026-12-03T18:40:01+01:00"), Some(1_796_319_601_000));
        assert_eq!(at("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        for bad in [
            "",
            "2026-12-03",
            "2026-13-03T00:00:00Z",
            "2026-12-03T17:40:01",
            "x",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }

    #[test]
    fn sources_parse_and_print() {
        assert_eq!("guest".parse::<LogSource>().unwrap(), LogSource::Guest);
        assert_eq!(
            "supervisor".parse::<LogSource>().unwrap(),
            LogSource::Supervisor
        );
        assert_eq!(
            "x".parse::<LogSource>().unwrap_err().code(),
            crate::ErrorCode::InvalidArgument
        );
        assert_eq!(LogSource::Guest.to_string(), "guest");
    }
}
