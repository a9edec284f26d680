#![allow(clippy::unwrap_used)]
//! Process execution through the agent: output, stdin, errors, timeouts,
//! signals, concurrency and ptys.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use burrow_protocol::{ExecRequest, GuestErrorCode, GuestMsg, HostMsg, Request, TtySize};
use common::{exec_req, Agent};

#[test]
fn stdout_stderr_and_exit_code() {
    let mut agent = Agent::start();
    let out = agent.exec(&["sh", "-c", "echo hello; echo oops >&2; exit 3"]);
    assert_eq!(out.stdout_str(), "hello\n");
    assert_eq!(out.stderr_str(), "oops\n");
    let exit = out.exit();
    assert_eq!(exit.code, Some(3));
    assert_eq!(exit.signal, None);
    assert!(!exit.timed_out);
}

#[test]
fn large_output_is_chunked_and_complete() {
    let mut agent = Agent::start();
    // 3 MiB of output; `collect` asserts every chunk is <= MAX_CHUNK.
    let out = agent.exec(&["sh", "-c", "head -c 3145728 /dev/zero"]);
    assert_eq!(out.stdout.len(), 3 * 1024 * 1024);
    assert_eq!(out.exit().code, Some(0));
}

#[test]
fn environment_and_cwd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = Agent::start_with(|cmd| {
        cmd.env("BURROW_TEST_BASE", "from-agent")
            .env("BURROW_TEST_OVERRIDE", "old");
    });
    let mut req = exec_req(&[
        "sh",
        "-c",
        "echo $BURROW_TEST_BASE $BURROW_TEST_OVERRIDE $BURROW_TEST_EXTRA; pwd",
    ]);
    req.env.insert("BURROW_TEST_OVERRIDE".into(), "new".into());
    req.env.insert("BURROW_TEST_EXTRA".into(), "extra".into());
    req.cwd = Some(dir.path().to_string_lossy().into_owned());
    let out = agent.call(Request::Exec(req));
    let real = dir.path().canonicalize().expect("canonical");
    assert_eq!(
        out.stdout_str(),
        format!("from-agent new extra\n{}\n", real.display())
    );
}

#[test]
fn invalid_exec_requests() {
    let mut agent = Agent::start();
    let out = agent.call(Request::Exec(ExecRequest::default()));
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);
    let mut req = exec_req(&["true"]);
    req.cwd = Some("relative".into());
    let out = agent.call(Request::Exec(req));
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);
    let mut req = exec_req(&["true"]);
    req.env.insert("A=B".into(), "c".into());
    let out = agent.call(Request::Exec(req));
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);
}

#[test]
fn stdin_from_data_frames() {
    let mut agent = Agent::start();
    let mut req = exec_req(&["cat"]);
    req.stdin = true;
    let id = agent.request(Request::Exec(req));
    agent.data(id, b"hello ");
    agent.data(id, b"world");
    agent.eof(id);
    let out = agent.collect(id);
    assert_eq!(out.stdout_str(), "hello world");
    assert_eq!(out.exit().code, Some(0));
}

#[test]
fn large_stdin_round_trip() {
    let mut agent = Agent::start();
    let mut req = exec_req(&["cat"]);
    req.stdin = true;
    let id = agent.request(Request::Exec(req));
    let payload: Vec<u8> = (0..1024 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    for chunk in payload.chunks(burrow_protocol::MAX_CHUNK) {
        agent.data(id, chunk);
    }
    agent.eof(id);
    let out = agent.collect(id);
    assert_eq!(out.stdout.len(), payload.len());
    assert!(out.stdout == payload);
}

#[test]
fn stdin_is_dev_null_by_default() {
    let mut agent = Agent::start();
    let out = agent.exec(&["cat"]);
    assert_eq!(out.stdout, b"");
    assert_eq!(out.exit().code, Some(0));
}

#[test]
fn missing_program_is_not_found() {
    let mut agent = Agent::start();
    let out = agent.exec(&["burrow-definitely-not-a-program"]);
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
    let out = agent.exec(&["/nonexistent/burrow/program"]);
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
    let mut req = exec_req(&["true"]);
    req.cwd = Some("/nonexistent/burrow/dir".into());
    let out = agent.call(Request::Exec(req));
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
    // The agent is fine afterwards.
    assert_eq!(agent.exec(&["true"]).exit().code, Some(0));
}

#[test]
fn non_executable_is_permission_denied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("script");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut agent = Agent::start();
    let out = agent.exec(&[file.to_str().expect("utf-8")]);
    assert_eq!(out.error().code, GuestErrorCode::PermissionDenied);
}

