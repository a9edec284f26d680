//! A multiplexed client of the agent protocol. Many requests share one
//! channel; each gets its own id and its own stream of frames.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burrow_protocol::{
    encode, Control, GuestError, GuestMsg, HostMsg, Identity, Request, Response, TtySize,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use super::frames::{read_frame, write_frame};
use crate::error::{Error, Result};

type Pending = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<GuestMsg>>>>;

/// What the other side said in its hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHello {
    /// Agent build version.
    pub agent_version: String,
    /// Runtime identity (set by supervisors).
    pub identity: Option<Identity>,
}

/// A connected, multiplexed protocol client.
#[derive(Debug, Clone)]
pub struct AgentClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    tx: mpsc::UnboundedSender<HostMsg>,
    pending: Pending,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    // Read by the supervisor (feature `local`), which checks the agent's hello.
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    hello: PeerHello,
}

/// Why the connection refused us at hello time.
#[derive(Debug)]
pub enum ConnectError {
    /// The peer sent `Fatal` (e.g. identity mismatch).
    Refused(GuestError),
    /// Anything else.
    Other(Error),
}

impl AgentClient {
    /// Performs the hello exchange (bounded by `timeout`) and starts the
    /// reader and writer tasks.
    pub async fn connect<R, W>(
        mut reader: R,
        mut writer: W,
        expect: Option<Identity>,
        timeout: Duration,
    ) -> std::result::Result<AgentClient, ConnectError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let handshake = async {
            write_frame(
                &mut writer,
                &HostMsg::Hello {
                    version: PROTOCOL_VERSION,
                    expect,
                },
            )
            .await
            .map_err(|e| ConnectError::Other(Error::protocol(format!("sending hello: {e}"))))?;
            match read_frame::<_, GuestMsg>(&mut reader).await {
                Ok(Some(GuestMsg::Hello {
                    version,
                    agent_version,
                    identity,
                })) => {
                    if version != PROTOCOL_VERSION {
                        return Err(ConnectError::Other(Error::protocol(format!(
                            "peer speaks protocol {version}, this build speaks {PROTOCOL_VERSION}"
                        ))));
                    }
                    Ok(PeerHello {
                        agent_version,
                        identity,
                    })
                }
                Ok(Some(GuestMsg::Fatal { error })) => Err(ConnectError::Refused(error)),
                Ok(Some(other)) => Err(ConnectError::Other(Error::protocol(format!(
                    "expected hello, got {other:?}"
                )))),
                Ok(None) => Err(ConnectError::Other(Error::protocol(
                    "channel closed during hello",
                ))),
                Err(e) => Err(ConnectError::Other(Error::protocol(format!(
                    "reading hello: {e}"
                )))),
            }
        };
        let hello = match tokio::time::timeout(timeout, handshake).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(ConnectError::Other(Error::Timeout {
                    operation: "protocol hello".into(),
                    after: timeout,
                }))
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<HostMsg>();
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        // Writer: one task owns the write half so frames never interleave.
        let closed_w = closed.clone();
        tokio::spawn(async move {
            let mut w = BufWriter::new(writer);
            while let Some(msg) = rx.recv().await {
                if w.write_all(&encode(&msg)).await.is_err() {
                    break;
                }
                // Batch whatever is already queued, then flush once.
                let mut failed = false;
                while let Ok(more) = rx.try_recv() {
                    if w.write_all(&encode(&more)).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || w.flush().await.is_err() {
                    break;
                }
            }
            closed_w.store(true, Ordering::SeqCst);
            let _ = w.shutdown().await;
        });
        // Reader: dispatch by request id; on EOF/error every pending request
        // sees its stream end.
        let pending_r = pending.clone();
        let closed_r = closed.clone();
        tokio::spawn(async move {
            loop {
                match read_frame::<_, GuestMsg>(&mut reader).await {
                    Ok(Some(msg)) => {
                        let (id, last) = match &msg {
                            GuestMsg::Stdout { id, .. }
                            | GuestMsg::Stderr { id, .. }
                            | GuestMsg::Eof { id } => (*id, false),
                            GuestMsg::Response { id, .. } => (*id, true),
                            GuestMsg::Fatal { error } => {
                                tracing::warn!(%error, "peer closed the channel");
                                break;
                            }
                            GuestMsg::Hello { .. } => continue,
                        };
                        let mut map = pending_r.lock().unwrap_or_else(|p| p.into_inner());
                        let sender = if last {
                            map.remove(&id)
                        } else {
                            map.get(&id).cloned()
                        };
                        drop(map);
                        if let Some(s) = sender {
                            let _ = s.send(msg);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading from the sandbox channel failed");
                        break;
                    }
                }
            }
            closed_r.store(true, Ordering::SeqCst);
            pending_r.lock().unwrap_or_else(|p| p.into_inner()).clear();
        });
        Ok(AgentClient {
            inner: Arc::new(Inner {
                tx,
                pending,
                next_id: AtomicU64::new(1),
                closed,
                hello,
            }),
        })
    }

    /// The peer's hello.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub fn hello(&self) -> &PeerHello {
        &self.inner.hello
    }

