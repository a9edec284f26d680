#![allow(clippy::unwrap_used)]
//! Sandbox logs against real sandboxes: the output of the programs run in
//! it (stdout and stderr, each line with its time), the guest log (the
//! agent's stderr, captured by the supervisor) and the supervisor's events,
//! read through the library and the CLI while running, after a stop, after
//! a crash and after a failed start; `since`; follow mode; the size bound
//! and rotation.
//!
//! To put lines we control into the guest log, a command writes to the
//! agent's stderr (`/proc/1/fd/2`).

use burrow_cli_testkit as common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use burrow::image::ImageConfig;
use burrow::internal::image::oci::{write_layout, LayerSpec};
use burrow::{
    ErrorCode, ExitReason, LogLine, LogOptions, LogSource, Sandbox, SandboxHandle, Status,
};
use common::{busybox_rootfs, TestHome};

/// Writes `line` into the guest log from inside the sandbox. The agent
/// logs the exec's start at about the same moment, and its lines are not
/// written atomically: a short pause keeps the two apart, and readers look
/// for the marker within a line.
async fn guest_log_line(sb: &Sandbox, line: &str) {
    let out = sb
        .exec([
            "sh",
            "-c",
            "sleep 0.2; echo \"$1\" > /proc/1/fd/2",
            "sh",
            line,
        ])
        .await
        .unwrap();
    assert!(out.success(), "{}", out.stderr_str());
}

fn only(source: LogSource) -> LogOptions {
    LogOptions::default().sources([source])
}

async fn read(handle: &SandboxHandle, opts: &LogOptions) -> Vec<LogLine> {
    handle.logs(opts).await.unwrap().collect().await.unwrap()
}

async fn texts(handle: &SandboxHandle, source: LogSource) -> Vec<String> {
    let lines = read(handle, &only(source)).await;
    assert!(lines.iter().all(|l| l.source == source));
    lines.into_iter().map(|l| l.text).collect()
}

/// Whether a supervisor log line is the event `name` (the `tracing` message
/// after the target, e.g. `...supervisor: running sandbox=...`).
fn is_event(line: &str, name: &str) -> bool {
    line.contains(&format!(": {name} ")) || line.ends_with(&format!(": {name}"))
}

fn has_event(lines: &[String], name: &str) -> bool {
    lines.iter().any(|l| is_event(l, name))
}

/// Polls `source` until one of its lines holds `wanted` (the capture of
/// the guest log is asynchronous).
async fn wait_for_line(handle: &SandboxHandle, source: LogSource, wanted: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = texts(handle, source).await;
        if lines.iter().any(|l| l.contains(wanted)) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{wanted:?} not in the {source} log: {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next line of `stream` that satisfies `f`, within 15 s.
async fn next_matching(
    stream: &mut burrow::LogStream,
    mut f: impl FnMut(&LogLine) -> bool,
) -> LogLine {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, stream.next())
            .await
            .expect("the followed line arrives")
            .expect("a follow stream does not end")
            .unwrap();
        if f(&line) {
            return line;
        }
    }
}

