//! The per-process runtime and backend, safe across `fork()`.
//!
//! Everything that owns threads, sockets or SQLite connections is tagged
//! with the pid that made it. A process whose pid differs (a fork child)
//! builds its own runtime and backend on first use and never touches the
//! inherited ones: they are leaked (`std::mem::forget`), not dropped, since
//! dropping them would join threads that do not exist in the child or wake
//! the parent's event loop through shared descriptors.

use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burrow::{Backend, BackendSelection};

use crate::failure::Failure;

/// One process's runtime and backend.
#[derive(Debug)]
pub struct ProcState {
    pid: u32,
    rt: tokio::runtime::Runtime,
    /// The backend, keyed by the selection it was opened for (a change of
    /// `$BURROW_URL`, `$BURROW_TOKEN` or the configured home opens a new one).
    backend: tokio::sync::Mutex<Option<OpenBackend>>,
}

/// A backend and the selection it was opened for.
type OpenBackend = (BackendSelection, Arc<dyn Backend>);

static STATE: Mutex<Option<Arc<ProcState>>> = Mutex::new(None);
/// The home set by [`configure`].
static HOME: Mutex<Option<PathBuf>> = Mutex::new(None);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The supervisor program built into this library by `build.rs` (empty
/// when none was: a development build, or `BURROW_EMBED_SUPERVISOR=none`).
static SUPERVISOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/burrow-supervisor"));

/// Hands the embedded supervisor to the library (first call wins; an empty
/// one is ignored), so an installed package runs sandboxes by itself.
fn register_supervisor() {
    burrow::internal::set_embedded_supervisor(burrow::internal::agent::EmbeddedAgent::new(
        SUPERVISOR,
        env!("BURROW_EMBEDDED_SUPERVISOR_SHA256"),
    ));
}

/// This process's state, built on first use and rebuilt after a fork.
pub fn state() -> Result<Arc<ProcState>, Failure> {
    register_supervisor();
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
        crate::run::forget_inherited_calls();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("burrow-binding")
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the burrow runtime: {e}")))?;
    install_child_handler(&rt);
    let st = Arc::new(ProcState {
        pid,
        rt,
        backend: tokio::sync::Mutex::new(None),
    });
    *slot = Some(st.clone());
    Ok(st)
}

/// Installs the runtime's SIGCHLD handler now, with `SA_ONSTACK`.
///
/// tokio reaps the child processes the engine starts through a SIGCHLD
/// handler (signal-hook-registry) that it installs on first use, at any
/// moment, without `SA_ONSTACK`. A Go program aborts when a signal lands on
/// a goroutine's small stack through such a handler ("non-Go code set up
/// signal handler without SA_ONSTACK flag"). Installing it here, once, and
/// adding the flag makes it safe in every host language (the registry never
/// installs it again); elsewhere the flag changes nothing, since no
/// alternate signal stack is set.
fn install_child_handler(rt: &tokio::runtime::Runtime) {
    let _guard = rt.enter();
    // Registration installs the process-wide handler; the stream itself is
    // not needed (tokio's process driver registers its own).
    drop(tokio::signal::unix::signal(
        tokio::signal::unix::SignalKind::child(),
    ));
    // SAFETY: sigaction with a zeroed struct to read, then the same
    // handler written back with one more flag; both calls get valid
    // pointers to a live local.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut sa) == 0
            && sa.sa_sigaction != libc::SIG_DFL
            && sa.sa_sigaction != libc::SIG_IGN
            && sa.sa_flags & libc::SA_ONSTACK == 0
        {
            sa.sa_flags |= libc::SA_ONSTACK;
            libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
        }
    }
}

impl ProcState {
    /// The tokio runtime every call of this process runs on.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }

    /// This process's backend: the core's selection ([`BackendSelection`],
    /// the one `burrow::default_backend` and the CLI use) with the home
    /// given to [`configure`], if any, as the local home. Opened once per
    /// selection, and again in a fork child.
    pub async fn backend(&self) -> burrow::Result<Arc<dyn Backend>> {
        let home = lock(&HOME).clone();
        let selection = BackendSelection::from_env_or_home(home)?;
        let mut slot = self.backend.lock().await;
        if let Some((s, b)) = slot.as_ref() {
            if *s == selection {
                return Ok(b.clone());
            }
        }
        let b = selection.open().await?;
        *slot = Some((selection, b.clone()));
        Ok(b)
    }
}

/// Sets the burrow home of the local backend for the calls that follow
/// (`None`: `$BURROW_HOME`, else `$XDG_DATA_HOME/burrow`, else
/// `~/.local/share/burrow`). `$BURROW_URL` still selects the remote backend.
pub fn configure(home: Option<PathBuf>) {
    *lock(&HOME) = home;
}

/// This process's backend (see [`ProcState::backend`]).
pub(crate) async fn backend() -> burrow::Result<Arc<dyn Backend>> {
    let st = state().map_err(Failure::into_core)?;
    st.backend().await
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
