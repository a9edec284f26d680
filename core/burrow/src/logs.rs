//! Sandbox logs: the guest's output (the agent, PID 1, and what it reports)
//! and the supervisor's own events, kept per sandbox under
//! `sandboxes/<id>/logs/` with a size bound and rotation, readable whether
//! the sandbox is running, stopped or crashed, with a follow mode.
//!
//! Writing: every log is a [`RotatingFile`]: append-only, at most
//! `BURROW_LOG_MAX_BYTES` (default 8 MiB) per file, with one rotated
//! generation `<name>.1` kept beside it. The supervisor writes its `tracing`
//! output to `supervisor.log` and copies the guest's stderr into `guest.log`
//! line by line ([`capture`]).
//!
//! Reading: [`open_local`] reads the rotated generation, then the current
//! file, of each source; in follow mode it keeps polling and survives
//! rotations (a new inode, or a file that shrank, is read from its start).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// Default size bound of one log file (the rotated generation doubles it).
pub const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Environment variable overriding [`DEFAULT_MAX_BYTES`] (a positive number
/// of bytes; anything else is ignored).
pub const MAX_BYTES_ENV: &str = "BURROW_LOG_MAX_BYTES";

/// How often follow mode looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(150);

/// Longest run of bytes [`capture`] holds back waiting for a newline.
const MAX_PENDING: usize = 16 * 1024;

/// A partial line older than this is written out by [`capture`] as it is
/// (the rest of the line follows it in the file).
const PARTIAL_FLUSH: Duration = Duration::from_millis(500);

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
pub fn log_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("logs")
}

/// The size bound of log files: `BURROW_LOG_MAX_BYTES`, else
/// [`DEFAULT_MAX_BYTES`].
pub fn max_bytes_from_env() -> u64 {
    parse_max_bytes(std::env::var(MAX_BYTES_ENV).ok().as_deref())
}

fn parse_max_bytes(value: Option<&str>) -> u64 {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// The rotated generation of a log file: `<name>.1` beside it.
pub fn rotated_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// An append-only log file with a size bound: a write that would take the
/// file past `max_bytes` first renames it to `<name>.1` (replacing the
/// previous generation) and starts a new file. Each write lands whole in one
/// generation, so a file exceeds the bound only by a single write larger
/// than the bound itself.
///
/// Usable from many threads through `&RotatingFile` (which implements
/// [`std::io::Write`]); `Arc<RotatingFile>` is a `tracing_subscriber`
/// `MakeWriter` as it is. Rotation is tracked within this value: one writer
/// per file (the supervisor), however many readers.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    /// `None` after a failed rotation; reopened by the next write.
    file: Option<File>,
    size: u64,
}

impl RotatingFile {
    /// Opens (creating, mode 0600) `path` with the bound from the environment.
    pub fn open(path: impl Into<PathBuf>) -> Result<RotatingFile> {
        RotatingFile::with_max_bytes(path, max_bytes_from_env())
    }

    /// Opens (creating, mode 0600) `path` with an explicit bound (at least 1).
    pub fn with_max_bytes(path: impl Into<PathBuf>, max_bytes: u64) -> Result<RotatingFile> {
        let path = path.into();
        let file = open_append(&path).map_err(|e| Error::io("opening the log", Some(&path), e))?;
        let size = file
            .metadata()
            .map_err(|e| Error::io("reading the log's size", Some(&path), e))?
            .len();
        Ok(RotatingFile {
            path,
            max_bytes: max_bytes.max(1),
            current: Mutex::new(Current {
                file: Some(file),
                size,
            }),
        })
    }

    /// The current file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rotated generation (`<name>.1`).
    pub fn rotated_path(&self) -> PathBuf {
        rotated_path(&self.path)
    }

