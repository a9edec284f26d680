//! Per-request mailboxes. The main thread routes host input (`Data`, `Eof`,
//! `Signal`, `Resize`, `Cancel`) and the reaper routes exit statuses into the
//! mailbox of the request they belong to; the request's worker thread reads
//! them, either blocking on [`Inbox::recv`] or from a `poll` loop woken by the
//! mailbox's eventfd.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;

use burrow_protocol::TtySize;

use crate::sys::Waker;

/// Host input for one request.
#[derive(Debug)]
pub enum Input {
    /// Payload bytes (stdin, file content, tar stream, tunnel data).
    Data(Vec<u8>),
    /// End of input.
    Eof,
    /// Signal for the request's process group.
    Signal(i32),
    /// New pty size.
    Resize(TtySize),
    /// Abandon the request.
    Cancel,
    /// Output credit granted by the host ([`crate::flow`]).
    Window(u32),
}

/// Anything a request's worker may be told.
#[derive(Debug)]
pub enum Event {
    /// From the host.
    Input(Input),
    /// From the reaper: the request's process ended with this raw wait status.
    Exited(libc::c_int),
}

/// Sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct Mailbox {
    tx: Sender<Event>,
    waker: Arc<Waker>,
}

/// Receiving side, owned by the request's worker.
#[derive(Debug)]
pub struct Inbox {
    rx: Receiver<Event>,
    waker: Arc<Waker>,
}

/// A connected mailbox pair.
pub fn new() -> io::Result<(Mailbox, Inbox)> {
    let (tx, rx) = mpsc::channel();
    let waker = Arc::new(Waker::new()?);
    Ok((
        Mailbox {
            tx,
            waker: waker.clone(),
        },
        Inbox { rx, waker },
    ))
}

impl Mailbox {
    /// Delivers an event; returns false when the worker is gone.
    pub fn send(&self, event: Event) -> bool {
        let ok = self.tx.send(event).is_ok();
        // Wake after queueing: the worker drains the eventfd before it looks
        // into the queue, so this wake-up can never be lost.
        self.waker.wake();
        ok
    }
}

impl Inbox {
    /// Blocks for the next event; `None` when every sender is gone.
    pub fn recv(&self) -> Option<Event> {
        self.rx.recv().ok()
    }

    /// Takes every queued event without blocking (after resetting the waker).
    pub fn drain(&self) -> Vec<Event> {
        self.waker.drain();
        let mut out = Vec::new();
        loop {
            match self.rx.try_recv() {
                Ok(ev) => out.push(ev),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return out,
            }
        }
    }

    /// The eventfd to poll for readability.
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.waker.raw()
    }
}
