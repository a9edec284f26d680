//! Sandbox logs: the guest's output (the agent, PID 1, and what it reports)
//! and the supervisor's own events, kept per sandbox under
//! `sandboxes/<id>/logs/` with a size bound and rotation, readable whether
//! the sandbox is running, stopped or crashed, with a follow mode.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

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
}

/// What to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Sources to read (empty: all).
    pub sources: Vec<LogSource>,
    /// Keep reading as the logs grow, until the stream is dropped.
    pub follow: bool,
    /// Only the last N lines of each source (before following).
    pub tail: Option<usize>,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Where it came from.
    pub source: LogSource,
    /// The line, without its newline.
    pub text: String,
}

/// A stream of log lines.
#[derive(Debug)]
pub struct LogStream {
    rx: mpsc::Receiver<Result<LogLine>>,
}

impl LogStream {
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
pub fn log_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("logs")
}

/// Opens the logs of the sandbox whose directory is `sandbox_dir`.
pub fn open_local(sandbox_dir: &Path, opts: &LogOptions) -> Result<LogStream> {
    let dir = log_dir(sandbox_dir);
    let sources = if opts.sources.is_empty() {
        vec![LogSource::Supervisor, LogSource::Guest]
    } else {
        opts.sources.clone()
    };
    let (tx, rx) = mpsc::channel(256);
    let mut lines = Vec::new();
    for source in sources {
        let path = dir.join(source.file_name());
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io("reading the sandbox log", Some(&path), e)),
        };
        let mut these: Vec<LogLine> = text
            .lines()
            .map(|l| LogLine {
                source,
                text: l.to_owned(),
            })
            .collect();
        if let Some(n) = opts.tail {
            let skip = these.len().saturating_sub(n);
            these.drain(..skip);
        }
        lines.extend(these);
    }
    tokio::spawn(async move {
        for l in lines {
            if tx.send(Ok(l)).await.is_err() {
                return;
            }
        }
    });
    Ok(LogStream { rx })
}
