//! Running core calls for Python: as an asyncio future on the caller's
//! running loop, or blocking with the GIL released (the synchronous
//! facade), Ctrl-C cancelling the call.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use burrow_binding::{run, CallFuture};
use pyo3::prelude::*;

use crate::convert::{failure, output};

/// Calls handing a result to an asyncio loop right now.
static DELIVERING: AtomicUsize = AtomicUsize::new(0);
/// The interpreter is shutting down: results are no longer delivered.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Counts a call while it hands its result to the loop.
struct Delivering;

impl Delivering {
    fn new() -> Self {
        DELIVERING.fetch_add(1, Ordering::SeqCst);
        Delivering
    }
}

impl Drop for Delivering {
    fn drop(&mut self) {
        DELIVERING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Called from an `atexit` hook, while other threads may still take the
/// GIL: stops result deliveries and waits (GIL released, at most 2 s) for
/// those under way. A delivery wakes the loop with `call_soon_threadsafe`,
/// which releases the GIL inside `socket.send`; if the interpreter were
/// already finalizing, CPython would end that worker thread with
/// `pthread_exit`, whose forced unwind through Rust frames aborts the
/// process. (The loop may run the callback, and `asyncio.run` return,
/// before the waking write has finished.)
pub(crate) fn at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while DELIVERING.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Runs `fut`: blocking (GIL released, signals checked every 100 ms: an
/// interrupt drops the call), or as an asyncio future.
pub(crate) fn run_call(py: Python<'_>, blocking: bool, fut: CallFuture) -> PyResult<Py<PyAny>> {
    if !blocking {
        return spawn_awaitable(py, fut);
    }
    let res = py.detach(move || run::block_on(fut, || Python::attach(|py| py.check_signals())))?;
    match res {
        Ok(out) => output(py, out),
        Err(f) => Err(failure(py, &f)),
    }
}

/// Gives this runtime thread a Python thread state of its own for the rest
/// of its life, the GIL released (once per thread).
///
/// Without it every delivery creates a thread state and deletes it, each
/// time under the interpreter's runtime lock, taken without the GIL. A
/// `fork()` by another thread at that moment leaves the child with that
/// lock held, and CPython before 3.11.8 and 3.12 takes it again in the
/// child (`PyOS_AfterFork_Child`), which then hangs forever
/// (python/cpython#112275). With a kept state a delivery only takes and
/// releases the GIL. The state outlives the thread only if the thread ends
/// first: the runtime's workers live as long as the process (or the fork
/// child's runtime).
fn keep_thread_state() {
    thread_local! {
        static KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if KEPT.with(|kept| kept.replace(true)) {
        return;
    }
    // SAFETY: a thread without a Python thread state holds no GIL: Ensure
    // creates its state and takes the GIL, SaveThread releases the GIL and
    // keeps the state, which later `Python::attach` calls reuse. A thread
    // that has a state (one Python made) is left as it is.
    unsafe {
        if pyo3::ffi::PyGILState_GetThisThreadState().is_null() {
            pyo3::ffi::PyGILState_Ensure();
            pyo3::ffi::PyEval_SaveThread();
        }
    }
}

fn spawn_awaitable(py: Python<'_>, fut: CallFuture) -> PyResult<Py<PyAny>> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let py_fut = event_loop.call_method0("create_future")?;
    let loop_ref = event_loop.unbind();
    let fut_ref = py_fut.clone().unbind();
    let cancel = run::spawn(fut, move |res| {
        // Announce the delivery before checking for exit (see `at_exit`).
        let _delivering = Delivering::new();
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        keep_thread_state();
        Python::attach(|py| {
            let (ok, value) = match res.map(|out| output(py, out)) {
                Ok(Ok(v)) => (true, v),
                Ok(Err(e)) => (false, e.into_value(py).into_any()),
                Err(f) => (false, failure(py, &f).into_value(py).into_any()),
            };
            let deliver = Deliver {
                fut: fut_ref,
                ok,
                value,
            };
            // A closed loop has nobody left to tell.
            let _ = loop_ref.call_method1(py, "call_soon_threadsafe", (deliver,));
        });
    })
    .map_err(|f| failure(py, &f))?;
    py_fut.call_method1("add_done_callback", (AbortOnCancel { cancel },))?;
    Ok(py_fut.unbind())
}

/// Sets the outcome on the asyncio future (on its loop's thread), unless it
/// was cancelled meanwhile.
#[pyclass(frozen, module = "burrow._core")]
struct Deliver {
    fut: Py<PyAny>,
    ok: bool,
    value: Py<PyAny>,
}

#[pymethods]
impl Deliver {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let fut = self.fut.bind(py);
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        let method = if self.ok {
            "set_result"
        } else {
            "set_exception"
        };
        fut.call_method1(method, (self.value.clone_ref(py),))?;
        Ok(())
    }
}

/// Done-callback of the asyncio future: a cancelled future cancels the
/// core call (dropping its future at its next await point).
#[pyclass(frozen, module = "burrow._core")]
struct AbortOnCancel {
    cancel: run::Cancel,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.cancel.cancel();
        }
        Ok(())
    }
}
