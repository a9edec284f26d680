#![allow(clippy::unwrap_used)]
//! Flow control end to end (protocol 2): a reader that stalls, reads
//! slowly or goes away costs the host a window per stream, not the
//! sandbox's output. The guest's writer blocks on its pipe meanwhile;
//! nothing is dropped, and the sandbox's other streams are served. Each
//! case runs locally and through `burrow serve` (the remote backend), for
//! whichever driver the suite runs under.

use burrow_cli_testkit as common;

use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use burrow::{Backend, ExecEvent, ExecOptions, Process, Sandbox};
use common::{busybox_rootfs, TestHome};
use tokio::io::{AsyncRead, ReadBuf};

/// Size of the files streamed in and out.
const FILE_BYTES: u64 = 64 << 20;

/// The byte at `pos` of a streamed file.
fn pattern(pos: u64) -> u8 {
    (pos % 251) as u8
}

/// An endless-looking source of `left` pattern bytes, made as read.
struct Pattern {
    pos: u64,
    left: u64,
}

impl AsyncRead for Pattern {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = (buf.remaining() as u64).min(self.left);
        let start = self.pos;
        let bytes: Vec<u8> = (start..start + n).map(pattern).collect();
        buf.put_slice(&bytes);
        self.pos += n;
        self.left -= n;
        Poll::Ready(Ok(()))
    }
}

/// Lines of `seq` output the big streams carry (about 26 MB).
const LINES: u64 = 3_400_000;

/// What one stalled or slow stream may add to a process's resident
/// memory: a 1 MiB window on each hop, with room for the allocator.
/// Without flow control the whole output piles up (hundreds of MiB).
const BOUND_KIB: u64 = 16 * 1024;

