//! The relay behind `GET /v1/sandboxes/{id}/runtime`: a client's protocol
//! stream spliced to the sandbox's runtime (its supervisor), frame by
//! frame, so that the stream carries runtime requests only.
//!
//! Client to runtime, every frame is read whole (its length checked against
//! [`MAX_FRAME_LEN`] before anything is allocated; never more than one frame
//! held) and passed on unchanged (the hello, requests, data, windows), except
//! a `control` frame other than `status`: stop, kill, drain, detach, claim,
//! touch, pause, snapshot and the rest act on the sandbox's lifecycle, which
//! goes through the lifecycle API (with its sessions, targets, quotas and
//! audit), never past it. Such a frame is not passed on; the client gets the
//! answer a runtime gives a control it does not serve: a `response` of that
//! id with the error `unsupported`. `status` is the barrier the library's
//! `spawn` and `shell` send on this stream (see docs/backends.md, "The
//! runtime stream"); it acts on nothing.
//!
//! Runtime to client, frames are passed on whole too, so that a refusal is
//! written between two frames, never inside one. A frame that is not a frame
//! of the protocol (too long, truncated, not a host message) ends the relay,
//! after a `fatal` to the client, as the runtime itself would answer it.
//!
//! Each action-shaped request that crosses (an exec, a file read or
//! written, a copy, a tunnel, ...) and each refused control is an entry of
//! the audit log, with the answer's outcome ([`crate::audit::StreamAudit`]).

use burrow::backend::RuntimeStream;
use burrow_protocol::{
    decode, decode_data_prefix, decode_header, encode, Control, DataKind, FrameError, GuestError,
    GuestErrorCode, GuestMsg, Header, HostMsg, Request, DATA_PREFIX_LEN, MAX_FRAME_LEN,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::audit::StreamAudit;

/// Answers (refusals, the last `fatal`) waiting for a frame boundary of the
/// client-bound direction. A client that sends controls and never reads
/// stops being read itself once this many wait.
const PENDING_ANSWERS: usize = 16;

/// A buffer above this capacity (a rare large frame) is let go after use
/// instead of being kept for the next frame.
const KEPT_BUFFER: usize = 1 << 20;

/// The controls a client may send on the runtime stream: those that act on
/// nothing. `status` is the library's delivery barrier (a handle's `spawn`
/// and `shell`); every other control is the lifecycle API's.
pub fn allowed(control: &Control) -> bool {
    matches!(control, Control::Status)
}

/// Relays between a client (`client_rd`, `client_wr`: an upgraded HTTP
/// connection) and `runtime` until either side closes or the client sends
/// something that is not a protocol frame; logs its actions in `audit`.
pub async fn relay<R, W>(
    client_rd: R,
    client_wr: W,
    runtime: RuntimeStream,
    audit: Option<&StreamAudit>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let RuntimeStream {
        reader: runtime_rd,
        writer: mut runtime_wr,
        ..
    } = runtime;
    let (answers, pending) = mpsc::channel(PENDING_ANSWERS);
    let up = async move {
        let mut client = FrameReader::new(client_rd);
        if let Err(e) = filter(&mut client, &mut runtime_wr, &answers, audit).await {
            tracing::debug!(error = %e, "runtime stream: bad frame from the client");
            let fatal = GuestMsg::Fatal {
                error: GuestError::new(GuestErrorCode::Protocol, format!("bad frame: {e}")),
            };
            let _ = answers.send(encode(&fatal)).await;
        }
        let _ = runtime_wr.shutdown().await;
        // Dropping `answers` tells the other direction to finish: what is
        // already queued is written, then the relay ends.
        drop(answers);
        std::future::pending::<()>().await
    };
    let down = async move {
        let mut client_wr = client_wr;
        merge(FrameReader::new(runtime_rd), &mut client_wr, pending, audit).await;
        let _ = client_wr.shutdown().await;
    };
    // Either side closing ends the relay: the client (through `answers`
    // closing), or the runtime.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    if let Some(audit) = audit {
        audit.end().await;
    }
}

