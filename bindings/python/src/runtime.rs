//! The per-process runtime and backend, and the bridge from Rust futures to
//! Python awaitables (or blocking calls for the synchronous facade).
//!
//! Fork safety: everything that owns threads, sockets or SQLite connections
//! is tagged with the pid that made it. A process whose pid differs (a fork
//! child) builds its own runtime and backend on first use and never touches
//! the inherited ones: they are leaked (`std::mem::forget`), not dropped,
//! since dropping them would join threads that do not exist in the child or
//! wake the parent's event loop through shared descriptors.

use std::future::Future;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use burrow::{Backend, BackendSelection};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::convert::ToPy;

/// One process's runtime and backend.
#[derive(Debug)]
pub(crate) struct ProcState {
    pid: u32,
    rt: tokio::runtime::Runtime,
    /// The backend, keyed by the selection it was opened for (a change of
    /// `$BURROW_URL`, `$BURROW_TOKEN` or the configured home opens a new one).
    backend: tokio::sync::Mutex<Option<OpenBackend>>,
}

/// A backend and the selection it was opened for.
type OpenBackend = (BackendSelection, Arc<dyn Backend>);

static STATE: Mutex<Option<Arc<ProcState>>> = Mutex::new(None);
/// The home set by `configure(home=...)`.
static HOME: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Bridge tasks of this process not yet finished (or aborted).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Bridge tasks handing a result to an asyncio loop right now.
static DELIVERING: AtomicUsize = AtomicUsize::new(0);
/// The interpreter is shutting down: results are no longer delivered.
static EXITING: AtomicBool = AtomicBool::new(false);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's state, built on first use and rebuilt after a fork.
pub(crate) fn state() -> PyResult<Arc<ProcState>> {
    let pid = std::process::id();
    let mut slot = lock(&STATE);
    if let Some(st) = slot.as_ref() {
        if st.pid == pid {
            return Ok(st.clone());
        }
    }
    if let Some(inherited) = slot.take() {
        // The parent's runtime threads do not exist here and its SQLite
        // connections belong to the parent: never drop them.
        std::mem::forget(inherited);
        IN_FLIGHT.store(0, Ordering::SeqCst);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("burrow-py")
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the burrow runtime: {e}")))?;
    let st = Arc::new(ProcState {
        pid,
        rt,
        backend: tokio::sync::Mutex::new(None),
    });
    *slot = Some(st.clone());
    Ok(st)
}

/// Sets the home used from the next call on (`None`: `$BURROW_HOME` ...).
pub(crate) fn set_home(home: Option<PathBuf>) {
    *lock(&HOME) = home;
}

/// Bridge tasks still running in this process.
pub(crate) fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::SeqCst)
}

/// What a call needs from the process: its state and the configured home.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    st: Arc<ProcState>,
    home: Option<PathBuf>,
}

impl Ctx {
    pub(crate) fn new() -> PyResult<Ctx> {
        Ok(Ctx {
            st: state()?,
            home: lock(&HOME).clone(),
        })
    }

    /// This process's backend (opened once per selection, and again in a
    /// fork child): the core's selection ([`BackendSelection`], as
    /// `burrow::default_backend`) with the configured home, if any, as the
    /// local home.
    pub(crate) async fn backend(&self) -> burrow::Result<Arc<dyn Backend>> {
        let selection = BackendSelection::from_env_or_home(self.home.clone())?;
        let mut slot = self.st.backend.lock().await;
        if let Some((s, b)) = slot.as_ref() {
            if *s == selection {
                return Ok(b.clone());
            }
        }
        let b = selection.open().await?;
        *slot = Some((selection, b.clone()));
        Ok(b)
    }

    /// Runs `fut` as a Python awaitable on the caller's running event loop,
    /// or (with `blocking`) to completion with the GIL released.
    pub(crate) fn run<F, T>(&self, py: Python<'_>, blocking: bool, fut: F) -> PyResult<Py<PyAny>>
    where
        F: Future<Output = CallResult<T>> + Send + 'static,
        T: ToPy + Send + 'static,
    {
        if blocking {
            let st = self.st.clone();
            let res = py.detach(move || block_on(&st, fut))?;
            finish(py, res)
        } else {
            spawn_awaitable(py, &self.st, fut)
        }
    }
}

/// An error of a call: the core's, or the binding's own (a misuse such as a
/// process object used in a fork child).
#[derive(Debug)]
pub(crate) enum CallError {
    Core(burrow::Error),
    Misuse(String),
}

impl From<burrow::Error> for CallError {
    fn from(e: burrow::Error) -> Self {
        CallError::Core(e)
    }
}

pub(crate) type CallResult<T> = Result<T, CallError>;

impl CallError {
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            CallError::Core(e) => crate::convert::core_error(py, &e),
            CallError::Misuse(m) => PyRuntimeError::new_err(m),
        }
    }
}

