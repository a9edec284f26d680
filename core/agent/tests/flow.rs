//! Flow control in the agent (protocol 2): a request with a window never
//! sends more output than its credit, waits (its process blocked on a
//! full pipe, nothing dropped) until the host grants more, and drops input
//! beyond the host's credit.

mod common;

use std::time::{Duration, Instant};

use burrow_protocol::{ExecRequest, GuestMsg, Request, Response};
use common::{exec_req, Agent};

/// How long "nothing more comes" is watched for.
const QUIET: Duration = Duration::from_millis(700);

/// Output (stdout and stderr together) of request `id` until `want`
/// bytes came; panics on its response or on a stall of 20 s.
fn take_output(agent: &mut Agent, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        match agent.next_within(Duration::from_secs(20)) {
            Some(Some(GuestMsg::Stdout { data, .. } | GuestMsg::Stderr { data, .. })) => {
                got.extend_from_slice(&data.0)
            }
            Some(Some(GuestMsg::Window { .. })) => {}
            other => panic!("expected output, got {other:?} after {} bytes", got.len()),
        }
    }
    got
}

/// Asserts that nothing but input credit arrives for a while.
fn assert_quiet(agent: &mut Agent) {
    let until = Instant::now() + QUIET;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match agent.next_within(left) {
            None => return,
            Some(Some(GuestMsg::Window { .. })) => {}
            Some(other) => panic!("expected a stall, got {other:?}"),
        }
    }
}

/// The rest of request `id`: output granted as it comes (in steps of
/// `step`), until the response.
fn finish(agent: &mut Agent, id: u64, step: u32) -> (Vec<u8>, Response) {
    let mut out = Vec::new();
    loop {
        match agent.next_within(Duration::from_secs(20)) {
            Some(Some(GuestMsg::Stdout { data, .. } | GuestMsg::Stderr { data, .. })) => {
                assert!(data.0.len() <= step as usize, "a frame within the credit");
                out.extend_from_slice(&data.0);
                agent.window(id, data.0.len() as u32);
            }
            Some(Some(GuestMsg::Response { result, .. })) => {
                return (out, result.expect("the request succeeded"))
            }
            Some(Some(GuestMsg::Window { .. })) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn exec_output_stops_at_the_window_and_resumes_on_credit() {
    let mut agent = Agent::start();
    let window = 64 * 1024;
    let total = 1 << 20;
    let id = agent.request_windowed(
        Request::Exec(exec_req(&["head", "-c", &total.to_string(), "/dev/zero"])),
        window,
    );
    let first = take_output(&mut agent, window as usize);
    assert_eq!(first.len(), window as usize, "exactly the window");
    // The process is blocked on its pipe, not finished and not dropped.
    assert_quiet(&mut agent);
    agent.window(id, window);
    let (rest, response) = finish(&mut agent, id, window);
    assert_eq!(first.len() + rest.len(), total, "every byte, none dropped");
    assert!(rest.iter().all(|b| *b == 0));
    match response {
        Response::Exit(status) => assert_eq!(status.code, Some(0)),
        other => panic!("expected an exit, got {other:?}"),
    }
}

#[test]
fn output_left_in_the_pipe_at_exit_waits_for_credit() {
    // The process exits at once with its output in the pipe; the reader
    // grants nothing for longer than the agent drains after an exit.
    let mut agent = Agent::start();
    let script = "i=0; while [ $i -lt 600 ]; do echo line-$i; i=$((i+1)); done";
    let id = agent.request_windowed(Request::Exec(exec_req(&["sh", "-c", script])), 100);
    let first = take_output(&mut agent, 100);
    assert_eq!(first.len(), 100);
    std::thread::sleep(Duration::from_millis(1500));
    assert_quiet(&mut agent);
    agent.window(id, 100);
    let (rest, response) = finish(&mut agent, id, 100);
    let text = String::from_utf8([first, rest].concat()).expect("utf-8");
    let want: String = (0..600).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(text, want, "the whole output, in order");
    assert!(matches!(response, Response::Exit(s) if s.code == Some(0)));
}

#[test]
fn file_reads_wait_for_credit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big");
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &content).expect("write");
    let mut agent = Agent::start();
    let window = 100_000;
    let id = agent.request_windowed(
        Request::ReadFile {
            path: path.to_string_lossy().into_owned(),
        },
        window,
    );
    let first = take_output(&mut agent, window as usize);
    assert_eq!(first.len(), window as usize);
    assert_quiet(&mut agent);
    agent.window(id, window);
    let (rest, response) = finish(&mut agent, id, window);
    assert_eq!([first, rest].concat(), content);
    assert_eq!(response, Response::Done);
}

#[test]
fn input_is_granted_back_as_written_and_an_overrun_is_dropped() {
    let mut agent = Agent::start();
    // A window of 1 byte in each direction: "ab" in one frame overruns it.
    let id = agent.request_windowed(
        Request::Exec(ExecRequest {
            stdin: true,
            ..exec_req(&["cat"])
        }),
        1,
    );
    agent.data(id, b"ab");
    agent.data(id, b"c");
    // The one byte of credit comes back once "c" is in cat's stdin.
    let mut out = Vec::new();
    loop {
        match agent.next_within(Duration::from_secs(20)) {
            Some(Some(GuestMsg::Window { id: got, bytes })) => {
                assert_eq!((got, bytes), (id, 1));
                break;
            }
            Some(Some(GuestMsg::Stdout { data, .. })) => out.extend_from_slice(&data.0),
            other => panic!("expected input credit, got {other:?}"),
        }
    }
    agent.data(id, b"d");
    agent.eof(id);
    agent.window(id, 1 << 20);
    let (rest, response) = finish(&mut agent, id, 1 << 20);
    out.extend_from_slice(&rest);
    assert_eq!(
        out, b"cd",
        "the overrunning frame was dropped, the rest kept"
    );
    assert!(matches!(response, Response::Exit(s) if s.code == Some(0)));
}