/// The `op` of a control or request, as the protocol names it.
fn op_name<T: serde::Serialize>(body: &T) -> String {
    serde_json::to_value(body)
        .ok()
        .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

/// The client-to-runtime direction: frames passed on whole, refused
/// controls answered through `answers`. `Ok` when the client closed (or a
/// side went away); `Err` for a frame that is not one.
async fn filter<R, W>(
    client: &mut FrameReader<R>,
    runtime: &mut W,
    answers: &mpsc::Sender<Vec<u8>>,
    audit: Option<&StreamAudit>,
) -> Result<(), FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    while let Some(header) = client.next().await? {
        let frame = client.frame();
        let body = &frame[4..];
        if header.binary {
            // A data frame: never a control. Checked as the runtime would,
            // so a bad one ends the stream here too.
            let prefix: [u8; DATA_PREFIX_LEN] = body
                .get(..DATA_PREFIX_LEN)
                .and_then(|p| p.try_into().ok())
                .ok_or(FrameError::BadData {
                    why: "shorter than its prefix",
                })?;
            if decode_data_prefix(prefix)?.0 != DataKind::Input {
                return Err(FrameError::BadData {
                    why: "output sent by the host",
                });
            }
        } else {
            let refused = match decode::<HostMsg>(body)? {
                HostMsg::Control { id, body } if !allowed(&body) => Some((id, op_name(&body))),
                // Requests that end or suspend the run: lifecycle too.
                HostMsg::Request {
                    id,
                    body: body @ (Request::Shutdown { .. } | Request::Suspend),
                    ..
                } => Some((id, op_name(&body))),
                HostMsg::Request { id, body, .. } => {
                    if let Some(audit) = audit {
                        audit.request(id, &body).await;
                    }
                    None
                }
                _ => None,
            };
            if let Some((id, what)) = refused {
                tracing::debug!(id, what, "runtime stream: lifecycle request refused");
                if let Some(audit) = audit {
                    audit.refused(&what).await;
                }
                if answers.send(encode(&refusal(id))).await.is_err() {
                    return Ok(());
                }
                continue;
            }
        }
        if runtime.write_all(frame).await.is_err() || runtime.flush().await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// The answer to a refused control `id`: what a runtime answers a control
/// it does not serve.
pub fn refusal(id: u64) -> GuestMsg {
    GuestMsg::Response {
        id,
        result: Err(GuestError::new(
            GuestErrorCode::Unsupported,
            "lifecycle control is not taken on the runtime stream: \
             it goes through the lifecycle API (/v1/sandboxes/{id}/...)",
        )),
    }
}

/// The runtime-to-client direction: the runtime's frames and the queued
/// answers, each written whole. Ends when the runtime closes, the client
/// stops taking bytes, or the other direction finished and its answers are
/// written.
async fn merge<R, W>(
    mut runtime: FrameReader<R>,
    client: &mut W,
    mut answers: mpsc::Receiver<Vec<u8>>,
    audit: Option<&StreamAudit>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        // Both arms are cancel-safe: a frame half read stays in `runtime`.
        let written = tokio::select! {
            biased;
            answer = answers.recv() => match answer {
                Some(answer) => client.write_all(&answer).await,
                None => return,
            },
            frame = runtime.next() => match frame {
                Ok(Some(header)) => {
                    // An answer (JSON) may end a logged action.
                    if let Some(audit) = audit.filter(|a| !header.binary && a.waiting()) {
                        audit.answered(&runtime.frame()[4..]).await;
                    }
                    client.write_all(runtime.frame()).await
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "runtime stream: bad frame from the runtime");
                    return;
                }
            },
        };
        if written.is_err() || client.flush().await.is_err() {
            return;
        }
    }
}

/// Reads one frame at a time: its 4-byte word, checked with
/// [`decode_header`] (at most [`MAX_FRAME_LEN`]), then exactly its body,
/// nothing past it. [`FrameReader::next`] is cancel-safe: what was read of
/// a frame stays here until the rest comes.
struct FrameReader<R> {
    inner: R,
    /// The frame being read: its word, then its body.
    buf: Vec<u8>,
    /// Bytes of `buf` read so far.
    filled: usize,
    /// The header, once its word is in.
    header: Option<Header>,
    /// The last call returned a whole frame (still in `buf`).
    done: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    fn new(inner: R) -> Self {
        FrameReader {
            inner,
            buf: vec![0; 4],
            filled: 0,
            header: None,
            done: false,
        }
    }