fn finish<T: ToPy>(py: Python<'_>, res: CallResult<T>) -> PyResult<Py<PyAny>> {
    match res {
        Ok(v) => v.to_py(py),
        Err(e) => Err(e.into_pyerr(py)),
    }
}

/// Counts a bridge task while it hands its result to the loop.
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

/// Counts a bridge task while it exists (decremented when it ends or is
/// aborted).
struct InFlight;

impl InFlight {
    fn new() -> Self {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Blocks on `fut` (GIL released by the caller), checking for signals
/// (Ctrl-C) every 100 ms; an interrupt drops (cancels) the future.
fn block_on<F, T>(st: &ProcState, fut: F) -> PyResult<CallResult<T>>
where
    F: Future<Output = CallResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let _guard = InFlight::new();
    let _enter = st.rt.enter();
    let mut fut = Box::pin(fut);
    loop {
        let step = st
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut fut).await });
        match step {
            Ok(res) => return Ok(res),
            Err(_) => Python::attach(|py| py.check_signals())?,
        }
    }
}

fn spawn_awaitable<F, T>(py: Python<'_>, st: &ProcState, fut: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = CallResult<T>> + Send + 'static,
    T: ToPy + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let py_fut = event_loop.call_method0("create_future")?;
    let loop_ref = event_loop.unbind();
    let fut_ref = py_fut.clone().unbind();
    let guard = InFlight::new();
    let task = st.rt.spawn(async move {
        let _guard = guard;
        let res = fut.await;
        // Announce the delivery before checking for exit (see `at_exit`).
        let _delivering = Delivering::new();
        if EXITING.load(Ordering::SeqCst) {
            return;
        }
        Python::attach(|py| {
            let (ok, value) = match finish(py, res) {
                Ok(v) => (true, v),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            let deliver = Deliver {
                fut: fut_ref,
                ok,
                value,
            };
            // A closed loop has nobody left to tell.
            let _ = loop_ref.call_method1(py, "call_soon_threadsafe", (deliver,));
        });
    });
    let abort = AbortOnCancel {
        task: task.abort_handle(),
    };
    py_fut.call_method1("add_done_callback", (abort,))?;
    Ok(py_fut.unbind())
}

/// Sets the outcome on the asyncio future (on its loop's thread), unless it
/// was cancelled meanwhile.
#[pyclass(frozen, module = "burrow._native")]
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

/// Done-callback of the asyncio future: a cancelled future aborts the Rust
/// task (dropping the core future at its next await point).
#[pyclass(frozen, module = "burrow._native")]
struct AbortOnCancel {
    task: tokio::task::AbortHandle,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.task.abort();
        }
        Ok(())
    }
}

/// A value owned by the process that made it. In any other process (a fork
/// child) it is unusable and is leaked instead of dropped.
#[derive(Debug)]
pub(crate) struct Owned<T> {
    pid: u32,
    val: ManuallyDrop<T>,
}

impl<T> Owned<T> {
    pub(crate) fn new(val: T) -> Self {
        Owned {
            pid: std::process::id(),
            val: ManuallyDrop::new(val),
        }
    }

    /// The value, if this is the process that made it.
    pub(crate) fn get(&self) -> Option<&T> {
        (self.pid == std::process::id()).then_some(&*self.val)
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if self.pid == std::process::id() {
            // SAFETY: `val` is dropped exactly once, here, and never used
            // again (this is the owner's Drop).
            unsafe { ManuallyDrop::drop(&mut self.val) }
        }
    }
}

/// A pid-owned slot that can be (re)filled: empty, or holding a value of
/// this process or (after a fork) of the parent.
#[derive(Debug)]
pub(crate) struct Slot<T>(Mutex<Option<Owned<T>>>);

impl<T: Clone> Slot<T> {
    pub(crate) fn new(val: T) -> Self {
        Slot(Mutex::new(Some(Owned::new(val))))
    }

    pub(crate) fn empty() -> Self {
        Slot(Mutex::new(None))
    }

    /// A clone of the value if it belongs to this process.
    pub(crate) fn current(&self) -> Option<T> {
        lock(&self.0).as_ref().and_then(Owned::get).cloned()
    }

    /// Replaces the value with one made by this process (an inherited one
    /// is leaked by `Owned`).
    pub(crate) fn refill(&self, val: T) {
        *lock(&self.0) = Some(Owned::new(val));
    }
}