    /// The size bound.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Appends `data` as one record (rotating first when needed).
    pub fn append(&self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.file.is_some() && cur.size > 0 && cur.size + data.len() as u64 > self.max_bytes {
            // Close first: readers see the old generation complete once it
            // is renamed.
            cur.file = None;
            match std::fs::rename(&self.path, self.rotated_path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        if cur.file.is_none() {
            let file = open_append(&self.path)?;
            cur.size = file.metadata()?.len();
            cur.file = Some(file);
        }
        let Current { file, size } = &mut *cur;
        if let Some(f) = file.as_mut() {
            f.write_all(data)?;
            *size += data.len() as u64;
        }
        Ok(())
    }
}

impl Write for &RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Every write goes straight to the file.
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Copies `reader` (the guest's stderr) into `sink` line by line until EOF;
/// returns the number of bytes copied. A partial line is written as it is
/// once it has waited [`PARTIAL_FLUSH`] or grown past 16 KiB (the rest of
/// the line follows it), and at EOF with a newline added.
pub async fn capture<R: AsyncRead + Unpin>(mut reader: R, sink: &RotatingFile) -> io::Result<u64> {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 8192];
    let mut total = 0u64;
    let result = loop {
        // `read` is cancel-safe: a timed-out read loses no bytes.
        let read = if pending.is_empty() {
            Some(reader.read(&mut chunk).await)
        } else {
            tokio::time::timeout(PARTIAL_FLUSH, reader.read(&mut chunk))
                .await
                .ok()
        };
        match read {
            Some(Ok(0)) => break Ok(total),
            Some(Ok(n)) => {
                total += n as u64;
                pending.extend_from_slice(&chunk[..n]);
                if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                    let rest = pending.split_off(end + 1);
                    for line in pending.split_inclusive(|b| *b == b'\n') {
                        sink.append(line)?;
                    }
                    pending = rest;
                }
                if pending.len() >= MAX_PENDING {
                    sink.append(&pending)?;
                    pending.clear();
                }
            }
            // A partial line waited long enough: out it goes.
            None => {
                sink.append(&pending)?;
                pending.clear();
            }
            Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Some(Err(e)) => break Err(e),
        }
    };
    if !pending.is_empty() {
        pending.push(b'\n');
        sink.append(&pending)?;
    }
    result
}

/// Opens the logs of the sandbox whose directory is `sandbox_dir`.
///
/// Each source is read from its rotated generation, then its current file
/// (`tail` counts across both). A missing log is empty. With `follow`, a
/// task keeps polling for new complete lines until the stream is dropped.
pub fn open_local(sandbox_dir: &Path, opts: &LogOptions) -> Result<LogStream> {
    spawn_reader(sandbox_dir, opts).map(|(stream, _task)| stream)
}

/// [`open_local`], also returning the task that feeds the stream.
fn spawn_reader(
    sandbox_dir: &Path,
    opts: &LogOptions,
) -> Result<(LogStream, tokio::task::JoinHandle<()>)> {
    let dir = log_dir(sandbox_dir);
    let requested = if opts.sources.is_empty() {
        &[LogSource::Supervisor, LogSource::Guest][..]
    } else {
        &opts.sources[..]
    };
    let mut sources = Vec::new();
    for s in requested {
        if !sources.contains(s) {
            sources.push(*s);
        }
    }
    let mut first = Vec::new();
    let mut followers = Vec::new();
    for source in sources {
        let (lines, follower) = Follower::open(source, dir.join(source.file_name()), opts)?;
        first.extend(lines.into_iter().map(|text| LogLine { source, text }));
        followers.push(follower);
    }
    let (tx, rx) = mpsc::channel(256);
    let follow = opts.follow;
    let task = tokio::spawn(async move {
        for l in first {
            if tx.send(Ok(l)).await.is_err() {
                return;
            }
        }
        if !follow {
            return;
        }
        loop {
            tokio::select! {
                // Nobody reads any more: stop polling.
                _ = tx.closed() => return,
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
            for f in &mut followers {
                match f.poll() {
                    Ok(lines) => {
                        for text in lines {
                            let line = LogLine {
                                source: f.source,
                                text,
                            };
                            if tx.send(Ok(line)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        }
    });
    Ok((LogStream { rx }, task))
}

/// The last `n` lines of the log at `path` (its rotated generation, then
/// the file itself); empty when it does not exist.
pub fn read_tail(path: &Path, n: usize) -> Result<Vec<String>> {
    let opts = LogOptions {
        tail: Some(n),
        ..LogOptions::default()
    };
    Follower::open(LogSource::Supervisor, path.to_path_buf(), &opts).map(|(lines, _)| lines)
}

/// Reading position in one source's current file.
#[derive(Debug)]
struct Follower {
    source: LogSource,
    path: PathBuf,
    /// The generation being read (`None`: the file did not exist yet).
    file: Option<File>,
    ino: u64,
    pos: u64,
    /// Bytes after the last newline read (completed by a later read).
    partial: Vec<u8>,
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> Error + '_ {
    move |e| Error::io("reading the sandbox log", Some(path), e)
}

/// The whole of `path`; empty when it does not exist.
fn read_all(path: &Path) -> Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// The complete lines of `bytes` (without `\n` or `\r\n`); what follows the
/// last newline stays in `bytes`.
fn take_lines(bytes: &mut Vec<u8>) -> Vec<String> {
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
        return Vec::new();
    };
    let rest = bytes.split_off(end + 1);
    let complete = std::mem::replace(bytes, rest);
    complete[..end]
        .split(|b| *b == b'\n')
        .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
        .collect()
}

impl Follower {
    /// Reads what the source holds now (rotated generation, then current
    /// file) and returns its lines, keeping the position for follow mode.
    /// In follow mode a trailing partial line is held back until complete;
    /// otherwise it is returned as the last line.
    fn open(source: LogSource, path: PathBuf, opts: &LogOptions) -> Result<(Vec<String>, Self)> {
        // Open the current file before reading the rotated one: a rotation
        // in between then shows as the rotated file being ours.
        let (file, ino) = match File::open(&path) {
            Ok(f) => {
                let ino = f.metadata().map_err(io_err(&path))?.ino();
                (Some(f), ino)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let old = rotated_path(&path);
        let mut bytes = match std::fs::metadata(&old) {
            Ok(m) if file.is_some() && m.ino() == ino => Vec::new(),
            _ => read_all(&old)?,
        };
        let mut me = Follower {
            source,
            path,
            file,
            ino,
            pos: 0,
            partial: Vec::new(),
        };
        me.read_current(&mut bytes)?;
        let mut lines = take_lines(&mut bytes);
        if !opts.follow && !bytes.is_empty() {
            lines.push(String::from_utf8_lossy(&bytes).into_owned());
            bytes.clear();
        }
        me.partial = bytes;
        if let Some(n) = opts.tail {
            let skip = lines.len().saturating_sub(n);
            lines.drain(..skip);
        }
        Ok((lines, me))
    }

    /// Appends what the open generation holds past our position.
    fn read_current(&mut self, into: &mut Vec<u8>) -> Result<()> {
        if let Some(f) = self.file.as_mut() {
            let n = f.read_to_end(into).map_err(io_err(&self.path))?;
            self.pos += n as u64;
        }
        Ok(())
    }

    /// New complete lines since the last call.
    fn poll(&mut self) -> Result<Vec<String>> {
        // Look at the path before reading the open file: everything written
        // to a generation happened before it was renamed away.
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => Some((m.ino(), m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&self.path)(e)),
        };
        let mut bytes = std::mem::take(&mut self.partial);
        match now {
            Some((ino, len)) if self.file.is_some() && ino == self.ino && len < self.pos => {
                // Truncated in place: start over.
                bytes.clear();
                if let Some(f) = self.file.as_mut() {
                    f.seek(SeekFrom::Start(0)).map_err(io_err(&self.path))?;
                }
                self.pos = 0;
                self.read_current(&mut bytes)?;
            }
            Some((ino, _)) if self.file.is_none() || ino != self.ino => {
                // Rotated (or created): finish the old generation, then take
                // up the new file from its start.
                self.read_current(&mut bytes)?;
                if self.file.is_some() {
                    // Rotated twice since the last look: the generation in
                    // between is the rotated file now.
                    let old = rotated_path(&self.path);
                    if let Ok(m) = std::fs::metadata(&old) {
                        if m.ino() != self.ino && m.ino() != ino {
                            bytes.extend(read_all(&old)?);
                        }
                    }
                }
                match File::open(&self.path) {
                    Ok(f) => {
                        self.ino = f.metadata().map_err(io_err(&self.path))?.ino();
                        self.file = Some(f);
                        self.pos = 0;
                        self.read_current(&mut bytes)?;
                    }
                    // Renamed away again under us: next time.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&self.path)(e)),
                }
            }
            // Same generation, or the file is gone (keep draining ours).
            _ => self.read_current(&mut bytes)?,
        }
        let lines = take_lines(&mut bytes);
        self.partial = bytes;
        Ok(lines)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn logs_dir(dir: &tempfile::TempDir) -> PathBuf {
        let d = log_dir(dir.path());
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    async fn next_text(stream: &mut LogStream) -> String {
        tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a line within 5 s")
            .expect("stream open")
            .unwrap()
            .text
    }

    #[test]
    fn rotates_at_the_bound_and_keeps_one_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let f = RotatingFile::with_max_bytes(&path, 20).unwrap();
        (&f).write_all(b"0123456789\n").unwrap(); // 11 bytes
        (&f).write_all(b"abcdefgh\n").unwrap(); // 20: still fits
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 20);
        assert!(!f.rotated_path().exists());
        (&f).write_all(b"next\n").unwrap(); // would be 25: rotate first
        assert_eq!(lines_of(&f.rotated_path()), ["0123456789", "abcdefgh"]);
        assert_eq!(lines_of(&path), ["next"]);
        for i in 0..10 {
            (&f).write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        for p in [&path, &f.rotated_path()] {
            assert!(std::fs::metadata(p).unwrap().len() <= 20, "{}", p.display());
        }
        assert_eq!(lines_of(&path), ["line 8", "line 9"]);
        assert_eq!(lines_of(&f.rotated_path()), ["line 6", "line 7"]);
        // Only one rotated generation exists.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // A record larger than the bound lands whole in a fresh file.
        (&f).write_all(&[b'z'; 30]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 30);
    }

    #[test]
    fn reopening_continues_the_size_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, b"0123456789012345\n").unwrap(); // 17 bytes
        let f = RotatingFile::with_max_bytes(&path, 20).unwrap();
        (&f).write_all(b"more\n").unwrap();
        assert_eq!(lines_of(&f.rotated_path()), ["0123456789012345"]);
        assert_eq!(lines_of(&path), ["more"]);
    }

    #[test]
    fn writes_from_many_threads_stay_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let f = std::sync::Arc::new(RotatingFile::with_max_bytes(&path, 4096).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        (&*f)
                            .write_all(format!("thread {t} line {i:04}\n").as_bytes())
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut all = lines_of(&f.rotated_path());
        all.extend(lines_of(&path));
        assert!(!all.is_empty());
        assert!(
            all.iter()
                .all(|l| l.starts_with("thread ") && l.len() == 18),
            "{all:?}"
        );
    }

    #[test]
    fn the_bound_from_the_environment_must_be_a_positive_number() {
        assert_eq!(parse_max_bytes(Some("12345")), 12345);
        assert_eq!(parse_max_bytes(Some(" 4096 ")), 4096);
        assert_eq!(parse_max_bytes(Some("nonsense")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(Some("0")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(None), DEFAULT_MAX_BYTES);
    }

    #[tokio::test]
    async fn reads_the_rotated_generation_first_and_tails_across_both() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        let f = RotatingFile::with_max_bytes(logs.join("guest.log"), 30).unwrap();
        for i in 0..8 {
            (&f).write_all(format!("g{i}\n").as_bytes()).unwrap();
        }
        let s = RotatingFile::with_max_bytes(logs.join("supervisor.log"), 1000).unwrap();
        (&s).write_all(b"s0\ns1\n").unwrap();
        // 8 lines of 3 bytes with a bound of 30: no rotation yet. Force one.
        for i in 8..12 {
            (&f).write_all(format!("g{i}\n").as_bytes()).unwrap();
        }
        assert!(f.rotated_path().exists());

        let all = open_local(dir.path(), &LogOptions::default())
            .unwrap()
            .collect()
            .await
            .unwrap();
        let texts: Vec<(LogSource, &str)> =
            all.iter().map(|l| (l.source, l.text.as_str())).collect();
        let mut expected = vec![(LogSource::Supervisor, "s0"), (LogSource::Supervisor, "s1")];
        let guest: Vec<String> = (0..12).map(|i| format!("g{i}")).collect();
        expected.extend(guest.iter().map(|g| (LogSource::Guest, g.as_str())));
        assert_eq!(texts, expected);

        // tail spans the rotated generation and the current file.
        let current = lines_of(f.path()).len();
        let opts = LogOptions {
            sources: vec![LogSource::Guest],
            tail: Some(current + 2),
            ..Default::default()
        };
        let tail = open_local(dir.path(), &opts)
            .unwrap()
            .collect()
            .await
            .unwrap();
        let texts: Vec<&str> = tail.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, guest[12 - current - 2..]);
    }

    #[tokio::test]
    async fn missing_logs_are_empty_and_a_partial_last_line_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let all = open_local(dir.path(), &LogOptions::default())
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert!(all.is_empty());
        let logs = logs_dir(&dir);
        std::fs::write(logs.join("guest.log"), b"one\r\ntwo\nthr").unwrap();
        let opts = LogOptions {
            sources: vec![LogSource::Guest],
            ..Default::default()
        };
        let all = open_local(dir.path(), &opts)
            .unwrap()
            .collect()
            .await
            .unwrap();
        let texts: Vec<&str> = all.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "thr"]);
    }

    #[tokio::test]
    async fn follow_sees_appended_lines_and_rotations() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        let f = RotatingFile::with_max_bytes(logs.join("guest.log"), 16).unwrap();
        (&f).write_all(b"before\n").unwrap();
        let opts = LogOptions {
            sources: vec![LogSource::Guest],
            follow: true,
            tail: None,
        };
        let mut stream = open_local(dir.path(), &opts).unwrap();
        assert_eq!(next_text(&mut stream).await, "before");

        // A partial line is held back until it is complete.
        (&f).write_all(b"hal").unwrap();
        tokio::time::sleep(FOLLOW_POLL * 3).await;
        (&f).write_all(b"f\n").unwrap();
        assert_eq!(next_text(&mut stream).await, "half");

        // Each of these rotates (16 bytes bound).
        (&f).write_all(b"rotated 00\n").unwrap();
        assert!(f.rotated_path().exists());
        assert_eq!(next_text(&mut stream).await, "rotated 00");
        // Two rotations between two looks: the generation in between is
        // the rotated file by the time the reader looks.
        (&f).write_all(b"rotated 01\n").unwrap();
        (&f).write_all(b"rotated 02\n").unwrap();
        assert_eq!(next_text(&mut stream).await, "rotated 01");
        assert_eq!(next_text(&mut stream).await, "rotated 02");
        // One rotation between two looks, followed by appends.
        tokio::time::sleep(FOLLOW_POLL * 2).await;
        (&f).write_all(b"after 1\n").unwrap();
        (&f).write_all(b"after 2\n").unwrap();
        assert_eq!(next_text(&mut stream).await, "after 1");
        assert_eq!(next_text(&mut stream).await, "after 2");

        // Truncated in place: read again from the start.
        std::fs::write(f.path(), b"").unwrap();
        tokio::time::sleep(FOLLOW_POLL * 2).await;
        std::fs::write(f.path(), b"fresh\n").unwrap();
        assert_eq!(next_text(&mut stream).await, "fresh");
    }

    #[tokio::test]
    async fn follow_waits_for_a_log_that_does_not_exist_yet() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        let opts = LogOptions {
            sources: vec![LogSource::Supervisor],
            follow: true,
            tail: Some(0),
        };
        let mut stream = open_local(dir.path(), &opts).unwrap();
        tokio::time::sleep(FOLLOW_POLL * 2).await;
        let f = RotatingFile::with_max_bytes(logs.join("supervisor.log"), 1000).unwrap();
        (&f).write_all(b"hello\n").unwrap();
        assert_eq!(next_text(&mut stream).await, "hello");
    }

    #[tokio::test]
    async fn dropping_the_stream_stops_the_follow_task() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        std::fs::write(logs.join("guest.log"), b"a\nb\n").unwrap();
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let (mut stream, task) = spawn_reader(dir.path(), &opts).unwrap();
        assert_eq!(next_text(&mut stream).await, "a");
        assert!(!task.is_finished());
        drop(stream);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the task ends once the stream is dropped")
            .unwrap();
    }

