//! The program output of a sandbox in its logs: what execs and shells write
//! to stdout and stderr, copied by the relay as it passes (`Tap`) into
//! `stdout.log` and `stderr.log`, one line per line with the time it was
//! completed in milliseconds since the Unix epoch (`<ms> <text>`).
//!
//! The copy is rate limited ([`Budget`]): a program that streams bulk
//! output (a gigabyte to its caller) must not pay a disk write of it, nor
//! flush the log's rotation window with it. What goes past the budget is
//! left out of the log (never out of the stream to the caller), and one
//! line says how much once logging resumes.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::RotatingFile;
use crate::error::Result;
use crate::logs::LogSource;

/// Longest line kept whole; a longer one is cut into lines of this size.
const MAX_LINE: usize = 16 * 1024;

/// Output logged at most, in a burst: the size bound of a log file.
const BURST: f64 = crate::logs::DEFAULT_MAX_BYTES as f64;

/// Output logged at most, sustained: 1 MiB/s.
const RATE: f64 = (1 << 20) as f64;

/// A token bucket of output bytes, shared by a sandbox's taps.
#[derive(Debug)]
pub(crate) struct Budget {
    tokens: f64,
    at: Instant,
    /// Bytes left out since the last logged ones.
    dropped: u64,
}

impl Budget {
    fn new(now: Instant) -> Budget {
        Budget {
            tokens: BURST,
            at: now,
            dropped: 0,
        }
    }

    /// Whether `n` bytes may be logged at `now`; if so, also how many were
    /// left out before them (to be said once).
    fn take(&mut self, n: usize, now: Instant) -> Option<u64> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * RATE;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens < n as f64 {
            self.dropped += n as u64;
            return None;
        }
        self.tokens -= n as f64;
        Some(std::mem::take(&mut self.dropped))
    }
}

/// The two output logs of one sandbox.
#[derive(Debug)]
pub(crate) struct OutputLog {
    stdout: RotatingFile,
    stderr: RotatingFile,
    budget: Mutex<Budget>,
}

