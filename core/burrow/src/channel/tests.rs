//! Protocol versions across builds: a host of this build with an agent or
//! a supervisor that speaks only protocol 1, and the windows of protocol 2
//! through a relay. The far ends are scripted over in-memory streams.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use burrow_protocol::{
    encode, encode_for, GuestErrorCode, GuestMsg, HostMsg, Identity, Request, Response,
    DEFAULT_WINDOW, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{duplex, split, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};

use super::client::{AgentClient, Handshake};
use super::frames::read_frame;
use super::relay::Relay;
use crate::model::SandboxId;

const HELLO: Duration = Duration::from_secs(5);

type Far = (ReadHalf<DuplexStream>, WriteHalf<DuplexStream>);

/// A connected pair: our halves and the far end's.
fn pair() -> ((ReadHalf<DuplexStream>, WriteHalf<DuplexStream>), Far) {
    let (a, b) = duplex(1 << 20);
    (split(a), split(b))
}

fn hello(version: u32, identity: Option<Identity>) -> GuestMsg {
    GuestMsg::Hello {
        version,
        agent_version: "old".into(),
        identity,
    }
}

/// An agent of protocol 1: says hello first, takes only a hello of 1, and
/// answers one request (which must carry no window) with its output in
/// JSON frames.
async fn old_agent((mut rd, mut wr): Far) {
    wr.write_all(&encode(&hello(1, None))).await.unwrap();
    match read_frame::<_, HostMsg>(&mut rd).await.unwrap() {
        Some(HostMsg::Hello { version: 1, .. }) => {}
        other => panic!("an agent of protocol 1 was sent {other:?}"),
    }
    loop {
        match read_frame::<_, HostMsg>(&mut rd).await {
            Ok(Some(HostMsg::Request { id, window, .. })) => {
                assert_eq!(window, None, "no window for a protocol 1 agent");
                let out = GuestMsg::Stdout {
                    id,
                    data: b"old".to_vec().into(),
                };
                wr.write_all(&encode(&out)).await.unwrap();
                let done = GuestMsg::Response {
                    id,
                    result: Ok(Response::Done),
                };
                wr.write_all(&encode(&done)).await.unwrap();
            }
            Ok(Some(_)) => {}
            _ => return,
        }
    }
}

/// Runs `request` on `client` and collects its output and response.
async fn run(client: &AgentClient) -> (Vec<u8>, Option<Response>) {
    let mut h = client.request(Request::Ping).unwrap();
    let mut out = Vec::new();
    while let Some(m) = h.next().await {
        match m {
            GuestMsg::Stdout { data, .. } => out.extend_from_slice(&data.0),
            GuestMsg::Response { result, .. } => return (out, result.ok()),
            _ => {}
        }
    }
    (out, None)
}

#[tokio::test]
async fn an_agent_of_protocol_1_gets_a_protocol_1_session() {
    let ((rd, wr), far) = pair();
    tokio::spawn(old_agent(far));
    let client = AgentClient::connect(rd, wr, Handshake::Agent, HELLO)
        .await
        .unwrap();
    assert_eq!(client.version(), 1);
    assert_eq!(run(&client).await, (b"old".to_vec(), Some(Response::Done)));
}

#[tokio::test]
async fn a_supervisor_of_protocol_1_refuses_2_and_takes_1_again() {
    // The old relay: refuses any version but its own.
    let old_relay = |(mut rd, mut wr): Far| async move {
        match read_frame::<_, HostMsg>(&mut rd).await.unwrap() {
            Some(HostMsg::Hello { version: 1, expect }) => {
                let id = expect.unwrap();
                wr.write_all(&encode(&hello(1, Some(id)))).await.unwrap();
                old_agent_session(rd, wr).await;
            }
            Some(HostMsg::Hello { version, .. }) => {
                let fatal = GuestMsg::Fatal {
                    error: burrow_protocol::GuestError::new(
                        GuestErrorCode::Protocol,
                        format!("protocol {version} is not 1"),
                    ),
                };
                wr.write_all(&encode(&fatal)).await.unwrap();
            }
            other => panic!("{other:?}"),
        }
    };
    let expect = Identity {
        sandbox_id: "sb_x".into(),
        generation: 1,
    };
    let ((rd, wr), far) = pair();
    tokio::spawn(old_relay(far));
    let refused = AgentClient::connect(rd, wr, Handshake::client(Some(expect.clone())), HELLO)
        .await
        .unwrap_err();
    assert!(refused.version_refused());
    let ((rd, wr), far) = pair();
    tokio::spawn(old_relay(far));
    let how = Handshake::Client {
        expect: Some(expect),
        version: OLDEST_PROTOCOL_VERSION,
    };
    let client = AgentClient::connect(rd, wr, how, HELLO).await.unwrap();
    assert_eq!(client.version(), 1);
    assert_eq!(run(&client).await, (b"old".to_vec(), Some(Response::Done)));
}