#[test]
fn timeout_kills_the_process_group() {
    let mut agent = Agent::start();
    let mut req = exec_req(&["sh", "-c", "sleep 30 & sleep 30"]);
    req.timeout_ms = Some(300);
    let started = Instant::now();
    let out = agent.call(Request::Exec(req));
    let exit = out.exit();
    assert!(exit.timed_out);
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn signal_reaches_the_process() {
    let mut agent = Agent::start();
    let id = agent.request(Request::Exec(exec_req(&[
        "sh",
        "-c",
        "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done",
    ])));
    assert!(matches!(agent.next_for(id), GuestMsg::Stdout { .. }));
    agent.send(&HostMsg::Signal {
        id,
        signal: libc::SIGUSR1,
    });
    let out = agent.collect(id);
    assert_eq!(out.stdout_str(), "got-usr1\n");
    assert_eq!(out.exit().code, Some(7));

    let id = agent.request(Request::Exec(exec_req(&["sleep", "30"])));
    std::thread::sleep(Duration::from_millis(100));
    agent.send(&HostMsg::Signal {
        id,
        signal: libc::SIGTERM,
    });
    let exit = agent.collect(id).exit();
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    assert!(!exit.timed_out);
}

#[test]
fn cancel_kills_the_process() {
    let mut agent = Agent::start();
    let id = agent.request(Request::Exec(exec_req(&["sleep", "30"])));
    std::thread::sleep(Duration::from_millis(100));
    agent.send(&HostMsg::Cancel { id });
    let exit = agent.collect(id).exit();
    assert_eq!(exit.signal, Some(libc::SIGKILL));
}

#[test]
fn a_cancel_after_the_exit_with_output_unread_is_an_error_not_a_success() {
    // No credit: the output waits in the pipe while the process exits; a
    // cancel then (a stop's shutdown, or the caller gone) must not answer
    // "exit 0" without the output.
    let mut agent = Agent::start();
    let id = agent.request_windowed(Request::Exec(exec_req(&["echo", "soak"])), 0);
    std::thread::sleep(Duration::from_millis(300));
    agent.send(&HostMsg::Cancel { id });
    let out = agent.collect(id);
    assert_eq!(out.error().code, GuestErrorCode::Aborted);
    assert!(out.stdout_str().is_empty());
}

#[test]
fn background_children_do_not_hold_the_exec_open() {
    let mut agent = Agent::start();
    let started = Instant::now();
    // The background sleep outlives the exec (it is not killed: its group
    // leader is gone), so keep it short.
    let out = agent.exec(&["sh", "-c", "echo before; sleep 3 & echo after"]);
    assert_eq!(out.stdout_str(), "before\nafter\n");
    assert_eq!(out.exit().code, Some(0));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn concurrent_execs_keep_their_output_apart() {
    let mut agent = Agent::start();
    let mut ids = HashMap::new();
    for name in ["a", "b", "c", "d"] {
        let script = format!(
            "for i in 1 2 3 4 5; do echo {name}$i; echo err-{name}$i >&2; sleep 0.02; done; exit {}",
            name.as_bytes()[0] - b'a'
        );
        let id = agent.request(Request::Exec(exec_req(&["sh", "-c", &script])));
        ids.insert(id, name);
    }
    // Collect in reverse order: frames of the others arrive meanwhile.
    let mut order: Vec<u64> = ids.keys().copied().collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    for id in order {
        let name = ids[&id];
        let out = agent.collect(id);
        let expected: String = (1..=5).map(|i| format!("{name}{i}\n")).collect();
        assert_eq!(out.stdout_str(), expected);
        let expected: String = (1..=5).map(|i| format!("err-{name}{i}\n")).collect();
        assert_eq!(out.stderr_str(), expected);
        assert_eq!(out.exit().code, Some(i32::from(name.as_bytes()[0] - b'a')));
    }
}

#[test]
fn tty_exec() {
    let mut agent = Agent::start();
    let mut req = exec_req(&["sh", "-c", "tty; stty size; echo err >&2"]);
    req.tty = Some(TtySize {
        rows: 33,
        cols: 101,
    });
    let out = agent.call(Request::Exec(req));
    let text = out.stdout_str();
    assert!(text.contains("/dev/pts/"), "{text:?}");
    assert!(text.contains("33 101"), "{text:?}");
    // Everything arrives on stdout with a tty.
    assert!(text.contains("err"), "{text:?}");
    assert!(out.stderr.is_empty());
    assert_eq!(out.exit().code, Some(0));
}

#[test]
fn tty_input_resize_and_eof() {
    let mut agent = Agent::start();
    let mut req = exec_req(&[
        "sh",
        "-c",
        "read line; echo \"line=$line\"; stty size; cat; echo done",
    ]);
    req.tty = Some(TtySize { rows: 24, cols: 80 });
    let id = agent.request(Request::Exec(req));
    agent.send(&HostMsg::Resize {
        id,
        size: TtySize {
            rows: 50,
            cols: 132,
        },
    });
    agent.data(id, b"hello\n");
    // End of input for `cat` on a terminal.
    agent.eof(id);
    let out = agent.collect(id);
    let text = out.stdout_str();
    assert!(text.contains("line=hello"), "{text:?}");
    assert!(text.contains("50 132"), "{text:?}");
    assert!(text.contains("done"), "{text:?}");
    assert_eq!(out.exit().code, Some(0));
}

/// What a guest process inherits: only fds 0-2 (nothing of the channel or
/// of other requests, even while those are in flight), no blocked or
/// ignored signals, its own session.
#[test]
fn children_inherit_a_clean_state() {
    let mut agent = Agent::start();
    let mut busy = exec_req(&["cat"]);
    busy.stdin = true;
    let busy_id = agent.request(Request::Exec(busy));
    let mut tty = exec_req(&["cat"]);
    tty.tty = Some(TtySize { rows: 10, cols: 10 });
    let tty_id = agent.request(Request::Exec(tty));
    std::thread::sleep(Duration::from_millis(100));

    // `ls` lists its own fds: 0-2 plus the one it reads the directory with.
    let out = agent.exec(&["ls", "/proc/self/fd"]);
    let fds: Vec<String> = out.stdout_str().lines().map(String::from).collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{}", out.stdout_str());

    let status = agent.exec(&["cat", "/proc/self/status"]).stdout_str();
    assert!(status.contains("SigBlk:\t0000000000000000"), "{status}");
    assert!(status.contains("SigIgn:\t0000000000000000"), "{status}");

    // pid == session id: `setsid` made it a session (and group) leader.
    let stat = agent.exec(&["cat", "/proc/self/stat"]).stdout_str();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let pid = stat.split_whitespace().next().unwrap_or("");
    assert_eq!(fields.get(2).copied(), Some(pid), "pgrp: {stat}");
    assert_eq!(fields.get(3).copied(), Some(pid), "session: {stat}");

    agent.eof(busy_id);
    assert_eq!(agent.collect(busy_id).exit().code, Some(0));
    agent.send(&HostMsg::Cancel { id: tty_id });
    assert_eq!(agent.collect(tty_id).exit().signal, Some(libc::SIGKILL));
}