impl OutputLog {
    /// The output logs in the log directory `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Arc<OutputLog>> {
        Ok(Arc::new(OutputLog {
            stdout: RotatingFile::open(dir.join(LogSource::Stdout.file_name()))?,
            stderr: RotatingFile::open(dir.join(LogSource::Stderr.file_name()))?,
            budget: Mutex::new(Budget::new(Instant::now())),
        }))
    }

    /// A tap for one program's output.
    pub(crate) fn tap(self: &Arc<Self>) -> Tap {
        Tap {
            log: self.clone(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }
}

/// Which stream of a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// The line buffers of one program's output; whatever is left is written
/// when it is dropped (a last line without its newline).
#[derive(Debug)]
pub(crate) struct Tap {
    log: Arc<OutputLog>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Tap {
    /// Copies `data` of `stream`: its completed lines go to the log, in
    /// one write (one time for all of them: they arrived together).
    pub(crate) fn feed(&mut self, stream: Stream, data: &[u8]) {
        let taken = self
            .log
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(data.len(), Instant::now());
        let (pending, sink) = self.parts(stream);
        let stamp = now_ms().to_string();
        let mut batch = Vec::new();
        match taken {
            // Over the budget: left out, with the line it was part of.
            None => {
                pending.clear();
                return;
            }
            Some(0) => {}
            Some(dropped) => {
                pending.clear();
                let note = format!(
                    "[burrow: {dropped} bytes of output were left out of this log (more than {} MiB/s)]",
                    RATE as u64 >> 20
                );
                push_line(&mut batch, &stamp, note.as_bytes());
            }
        }
        pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(n) = pending[start..].iter().position(|b| *b == b'\n') {
            push_line(&mut batch, &stamp, &pending[start..start + n]);
            start += n + 1;
        }
        while pending.len() - start >= MAX_LINE {
            push_line(&mut batch, &stamp, &pending[start..start + MAX_LINE]);
            start += MAX_LINE;
        }
        pending.drain(..start);
        write(sink, &batch);
    }

    fn parts(&mut self, stream: Stream) -> (&mut Vec<u8>, &RotatingFile) {
        match stream {
            Stream::Stdout => (&mut self.stdout, &self.log.stdout),
            Stream::Stderr => (&mut self.stderr, &self.log.stderr),
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let (pending, sink) = self.parts(stream);
            if !pending.is_empty() {
                let mut batch = Vec::new();
                push_line(&mut batch, &now_ms().to_string(), pending);
                write(sink, &batch);
                pending.clear();
            }
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn push_line(batch: &mut Vec<u8>, stamp: &str, text: &[u8]) {
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    batch.extend_from_slice(stamp.as_bytes());
    batch.push(b' ');
    batch.extend_from_slice(text);
    batch.push(b'\n');
}

fn write(sink: &RotatingFile, batch: &[u8]) {
    if batch.is_empty() {
        return;
    }
    if let Err(e) = sink.append(batch) {
        warn_once(&e, sink);
    }
}

fn warn_once(e: &io::Error, sink: &RotatingFile) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(error = %e, path = %sink.path().display(), "writing program output to the log failed");
    });
}

/// A line of an output log: its time and its text (`None` when the line
/// does not start with a time, which only a damaged file has).
pub(crate) fn parse_line(line: &str) -> (Option<u64>, &str) {
    match line.split_once(' ') {
        Some((ms, text)) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => {
            (ms.parse().ok(), text)
        }
        _ => (None, line),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::logs::fixtures::lines_of;

    #[test]
    fn lines_are_timed_split_and_the_rest_written_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let log = OutputLog::open(dir.path()).unwrap();
        let before = now_ms();
        {
            let mut tap = log.tap();
            tap.feed(Stream::Stdout, b"one\ntw");
            tap.feed(Stream::Stderr, b"oops\r\n");
            tap.feed(Stream::Stdout, b"o\nthree");
            assert_eq!(lines_of(&dir.path().join("stdout.log")).len(), 2);
        }
        let out: Vec<(Option<u64>, String)> = lines_of(&dir.path().join("stdout.log"))
            .iter()
            .map(|l| {
                let (t, text) = parse_line(l);
                (t, text.to_owned())
            })
            .collect();
        let texts: Vec<&str> = out.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, ["one", "two", "three"]);
        assert!(out.iter().all(|(t, _)| t.is_some_and(|t| t >= before)));
        let err = lines_of(&dir.path().join("stderr.log"));
        assert_eq!(parse_line(&err[0]).1, "oops");
    }

    #[test]
    fn a_long_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let log = OutputLog::open(dir.path()).unwrap();
        log.tap()
            .feed(Stream::Stdout, &vec![b'x'; MAX_LINE * 2 + 5]);
        let lines = lines_of(&dir.path().join("stdout.log"));
        let lens: Vec<usize> = lines.iter().map(|l| parse_line(l).1.len()).collect();
        assert_eq!(lens, [MAX_LINE, MAX_LINE, 5]);
    }

    #[test]
    fn the_budget_leaves_bulk_out_and_says_so_once() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0);
        assert_eq!(b.take(BURST as usize, t0), Some(0));
        assert_eq!(b.take(10, t0), None);
        assert_eq!(b.take(20, t0), None);
        // A second later a second's worth is back, and the gap is told.
        let t1 = t0 + std::time::Duration::from_secs(1);
        assert_eq!(b.take(100, t1), Some(30));
        assert_eq!(b.take(100, t1), Some(0));
        // Never more than the burst, however long the pause.
        let t2 = t1 + std::time::Duration::from_secs(3600);
        assert_eq!(b.take(BURST as usize + 1, t2), None);
    }

    #[test]
    fn a_line_without_a_time_is_kept_whole() {
        assert_eq!(parse_line("12 hi there"), (Some(12), "hi there"));
        assert_eq!(parse_line("hi there"), (None, "hi there"));
        assert_eq!(parse_line(""), (None, ""));
    }
}