/// The request loop of [`old_agent`], after a hello done elsewhere.
async fn old_agent_session(mut rd: ReadHalf<DuplexStream>, mut wr: WriteHalf<DuplexStream>) {
    while let Ok(Some(msg)) = read_frame::<_, HostMsg>(&mut rd).await {
        if let HostMsg::Request { id, window, .. } = msg {
            assert_eq!(window, None);
            for out in [
                GuestMsg::Stdout {
                    id,
                    data: b"old".to_vec().into(),
                },
                GuestMsg::Response {
                    id,
                    result: Ok(Response::Done),
                },
            ] {
                wr.write_all(&encode(&out)).await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn a_relay_over_a_protocol_1_agent_answers_its_clients_with_1() {
    let ((rd, wr), far) = pair();
    tokio::spawn(old_agent(far));
    let id = SandboxId::new();
    let relay = Relay::builder(&id, 1).connect(rd, wr).await.unwrap();
    let stream = relay.connect();
    let expect = Identity {
        sandbox_id: id.to_string(),
        generation: 1,
    };
    let client = AgentClient::connect(
        stream.reader,
        stream.writer,
        Handshake::client(Some(expect)),
        HELLO,
    )
    .await
    .unwrap();
    assert_eq!(client.version(), 1, "flow control needs both hops");
    assert_eq!(run(&client).await, (b"old".to_vec(), Some(Response::Done)));
}

#[tokio::test]
async fn an_agent_that_overruns_the_window_fails_the_request() {
    // A broken (or hostile) agent of protocol 2: sends past its credit.
    let ((rd, wr), (mut frd, mut fwr)) = pair();
    tokio::spawn(async move {
        fwr.write_all(&encode(&hello(PROTOCOL_VERSION, None)))
            .await
            .unwrap();
        let _ = read_frame::<_, HostMsg>(&mut frd).await;
        while let Ok(Some(msg)) = read_frame::<_, HostMsg>(&mut frd).await {
            if let HostMsg::Request { id, window, .. } = msg {
                assert_eq!(window, Some(DEFAULT_WINDOW));
                let chunk = vec![0u8; burrow_protocol::MAX_CHUNK];
                for _ in 0..=(DEFAULT_WINDOW as usize / chunk.len()) {
                    let out = GuestMsg::Stdout {
                        id,
                        data: chunk.clone().into(),
                    };
                    if fwr.write_all(&encode_for(&out, 2)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let client = AgentClient::connect(rd, wr, Handshake::Agent, HELLO)
        .await
        .unwrap();
    assert_eq!(client.version(), PROTOCOL_VERSION);
    let mut h = client.request(Request::Ping).unwrap();
    // Not read: nothing is granted back, so the fifth chunk overruns.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut chunks = 0;
    loop {
        match h.next().await.unwrap() {
            GuestMsg::Stdout { .. } => chunks += 1,
            GuestMsg::Response { result: Err(e), .. } => {
                assert_eq!(e.code, GuestErrorCode::Protocol);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(chunks, DEFAULT_WINDOW as usize / burrow_protocol::MAX_CHUNK);
}

/// A request opened just as the reader ends (the peer closed the channel,
/// as a supervisor does when its run ends) is refused as lost. It used to
/// be registered after the reader had ended every request, and waited
/// forever for an answer: the hang of a `ping` on a reclaimed sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_opened_as_the_channel_closes_is_lost_not_left_waiting() {
    let ((rd, wr), (far_rd, mut far_wr)) = pair();
    let agent = tokio::spawn(async move {
        far_wr.write_all(&encode(&hello(1, None))).await.unwrap();
        let mut far_rd = far_rd;
        let _ = read_frame::<_, HostMsg>(&mut far_rd).await;
        (far_rd, far_wr)
    });
    let client = AgentClient::connect(rd, wr, Handshake::Agent, HELLO)
        .await
        .unwrap();
    let far = agent.await.unwrap();
    let opened = tokio::task::spawn_blocking(move || {
        // The window held open: the peer goes away and the reader ends all
        // requests after the request started opening, before it registers.
        let closing = client.clone();
        super::client::tests_hook::set_before_open(move || {
            drop(far);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !closing.is_closed() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the reader never ended"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        client.request(Request::Ping)
    })
    .await
    .unwrap();
    match opened {
        Err(e) => assert_eq!(e.code(), crate::ErrorCode::Protocol),
        Ok(mut handle) => {
            let end = tokio::time::timeout(Duration::from_secs(10), handle.next()).await;
            panic!("a request on a closed channel was registered (next: {end:?})");
        }
    }
}
