//! `burrow._native`: the mechanical Python binding of the burrow core.
//!
//! Every function converts its arguments, calls the core on this process's
//! runtime and backend, and converts the result; every validation, lifecycle
//! rule and error comes from the core. Coroutine-style methods return an
//! asyncio future bound to the caller's running loop, or, with
//! `blocking=True` (the synchronous facade), block with the GIL released.

mod convert;
mod objects;
mod runtime;

use std::collections::BTreeMap;
use std::path::PathBuf;

use burrow::{
    ErrorCode, ListFilter, Mount, MountSource, Sandbox, SandboxConfig, SandboxHandle, SandboxId,
    Status,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::convert::{opt_seconds, seconds, unsigned};
use crate::objects::{Created, NativeHandle, NativeLogStream, NativeProcess, NativeSandbox};
use crate::runtime::{CallResult, Ctx};

/// Sets the burrow home for the calls that follow (`None`: `$BURROW_HOME`,
/// else `$XDG_DATA_HOME/burrow`, else `~/.local/share/burrow`).
#[pyfunction]
#[pyo3(signature = (home=None))]
fn configure(home: Option<PathBuf>) {
    runtime::set_home(home);
}

/// The core's error codes (`ErrorCode::ALL`), in order.
#[pyfunction]
fn error_codes() -> Vec<&'static str> {
    ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}

/// Calls of this process still running on the runtime (diagnostics: a
/// cancelled call must not linger).
#[pyfunction]
fn in_flight() -> usize {
    runtime::in_flight()
}

fn parse_statuses(statuses: Vec<String>) -> burrow::Result<Vec<Status>> {
    statuses.iter().map(|s| s.parse()).collect()
}

/// Creates, replaces, converges on or defines the sandbox `name`.
/// `mode`: `create`, `replace`, `connect_or_create` or `define`.
#[pyfunction]
#[pyo3(signature = (
    name, mode, *, image=None, driver=None, cpus=None, memory_mb=None, pids_limit=None,
    env=None, workdir=None, labels=None, volumes=None, network=false, idle_timeout=None,
    max_duration=None, startup_timeout=None, demand_start=None, detached=false, blocking=false
))]
#[allow(clippy::too_many_arguments)]
fn build(
    py: Python<'_>,
    name: String,
    mode: &str,
    image: Option<String>,
    driver: Option<String>,
    cpus: Option<f64>,
    memory_mb: Option<i128>,
    pids_limit: Option<i128>,
    env: Option<BTreeMap<String, String>>,
    workdir: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    volumes: Option<Vec<(String, String, bool)>>,
    network: bool,
    idle_timeout: Option<f64>,
    max_duration: Option<f64>,
    startup_timeout: Option<f64>,
    demand_start: Option<bool>,
    detached: bool,
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    #[derive(Clone, Copy)]
    enum Mode {
        Create,
        Replace,
        Converge,
        Define,
    }
    let mode = match mode {
        "create" => Mode::Create,
        "replace" => Mode::Replace,
        "connect_or_create" => Mode::Converge,
        "define" => Mode::Define,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown build mode {other:?}"
            )))
        }
    };
    let mut config = SandboxConfig::new(image.unwrap_or_default());
    config.cpus = cpus;
    config.memory_mb = memory_mb.map(|v| unsigned("memory_mb", v)).transpose()?;
    config.pids_limit = pids_limit.map(|v| unsigned("pids_limit", v)).transpose()?;
    config.env = env.unwrap_or_default();
    config.workdir = workdir;
    config.labels = labels.unwrap_or_default();
    config.mounts = volumes
        .unwrap_or_default()
        .into_iter()
        .map(|(source, target, read_only)| {
            // A volume name never contains '/'; anything else is a host path
            // (the core checks it is absolute and exists).
            let source = if source.contains('/') {
                MountSource::Host(PathBuf::from(source))
            } else {
                MountSource::Volume(source)
            };
            Mount::new(source, target).read_only(read_only)
        })
        .collect();
    config.network = network;
    config.idle_timeout = opt_seconds("idle_timeout", idle_timeout)?;
    config.max_duration = opt_seconds("max_duration", max_duration)?;
    if let Some(t) = startup_timeout {
        config.startup_timeout = seconds("startup_timeout", t)?;
    }
    config.demand_start = demand_start;
    let ctx = Ctx::new()?;
    let c = ctx.clone();
    ctx.run(py, blocking, async move {
        let backend = c.backend().await?;
        let mut builder = Sandbox::builder(name).backend(backend).detached(detached);
        // No driver: the backend's default (the server's with BURROW_URL).
        builder = match driver {
            Some(d) => builder.config(config).driver(d),
            None => builder.config(config),
        };
        let out: CallResult<Created> = Ok(match mode {
            Mode::Create => Created::Sandbox(builder.create().await?),
            Mode::Replace => Created::Sandbox(builder.replace().create().await?),
            Mode::Converge => Created::Sandbox(builder.connect_or_create().await?),
            Mode::Define => Created::Handle(builder.define().await?),
        });
        out
    })
}

