//! One in-flight request of an [`AgentClient`], and its flow control.
//!
//! On a channel of protocol 2 a request states a window (its initial
//! credit in each direction, [`burrow_protocol::DEFAULT_WINDOW`]):
//!
//! - **Output.** The peer sends at most the credit; [`RequestHandle::next`]
//!   grants it back once half the window has been handed out, so the
//!   peer's output follows the consumer's pace end to end, and what waits
//!   in memory for a consumer is at most one window. Output beyond the
//!   credit ends the request with a protocol error (see the client's
//!   reader).
//! - **Input.** [`RequestHandle::send_data`] waits for credit, which the
//!   peer grants as it writes the input where it goes: a process that
//!   does not read its stdin holds its writer, not this process's memory.
//!
//! A relay's requests ([`AgentClient::request_relayed`]) carry their
//! client's window instead and grant nothing themselves: the relay passes
//! its client's grants on with [`RequestHandle::grant`].

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use burrow_protocol::{Control, GuestError, GuestMsg, HostMsg, Response, TtySize, MAX_CHUNK};
use tokio::sync::{mpsc, Semaphore};

use super::client::AgentClient;
use crate::error::{Error, Result};

/// The error of a request whose connection went away.
pub(super) fn lost() -> Error {
    Error::protocol("the connection to the sandbox was lost")
}

/// A flow-controlled request's credit, shared with the client's reader.
#[derive(Debug)]
pub(super) struct Credit {
    /// Output bytes the peer may still send; below zero is an overrun.
    pub(super) out_left: AtomicI64,
    /// Input credit: one permit per byte this side may send.
    pub(super) input: Semaphore,
}

/// Who grants a request's output credit.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mode {
    /// The handle, as its consumer takes output (with this window).
    Auto(Option<u32>),
    /// A relay's client (its window), through [`RequestHandle::grant`].
    Relayed(Option<u32>),
}

impl Mode {
    pub(super) fn window(self) -> Option<u32> {
        match self {
            Mode::Auto(w) | Mode::Relayed(w) => w,
        }
    }
}

/// One in-flight request.
#[derive(Debug)]
pub struct RequestHandle {
    id: u64,
    rx: mpsc::UnboundedReceiver<GuestMsg>,
    client: AgentClient,
    finished: bool,
    credit: Option<Arc<Credit>>,
    /// Grant output credit back as output is handed out: the window, and
    /// what was handed out since the last grant.
    auto: Option<(u32, u32)>,
}

impl RequestHandle {
    pub(super) fn new(
        id: u64,
        rx: mpsc::UnboundedReceiver<GuestMsg>,
        client: AgentClient,
        mode: Mode,
        credit: Option<Arc<Credit>>,
    ) -> RequestHandle {
        let auto = match mode {
            Mode::Auto(Some(w)) => Some((w, 0)),
            _ => None,
        };
        RequestHandle {
            id,
            rx,
            client,
            finished: false,
            credit,
            auto,
        }
    }

    /// The request id on the channel.
    // Used by the supervisor (feature `local`).
    #[cfg_attr(not(feature = "local"), allow(dead_code))]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The request's input side, usable while [`RequestHandle::next`] is
    /// awaited elsewhere (a writer waiting for credit must not stop the
    /// output it waits behind from being read).
    pub fn input(&self) -> InputSender {
        InputSender {
            id: self.id,
            client: self.client.clone(),
            credit: self.credit.clone(),
        }
    }

    /// Signals the request's process.
    pub fn signal(&self, signal: i32) -> Result<()> {
        self.client.send(HostMsg::Signal {
            id: self.id,
            signal,
        })
    }

    /// Abandons the request in the peer (its process killed, its file
    /// let go); the request still ends with a response.
    pub fn cancel(&self) -> Result<()> {
        self.client.send(HostMsg::Cancel { id: self.id })
    }

    /// Grants the peer `bytes` more output credit (a relay passing its
    /// client's grant on).
    pub fn grant(&self, bytes: u32) {
        self.client.grant(self.id, bytes);
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
    /// before the response (after the response, also `None`). Handing out
    /// output grants its credit back.
    pub async fn next(&mut self) -> Option<GuestMsg> {
        if self.finished {
            return None;
        }
        let msg = self.rx.recv().await;
        match &msg {
            Some(GuestMsg::Response { .. }) | None => self.finished = true,
            Some(GuestMsg::Stdout { data, .. } | GuestMsg::Stderr { data, .. }) => {
                self.handed_out(data.0.len());
            }
            Some(_) => {}
        }
        msg
    }

    fn handed_out(&mut self, n: usize) {
        let Some((window, since)) = self.auto.as_mut() else {
            return;
        };
        *since = since.saturating_add(n as u32);
        if *since >= *window / 2 {
            let bytes = std::mem::take(since);
            self.grant(bytes);
        }
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

/// The input side of a request (see [`RequestHandle::input`]); cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct InputSender {
    id: u64,
    client: AgentClient,
    credit: Option<Arc<Credit>>,
}

impl InputSender {
    /// Sends input data (stdin, file content, tunnel bytes), chunked; on a
    /// flow-controlled request each chunk waits for credit. Input for a
    /// request that has ended is dropped.
    pub async fn send_data(&self, data: &[u8]) -> Result<()> {
        for chunk in data.chunks(MAX_CHUNK) {
            if let Some(c) = &self.credit {
                // A chunk is far below the window, so the permits come.
                match c.input.acquire_many(chunk.len() as u32).await {
                    Ok(permits) => permits.forget(),
                    // Closed: the request ended; its input goes nowhere.
                    Err(_) => return Ok(()),
                }
            }
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

    /// Resizes the request's pty.
    pub fn resize(&self, size: TtySize) -> Result<()> {
        self.client.send(HostMsg::Resize { id: self.id, size })
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        if !self.finished {
            // Abandoned mid-flight (caller dropped the future): tell the peer
            // so the process / tunnel does not linger, and stop routing.
            let _ = self.client.send(HostMsg::Cancel { id: self.id });
        }
        let route = self
            .client
            .inner
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        if let Some(c) = route.and_then(|r| r.credit) {
            c.input.close();
        }
    }
}
