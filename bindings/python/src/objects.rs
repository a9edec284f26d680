//! The native classes: a live sandbox, a metadata handle, a streaming
//! process and a followed log.
//!
//! Each holds its core object tagged with the pid that made it. In a fork
//! child a sandbox or handle is re-bound to the same id on the child's own
//! backend on first use; a process or log stream (a live stream of the
//! parent's connection) cannot move and says so.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use burrow::{
    ExecEvent, ExecOptions, LogOptions, LogSource, LogStream, Modify, SandboxHandle, SandboxId,
    StopOptions,
};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};
use pyo3::IntoPyObjectExt;
use tokio::sync::{mpsc, oneshot};

use crate::convert::{opt_seconds, unsigned, ToPy};
use crate::parse_statuses;
use crate::runtime::{CallError, CallResult, Ctx, Owned, Slot};

/// A sandbox or handle made by a call, as its native class.
pub(crate) enum Created {
    Sandbox(burrow::Sandbox),
    Handle(SandboxHandle),
}

impl ToPy for Created {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Created::Sandbox(sb) => Ok(Py::new(py, NativeSandbox::wrap(sb))?.into_any()),
            Created::Handle(h) => Ok(Py::new(py, NativeHandle::wrap(h))?.into_any()),
        }
    }
}

impl ToPy for burrow::Sandbox {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Created::Sandbox(self).to_py(py)
    }
}

impl ToPy for NativeProcess {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

impl ToPy for NativeLogStream {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

/// Runs `fut` with an optional deadline; past it, the core's `timeout`.
async fn bounded<T>(
    operation: &str,
    timeout: Option<Duration>,
    fut: impl Future<Output = burrow::Result<T>>,
) -> burrow::Result<T> {
    match timeout {
        None => fut.await,
        Some(after) => tokio::time::timeout(after, fut).await.unwrap_or_else(|_| {
            Err(burrow::Error::Timeout {
                operation: operation.to_owned(),
                after,
            })
        }),
    }
}

fn stop_options(grace: Option<f64>) -> PyResult<StopOptions> {
    let mut opts = StopOptions::default();
    if let Some(g) = opt_seconds("grace", grace)? {
        opts.grace = g;
    }
    Ok(opts)
}

fn log_options(tail: Option<i128>, follow: bool) -> PyResult<LogOptions> {
    let tail = match tail {
        None => None,
        Some(t) => Some(usize::try_from(unsigned("tail", t)?).unwrap_or(usize::MAX)),
    };
    let mut opts = LogOptions::default();
    opts.follow = follow;
    opts.tail = tail;
    Ok(opts)
}

/// Parses the log source inside the call, so an unknown name is the core's
/// `invalid_argument`.
fn with_source(mut opts: LogOptions, source: Option<String>) -> burrow::Result<LogOptions> {
    if let Some(s) = source {
        opts.sources = vec![s.parse::<LogSource>()?];
    }
    Ok(opts)
}

/// The changes of a `modify` call: only the keys present are changed; a
/// present `None` clears a limit or timeout.
fn modify_from(changes: &Bound<'_, PyDict>) -> PyResult<Modify> {
    /// Absent: `None`; present `None`: `Some(None)`; a value: `Some(Some(v))`.
    fn opt<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Option<Bound<'py, PyAny>>>> {
        Ok(d.get_item(key)?.map(|v| (!v.is_none()).then_some(v)))
    }
    let secs = |key: &str| -> PyResult<Option<Option<Duration>>> {
        opt(changes, key)?
            .map(|v| v.map(|v| v.extract::<f64>()).transpose())
            .transpose()?
            .map(|v| opt_seconds(key, v))
            .transpose()
    };
    let map = |key: &str| -> PyResult<BTreeMap<String, String>> {
        Ok(match opt(changes, key)?.flatten() {
            Some(v) => v.extract()?,
            None => BTreeMap::new(),
        })
    };
    let names = |key: &str| -> PyResult<Vec<String>> {
        Ok(match opt(changes, key)?.flatten() {
            Some(v) => v.extract()?,
            None => Vec::new(),
        })
    };
    let cpus = opt(changes, "cpus")?
        .map(|v| v.map(|v| v.extract::<f64>()).transpose())
        .transpose()?;
    let memory_mb = opt(changes, "memory_mb")?
        .map(|v| {
            v.map(|v| unsigned("memory_mb", v.extract::<i128>()?))
                .transpose()
        })
        .transpose()?;
    let mut m = Modify::default();
    m.cpus = cpus;
    m.memory_mb = memory_mb;
    m.env_set = map("env_set")?;
    m.env_unset = names("env_unset")?;
    m.labels_set = map("labels_set")?;
    m.labels_unset = names("labels_unset")?;
    m.idle_timeout = secs("idle_timeout")?;
    m.max_duration = secs("max_duration")?;
    Ok(m)
}

// ---------------------------------------------------------------------------
// Sandbox

/// A live sandbox (bound to one id).
#[pyclass(frozen, module = "burrow._native")]
pub(crate) struct NativeSandbox {
    id: String,
    name: String,
    generation: u64,
    core: Arc<Slot<burrow::Sandbox>>,
}

impl NativeSandbox {
    pub(crate) fn wrap(sb: burrow::Sandbox) -> Self {
        NativeSandbox {
            id: sb.id().to_string(),
            name: sb.name().to_owned(),
            generation: sb.generation(),
            core: Arc::new(Slot::new(sb)),
        }
    }

