//! Reading: the rotated generation, then the current file, of each source,
//! and in follow mode polling that survives rotations.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{log_dir, rotated_path};
use crate::error::{Error, Result};
use crate::logs::{LogLine, LogOptions, LogSource, LogStream};

/// How often follow mode looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(150);

/// How often a followed log asks whether its run has ended (every this
/// many looks for new lines).
const END_CHECK_EVERY: u32 = 2;

/// Says whether the run a followed log follows has ended (see
/// [`crate::logs::run_has_ended`]); asked between looks for new lines.
pub(crate) type RunEnded =
    Box<dyn FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send>;

/// Opens the logs of the sandbox whose directory is `sandbox_dir`.
///
/// Each source is read from its rotated generation, then its current file
/// (`tail` counts across both). A missing log is empty. With `follow`, a
/// task keeps polling for new complete lines until the stream is dropped
/// or, with `ended`, until `ended` says the followed run is over: then
/// what was written up to that moment (and a poll interval more) is read
/// and the stream ends.
pub fn open_local(
    sandbox_dir: &Path,
    opts: &LogOptions,
    ended: Option<RunEnded>,
) -> Result<LogStream> {
    spawn_reader(sandbox_dir, opts, ended).map(|(stream, _task)| stream)
}

/// [`open_local`], also returning the task that feeds the stream.
fn spawn_reader(
    sandbox_dir: &Path,
    opts: &LogOptions,
    mut ended: Option<RunEnded>,
) -> Result<(LogStream, tokio::task::JoinHandle<()>)> {
    let dir = log_dir(sandbox_dir);
    let requested = if opts.sources.is_empty() {
        &LogSource::ALL[..]
    } else {
        &opts.sources[..]
    };
    let since_ms = opts.since.map(|t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    });
    let mut sources = Vec::new();
    for s in requested {
        // A source without times has no lines "since" anything.
        if !sources.contains(s) && (since_ms.is_none() || s.is_timed()) {
            sources.push(*s);
        }
    }
    // With `since`, the tail is of the lines since then.
    let mut read_opts = opts.clone();
    if since_ms.is_some() {
        read_opts.tail = None;
    }
    let keep = move |l: &LogLine| match since_ms {
        Some(since) => l.time_ms.is_some_and(|t| t >= since),
        None => true,
    };
    let mut first = Vec::new();
    let mut followers = Vec::new();
    for source in sources {
        let (lines, follower) = Follower::open(source, dir.join(source.file_name()), &read_opts)?;
        let mut lines: Vec<LogLine> = lines
            .into_iter()
            .map(|text| to_line(source, text))
            .filter(keep)
            .collect();
        if let (Some(n), Some(_)) = (opts.tail, since_ms) {
            let skip = lines.len().saturating_sub(n);
            lines.drain(..skip);
        }
        first.extend(lines);
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
        let mut looks = 0u32;
        // Once the run is over: this look and one more, then the end (the
        // lines its last moments wrote are read).
        let mut final_looks: Option<u8> = None;
        loop {
            tokio::select! {
                // Nobody reads any more: stop polling.
                _ = tx.closed() => return,
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
            looks = looks.wrapping_add(1);
            if final_looks.is_none() && looks.is_multiple_of(END_CHECK_EVERY) {
                if let Some(ended) = ended.as_mut() {
                    if ended().await {
                        final_looks = Some(2);
                    }
                }
            }
            for f in &mut followers {
                match f.poll() {
                    Ok(lines) => {
                        for text in lines {
                            let line = to_line(f.source, text);
                            if !keep(&line) {
                                continue;
                            }
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
            if let Some(left) = final_looks.as_mut() {
                *left -= 1;
                if *left == 0 {
                    return;
                }
            }
        }
    });
    Ok((LogStream::from_channel(rx), task))
}

/// A line of `source` as read from its file: the program output's lines
/// start with their time (`<ms> <text>`), the supervisor's with the RFC 3339
/// time of its `tracing` output (kept in the text); the guest's have none.
fn to_line(source: LogSource, raw: String) -> LogLine {
    match source {
        LogSource::Stdout | LogSource::Stderr => {
            let (time_ms, text) = super::output::parse_line(&raw);
            let text = text.to_owned();
            LogLine {
                source,
                text,
                time_ms,
            }
        }
        LogSource::Supervisor => {
            let time_ms = raw
                .split_whitespace()
                .next()
                .and_then(crate::logs::parse_rfc3339)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64);
            LogLine {
                source,
                text: raw,
                time_ms,
            }
        }
        LogSource::Guest => LogLine::new(source, raw),
    }
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
    use crate::engine::logs::fixtures::lines_of;
    use crate::engine::logs::RotatingFile;
    use std::io::Write;

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

        let all = open_local(dir.path(), &LogOptions::default(), None)
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
        let tail = open_local(dir.path(), &opts, None)
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
        let all = open_local(dir.path(), &LogOptions::default(), None)
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
        let all = open_local(dir.path(), &opts, None)
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
            since: None,
        };
        let mut stream = open_local(dir.path(), &opts, None).unwrap();
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
            since: None,
        };
        let mut stream = open_local(dir.path(), &opts, None).unwrap();
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
        let (mut stream, task) = spawn_reader(dir.path(), &opts, None).unwrap();
        assert_eq!(next_text(&mut stream).await, "a");
        assert!(!task.is_finished());
        drop(stream);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the task ends once the stream is dropped")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_ends_after_the_lines_written_before_its_run_ended() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        let f = RotatingFile::with_max_bytes(logs.join("stdout.log"), 1 << 20).unwrap();
        (&f).write_all(b"1 first\n").unwrap();
        let over = Arc::new(AtomicBool::new(false));
        let asked = over.clone();
        let ended: RunEnded = Box::new(move || {
            let over = asked.load(Ordering::SeqCst);
            Box::pin(async move { over })
        });
        let opts = LogOptions::default()
            .sources([LogSource::Stdout])
            .follow(true);
        let (mut stream, task) = spawn_reader(dir.path(), &opts, Some(ended)).unwrap();
        assert_eq!(next_text(&mut stream).await, "first");
        // Still following: many polls later, nothing ended it.
        tokio::time::sleep(FOLLOW_POLL * 20).await;
        assert!(!task.is_finished());
        // The last lines of the run, then its end: both lines arrive, then
        // the end of the stream.
        (&f).write_all(b"2 second\n3 last\n").unwrap();
        over.store(true, Ordering::SeqCst);
        assert_eq!(next_text(&mut stream).await, "second");
        assert_eq!(next_text(&mut stream).await, "last");
        assert!(stream.next().await.is_none(), "the stream ends");
        task.await.unwrap();
    }

    #[tokio::test]
    async fn non_follow_ends_and_its_task_too() {
        let dir = tempfile::tempdir().unwrap();
        let logs = logs_dir(&dir);
        std::fs::write(logs.join("guest.log"), b"a\n").unwrap();
        let (stream, task) = spawn_reader(dir.path(), &LogOptions::default(), None).unwrap();
        assert_eq!(stream.collect().await.unwrap().len(), 1);
        task.await.unwrap();
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
}