    /// The next whole frame (then in [`FrameReader::frame`]); `None` on a
    /// clean end of stream at a frame boundary.
    async fn next(&mut self) -> Result<Option<Header>, FrameError> {
        if std::mem::take(&mut self.done) {
            self.filled = 0;
            self.header = None;
            if self.buf.capacity() > KEPT_BUFFER {
                self.buf = vec![0; 4];
            }
        }
        loop {
            let want = self.header.map_or(4, |h| 4 + h.len);
            if self.filled == want {
                match self.header {
                    Some(header) => {
                        self.done = true;
                        return Ok(Some(header));
                    }
                    None => {
                        let word = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
                        let header = decode_header(word)?;
                        debug_assert!(header.len <= MAX_FRAME_LEN);
                        self.buf.resize(4 + header.len, 0);
                        self.header = Some(header);
                        continue;
                    }
                }
            }
            let n = self
                .inner
                .read(&mut self.buf[self.filled..want])
                .await
                .map_err(FrameError::Io)?;
            if n == 0 {
                return if self.filled == 0 {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
            self.filled += n;
        }
    }

    /// The whole frame last returned by [`FrameReader::next`], its length
    /// word included.
    fn frame(&self) -> &[u8] {
        &self.buf[..self.filled]
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use burrow_protocol::{
        decode_frame, encode_for, Bytes, ExecRequest, Request, PROTOCOL_VERSION,
    };
    use tokio::io::{duplex, AsyncWriteExt, DuplexStream, ReadBuf};

    use super::*;

    /// A client that sends its bytes one at a time.
    struct Trickle(Vec<u8>, usize);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let at = self.1;
            if let Some(&b) = self.0.get(at) {
                buf.put_slice(&[b]);
                self.1 += 1;
            }
            Poll::Ready(Ok(()))
        }
    }

    /// A runtime's write side that keeps each write it is given apart.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<(Vec<Vec<u8>>, bool)>>);

    impl Writes {
        fn frames(&self) -> Vec<Vec<u8>> {
            self.0.lock().unwrap().0.clone()
        }
        fn shut(&self) -> bool {
            self.0.lock().unwrap().1
        }
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.0.lock().unwrap().1 = true;
            Poll::Ready(Ok(()))
        }
    }

    fn host(msg: &HostMsg) -> Vec<u8> {
        encode_for(msg, PROTOCOL_VERSION)
    }

    fn control(id: u64, body: Control) -> Vec<u8> {
        host(&HostMsg::Control { id, body })
    }

    /// The next frame the client reads; `None` at the end of the stream.
    async fn read(r: &mut FrameReader<DuplexStream>) -> Option<GuestMsg> {
        let header = r.next().await.unwrap()?;
        Some(decode_frame(header, r.frame()[4..].to_vec()).unwrap())
    }

