//! The input side of an [`Attempt`](super::attempt::Attempt): stdin, file
//! content and pty sizes, written through a shared reference while the
//! output is read elsewhere.
//!
//! A write waits for the request's credit (flow control), and the credit
//! can depend on the output being read (a process that echoes its input
//! blocks on its stdout), so writers never hold what the output's reader
//! needs: the reader only takes the short `state` lock. Writers queue on
//! `order`, which keeps their input in order and which a resend holds
//! while it replays the recorded input to the new run.

use std::sync::Mutex;

use burrow_protocol::TtySize;

use crate::channel::request::InputSender;
use crate::error::Result;

/// Input kept for a resend until the run shows it took the request.
const REPLAY_LIMIT: usize = 1 << 20;

/// Input frames sent before the run showed that it took the request.
#[derive(Debug, Default)]
pub(super) struct Replay {
    pub(super) frames: Vec<Input>,
    bytes: usize,
    /// Too much input to keep: a refusal can no longer be retried.
    pub(super) overflowed: bool,
}

#[derive(Debug, Clone)]
pub(super) enum Input {
    Data(Vec<u8>),
    Eof,
    Resize(TtySize),
}

#[derive(Debug)]
struct State {
    /// Where input goes: the request as sent last.
    target: InputSender,
    /// A frame other than a refusal arrived: the run took the request.
    taken: bool,
    /// Input to send again with a resend (`None` once taken or given up).
    replay: Option<Replay>,
}

/// The input side of a request in flight; shared by its writers.
#[derive(Debug)]
pub(crate) struct InputSide {
    state: Mutex<State>,
    /// Held by a writer while it sends, and by a resend.
    pub(super) order: tokio::sync::Mutex<()>,
}

impl InputSide {
    pub(super) fn new(target: InputSender) -> InputSide {
        InputSide {
            state: Mutex::new(State {
                target,
                taken: false,
                replay: Some(Replay::default()),
            }),
            order: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run took the request: nothing is resent from now on.
    pub(super) fn set_taken(&self) {
        let mut st = self.state();
        st.taken = true;
        st.replay = None;
    }

    pub(super) fn taken(&self) -> bool {
        self.state().taken
    }

    /// The recorded input, for a resend (the caller holds `order`).
    pub(super) fn take_replay(&self) -> Option<Replay> {
        self.state().replay.take()
    }

    /// After a resend: input goes to `target` now, recorded on `replay`.
    pub(super) fn resent(&self, target: InputSender, replay: Replay) {
        let mut st = self.state();
        st.target = target;
        st.replay = Some(replay);
    }

    /// Records `input` for a resend and returns where it goes.
    fn record(&self, input: Input) -> (InputSender, bool) {
        let mut st = self.state();
        let taken = st.taken;
        if let Some(r) = st.replay.as_mut() {
            if let Input::Data(d) = &input {
                r.bytes += d.len();
            }
            if r.bytes > REPLAY_LIMIT {
                r.overflowed = true;
                r.frames.clear();
            } else if !r.overflowed {
                r.frames.push(input);
            }
        }
        (st.target.clone(), taken)
    }

    /// Sends input data, waiting for credit.
    pub(crate) async fn send_data(&self, data: &[u8]) -> Result<()> {
        let _order = self.order.lock().await;
        let (target, taken) = self.record(Input::Data(data.to_vec()));
        sent(taken, target.send_data(data).await)
    }

    /// Ends the input.
    pub(crate) async fn send_eof(&self) -> Result<()> {
        let _order = self.order.lock().await;
        let (target, taken) = self.record(Input::Eof);
        sent(taken, target.send_eof())
    }

    /// Resizes the request's pty.
    pub(crate) async fn resize(&self, size: TtySize) -> Result<()> {
        let _order = self.order.lock().await;
        let (target, taken) = self.record(Input::Resize(size));
        sent(taken, target.resize(size))
    }
}

/// A send on a connection that just closed is not an error of its own
/// while the request may still be resent: the next frame (or its
/// absence) tells what happened to the request.
fn sent(taken: bool, r: Result<()>) -> Result<()> {
    match r {
        Err(_) if !taken => Ok(()),
        other => other,
    }
}

/// Sends recorded input to a resent request.
pub(super) async fn replay(target: &InputSender, replay: &Replay) {
    for frame in &replay.frames {
        let _ = match frame {
            Input::Data(d) => target.send_data(d).await,
            Input::Eof => target.send_eof(),
            Input::Resize(s) => target.resize(*s),
        };
    }
}
