#![allow(clippy::unwrap_used)]
//! Malformed and hostile frames on a supervisor socket get a typed `Fatal`
//! answer and a closed connection; the sandbox itself is untouched.

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use burrow_protocol::{
    encode, GuestErrorCode, GuestMsg, HostMsg, Identity, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use common::TestHome;

fn read_msg(s: &mut UnixStream) -> Option<GuestMsg> {
    burrow_protocol::read_message(s).ok().flatten()
}

fn expect_fatal(s: &mut UnixStream, code: GuestErrorCode) {
    match read_msg(s) {
        Some(GuestMsg::Fatal { error }) => assert_eq!(error.code, code),
        other => panic!("expected Fatal({code:?}), got {other:?}"),
    }
    // ...and then the supervisor closes the connection.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_are_refused_and_change_nothing() {
    let home = TestHome::new().await;
    let sb = home.builder("frames").create().await.unwrap();
    let generation = sb.generation();
    let socket = burrow::internal::Home::at(home.path())
        .unwrap()
        .socket_path(sb.id());
    let connect = || {
        let s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };

    // An oversized length prefix instead of a hello.
    let mut s = connect();
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    expect_fatal(&mut s, GuestErrorCode::Protocol);

    // A well-framed body that is not JSON.
    let mut s = connect();
    s.write_all(&5u32.to_be_bytes()).unwrap();
    s.write_all(b"{oops").unwrap();
    expect_fatal(&mut s, GuestErrorCode::Protocol);

    // A protocol version older than any spoken.
    let mut s = connect();
    s.write_all(&encode(&HostMsg::Hello {
        version: OLDEST_PROTOCOL_VERSION - 1,
        expect: None,
    }))
    .unwrap();
    expect_fatal(&mut s, GuestErrorCode::Protocol);

    // A newer one is answered with this build's, and protocol 1 with 1.
    for (offered, answered) in [
        (PROTOCOL_VERSION + 1, PROTOCOL_VERSION),
        (OLDEST_PROTOCOL_VERSION, OLDEST_PROTOCOL_VERSION),
    ] {
        let mut s = connect();
        s.write_all(&encode(&HostMsg::Hello {
            version: offered,
            expect: None,
        }))
        .unwrap();
        match read_msg(&mut s) {
            Some(GuestMsg::Hello { version, .. }) => assert_eq!(version, answered),
            other => panic!("expected hello, got {other:?}"),
        }
    }

    // A client expecting another sandbox (or another generation).
    let mut s = connect();
    let wrong = Identity {
        sandbox_id: burrow::SandboxId::new().to_string(),
        generation,
    };
    s.write_all(&encode(&HostMsg::Hello {
        version: PROTOCOL_VERSION,
        expect: Some(wrong),
    }))
    .unwrap();
    expect_fatal(&mut s, GuestErrorCode::IdentityMismatch);
    let mut s = connect();
    let stale = Identity {
        sandbox_id: sb.id().to_string(),
        generation: generation + 7,
    };
    s.write_all(&encode(&HostMsg::Hello {
        version: PROTOCOL_VERSION,
        expect: Some(stale),
    }))
    .unwrap();
    expect_fatal(&mut s, GuestErrorCode::IdentityMismatch);

    // A good hello, then garbage mid-session.
    let mut s = connect();
    let me = Identity {
        sandbox_id: sb.id().to_string(),
        generation,
    };
    s.write_all(&encode(&HostMsg::Hello {
        version: PROTOCOL_VERSION,
        expect: Some(me),
    }))
    .unwrap();
    match read_msg(&mut s) {
        Some(GuestMsg::Hello {
            identity: Some(id), ..
        }) => assert_eq!(id.sandbox_id, sb.id().as_str()),
        other => panic!("expected hello, got {other:?}"),
    }
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(b"\xff\xfe\xfd").unwrap();
    expect_fatal(&mut s, GuestErrorCode::Protocol);

    // Data for a request id that does not exist is ignored, not fatal.
    let mut s = connect();
    let me = Identity {
        sandbox_id: sb.id().to_string(),
        generation,
    };
    s.write_all(&encode(&HostMsg::Hello {
        version: PROTOCOL_VERSION,
        expect: Some(me),
    }))
    .unwrap();
    assert!(matches!(read_msg(&mut s), Some(GuestMsg::Hello { .. })));
    s.write_all(&encode(&HostMsg::Data {
        id: 999,
        data: b"x".to_vec().into(),
    }))
    .unwrap();
    s.write_all(&encode(&HostMsg::Request {
        id: 1,
        body: burrow_protocol::Request::Ping,
        window: None,
    }))
    .unwrap();
    match read_msg(&mut s) {
        Some(GuestMsg::Response {
            id: 1,
            result: Ok(burrow_protocol::Response::Pong),
        }) => {}
        other => panic!("expected pong, got {other:?}"),
    }
    drop(s);

    // The sandbox is untouched.
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, burrow::Status::Running);
    assert_eq!(info.generation, generation);
    assert_eq!(
        sb.exec(["echo", "still here"]).await.unwrap().stdout_str(),
        "still here\n"
    );
    sb.destroy().await.unwrap();
}
