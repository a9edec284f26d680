//! Per-request flow control (protocol 2).
//!
//! A request that states a window (`HostMsg::Request::window`) gets that
//! much credit in each direction:
//!
//! - **Output.** The worker sends at most its credit in `Stdout`/`Stderr`
//!   payload bytes, and the host grants more (`HostMsg::Window`) as its
//!   reader consumes them. Without credit a worker stops reading its
//!   source (the process's pipe fills and the writer blocks; a file or a
//!   socket simply waits): nothing is dropped and memory stays flat
//!   however slow the host's reader is.
//! - **Input.** The host sends at most its credit in `Data` bytes, and
//!   the worker grants more (`GuestMsg::Window`) as it writes them where
//!   they go. Input beyond the credit is a protocol violation: it is
//!   dropped, with a warning, so a broken host cannot grow the guest's
//!   memory either.
//!
//! A request without a window (protocol 1) runs unbounded, as before.
//! The state lives in the request's [`Ctx`] and is only touched by its
//! worker thread.

use std::cell::Cell;

use burrow_protocol::{GuestError, GuestMsg};

use crate::agent::{cancelled, Ctx};
use crate::log::warning;
use crate::mailbox::{Event, Input};

/// A request's credit in both directions (`None`: unbounded).
#[derive(Debug, Default)]
pub struct Flow {
    /// Output bytes the worker may still send.
    out: Cell<Option<u64>>,
    /// Input bytes the host may still send.
    input: Cell<Option<u64>>,
    /// Input written where it goes and not yet granted back.
    consumed: Cell<u64>,
    /// Grant input credit back in steps of this many bytes.
    step: u64,
    /// Input was dropped for overrunning the window (warned once).
    overran: Cell<bool>,
}

impl Flow {
    /// The state of a request that stated `window` (or none).
    pub fn new(window: Option<u32>) -> Flow {
        let window = window.map(u64::from);
        Flow {
            out: Cell::new(window),
            input: Cell::new(window),
            consumed: Cell::new(0),
            step: window.map_or(0, |w| (w / 4).max(1)),
            overran: Cell::new(false),
        }
    }
}

impl Ctx {
    /// How many output bytes may go out now, at most `max`.
    pub fn out_credit(&self, max: usize) -> usize {
        match self.flow.out.get() {
            None => max,
            Some(left) => max.min(usize::try_from(left).unwrap_or(usize::MAX)),
        }
    }

    /// Queues a `Stdout` frame, spending its length of credit.
    pub fn stdout(&self, data: Vec<u8>) {
        self.spend(data.len());
        self.agent.out.send(GuestMsg::Stdout {
            id: self.id,
            data: data.into(),
        });
    }

    /// Queues a `Stderr` frame, spending its length of credit.
    pub fn stderr(&self, data: Vec<u8>) {
        self.spend(data.len());
        self.agent.out.send(GuestMsg::Stderr {
            id: self.id,
            data: data.into(),
        });
    }

    fn spend(&self, n: usize) {
        if let Some(left) = self.flow.out.get() {
            self.flow.out.set(Some(left.saturating_sub(n as u64)));
        }
    }

    /// The host granted `bytes` more output credit.
    pub fn granted(&self, bytes: u32) {
        if let Some(left) = self.flow.out.get() {
            self.flow
                .out
                .set(Some(left.saturating_add(u64::from(bytes))));
        }
    }

    /// Input `data` arrived: `Some(data)` when it is within the credit,
    /// `None` (dropped, with a warning the first time) when it overruns.
    pub fn admit(&self, data: Vec<u8>) -> Option<Vec<u8>> {
        let Some(left) = self.flow.input.get() else {
            return Some(data);
        };
        let n = data.len() as u64;
        if n > left {
            if !self.flow.overran.replace(true) {
                warning!(
                    "request {}: the host sent {n} bytes of input with {left} of credit; dropping input beyond the window",
                    self.id
                );
            }
            return None;
        }
        self.flow.input.set(Some(left - n));
        Some(data)
    }

    /// `n` bytes of input were written where they go: grant them back to
    /// the host, in steps of a quarter window.
    pub fn consumed(&self, n: usize) {
        let Some(left) = self.flow.input.get() else {
            return;
        };
        let total = self.flow.consumed.get() + n as u64;
        if total < self.flow.step {
            self.flow.consumed.set(total);
            return;
        }
        self.flow.consumed.set(0);
        self.flow.input.set(Some(left + total));
        self.agent.out.send(GuestMsg::Window {
            id: self.id,
            bytes: u32::try_from(total).unwrap_or(u32::MAX),
        });
    }

    /// Applies the credit in `event`; true when it was a window.
    fn window_event(&self, event: &Event) -> bool {
        match event {
            Event::Input(Input::Window(bytes)) => {
                self.granted(*bytes);
                true
            }
            _ => false,
        }
    }

    /// Whether a `Cancel` is queued, taking every queued event: windows
    /// are applied, anything else is discarded (for requests that take no
    /// input while they stream output).
    pub fn cancelled(&self) -> bool {
        let mut cancel = false;
        for event in self.inbox.drain() {
            if !self.window_event(&event) {
                cancel |= matches!(event, Event::Input(Input::Cancel));
            }
        }
        cancel
    }

    /// Blocks until there is output credit (at most `max`), applying
    /// windows and discarding other input; an error once the request is
    /// cancelled.
    pub fn await_credit(&self, max: usize) -> Result<usize, GuestError> {
        if self.cancelled() {
            return Err(cancelled());
        }
        loop {
            let n = self.out_credit(max);
            if n > 0 || max == 0 {
                return Ok(n);
            }
            match self.inbox.recv() {
                Some(Event::Input(Input::Cancel)) | None => return Err(cancelled()),
                Some(event) => {
                    self.window_event(&event);
                }
            }
        }
    }

    /// Receives the next event, applying windows on the way (they are not
    /// returned); `None` when every sender is gone.
    pub fn next_event(&self) -> Option<Event> {
        loop {
            let event = self.inbox.recv()?;
            if !self.window_event(&event) {
                return Some(event);
            }
        }
    }
}