    /// Runs `f` on the core sandbox of this process (re-bound to the same
    /// id on this process's backend after a fork).
    fn call<F, Fut, T>(&self, py: Python<'_>, blocking: bool, f: F) -> PyResult<Py<PyAny>>
    where
        F: FnOnce(burrow::Sandbox) -> Fut + Send + 'static,
        Fut: Future<Output = CallResult<T>> + Send + 'static,
        T: ToPy + Send + 'static,
    {
        let ctx = Ctx::new()?;
        let c = ctx.clone();
        let current = self.core.current();
        let slot = self.core.clone();
        let id = self.id.clone();
        ctx.run(py, blocking, async move {
            let sb = match current {
                Some(sb) => sb,
                None => {
                    let id: SandboxId = id.parse()?;
                    let handle = SandboxHandle::get_by_id_in(c.backend().await?, &id).await?;
                    let sb = handle.sandbox().await?;
                    slot.refill(sb.clone());
                    sb
                }
            };
            f(sb).await
        })
    }
}

#[pymethods]
impl NativeSandbox {
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The runtime generation this handle is bound to.
    #[getter]
    fn generation(&self) -> u64 {
        self.core
            .current()
            .map_or(self.generation, |sb| sb.generation())
    }

    /// The metadata handle of the same sandbox.
    fn handle(&self) -> NativeHandle {
        match self.core.current() {
            Some(sb) => NativeHandle::wrap(sb.handle()),
            // A fork child: bound to the same id on first use.
            None => NativeHandle {
                id: self.id.clone(),
                name: self.name.clone(),
                core: Arc::new(Slot::empty()),
            },
        }
    }

    #[pyo3(signature = (*, blocking=false))]
    fn info(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.info().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn status(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.status().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn ping(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.ping().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn touch(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.touch().await?) })
    }

    /// Runs `argv`; returns `(stdout, stderr, exit_code, signal, timed_out)`.
    #[pyo3(signature = (argv, env=None, cwd=None, stdin=None, timeout=None, *, blocking=false))]
    #[allow(clippy::too_many_arguments)]
    fn exec(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        env: Option<BTreeMap<String, String>>,
        cwd: Option<String>,
        stdin: Option<PyBackedBytes>,
        timeout: Option<f64>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut opts = ExecOptions::new(argv);
        opts.env = env.unwrap_or_default();
        opts.cwd = cwd;
        opts.stdin = stdin.map(|b| b.to_vec());
        opts.timeout = opt_seconds("timeout", timeout)?;
        self.call(
            py,
            blocking,
            |sb| async move { Ok(sb.exec_with(opts).await?) },
        )
    }

