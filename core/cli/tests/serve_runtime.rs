#![allow(clippy::unwrap_used)]
//! The runtime stream through `burrow serve` carries runtime requests only:
//! a real server process, a real sandbox, a raw client that upgrades
//! `/v1/sandboxes/{id}/runtime` and speaks the protocol itself, sending the
//! lifecycle control frames the lifecycle API owns (each refused, the
//! sandbox untouched), and the remote backend's own use of the stream
//! (exec with several MiB each way, spawn with its `status` barrier) going
//! on unchanged.

use burrow_cli_testkit as common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use burrow::protocol::{
    read_message, write_message, Control, ExecRequest, GuestErrorCode, GuestMsg, HostMsg, Identity,
    Request, Response, MAX_FRAME_LEN, PROTOCOL_VERSION,
};
use burrow::{api, Backend, ExecOptions, RemoteBackend, Sandbox, SandboxId, Status};
use common::gateway::blocking;
use common::serve::{http, read_head, ServeEnv};
use common::TestHome;

/// A client of the runtime stream that speaks the protocol by hand.
struct Raw {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Raw {
    /// Upgrades `GET /v1/sandboxes/{id}/runtime` and says hello, expecting
    /// run `generation` of `id`.
    fn open(url: &str, token: &str, id: &str, generation: u64) -> Raw {
        let authority = url.strip_prefix("http://").unwrap();
        let mut w = TcpStream::connect(authority).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            w,
            "GET /v1/sandboxes/{id}/runtime HTTP/1.1\r\nHost: {authority}\r\n\
             Authorization: Bearer {token}\r\nConnection: Upgrade\r\nUpgrade: {}\r\n\r\n",
            api::UPGRADE_PROTOCOL
        )
        .unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        let (status, headers) = read_head(&mut r);
        assert_eq!(status, 101, "{headers:?}");
        let announced = headers
            .iter()
            .find(|(k, _)| k == api::HEADER_GENERATION)
            .map(|(_, v)| v.parse::<u64>().unwrap());
        assert_eq!(announced, Some(generation));
        let mut raw = Raw { r, w };
        let identity = Identity {
            sandbox_id: id.to_owned(),
            generation,
        };
        raw.send(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect: Some(identity.clone()),
        });
        match raw.recv() {
            GuestMsg::Hello {
                version,
                identity: got,
                ..
            } => assert_eq!((version, got), (PROTOCOL_VERSION, Some(identity))),
            other => panic!("no hello: {other:?}"),
        }
        raw
    }

    fn send(&mut self, msg: &HostMsg) {
        write_message(&mut self.w, msg, PROTOCOL_VERSION).unwrap();
        self.w.flush().unwrap();
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    fn recv(&mut self) -> GuestMsg {
        self.try_recv().expect("the stream ended")
    }

    /// The next frame; `None` at the end of the stream.
    fn try_recv(&mut self) -> Option<GuestMsg> {
        read_message(&mut self.r).unwrap()
    }

    fn control(&mut self, id: u64, body: Control) {
        self.send(&HostMsg::Control { id, body });
    }
}

/// The error code of a response to `id`.
fn refusal(msg: GuestMsg, want: u64) -> GuestErrorCode {
    match msg {
        GuestMsg::Response { id, result: Err(e) } if id == want => e.code,
        other => panic!("no error response to {want}: {other:?}"),
    }
}

/// Every control that acts on the sandbox's lifecycle.
fn lifecycle_controls(scratch: &Path) -> Vec<Control> {
    vec![
        Control::Stop {
            grace_ms: 0,
            owner_exited: false,
        },
        Control::Stop {
            grace_ms: 0,
            owner_exited: true,
        },
        Control::Drain,
        Control::Kill,
        Control::Detach,
        Control::Claim {
            name: "stolen".into(),
            owner: None,
        },
        Control::Touch,
        Control::Pause,
        Control::Resume,
        Control::Reload,
        Control::Metrics,
        Control::Snapshot {
            layer: scratch.join("layer.tar").display().to_string(),
        },
        Control::SaveGuest {
            dir: scratch.join("saved").display().to_string(),
        },
    ]
}

