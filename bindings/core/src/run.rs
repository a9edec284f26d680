//! Running a call: as a task of this process's runtime whose result is
//! handed to a callback (an adapter resolves its promise or future there),
//! or to completion on the caller's thread. Either way it can be cancelled
//! (aborting the task drops the core future at its next await point, which
//! cancels a guest request in flight) and bounded by a timeout.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::failure::Failure;
use crate::process::state;

/// Calls of this process not yet finished (or aborted).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Calls of this process still running on the runtime: a cancelled or
/// timed-out call must not linger (the SDKs' tests check this).
pub fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::SeqCst)
}

/// A fork child starts with none of its parent's calls.
pub(crate) fn forget_inherited_calls() {
    IN_FLIGHT.store(0, Ordering::SeqCst);
}

/// Counts a call while it exists (decremented when it ends or is aborted).
struct Counted;

impl Counted {
    fn new() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running call; [`Cancel::cancel`] aborts it (its callback is then never
/// called).
#[derive(Debug, Clone)]
pub struct Cancel(tokio::task::AbortHandle);

impl Cancel {
    /// Aborts the call: the core future is dropped at its next await
    /// point, a guest request in flight is cancelled in the guest.
    pub fn cancel(&self) {
        self.0.abort();
    }

    /// Aborts the call and waits (at most `bound`) until its task is gone,
    /// so that [`in_flight`] no longer counts it when the caller goes on
    /// (an adapter raising the interrupt that cancelled a call). Whether
    /// it is gone.
    pub fn cancel_and_wait(&self, bound: Duration) -> bool {
        self.cancel();
        let deadline = std::time::Instant::now() + bound;
        while !self.is_finished() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Whether the call has ended (finished or aborted).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// Aborts a task when dropped (a join handle alone would detach it).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The failure a panic of the core becomes: never an unwind across a
/// language boundary, never a call that does not answer.
fn panicked(payload: &(dyn std::any::Any + Send)) -> Failure {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    Failure::internal(format!("the burrow core panicked: {what}"))
}

/// Runs `fut` on this process's runtime and hands its result to `done`
/// (on a runtime thread). A panic of `fut` reaches `done` as a failure.
pub fn spawn<F, T, D>(fut: F, done: D) -> Result<Cancel, Failure>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Result<T, Failure>) + Send + 'static,
{
    let st = state()?;
    let counted = Counted::new();
    let rt = st.runtime().handle().clone();
    let task = st.runtime().spawn(async move {
        // The call runs as a task of its own, so that a panic ends that
        // task and is seen here; aborting this task aborts it too.
        let mut inner = AbortOnDrop(rt.spawn(fut));
        let ended = (&mut inner.0).await;
        // No longer counted before the answer is handed over: a caller
        // that has its answer never sees its own call in flight (it did,
        // for a moment, and the SDKs' no-call-left checks failed now and
        // then).
        drop(counted);
        match ended {
            Ok(outcome) => done(outcome),
            Err(e) if e.is_panic() => done(Err(panicked(e.into_panic().as_ref()))),
            Err(_) => {} // aborted: no answer, as documented
        }
    });
    Ok(Cancel(task.abort_handle()))
}

/// Runs `fut` to completion on the calling thread, asking `interrupted`
/// every 100 ms whether to give up (a pending signal such as Ctrl-C): its
/// error drops (cancels) the future and is returned.
pub fn block_on<F, T, E>(
    fut: F,
    mut interrupted: impl FnMut() -> Result<(), E>,
) -> Result<Result<T, Failure>, E>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: Send + 'static,
{
    let st = match state() {
        Ok(st) => st,
        Err(f) => return Ok(Err(f)),
    };
    let _counted = Counted::new();
    let rt = st.runtime();
    let _enter = rt.enter();
    let mut fut = Box::pin(fut);
    loop {
        // A panic of the core future is a failure, not an unwind into the
        // caller (which may be C, Go or Python).
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut fut).await })
        }));
        match step {
            Ok(Ok(res)) => return Ok(res),
            Ok(Err(_)) => interrupted()?,
            Err(payload) => return Ok(Err(panicked(payload.as_ref()))),
        }
    }
}

/// `fut` bounded by `timeout`: past it, the core's `timeout` error naming
/// `operation`.
pub async fn bounded<T>(
    operation: &str,
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    match timeout {
        None => fut.await,
        Some(after) => tokio::time::timeout(after, fut).await.unwrap_or_else(|_| {
            Err(Failure::from(burrow::Error::Timeout {
                operation: operation.to_owned(),
                after,
            }))
        }),
    }
}