    /// Starts `argv` with streamed output. `stdin`: data written then
    /// closed; with `keep_stdin` (and no data) stdin stays open for
    /// `write`; otherwise stdin is empty.
    #[pyo3(signature = (argv, env=None, cwd=None, stdin=None, keep_stdin=false, timeout=None, *, blocking=false))]
    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        py: Python<'_>,
        argv: Vec<String>,
        env: Option<BTreeMap<String, String>>,
        cwd: Option<String>,
        stdin: Option<PyBackedBytes>,
        keep_stdin: bool,
        timeout: Option<f64>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let stdin = match stdin {
            Some(b) => Some(b.to_vec()),
            None if keep_stdin => None,
            None => Some(Vec::new()),
        };
        let mut opts = ExecOptions::new(argv);
        opts.env = env.unwrap_or_default();
        opts.cwd = cwd;
        opts.stdin = stdin;
        opts.timeout = opt_seconds("timeout", timeout)?;
        self.call(py, blocking, |sb| async move {
            let process = sb.spawn(opts).await?;
            Ok(NativeProcess::start(process))
        })
    }

    #[pyo3(signature = (path, *, blocking=false))]
    fn fs_read(&self, py: Python<'_>, path: String, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |sb| async move { Ok(sb.fs().read(&path).await?) },
        )
    }

    #[pyo3(signature = (path, data, mode=None, *, blocking=false))]
    fn fs_write(
        &self,
        py: Python<'_>,
        path: String,
        data: PyBackedBytes,
        mode: Option<u32>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let data = data.to_vec();
        self.call(py, blocking, move |sb| async move {
            Ok(sb.fs().write_with(&path, &data, mode, false).await?)
        })
    }

