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
//! rotations (a new inode, or a file that shrank, is read from its start).
//!
//! Public: the types every backend's [`LogStream`] carries. The files
//! themselves belong to the local engine (feature `local`).

#[cfg(feature = "local")]
mod capture;
#[cfg(feature = "local")]
mod read;
#[cfg(feature = "local")]
pub(crate) mod rotating;

#[cfg(feature = "local")]
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

#[cfg(feature = "local")]
pub(crate) use capture::capture;
#[cfg(feature = "local")]
pub(crate) use read::{open_local, read_tail};
#[cfg(feature = "local")]
pub(crate) use rotating::RotatingFile;

/// Default size bound of one log file (the rotated generation doubles it).
pub const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Environment variable overriding [`DEFAULT_MAX_BYTES`] (a positive number
/// of bytes; anything else is ignored).
pub const MAX_BYTES_ENV: &str = "BURROW_LOG_MAX_BYTES";

/// Which log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSource {
    /// The guest: the agent (PID 1) and the guest processes' reports.
    Guest,
    /// The supervisor's own events (start phases, stop reasons, warnings).
    Supervisor,
}

impl LogSource {
    /// File name of the current log of this source.
    pub fn file_name(self) -> &'static str {
        match self {
            LogSource::Guest => "guest.log",
            LogSource::Supervisor => "supervisor.log",
        }
    }

    /// `guest` or `supervisor`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Guest => "guest",
            LogSource::Supervisor => "supervisor",
        }
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
        match s {
            "guest" => Ok(LogSource::Guest),
            "supervisor" => Ok(LogSource::Supervisor),
            other => Err(Error::InvalidArgument {
                argument: "source".into(),
                reason: format!("{other:?} is not a log source (guest, supervisor)"),
            }),
        }
    }
}

/// What to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Sources to read (empty: all).
    pub sources: Vec<LogSource>,
    /// Keep reading as the logs grow, until the stream is dropped.
    pub follow: bool,
    /// Only the last N lines of each source (before following).
    pub tail: Option<usize>,
}

impl LogOptions {
    /// Only these sources (empty: all).
    #[must_use]
    pub fn sources(mut self, sources: impl IntoIterator<Item = LogSource>) -> Self {
        self.sources = sources.into_iter().collect();
        self
    }

    /// Keep reading as the logs grow.
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
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Where it came from.
    pub source: LogSource,
    /// The line, without its newline.
    pub text: String,
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

    /// The next line; `None` at the end (never, in follow mode, until dropped).
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

/// The log directory of a sandbox directory.
#[cfg(feature = "local")]
pub(crate) fn log_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("logs")
}

/// The size bound of log files: `BURROW_LOG_MAX_BYTES`, else
/// [`DEFAULT_MAX_BYTES`].
#[cfg(feature = "local")]
pub(crate) fn max_bytes_from_env() -> u64 {
    parse_max_bytes(std::env::var(MAX_BYTES_ENV).ok().as_deref())
}

#[cfg(feature = "local")]
fn parse_max_bytes(value: Option<&str>) -> u64 {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// The rotated generation of a log file: `<name>.1` beside it.
#[cfg(feature = "local")]
pub(crate) fn rotated_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

/// Helpers shared by the tests of the submodules.
#[cfg(all(test, feature = "local"))]
mod fixtures {
    use std::path::Path;

    /// The lines of the file at `path` (none when it does not exist).
    pub(super) fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "local")]
    fn the_bound_from_the_environment_must_be_a_positive_number() {
        assert_eq!(parse_max_bytes(Some("12345")), 12345);
        assert_eq!(parse_max_bytes(Some(" 4096 ")), 4096);
        assert_eq!(parse_max_bytes(Some("nonsense")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(Some("0")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(None), DEFAULT_MAX_BYTES);
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
