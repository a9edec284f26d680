#![allow(clippy::unwrap_used)]
//! Handshake, framing robustness, request-id handling and shutdown.

mod common;

use std::time::{Duration, Instant};

use burrow_protocol::{
    Control, GuestErrorCode, GuestMsg, HostMsg, Request, Response, PROTOCOL_VERSION,
};
use common::{exec_req, process_gone, raw_frame, Agent};

#[test]
fn ping() {
    let mut agent = Agent::start();
    let out = agent.call(Request::Ping);
    assert_eq!(out.result, Ok(Response::Pong));
}

#[test]
fn bad_hello_version_is_fatal() {
    let mut agent = Agent::spawn(|_| {});
    agent.send(&HostMsg::Hello {
        version: PROTOCOL_VERSION + 41,
        expect: None,
    });
    // The agent's own hello comes first.
    assert!(matches!(
        agent.next_unaddressed(),
        Some(GuestMsg::Hello { .. })
    ));
    match agent.next_unaddressed() {
        Some(GuestMsg::Fatal { error }) => assert_eq!(error.code, GuestErrorCode::Protocol),
        other => panic!("expected fatal, got {other:?}"),
    }
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(!status.success());
}

#[test]
fn request_before_hello_is_fatal() {
    let mut agent = Agent::spawn(|_| {});
    agent.send(&HostMsg::Request {
        id: 1,
        body: Request::Ping,
        window: None,
    });
    assert!(matches!(
        agent.next_unaddressed(),
        Some(GuestMsg::Hello { .. })
    ));
    assert!(matches!(
        agent.next_unaddressed(),
        Some(GuestMsg::Fatal { error }) if error.code == GuestErrorCode::Protocol
    ));
    assert!(agent.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn malformed_frames_are_survived() {
    let mut agent = Agent::start();
    agent.send_raw(&raw_frame(b"{this is not json"));
    agent.send_raw(&raw_frame(b"{\"t\":\"data\",\"id\":1}"));
    agent.send_raw(&raw_frame(b""));
    let out = agent.call(Request::Ping);
    assert_eq!(out.result, Ok(Response::Pong));
}

#[test]
fn malformed_requests_get_an_answer() {
    let mut agent = Agent::start();
    // An op this agent does not know (a newer host): Unsupported.
    agent.send_raw(&raw_frame(
        br#"{"t":"request","id":77,"body":{"op":"frobnicate"}}"#,
    ));
    let out = agent.collect(77);
    assert_eq!(out.error().code, GuestErrorCode::Unsupported);
    // A known op with bad fields: InvalidArgument.
    agent.send_raw(&raw_frame(
        br#"{"t":"request","id":78,"body":{"op":"stat","path":5}}"#,
    ));
    let out = agent.collect(78);
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);
    assert_eq!(agent.call(Request::Ping).result, Ok(Response::Pong));
}

#[test]
fn oversized_frame_is_fatal() {
    let mut agent = Agent::start();
    agent.send_raw(&u32::MAX.to_be_bytes());
    match agent.next_unaddressed() {
        Some(GuestMsg::Fatal { error }) => assert_eq!(error.code, GuestErrorCode::Protocol),
        other => panic!("expected fatal, got {other:?}"),
    }
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(!status.success());
}

#[test]
fn unknown_ids_are_ignored() {
    let mut agent = Agent::start();
    agent.send(&HostMsg::Data {
        id: 999,
        data: b"x".as_slice().into(),
    });
    agent.send(&HostMsg::Eof { id: 999 });
    agent.send(&HostMsg::Signal { id: 999, signal: 9 });
    agent.send(&HostMsg::Resize {
        id: 999,
        size: burrow_protocol::TtySize { rows: 1, cols: 1 },
    });
    agent.send(&HostMsg::Cancel { id: 999 });
    assert_eq!(agent.call(Request::Ping).result, Ok(Response::Pong));
}

#[test]
fn duplicate_in_flight_id_is_rejected() {
    let mut agent = Agent::start();
    let id = agent.request(Request::Exec(exec_req(&["sleep", "30"])));
    agent.send(&HostMsg::Request {
        id,
        body: Request::Ping,
        window: None,
    });
    match agent.next_for(id) {
        GuestMsg::Response { result: Err(e), .. } => {
            assert_eq!(e.code, GuestErrorCode::InvalidArgument)
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // The original request is untouched.
    agent.send(&HostMsg::Cancel { id });
    let exit = agent.collect(id).exit();
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    // And the id can be reused once finished.
    agent.send(&HostMsg::Request {
        id,
        body: Request::Ping,
        window: None,
    });
    assert_eq!(agent.collect(id).result, Ok(Response::Pong));
}

#[test]
fn control_requests_are_unsupported() {
    let mut agent = Agent::start();
    agent.send(&HostMsg::Control {
        id: 5,
        body: Control::Status,
    });
    assert_eq!(agent.collect(5).error().code, GuestErrorCode::Unsupported);
}

/// Starts `sleep 1000` through the agent and returns its request id and pid.
fn start_sleeper(agent: &mut Agent) -> (u64, i32) {
    let id = agent.request(Request::Exec(exec_req(&[
        "sh",
        "-c",
        "echo $$; exec sleep 1000",
    ])));
    let pid = match agent.next_for(id) {
        GuestMsg::Stdout { data, .. } => String::from_utf8_lossy(&data.0)
            .trim()
            .parse::<i32>()
            .expect("pid"),
        other => panic!("expected the pid, got {other:?}"),
    };
    (id, pid)
}

#[test]
fn channel_eof_kills_processes_and_exits() {
    let mut agent = Agent::start();
    let (_, pid) = start_sleeper(&mut agent);
    assert!(!process_gone(pid));
    let closed = Instant::now();
    agent.close();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(status.success(), "{status:?}");
    assert!(closed.elapsed() < Duration::from_secs(5));
    assert!(common::eventually(Duration::from_secs(5), || process_gone(
        pid
    )));
}

#[test]
fn shutdown_request() {
    let mut agent = Agent::start();
    let (exec_id, pid) = start_sleeper(&mut agent);
    let id = agent.request(Request::Shutdown { grace_ms: 2000 });
    // The running exec ends first (SIGTERM), then the shutdown is answered.
    let exit = agent.collect(exec_id).exit();
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    assert_eq!(agent.collect(id).result, Ok(Response::Done));
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(status.success(), "{status:?}");
    assert!(process_gone(pid));
}

#[test]
fn shutdown_kills_after_grace() {
    let mut agent = Agent::start();
    // Ignores SIGTERM, so only SIGKILL after the grace ends it.
    let exec_id = agent.request(Request::Exec(exec_req(&[
        "sh",
        "-c",
        "trap '' TERM; echo ready; while :; do sleep 0.05; done",
    ])));
    assert!(matches!(agent.next_for(exec_id), GuestMsg::Stdout { .. }));
    let started = Instant::now();
    let id = agent.request(Request::Shutdown { grace_ms: 300 });
    let exit = agent.collect(exec_id).exit();
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(agent.collect(id).result, Ok(Response::Done));
    assert!(agent.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn sigterm_to_agent_shuts_down() {
    let mut agent = Agent::start();
    let (_, pid) = start_sleeper(&mut agent);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(status.success(), "{status:?}");
    assert!(common::eventually(Duration::from_secs(5), || process_gone(
        pid
    )));
}

#[test]
fn requests_after_shutdown_began_are_refused() {
    let mut agent = Agent::start();
    let exec_id = agent.request(Request::Exec(exec_req(&[
        "sh",
        "-c",
        "trap '' TERM; echo ready; while :; do sleep 0.05; done",
    ])));
    assert!(matches!(agent.next_for(exec_id), GuestMsg::Stdout { .. }));
    let id = agent.request(Request::Shutdown { grace_ms: 1000 });
    // Refused however the agent's threads are scheduled: it comes after
    // the Shutdown on the channel.
    let out = agent.call(Request::Ping);
    assert_eq!(out.error().code, GuestErrorCode::Unavailable);
    assert_eq!(agent.collect(id).result, Ok(Response::Done));
}