/// How long the stalled reader stalls (the soak stalls for minutes).
fn stall() -> Duration {
    let secs = std::env::var("BURROW_FLOW_STALL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    Duration::from_secs(secs)
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The processes whose memory a stream could grow: this one (the
/// client), the sandbox's supervisor, and the server in between if any.
struct Watched {
    pids: Vec<(&'static str, u32)>,
    base: Vec<u64>,
}

impl Watched {
    async fn new(sb: &Sandbox, server: Option<u32>) -> Watched {
        let info = sb.info().await.unwrap();
        let supervisor = info.last_run.and_then(|r| r.supervisor_pid).unwrap();
        let mut pids = vec![("client", std::process::id()), ("supervisor", supervisor)];
        if let Some(pid) = server {
            pids.push(("server", pid));
        }
        let base = pids.iter().map(|(_, p)| rss_kib(*p)).collect();
        Watched { pids, base }
    }

    /// Asserts that no watched process grew by more than [`BOUND_KIB`].
    fn assert_bounded(&self, when: &str) {
        for ((who, pid), base) in self.pids.iter().zip(&self.base) {
            let now = rss_kib(*pid);
            let grown = now.saturating_sub(*base);
            assert!(
                grown <= BOUND_KIB,
                "{when}: the {who}'s memory grew by {grown} KiB ({base} -> {now} KiB)"
            );
        }
    }
}

/// A sandbox on `backend`, warmed up (one exec, one file write).
async fn sandbox(backend: Arc<dyn Backend>, name: &str) -> Sandbox {
    let sb = Sandbox::builder(name)
        .image(busybox_rootfs().to_string_lossy().into_owned())
        .backend(backend)
        .create()
        .await
        .unwrap();
    sb.exec(["true"]).await.unwrap();
    sb.fs().write("/tmp/warm", b"warm").await.unwrap();
    sb
}

/// Reads `process` to its end, checking that its stdout is `seq 1
/// LINES`, whole and in order; `slow` pauses now and then (a reader
/// slower than the writer). Calls `sample` after each event.
async fn read_seq(mut process: Process, slow: bool, mut sample: impl FnMut()) {
    let mut next = 1u64;
    let mut events = 0u64;
    let mut partial = Vec::new();
    loop {
        match process.next_event().await.unwrap() {
            Some(ExecEvent::Stdout(data)) => {
                partial.extend_from_slice(&data);
                let end = partial
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                for line in partial[..end]
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                {
                    let got: u64 = std::str::from_utf8(line).unwrap().parse().unwrap();
                    assert_eq!(got, next, "line {next} in order");
                    next += 1;
                }
                partial.drain(..end);
            }
            Some(ExecEvent::Stderr(data)) => panic!("stderr: {}", String::from_utf8_lossy(&data)),
            Some(ExecEvent::Exit(status)) => {
                assert_eq!(status.code, Some(0));
                break;
            }
            None => panic!("no exit status"),
        }
        sample();
        events += 1;
        if slow && events.is_multiple_of(16) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(partial.is_empty());
    assert_eq!(next, LINES + 1, "every line arrived");
}

fn seq() -> ExecOptions {
    ExecOptions::new(["seq", "1", &LINES.to_string()])
}

/// A reader that stops: memory stays flat while the guest's writer
/// waits, the sandbox serves other streams meanwhile, and once read the
/// output is whole and in order.
async fn stalled_reader(sb: &Sandbox, server: Option<u32>) {
    let watched = Watched::new(sb, server).await;
    let process = sb.spawn(seq()).await.unwrap();
    tokio::time::sleep(stall()).await;
    watched.assert_bounded("with the reader stalled");
    // The stalled stream blocks no other.
    let other = sb.exec(["echo", "other"]).await.unwrap();
    assert_eq!(other.stdout_str(), "other\n");
    sb.fs().write("/tmp/side", b"side").await.unwrap();
    assert_eq!(sb.fs().read("/tmp/side").await.unwrap(), b"side");
    read_seq(process, false, || {}).await;
    watched.assert_bounded("after reading it all");
}

/// A reader slower than the writer: memory stays flat throughout.
async fn slow_reader(sb: &Sandbox, server: Option<u32>) {
    let watched = Watched::new(sb, server).await;
    let process = sb.spawn(seq()).await.unwrap();
    let mut events = 0u64;
    read_seq(process, true, || {
        events += 1;
        if events.is_multiple_of(64) {
            watched.assert_bounded("while reading slowly");
        }
    })
    .await;
}

/// A reader that goes away: the process is cancelled, nothing of its
/// output is kept, and the sandbox goes on serving.
async fn vanished_reader(sb: &Sandbox, server: Option<u32>) {
    let watched = Watched::new(sb, server).await;
    let mut process = sb.spawn(seq()).await.unwrap();
    assert!(matches!(
        process.next_event().await.unwrap(),
        Some(ExecEvent::Stdout(_))
    ));
    drop(process);
    tokio::time::sleep(Duration::from_millis(500)).await;
    watched.assert_bounded("after the reader went away");
    let out = sb.exec(["echo", "still"]).await.unwrap();
    assert_eq!(out.stdout_str(), "still\n");
}

/// A file streamed in from a source made as it is read, and out to a
/// reader that stalls: memory stays flat, every byte arrives in order.
async fn file_streams(sb: &Sandbox, server: Option<u32>) {
    let watched = Watched::new(sb, server).await;
    let mut source = Pattern {
        pos: 0,
        left: FILE_BYTES,
    };
    let written = sb
        .fs()
        .write_from("/tmp/stream", &mut source)
        .await
        .unwrap();
    assert_eq!(written, FILE_BYTES);
    watched.assert_bounded("after streaming a file in");
    let mut reader = sb.fs().open_read("/tmp/stream").await.unwrap();
    tokio::time::sleep(stall()).await;
    watched.assert_bounded("with a file reader stalled");
    let mut pos = 0u64;
    while let Some(chunk) = reader.next_chunk().await.unwrap() {
        for b in chunk {
            assert_eq!(b, pattern(pos), "byte {pos}");
            pos += 1;
        }
    }
    assert_eq!(pos, FILE_BYTES);
    watched.assert_bounded("after reading the file");
    sb.fs().remove("/tmp/stream", false).await.unwrap();
    // A missing file is the open's error, typed.
    match sb.fs().open_read("/tmp/missing").await.unwrap_err() {
        burrow::Error::Guest { failure, .. } => {
            assert_eq!(failure.code(), burrow::protocol::GuestErrorCode::NotFound)
        }
        other => panic!("expected a guest not_found, got {other:?}"),
    }
}

/// Stdin to a process that does not read it: the writer waits (the
/// input costs a window, not memory) until the process goes; and a
/// process that echoes its input, written from one task and read from
/// another, moves much more than a window without a deadlock.
async fn stdin_flow(sb: &Sandbox, server: Option<u32>) {
    let watched = Watched::new(sb, server).await;
    let mut sleeper = sb.spawn(ExecOptions::new(["sleep", "60"])).await.unwrap();
    let stdin = sleeper.stdin();
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..32 {
            stdin.write(&chunk).await?;
        }
        Ok::<(), burrow::Error>(())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !writer.is_finished(),
        "32 MiB went into a process that reads nothing"
    );
    watched.assert_bounded("with stdin unread");
    sleeper.signal(9).unwrap();
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer is let go once the process ended")
        .unwrap()
        .unwrap();
    loop {
        match sleeper.next_event().await.unwrap() {
            Some(ExecEvent::Exit(status)) => {
                assert_eq!(status.signal, Some(9));
                break;
            }
            Some(_) => {}
            None => panic!("no exit"),
        }
    }

    let total: usize = 24 << 20;
    let mut cat = sb.spawn(ExecOptions::new(["cat"])).await.unwrap();
    let stdin = cat.stdin();
    let writer = tokio::spawn(async move {
        let mut pos = 0u64;
        while (pos as usize) < total {
            let chunk: Vec<u8> = (pos..pos + (1 << 20)).map(pattern).collect();
            stdin.write(&chunk).await?;
            pos += chunk.len() as u64;
        }
        stdin.close().await
    });
    let mut pos = 0u64;
    loop {
        match cat.next_event().await.unwrap() {
            Some(ExecEvent::Stdout(d)) => {
                for b in d {
                    assert_eq!(b, pattern(pos), "echoed byte {pos}");
                    pos += 1;
                }
            }
            Some(ExecEvent::Stderr(_)) => {}
            Some(ExecEvent::Exit(status)) => {
                assert_eq!(status.code, Some(0));
                break;
            }
            None => panic!("no exit"),
        }
    }
    assert_eq!(pos as usize, total);
    writer.await.unwrap().unwrap();
    watched.assert_bounded("after echoing through cat");
}

/// The collected form keeps what its limit says, and says it cut.
async fn output_limit(sb: &Sandbox) {
    let out = sb.exec_with(seq().output_limit(1000)).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout.starts_with(b"1\n2\n3\n"));
    assert!(out.truncated);
    let out = sb
        .exec_with(ExecOptions::new(["echo", "short"]).output_limit(1000))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "short\n");
    assert!(!out.truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_stall_crawl_or_vanish_cost_a_window() {
    let home = TestHome::new().await;
    let sb = sandbox(home.dyn_backend(), "flow").await;
    stalled_reader(&sb, None).await;
    slow_reader(&sb, None).await;
    vanished_reader(&sb, None).await;
    file_streams(&sb, None).await;
    stdin_flow(&sb, None).await;
    output_limit(&sb).await;
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_burrow_serve_too() {
    let home = TestHome::new().await;
    let sock = home.path().join("serve.sock");
    let sqlite = format!("sqlite://{}/serve.db", home.path().display());
    let server = common::serve::ServeEnv::new(home.path(), &sqlite)
        .set("LISTEN", &format!("unix:{}", sock.display()))
        .start("a");
    let remote: Arc<dyn Backend> = Arc::new(
        burrow::RemoteBackend::connect(&format!("unix:{}", sock.display()), None).unwrap(),
    );
    let sb = sandbox(remote, "flow-remote").await;
    let pid = Some(server.pid());
    stalled_reader(&sb, pid).await;
    slow_reader(&sb, pid).await;
    vanished_reader(&sb, pid).await;
    file_streams(&sb, pid).await;
    stdin_flow(&sb, pid).await;
    output_limit(&sb).await;
    sb.destroy().await.unwrap();
    drop(server);
}