/// A handle bound to the sandbox currently named `name`.
#[pyfunction]
#[pyo3(signature = (name, *, blocking=false))]
fn get(py: Python<'_>, name: String, blocking: bool) -> PyResult<Py<PyAny>> {
    let ctx = Ctx::new()?;
    let c = ctx.clone();
    ctx.run(py, blocking, async move {
        let handle = SandboxHandle::get_in(c.backend().await?, &name).await?;
        Ok(Created::Handle(handle))
    })
}

/// A handle bound to exactly `id`.
#[pyfunction]
#[pyo3(signature = (id, *, blocking=false))]
fn get_by_id(py: Python<'_>, id: String, blocking: bool) -> PyResult<Py<PyAny>> {
    let ctx = Ctx::new()?;
    let c = ctx.clone();
    ctx.run(py, blocking, async move {
        let id: SandboxId = id.parse()?;
        let handle = SandboxHandle::get_by_id_in(c.backend().await?, &id).await?;
        Ok(Created::Handle(handle))
    })
}

/// Snapshots of the sandboxes matching the filter.
#[pyfunction]
#[pyo3(signature = (statuses=None, labels=None, *, blocking=false))]
fn list(
    py: Python<'_>,
    statuses: Option<Vec<String>>,
    labels: Option<BTreeMap<String, String>>,
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let ctx = Ctx::new()?;
    let c = ctx.clone();
    ctx.run(py, blocking, async move {
        let mut filter =
            ListFilter::default().statuses(parse_statuses(statuses.unwrap_or_default())?);
        filter.labels = labels.unwrap_or_default();
        Ok(c.backend().await?.list(&filter).await?)
    })
}

/// Removes the stopped (or crashed, or never started) sandbox `name`.
#[pyfunction]
#[pyo3(signature = (name, *, blocking=false))]
fn remove(py: Python<'_>, name: String, blocking: bool) -> PyResult<Py<PyAny>> {
    let ctx = Ctx::new()?;
    let c = ctx.clone();
    ctx.run(py, blocking, async move {
        burrow::BackendExt::remove_by_name(&*c.backend().await?, &name).await?;
        Ok(())
    })
}

/// Registered with `atexit` by the package: lets result deliveries under
/// way finish before the interpreter finalizes (see `runtime::at_exit`).
#[pyfunction]
fn _at_exit(py: Python<'_>) {
    runtime::at_exit(py);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(in_flight, m)?)?;
    m.add_function(wrap_pyfunction!(_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(get, m)?)?;
    m.add_function(wrap_pyfunction!(get_by_id, m)?)?;
    m.add_function(wrap_pyfunction!(list, m)?)?;
    m.add_function(wrap_pyfunction!(remove, m)?)?;
    m.add_class::<NativeSandbox>()?;
    m.add_class::<NativeHandle>()?;
    m.add_class::<NativeProcess>()?;
    m.add_class::<NativeLogStream>()?;
    Ok(())
}