/// `seq 1 n` as the guest prints it.
fn seq(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

/// `n` bytes of every value, in no simple pattern.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The raw client's session: every lifecycle control refused, `status`
/// and requests served, and refusals written between the frames of an
/// exec's output streaming at the same time.
fn raw_session(url: &str, token: &str, id: &str, generation: u64, scratch: &Path) {
    let mut raw = Raw::open(url, token, id, generation);
    let controls = lifecycle_controls(scratch);
    for (id, body) in (1..).zip(controls.clone()) {
        raw.control(id, body.clone());
        assert_eq!(
            refusal(raw.recv(), id),
            GuestErrorCode::Unsupported,
            "{body:?}"
        );
    }
    // Requests that would end or suspend the run are lifecycle too.
    for (id, body) in [
        (90, Request::Shutdown { grace_ms: 0 }),
        (91, Request::Suspend),
    ] {
        raw.send(&HostMsg::Request {
            id,
            body: body.clone(),
            window: None,
        });
        assert_eq!(
            refusal(raw.recv(), id),
            GuestErrorCode::Unsupported,
            "{body:?}"
        );
    }
    // What the library sends on this stream still passes: the `status`
    // barrier, and requests.
    raw.control(100, Control::Status);
    match raw.recv() {
        GuestMsg::Response {
            id: 100,
            result: Ok(Response::Supervisor { .. }),
        } => {}
        other => panic!("status: {other:?}"),
    }
    raw.send(&HostMsg::Request {
        id: 101,
        body: Request::Ping,
        window: None,
    });
    match raw.recv() {
        GuestMsg::Response {
            id: 101,
            result: Ok(Response::Pong),
        } => {}
        other => panic!("ping: {other:?}"),
    }

    // Refusals while output streams (binary frames, no window): each one
    // lands between two frames, and the output arrives whole.
    let expected = seq(300_000);
    raw.send(&HostMsg::Request {
        id: 200,
        body: Request::Exec(ExecRequest {
            argv: vec!["seq".into(), "1".into(), "300000".into()],
            ..Default::default()
        }),
        window: None,
    });
    let (mut stdout, mut refused, mut exit) = (Vec::new(), Vec::new(), None);
    let mut sent = false;
    while exit.is_none() {
        match raw.recv() {
            GuestMsg::Stdout { id: 200, data } => {
                stdout.extend_from_slice(&data.0);
                if !sent {
                    sent = true;
                    for (id, body) in (201..).zip(controls.clone()) {
                        raw.control(id, body);
                    }
                }
            }
            GuestMsg::Response {
                id: 200,
                result: Ok(Response::Exit(status)),
            } => exit = Some(status),
            GuestMsg::Response { id, result: Err(e) } if id > 200 => refused.push((id, e.code)),
            other => panic!("unexpected during the exec: {other:?}"),
        }
    }
    assert_eq!(exit.unwrap().code, Some(0));
    assert!(stdout == expected, "{} bytes of output", stdout.len());
    while refused.len() < controls.len() {
        let id = 201 + refused.len() as u64;
        refused.push((id, refusal(raw.recv(), id)));
    }
    let want: Vec<_> = (201..)
        .take(controls.len())
        .map(|id| (id, GuestErrorCode::Unsupported))
        .collect();
    assert_eq!(refused, want);
}

/// A frame longer than the protocol allows ends the stream with a `fatal`
/// of code `protocol`, the rest never read.
fn oversized_frame(url: &str, token: &str, id: &str, generation: u64) {
    let mut raw = Raw::open(url, token, id, generation);
    let word = (MAX_FRAME_LEN as u32 + 1).to_be_bytes();
    raw.send_bytes(&word);
    raw.send_bytes(&[b'x'; 1024]);
    match raw.recv() {
        GuestMsg::Fatal { error } => assert_eq!(error.code, GuestErrorCode::Protocol),
        other => panic!("no fatal: {other:?}"),
    }
    assert!(raw.try_recv().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runtime_stream_refuses_lifecycle_control_and_carries_the_rest_intact() {
    let th = TestHome::new().await;
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = ServeEnv::new(th.path(), &sqlite).set("IDLE_TIMEOUT", "0");
    let token = env.create_token("t");
    let server = env.start("a");
    let remote: Arc<dyn Backend> =
        Arc::new(RemoteBackend::connect(&server.url, Some(token.clone())).unwrap());
    let sb = Sandbox::builder("rt")
        .image(common::busybox_rootfs().display().to_string())
        .backend(remote.clone())
        .create()
        .await
        .unwrap();
    let before = sb.info().await.unwrap();
    assert_eq!(before.status, Status::Running);
    let id: SandboxId = before.id.clone();

    {
        let (url, token, id) = (server.url.clone(), token.clone(), id.to_string());
        let (generation, scratch) = (before.generation, th.path().join("scratch"));
        blocking(move || {
            raw_session(&url, &token, &id, generation, &scratch);
            oversized_frame(&url, &token, &id, generation);
        })
        .await;
    }

    // Nothing of it reached the sandbox: the same run, still Running (not
    // draining, paused, detached or claimed under another name).
    let r = {
        let url = format!("{}/v1/sandboxes/{id}", server.url);
        let token = token.clone();
        blocking(move || http("GET", &url, Some(&token), None)).await
    };
    assert_eq!(r.status, 200, "{}", r.text());
    let info = r.json();
    assert_eq!(
        info["status"],
        serde_json::to_value(Status::Running).unwrap()
    );
    assert_eq!(info["generation"].as_u64(), Some(before.generation));
    assert_eq!(info["name"], serde_json::to_value(&before.name).unwrap());
    assert_eq!(info["detached"], before.detached);

    // The remote backend's own use of the stream: several MiB out, several
    // MiB in and out again, byte for byte, and a spawn (whose `status`
    // barrier is the one control the stream takes).
    let out = sb.exec(["seq", "1", "1000000"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    assert!(out.stdout == seq(1_000_000), "{} bytes", out.stdout.len());
    let payload = noise(5 << 20);
    let out = sb
        .exec_with(ExecOptions::new(["cat"]).stdin(payload.clone()))
        .await
        .unwrap();
    assert_eq!(out.status.code, Some(0));
    assert!(out.stdout == payload, "{} bytes", out.stdout.len());
    let spawned = sb
        .spawn(ExecOptions::new(["sh", "-c", "echo spawned"]))
        .await
        .unwrap();
    assert_eq!(spawned.wait().await.unwrap().stdout_str(), "spawned\n");

    // Nothing was written where the refused saves were to go.
    assert!(!th.path().join("scratch").exists());
    // And the lifecycle API still acts.
    assert_eq!(sb.stop().await.unwrap().status, Status::Stopped);
}