    #[pyo3(signature = (path, *, blocking=false))]
    fn fs_list(&self, py: Python<'_>, path: String, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |sb| async move { Ok(sb.fs().list(&path).await?) },
        )
    }

    #[pyo3(signature = (path, *, blocking=false))]
    fn fs_stat(&self, py: Python<'_>, path: String, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |sb| async move { Ok(sb.fs().stat(&path).await?) },
        )
    }

    #[pyo3(signature = (path, *, blocking=false))]
    fn fs_exists(&self, py: Python<'_>, path: String, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move {
            Ok(sb.fs().exists(&path).await?)
        })
    }

    #[pyo3(signature = (path, parents=false, *, blocking=false))]
    fn fs_mkdir(
        &self,
        py: Python<'_>,
        path: String,
        parents: bool,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, move |sb| async move {
            Ok(sb.fs().mkdir(&path, parents).await?)
        })
    }

    #[pyo3(signature = (path, recursive=false, *, blocking=false))]
    fn fs_remove(
        &self,
        py: Python<'_>,
        path: String,
        recursive: bool,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, move |sb| async move {
            Ok(sb.fs().remove(&path, recursive).await?)
        })
    }

    #[pyo3(signature = (src, dst, *, blocking=false))]
    fn fs_rename(
        &self,
        py: Python<'_>,
        src: String,
        dst: String,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, move |sb| async move {
            Ok(sb.fs().rename(&src, &dst).await?)
        })
    }

    #[pyo3(signature = (grace=None, *, blocking=false))]
    fn stop(&self, py: Python<'_>, grace: Option<f64>, blocking: bool) -> PyResult<Py<PyAny>> {
        let opts = stop_options(grace)?;
        self.call(py, blocking, move |sb| async move {
            Ok(sb.stop_with(opts).await?)
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn kill(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.kill().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn request_drain(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |sb| async move { Ok(sb.request_drain().await?) },
        )
    }

    #[pyo3(signature = (*, blocking=false))]
    fn wait_until_stopped(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move {
            Ok(sb.wait_until_stopped().await?)
        })
    }

    #[pyo3(signature = (statuses, timeout=None, *, blocking=false))]
    fn wait_for_status(
        &self,
        py: Python<'_>,
        statuses: Vec<String>,
        timeout: Option<f64>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = opt_seconds("timeout", timeout)?;
        self.call(py, blocking, move |sb| async move {
            let statuses = parse_statuses(statuses)?;
            let handle = sb.handle();
            Ok(bounded(
                "wait_for_status",
                timeout,
                handle.wait_for_status(&statuses),
            )
            .await?)
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn restart(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.restart().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn pause(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.pause().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn resume(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.resume().await?) })
    }

    /// `changes`: only the keys given change (see `modify_from`).
    #[pyo3(signature = (changes, *, blocking=false))]
    fn modify(
        &self,
        py: Python<'_>,
        changes: &Bound<'_, PyDict>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let changes = modify_from(changes)?;
        self.call(py, blocking, move |sb| async move {
            Ok(sb.modify(&changes).await?)
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn metrics(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.metrics().await?) })
    }

    #[pyo3(signature = (tail=None, source=None, *, blocking=false))]
    fn logs(
        &self,
        py: Python<'_>,
        tail: Option<i128>,
        source: Option<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let opts = log_options(tail, false)?;
        self.call(py, blocking, move |sb| async move {
            let opts = with_source(opts, source)?;
            Ok(sb.logs(&opts).await?.collect().await?)
        })
    }

    /// A followed log stream (never ends by itself; see `NativeLogStream`).
    #[pyo3(signature = (tail=None, source=None, *, blocking=false))]
    fn follow_logs(
        &self,
        py: Python<'_>,
        tail: Option<i128>,
        source: Option<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let opts = log_options(tail, true)?;
        self.call(py, blocking, move |sb| async move {
            let opts = with_source(opts, source)?;
            Ok(NativeLogStream::new(sb.logs(&opts).await?))
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn detach(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.detach().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn destroy(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |sb| async move { Ok(sb.destroy().await?) })
    }

    fn __repr__(&self) -> String {
        format!("NativeSandbox(id={:?}, name={:?})", self.id, self.name)
    }
}

// ---------------------------------------------------------------------------
// Handle

/// A metadata handle (bound to one id; the sandbox may be stopped).
#[pyclass(frozen, module = "burrow._native")]
pub(crate) struct NativeHandle {
    id: String,
    name: String,
    core: Arc<Slot<SandboxHandle>>,
}

impl NativeHandle {
    pub(crate) fn wrap(h: SandboxHandle) -> Self {
        NativeHandle {
            id: h.id().to_string(),
            name: h.name().to_owned(),
            core: Arc::new(Slot::new(h)),
        }
    }

    fn call<F, Fut, T>(&self, py: Python<'_>, blocking: bool, f: F) -> PyResult<Py<PyAny>>
    where
        F: FnOnce(SandboxHandle) -> Fut + Send + 'static,
        Fut: Future<Output = CallResult<T>> + Send + 'static,
        T: ToPy + Send + 'static,
    {
        let ctx = Ctx::new()?;
        let c = ctx.clone();
        let current = self.core.current();
        let slot = self.core.clone();
        let id = self.id.clone();
        ctx.run(py, blocking, async move {
            let h = match current {
                Some(h) => h,
                None => {
                    let id: SandboxId = id.parse()?;
                    let h = SandboxHandle::get_by_id_in(c.backend().await?, &id).await?;
                    slot.refill(h.clone());
                    h
                }
            };
            f(h).await
        })
    }
}

#[pymethods]
impl NativeHandle {
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[pyo3(signature = (*, blocking=false))]
    fn info(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.info().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn status(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.status().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn start(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.start().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn connect_or_start(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |h| async move { Ok(h.connect_or_start().await?) },
        )
    }

    #[pyo3(signature = (*, blocking=false))]
    fn connect(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.connect().await?) })
    }

    #[pyo3(signature = (grace=None, *, blocking=false))]
    fn stop(&self, py: Python<'_>, grace: Option<f64>, blocking: bool) -> PyResult<Py<PyAny>> {
        let opts = stop_options(grace)?;
        self.call(py, blocking, move |h| async move {
            Ok(h.stop_with(opts).await?)
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn kill(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.kill().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn request_drain(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(
            py,
            blocking,
            |h| async move { Ok(h.request_drain().await?) },
        )
    }

    #[pyo3(signature = (*, blocking=false))]
    fn pause(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.pause().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn resume(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.resume().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn touch(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.touch().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn restart(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.restart().await?) })
    }

    #[pyo3(signature = (statuses, timeout=None, *, blocking=false))]
    fn wait_for_status(
        &self,
        py: Python<'_>,
        statuses: Vec<String>,
        timeout: Option<f64>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = opt_seconds("timeout", timeout)?;
        self.call(py, blocking, move |h| async move {
            let statuses = parse_statuses(statuses)?;
            Ok(bounded("wait_for_status", timeout, h.wait_for_status(&statuses)).await?)
        })
    }

    #[pyo3(signature = (changes, *, blocking=false))]
    fn modify(
        &self,
        py: Python<'_>,
        changes: &Bound<'_, PyDict>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let changes = modify_from(changes)?;
        self.call(py, blocking, move |h| async move {
            Ok(h.modify(&changes).await?)
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn metrics(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.metrics().await?) })
    }

    #[pyo3(signature = (tail=None, source=None, *, blocking=false))]
    fn logs(
        &self,
        py: Python<'_>,
        tail: Option<i128>,
        source: Option<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let opts = log_options(tail, false)?;
        self.call(py, blocking, move |h| async move {
            let opts = with_source(opts, source)?;
            Ok(h.logs(&opts).await?.collect().await?)
        })
    }

    #[pyo3(signature = (tail=None, source=None, *, blocking=false))]
    fn follow_logs(
        &self,
        py: Python<'_>,
        tail: Option<i128>,
        source: Option<String>,
        blocking: bool,
    ) -> PyResult<Py<PyAny>> {
        let opts = log_options(tail, true)?;
        self.call(py, blocking, move |h| async move {
            let opts = with_source(opts, source)?;
            Ok(NativeLogStream::new(h.logs(&opts).await?))
        })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn remove(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.remove().await?) })
    }

    #[pyo3(signature = (*, blocking=false))]
    fn destroy(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.call(py, blocking, |h| async move { Ok(h.destroy().await?) })
    }

    fn __repr__(&self) -> String {
        format!("NativeHandle(id={:?}, name={:?})", self.id, self.name)
    }
}

// ---------------------------------------------------------------------------
// Process

enum Cmd {
    Write(Vec<u8>, oneshot::Sender<burrow::Result<()>>),
    CloseStdin(oneshot::Sender<burrow::Result<()>>),
    Signal(i32, oneshot::Sender<burrow::Result<()>>),
}

type Events = Arc<tokio::sync::Mutex<mpsc::Receiver<burrow::Result<ExecEvent>>>>;

/// A process with streamed output. A task owns the core `Process`: it
/// forwards output events and applies stdin/signal commands as they come.
#[pyclass(frozen, module = "burrow._native")]
pub(crate) struct NativeProcess {
    cmds: Owned<mpsc::UnboundedSender<Cmd>>,
    events: Owned<Events>,
}

const MOVED: &str = "this process object belongs to the process that started it (before a fork)";

impl NativeProcess {
    /// Starts the task that owns `process` (on the current runtime).
    fn start(process: burrow::Process) -> Self {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::channel(64);
        tokio::spawn(pump(process, cmd_rx, ev_tx));
        NativeProcess {
            cmds: Owned::new(cmd_tx),
            events: Owned::new(Arc::new(tokio::sync::Mutex::new(ev_rx))),
        }
    }

    fn command(
        &self,
        py: Python<'_>,
        blocking: bool,
        make: impl FnOnce(oneshot::Sender<burrow::Result<()>>) -> Cmd,
    ) -> PyResult<Py<PyAny>> {
        let ctx = Ctx::new()?;
        let sent = match self.cmds.get() {
            None => Err(CallError::Misuse(MOVED.into())),
            Some(tx) => {
                let (reply_tx, reply_rx) = oneshot::channel();
                match tx.send(make(reply_tx)) {
                    Ok(()) => Ok(reply_rx),
                    Err(_) => Err(CallError::Misuse("the process task is gone".into())),
                }
            }
        };
        ctx.run(py, blocking, async move {
            let reply = sent?
                .await
                .map_err(|_| CallError::Misuse("the process task is gone".into()))?;
            Ok(reply?)
        })
    }
}

/// Owns the core process: output events out, commands in. After the exit
/// event it keeps answering commands (with the core's errors) until the
/// Python object is gone; dropping the process then cancels the request.
async fn pump(
    mut process: burrow::Process,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    events: mpsc::Sender<burrow::Result<ExecEvent>>,
) {
    let apply = |process: &burrow::Process, cmd: Cmd| match cmd {
        Cmd::Write(data, reply) => {
            let _ = reply.send(process.write_stdin(&data));
        }
        Cmd::CloseStdin(reply) => {
            let _ = reply.send(process.close_stdin());
        }
        Cmd::Signal(n, reply) => {
            let _ = reply.send(process.signal(n));
        }
    };
    let mut streaming = true;
    while streaming {
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                Some(cmd) => apply(&process, cmd),
                None => return,
            },
            ev = process.next_event() => {
                let last = !matches!(ev, Ok(Some(ExecEvent::Stdout(_) | ExecEvent::Stderr(_))));
                if let Some(ev) = ev.transpose() {
                    if events.send(ev).await.is_err() {
                        return;
                    }
                }
                streaming = !last;
            }
        }
    }
    drop(events);
    while let Some(cmd) = cmds.recv().await {
        apply(&process, cmd);
    }
}

#[pymethods]
impl NativeProcess {
    /// The next event: `("stdout", bytes)`, `("stderr", bytes)`,
    /// `("exit", (exit_code, signal, timed_out))`, or `None` after the exit.
    #[pyo3(signature = (*, blocking=false))]
    fn next_event(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        let ctx = Ctx::new()?;
        let events = self.events.get().cloned();
        ctx.run(py, blocking, async move {
            let events = events.ok_or_else(|| CallError::Misuse(MOVED.into()))?;
            let ev = events.lock().await.recv().await;
            Ok(Event(ev.transpose()?))
        })
    }

    #[pyo3(signature = (data, *, blocking=false))]
    fn write(&self, py: Python<'_>, data: PyBackedBytes, blocking: bool) -> PyResult<Py<PyAny>> {
        let data = data.to_vec();
        self.command(py, blocking, |r| Cmd::Write(data, r))
    }

    #[pyo3(signature = (*, blocking=false))]
    fn close_stdin(&self, py: Python<'_>, blocking: bool) -> PyResult<Py<PyAny>> {
        self.command(py, blocking, Cmd::CloseStdin)
    }

    #[pyo3(signature = (signal, *, blocking=false))]
    fn signal(&self, py: Python<'_>, signal: i32, blocking: bool) -> PyResult<Py<PyAny>> {
        self.command(py, blocking, |r| Cmd::Signal(signal, r))
    }
}

struct Event(Option<ExecEvent>);

impl ToPy for Event {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.0 {
            None => Ok(py.None()),
            Some(ExecEvent::Stdout(d)) => ("stdout", PyBytes::new(py, &d)).into_py_any(py),
            Some(ExecEvent::Stderr(d)) => ("stderr", PyBytes::new(py, &d)).into_py_any(py),
            Some(ExecEvent::Exit(s)) => ("exit", (s.code, s.signal, s.timed_out)).into_py_any(py),
        }
    }
}

// ---------------------------------------------------------------------------
// Logs

/// A followed log: lines as they are written, until the object is dropped.
#[pyclass(frozen, module = "burrow._native")]
pub(crate) struct NativeLogStream {
    stream: Owned<Arc<tokio::sync::Mutex<LogStream>>>,
}

impl NativeLogStream {
    fn new(stream: LogStream) -> Self {
        NativeLogStream {
            stream: Owned::new(Arc::new(tokio::sync::Mutex::new(stream))),
        }
    }
}

#[pymethods]
impl NativeLogStream {
    /// The next line (`{"source": .., "text": ..}`), or `None` at the end.
    /// With `timeout` (seconds), the core's `timeout` error when no line
    /// came in time (no line is lost).
    #[pyo3(signature = (timeout=None, *, blocking=false))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>, blocking: bool) -> PyResult<Py<PyAny>> {
        let ctx = Ctx::new()?;
        let stream = self.stream.get().cloned();
        let timeout = opt_seconds("timeout", timeout)?;
        ctx.run(py, blocking, async move {
            let stream = stream.ok_or_else(|| CallError::Misuse(MOVED.into()))?;
            let next = async { stream.lock().await.next().await.transpose() };
            Ok(bounded("follow_logs", timeout, next).await?)
        })
    }
}