fn reason(info: &burrow::SandboxInfo) -> Option<ExitReason> {
    info.last_run.as_ref().and_then(|r| r.exit_reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_readable_while_running_and_after_a_stop() {
    let home = TestHome::new().await;
    let sb = home.builder("logs").create().await.unwrap();
    let handle = sb.handle();
    guest_log_line(&sb, "guest-marker-running").await;
    let guest = wait_for_line(&handle, LogSource::Guest, "guest-marker-running").await;
    let sup = texts(&handle, LogSource::Supervisor).await;
    assert!(has_event(&sup, "running"), "{sup:#?}");

    // Both sources by default, each in file order; the live handle reads
    // the same as the metadata handle.
    let all = sb.logs(&LogOptions::default()).await.unwrap();
    let all = all.collect().await.unwrap();
    let of = |s: LogSource| -> Vec<String> {
        all.iter()
            .filter(|l| l.source == s)
            .map(|l| l.text.clone())
            .collect()
    };
    assert!(of(LogSource::Guest).starts_with(&guest));
    assert!(of(LogSource::Supervisor).starts_with(&sup));

    // After a stop both logs are still there, with the end of the run.
    let stopped = sb.stop().await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    let guest = texts(&handle, LogSource::Guest).await;
    assert!(
        guest.iter().any(|l| l.contains("guest-marker-running")),
        "{guest:#?}"
    );
    let sup = texts(&handle, LogSource::Supervisor).await;
    assert!(has_event(&sup, "running"), "{sup:#?}");
    assert!(
        sup.iter()
            .any(|l| is_event(l, "run ended") && l.contains("reason=\"stopped\"")),
        "{sup:#?}"
    );

    // tail: the last N lines of each source (the logs no longer change).
    let opts = LogOptions::default().tail(1);
    let tail = read(&handle, &opts).await;
    assert_eq!(tail.len(), 2, "{tail:#?}");
    assert!(tail
        .iter()
        .any(|l| l.source == LogSource::Guest && Some(&l.text) == guest.last()));
    assert!(tail
        .iter()
        .any(|l| l.source == LogSource::Supervisor && Some(&l.text) == sup.last()));

    // The CLI reads the same through the library.
    let out = home
        .cli()
        .args(["logs", "logs", "--source", "guest"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("guest-marker-running"), "{stdout}");
    let out = home
        .cli()
        .args(["--json", "logs", "logs", "--tail", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for source in ["guest", "supervisor"] {
        assert_eq!(lines.iter().filter(|v| v["source"] == source).count(), 2);
    }
    sb.destroy().await.unwrap();

    // A removed sandbox has no logs to read.
    let err = handle.logs(&LogOptions::default()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_yields_lines_written_later() {
    let home = TestHome::new().await;
    let sb = home.builder("follow").create().await.unwrap();
    let opts = LogOptions::default().follow(true).tail(0);
    let mut stream = sb.logs(&opts).await.unwrap();

    // The CLI follows too, as a separate process.
    let mut cli = home
        .cli()
        .args(["logs", "follow", "-f", "--source", "guest", "--tail", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = cli.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Give the CLI time to open its stream (tail 0: only later lines).
    tokio::time::sleep(Duration::from_millis(500)).await;

    guest_log_line(&sb, "guest-marker-follow").await;
    let line = next_matching(&mut stream, |l| l.text.contains("guest-marker-follow")).await;
    assert_eq!(line.source, LogSource::Guest);
    let seen = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        while let Ok(l) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if l.contains("guest-marker-follow") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(seen, "burrow logs -f printed the new line");

    // A supervisor event after the stream was opened: the run's last line.
    sb.stop().await.unwrap();
    let line = next_matching(&mut stream, |l| {
        l.source == LogSource::Supervisor && is_event(&l.text, "run ended")
    })
    .await;
    assert!(line.text.contains("reason=\"stopped\""), "{}", line.text);
    // The run has ended: so has its followed log, in the library and in
    // `burrow logs -f` (which exits 0 by itself).
    let end = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(line) = stream.next().await {
            line.unwrap();
        }
    })
    .await;
    assert!(end.is_ok(), "the followed log ends with its run");
    let status = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = cli.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = cli.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert_eq!(
        status.map(|s| s.code()),
        Some(Some(0)),
        "burrow logs -f exits once the run ended"
    );

    // Following a stopped sandbox: the lines already written, then the end.
    let lines = tokio::time::timeout(
        Duration::from_secs(15),
        sb.logs(&LogOptions::default().follow(true))
            .await
            .unwrap()
            .collect(),
    )
    .await
    .expect("a follow of a stopped sandbox ends")
    .unwrap();
    assert!(
        lines.iter().any(|l| l.text.contains("guest-marker-follow")),
        "{lines:?}"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_crashed_guest() {
    let home = TestHome::new().await;
    let sb = home.builder("crash").create().await.unwrap();
    let handle = sb.handle();
    guest_log_line(&sb, "guest-marker-before-crash").await;
    wait_for_line(&handle, LogSource::Guest, "guest-marker-before-crash").await;

    // Kill the guest from the host (the container's init, or the VM's
    // QEMU): the run ends on its own.
    let pid = common::guest_pid(home.path(), sb.id());
    // SAFETY: kill(2) on the guest process whose pid the driver recorded.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let info = tokio::time::timeout(Duration::from_secs(20), sb.wait_until_stopped())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.status, Status::Crashed);
    assert_eq!(reason(&info), Some(ExitReason::Crashed));

    let guest = texts(&handle, LogSource::Guest).await;
    assert!(
        guest
            .iter()
            .any(|l| l.contains("guest-marker-before-crash")),
        "{guest:#?}"
    );
    let sup = texts(&handle, LogSource::Supervisor).await;
    assert!(
        sup.iter()
            .any(|l| is_event(l, "run ended") && l.contains("reason=\"crashed\"")),
        "{sup:#?}"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_failed_start() {
    let home = TestHome::new().await;
    // An image whose configured user does not exist: the start fails.
    let layout = home.path().join("bad-image");
    let config = ImageConfig {
        user: Some("ghost".into()),
        ..Default::default()
    };
    write_layout(
        &layout,
        &[LayerSpec::dir(busybox_rootfs())],
        &config,
        Some("v1"),
    )
    .unwrap();
    let handle = Sandbox::builder("failing")
        .image(format!("oci:{}:v1", layout.display()))
        .backend(home.dyn_backend())
        .define()
        .await
        .unwrap();
    let err = handle.start().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::StartFailed);
    let info = handle.info().await.unwrap();
    assert_eq!(info.status, Status::Crashed);
    assert_eq!(reason(&info), Some(ExitReason::StartFailed));

    let sup = texts(&handle, LogSource::Supervisor).await;
    assert!(has_event(&sup, "start failed"), "{sup:#?}");
    assert!(!has_event(&sup, "running"), "{sup:#?}");
    // The guest never ran: its log is empty, not an error.
    assert!(texts(&handle, LogSource::Guest).await.is_empty());
    let out = home
        .cli()
        .args(["logs", "failing", "--source", "supervisor"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| is_event(l, "start failed")));
    handle.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_log_is_bounded_and_rotated() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let out = home
        .cli()
        .env("BURROW_LOG_MAX_BYTES", "4096")
        .args(["up", "rot", "--image", &image])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handle = SandboxHandle::get_in(home.dyn_backend(), "rot")
        .await
        .unwrap();
    let sb = handle.connect().await.unwrap();
    // About 20 KiB of lines: several rotations at 4 KiB.
    let script = "exec 2>/proc/1/fd/2; i=0; while [ $i -lt 1000 ]; do echo rotation-line-$i >&2; i=$((i+1)); done";
    assert!(sb.exec(["sh", "-c", script]).await.unwrap().success());
    wait_for_line(&handle, LogSource::Guest, "rotation-line-999").await;

    let logs = home
        .path()
        .join("sandboxes")
        .join(handle.id().as_str())
        .join("logs");
    let current = logs.join("guest.log");
    let rotated = logs.join("guest.log.1");
    assert!(rotated.exists(), "the log rotated");
    for f in [&current, &rotated] {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 4096, "{} is {len} bytes", f.display());
    }
    assert!(!logs.join("guest.log.2").exists(), "one rotated generation");

    // Reading spans the rotated generation and the current file, in order:
    // the newest lines, contiguous, the oldest ones gone.
    let numbers: Vec<u32> = texts(&handle, LogSource::Guest)
        .await
        .iter()
        .filter_map(|l| l.strip_prefix("rotation-line-")?.parse().ok())
        .collect();
    assert_eq!(numbers.last(), Some(&999));
    assert!(numbers[0] > 0, "old lines were rotated away");
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    assert!(numbers.len() > 4096 / 20, "both generations are read");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn program_output_is_kept_with_its_source_and_time() {
    let home = TestHome::new().await;
    let sb = home.builder("output").create().await.unwrap();
    let handle = sb.handle();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let out = sb
        .exec([
            "sh",
            "-c",
            "echo out-1; echo err-1 >&2; printf 'out-2\\nno-newline'",
        ])
        .await
        .unwrap();
    assert!(out.success());
    // The caller still gets all of it.
    assert_eq!(out.stdout_str(), "out-1\nout-2\nno-newline");
    assert_eq!(
        texts(&handle, LogSource::Stdout).await,
        ["out-1", "out-2", "no-newline"]
    );
    assert_eq!(texts(&handle, LogSource::Stderr).await, ["err-1"]);
    let lines = read(&handle, &only(LogSource::Stdout)).await;
    assert!(
        lines.iter().all(|l| l.time_ms.is_some_and(|t| t >= before)),
        "{lines:?}"
    );

    // `since` a moment after the first exec: only what came later.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mark = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    sb.exec(["echo", "out-3"]).await.unwrap();
    let later = read(&handle, &LogOptions::default().since(mark)).await;
    let later: Vec<(LogSource, &str)> = later
        .iter()
        .filter(|l| l.source == LogSource::Stdout || l.source == LogSource::Stderr)
        .map(|l| (l.source, l.text.as_str()))
        .collect();
    assert_eq!(later, [(LogSource::Stdout, "out-3")]);
    // The guest's log has no times: `since` leaves it out.
    let since_all = read(&handle, &LogOptions::default().since(mark)).await;
    assert!(since_all.iter().all(|l| l.source != LogSource::Guest));

    // Kept after the sandbox stops, and readable through the CLI with the
    // same sources and times.
    sb.stop().await.unwrap();
    assert_eq!(
        texts(&handle, LogSource::Stdout).await,
        ["out-1", "out-2", "no-newline", "out-3"]
    );
    let out = home
        .cli()
        .args(["--json", "logs", "output", "--source", "stderr"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        (&lines[0]["source"], &lines[0]["text"]),
        (&"stderr".into(), &"err-1".into())
    );
    assert!(lines[0]["time_ms"].as_u64().is_some_and(|t| t >= before));
    let out = home
        .cli()
        .args(["logs", "output", "--source", "stdout", "--since", "1h"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "out-1\nout-2\nno-newline\nout-3\n"
    );
    let out = home
        .cli()
        .args(["logs", "output", "--since", "yesterday"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad --since is a usage error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_can_keep_its_output_out_of_its_logs() {
    let home = TestHome::new().await;
    let mut config = burrow::SandboxConfig::new(busybox_rootfs().to_string_lossy());
    config.capture_output = false;
    let sb = home.builder("quiet").config(config).create().await.unwrap();
    let out = sb
        .exec(["sh", "-c", "echo secret; echo secret >&2"])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "secret\n");
    assert!(!sb.info().await.unwrap().config.capture_output);
    for source in [LogSource::Stdout, LogSource::Stderr] {
        assert!(texts(&sb.handle(), source).await.is_empty(), "{source}");
    }
}