    fn refused_code(msg: Option<GuestMsg>, want: u64) -> GuestErrorCode {
        match msg {
            Some(GuestMsg::Response { id, result: Err(e) }) if id == want => e.code,
            other => panic!("not a refusal of {want}: {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_split_into_single_bytes_pass_whole_and_lifecycle_controls_are_refused() {
        let hello = host(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect: None,
        });
        let exec = host(&HostMsg::Request {
            id: 1,
            body: Request::Exec(ExecRequest {
                argv: vec!["cat".into()],
                stdin: true,
                ..Default::default()
            }),
            window: Some(1 << 20),
        });
        let data = host(&HostMsg::Data {
            id: 1,
            data: Bytes((0..=255u8).cycle().take(70_000).collect()),
        });
        assert_ne!(data[0] & 0x80, 0, "a binary frame");
        let status = control(2, Control::Status);
        let eof = host(&HostMsg::Eof { id: 1 });
        let refused = [
            (
                3,
                Control::Stop {
                    grace_ms: 0,
                    owner_exited: false,
                },
            ),
            (4, Control::Kill),
            (5, Control::Drain),
            (6, Control::Detach),
            (7, Control::Touch),
            (
                8,
                Control::Claim {
                    name: "x".into(),
                    owner: None,
                },
            ),
        ];
        let mut sent = [hello.clone(), exec.clone(), data.clone()].concat();
        for (id, body) in &refused {
            sent.extend(control(*id, body.clone()));
        }
        sent.extend([status.clone(), eof.clone()].concat());

        let writes = Writes::default();
        let (runtime_rd, _runtime_end) = duplex(64);
        let (client_wr, client_out) = duplex(1 << 16);
        let runtime = RuntimeStream::new(runtime_rd, writes.clone(), 1);
        let task = tokio::spawn(relay(Trickle(sent, 0), client_wr, runtime, None));

        let mut out = FrameReader::new(client_out);
        for (id, _) in &refused {
            assert_eq!(
                refused_code(read(&mut out).await, *id),
                GuestErrorCode::Unsupported
            );
        }
        // The client's end of stream ends the relay.
        assert!(read(&mut out).await.is_none());
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        // One write per frame, each whole and unchanged.
        assert_eq!(writes.frames(), [hello, exec, data, status, eof]);
        assert!(writes.shut());
    }

    #[tokio::test]
    async fn an_oversized_or_malformed_frame_ends_the_relay_with_a_fatal() {
        let hello = host(&HostMsg::Hello {
            version: PROTOCOL_VERSION,
            expect: None,
        });
        let too_long = (MAX_FRAME_LEN + 1) as u32;
        for bad in [
            too_long.to_be_bytes().to_vec(),
            (too_long | 1 << 31).to_be_bytes().to_vec(),
            [&5u32.to_be_bytes()[..], b"{\"t\":"].concat(),
            [&13u32.to_be_bytes()[..], br#"{"t":"stop!"}"#].concat(),
            // A binary frame of output, which a host never sends.
            [&(9u32 | 1 << 31).to_be_bytes()[..], &[1u8; 9]].concat(),
        ] {
            let sent = [&hello[..], &bad[..], &[0u8; 64][..]].concat();
            let writes = Writes::default();
            let (runtime_rd, _runtime_end) = duplex(64);
            let (client_wr, client_out) = duplex(1 << 16);
            let runtime = RuntimeStream::new(runtime_rd, writes.clone(), 1);
            let task = tokio::spawn(relay(Trickle(sent, 0), client_wr, runtime, None));
            let mut out = FrameReader::new(client_out);
            match read(&mut out).await {
                Some(GuestMsg::Fatal { error }) => {
                    assert_eq!(error.code, GuestErrorCode::Protocol, "{bad:?}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            assert!(read(&mut out).await.is_none());
            tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(writes.frames(), std::slice::from_ref(&hello), "{bad:?}");
            assert!(writes.shut());
        }
    }

    #[tokio::test]
    async fn a_refusal_goes_between_the_runtime_frames_never_inside_one() {
        let (client_rd, mut client_in) = duplex(1 << 16);
        let (client_wr, client_out) = duplex(1 << 20);
        let (runtime_rd, mut runtime_end) = duplex(1 << 20);
        let (to_runtime, _runtime_in) = duplex(1 << 16);
        let runtime = RuntimeStream::new(runtime_rd, to_runtime, 1);
        let task = tokio::spawn(relay(client_rd, client_wr, runtime, None));
        let payload: Vec<u8> = (0..=255u8).cycle().take(256 * 1024).collect();
        let stdout = encode_for(
            &GuestMsg::Stdout {
                id: 1,
                data: Bytes(payload.clone()),
            },
            PROTOCOL_VERSION,
        );
        let mut out = FrameReader::new(client_out);
        // Half a frame from the runtime, then a control from the client:
        // the refusal is the only whole frame there is.
        runtime_end.write_all(&stdout[..1000]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        client_in
            .write_all(&control(9, Control::Kill))
            .await
            .unwrap();
        assert_eq!(
            refused_code(read(&mut out).await, 9),
            GuestErrorCode::Unsupported
        );
        runtime_end.write_all(&stdout[1000..]).await.unwrap();
        match read(&mut out).await {
            Some(GuestMsg::Stdout { id: 1, data }) => assert!(data.0 == payload),
            other => panic!("{other:?}"),
        }
        // The runtime closing ends the relay.
        drop(runtime_end);
        assert!(read(&mut out).await.is_none());
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn each_action_is_audited_once_without_its_arguments_or_bytes() {
        use crate::audit::Who;
        use crate::store::{AuditFilter, Outcome, Store};

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("a.db").display());
        let store = Store::open(&url, &url, 2, Duration::from_secs(5))
            .await
            .unwrap();
        let who = Who {
            tenant: Some("team".into()),
            token: Some("ops".into()),
            client: Some("127.0.0.1".into()),
        };
        let sandbox = "sb_0123456789abcdefghjkmnpqrs";
        let audit = Arc::new(StreamAudit::new(store.clone(), who, sandbox.into()));

        let request = |id, body| {
            host(&HostMsg::Request {
                id,
                body,
                window: None,
            })
        };
        let data = |id, bytes: &[u8]| {
            host(&HostMsg::Data {
                id,
                data: Bytes(bytes.to_vec()),
            })
        };
        let sent = [
            host(&HostMsg::Hello {
                version: PROTOCOL_VERSION,
                expect: None,
            }),
            request(
                1,
                Request::Exec(ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), "echo s3cret-arg".into()],
                    stdin: true,
                    ..Default::default()
                }),
            ),
            data(1, b"s3cret-stdin"),
            host(&HostMsg::Eof { id: 1 }),
            request(
                2,
                Request::WriteFile {
                    path: "/tmp/f".into(),
                    mode: None,
                    append: false,
                },
            ),
            data(2, b"s3cret-file"),
            host(&HostMsg::Eof { id: 2 }),
            request(3, Request::Stat { path: "/".into() }),
            control(4, Control::Kill),
            request(
                5,
                Request::ReadFile {
                    path: "/etc/x".into(),
                },
            ),
        ]
        .concat();

        let (client_rd, mut client_in) = duplex(1 << 16);
        let (client_wr, client_out) = duplex(1 << 16);
        let (runtime_rd, mut runtime_end) = duplex(1 << 16);
        let (to_runtime, runtime_in) = duplex(1 << 16);
        let runtime = RuntimeStream::new(runtime_rd, to_runtime, 1);
        let relayed = audit.clone();
        let task = tokio::spawn(async move {
            relay(client_rd, client_wr, runtime, Some(&relayed)).await;
        });
        client_in.write_all(&sent).await.unwrap();

        // The runtime sees every request but the refused control, then
        // answers the exec (with output), the write (an error) and the
        // stat; the read stays unanswered.
        let mut at_runtime = FrameReader::new(runtime_in);
        let mut requests = Vec::new();
        while requests.len() < 4 {
            let header = at_runtime.next().await.unwrap().unwrap();
            let msg: HostMsg = decode_frame(header, at_runtime.frame()[4..].to_vec()).unwrap();
            if let HostMsg::Request { id, .. } = msg {
                requests.push(id);
            }
        }
        assert_eq!(requests, [1, 2, 3, 5]);
        let guest = |msg: &GuestMsg| encode_for(msg, PROTOCOL_VERSION);
        let answers = [
            guest(&GuestMsg::Stdout {
                id: 1,
                data: Bytes(b"s3cret-output".to_vec()),
            }),
            guest(&GuestMsg::Response {
                id: 1,
                result: Ok(burrow_protocol::Response::Done),
            }),
            guest(&GuestMsg::Response {
                id: 2,
                result: Err(GuestError::new(GuestErrorCode::PermissionDenied, "no")),
            }),
            guest(&GuestMsg::Response {
                id: 3,
                result: Ok(burrow_protocol::Response::Done),
            }),
        ]
        .concat();
        runtime_end.write_all(&answers).await.unwrap();
        let mut out = FrameReader::new(client_out);
        let mut answered = Vec::new();
        while answered.len() < 4 {
            if let Some(GuestMsg::Response { id, .. }) = read(&mut out).await {
                answered.push(id);
            }
        }
        answered.sort_unstable();
        assert_eq!(answered, [1, 2, 3, 4]);
        // The client goes: the read is interrupted.
        drop(client_in);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        store.flush_audit().await;

        let entries = store.audit(&AuditFilter::default(), 0, 100).await.unwrap();
        let seen: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.operation.as_str(),
                    e.object.as_deref(),
                    e.outcome,
                    e.code.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("exec", Some("sh"), Outcome::Ok, None),
                (
                    "fs.write",
                    Some("/tmp/f"),
                    Outcome::Error,
                    Some("permission_denied")
                ),
                (
                    "control",
                    Some("kill"),
                    Outcome::Refused,
                    Some("unsupported")
                ),
                ("fs.read", Some("/etc/x"), Outcome::Interrupted, None),
            ]
        );
        for e in &entries {
            assert_eq!(
                (
                    e.tenant.as_deref(),
                    e.token.as_deref(),
                    e.client.as_deref(),
                    e.sandbox.as_deref(),
                    e.status
                ),
                (
                    Some("team"),
                    Some("ops"),
                    Some("127.0.0.1"),
                    Some(sandbox),
                    None
                )
            );
            let all = serde_json::to_string(e).unwrap();
            assert!(!all.contains("s3cret"), "{all}");
        }
    }
}