    /// Whether the channel is gone.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst) || self.inner.tx.is_closed()
    }

    fn open(&self, make: impl FnOnce(u64) -> HostMsg) -> Result<RequestHandle> {
        if self.is_closed() {
            return Err(lost());
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let handle = RequestHandle {
            id,
            rx,
            client: self.clone(),
            finished: false,
        };
        self.inner.tx.send(make(id)).map_err(|_| lost())?;
        Ok(handle)
    }

    /// Starts an agent request.
    pub fn request(&self, body: Request) -> Result<RequestHandle> {
        self.open(|id| HostMsg::Request { id, body })
    }

    /// Starts a supervisor control request.
    pub fn control(&self, body: Control) -> Result<RequestHandle> {
        self.open(|id| HostMsg::Control { id, body })
    }

    /// Sends a raw frame (used by relays).
    pub fn send(&self, msg: HostMsg) -> Result<()> {
        self.inner.tx.send(msg).map_err(|_| lost())
    }

    /// Runs a request that streams nothing and returns its response.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub async fn call(&self, body: Request) -> Result<std::result::Result<Response, GuestError>> {
        self.request(body)?.response().await
    }
}

fn lost() -> Error {
    Error::protocol("the connection to the sandbox was lost")
}

/// One in-flight request.
#[derive(Debug)]
pub struct RequestHandle {
    id: u64,
    rx: mpsc::UnboundedReceiver<GuestMsg>,
    client: AgentClient,
    finished: bool,
}

impl RequestHandle {
    /// The request id on the channel.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sends input data (stdin, file content, tunnel bytes), chunked.
    pub fn send_data(&self, data: &[u8]) -> Result<()> {
        for chunk in data.chunks(burrow_protocol::MAX_CHUNK) {
            self.client.send(HostMsg::Data {
                id: self.id,
                data: chunk.into(),
            })?;
        }
        Ok(())
    }

    /// Ends the input.
    pub fn send_eof(&self) -> Result<()> {
        self.client.send(HostMsg::Eof { id: self.id })
    }

    /// Signals the request's process.
    pub fn signal(&self, signal: i32) -> Result<()> {
        self.client.send(HostMsg::Signal {
            id: self.id,
            signal,
        })
    }

    /// Resizes the request's pty.
    pub fn resize(&self, size: TtySize) -> Result<()> {
        self.client.send(HostMsg::Resize { id: self.id, size })
    }

    /// Waits until the peer has read this request: it reads a connection's
    /// frames in order and answers a control frame as it reads it (a relay
    /// with the supervisor's status, an agent with a refusal), so once a
    /// control frame sent after the request is answered, the request was
    /// read before it, and taken or refused (the refusal is then already on
    /// this request's way). A lost connection ends the wait too: the
    /// request's own frames tell what became of it.
    pub async fn delivered(&self) {
        if let Ok(barrier) = self.client.control(Control::Status) {
            let _ = barrier.response().await;
        }
    }

    /// The next frame of this request; `None` when the channel was lost
    /// before the response (after the response, also `None`).
    pub async fn next(&mut self) -> Option<GuestMsg> {
        if self.finished {
            return None;
        }
        let msg = self.rx.recv().await;
        if matches!(msg, Some(GuestMsg::Response { .. }) | None) {
            self.finished = true;
        }
        msg
    }

    /// Waits for the response, discarding streamed data.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub async fn response(mut self) -> Result<std::result::Result<Response, GuestError>> {
        while let Some(msg) = self.next().await {
            if let GuestMsg::Response { result, .. } = msg {
                return Ok(result);
            }
        }
        Err(lost())
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        if !self.finished {
            // Abandoned mid-flight (caller dropped the future): tell the peer
            // so the process / tunnel does not linger, and stop routing.
            let _ = self.client.send(HostMsg::Cancel { id: self.id });
        }
        self.client
            .inner
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}