    #[tokio::test]
    async fn non_follow_ends_and_its_task_too() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        std::fs::write(logs.join("guest.log"), b"a\n").unwrap();
        let (stream, task) = spawn_reader(dir.path(), &LogOptions::default()).unwrap();
        assert_eq!(stream.collect().await.unwrap().len(), 1);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn capture_copies_lines_partials_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.log");
        let sink = RotatingFile::with_max_bytes(&path, 1 << 20).unwrap();
        let (mut w, r) = tokio::io::duplex(64);
        let copy = async {
            use tokio::io::AsyncWriteExt;
            w.write_all(b"one\ntw").await.unwrap();
            tokio::time::sleep(PARTIAL_FLUSH * 2).await;
            // The partial line was written out while it waited.
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntw");
            w.write_all(b"o\nthree").await.unwrap();
            drop(w);
        };
        let (n, ()) = tokio::join!(capture(r, &sink), copy);
        assert_eq!(n.unwrap(), 13);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\nthree\n");
    }

    #[tokio::test]
    async fn capture_rotates_on_line_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.log");
        let sink = RotatingFile::with_max_bytes(&path, 10).unwrap();
        let data: &[u8] = b"aaaa\nbbbb\ncccc\ndddd\n";
        capture(data, &sink).await.unwrap();
        assert_eq!(lines_of(&rotated_path(&path)), ["aaaa", "bbbb"]);
        assert_eq!(lines_of(&path), ["cccc", "dddd"]);
    }

    #[test]
    fn read_tail_spans_both_generations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("supervisor.stderr");
        assert!(read_tail(&path, 3).unwrap().is_empty());
        std::fs::write(rotated_path(&path), b"a\nb\nc\n").unwrap();
        std::fs::write(&path, b"d\ne").unwrap();
        assert_eq!(read_tail(&path, 3).unwrap(), ["c", "d", "e"]);
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
