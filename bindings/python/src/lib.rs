//! `burrow._core`: the Python adapter of the binding core
//! (`burrow-binding`). It converts values and nothing else: every call is
//! an operation of the core (JSON, see `burrow_binding::call`) run on the
//! core's per-process runtime, as an asyncio future bound to the caller's
//! running loop or, with `blocking=True` (the synchronous facade), to
//! completion with the GIL released.

mod bridge;
mod convert;

use std::path::PathBuf;

use burrow_binding::Object;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

/// An object of the core: a sandbox (live or a handle), a process or a
/// followed log.
#[pyclass(frozen, module = "burrow._core")]
pub(crate) struct NativeObject(pub(crate) Object);

#[pymethods]
impl NativeObject {
    /// `sandbox`, `process`, `logs`, `file_reader` or `file_writer`.
    #[getter]
    fn kind(&self) -> &'static str {
        match &self.0 {
            Object::Sandbox(_) => "sandbox",
            Object::Process(_) => "process",
            Object::Logs(_) => "logs",
            Object::FileRead(_) => "file_reader",
            Object::FileWrite(_) => "file_writer",
        }
    }

    /// A sandbox's id (`None` for other objects).
    #[getter]
    fn id(&self) -> Option<String> {
        match &self.0 {
            Object::Sandbox(sb) => Some(sb.id().to_string()),
            _ => None,
        }
    }

    /// A sandbox's name.
    #[getter]
    fn name(&self) -> Option<String> {
        match &self.0 {
            Object::Sandbox(sb) => Some(sb.name().to_owned()),
            _ => None,
        }
    }

    /// Whether a sandbox is live (else a metadata handle).
    #[getter]
    fn live(&self) -> bool {
        matches!(&self.0, Object::Sandbox(sb) if sb.is_live())
    }

    /// The status a sandbox object was made with (a lookup's, a list's, a
    /// start's: the binding core's snapshot; `None` for other objects).
    #[getter]
    fn status(&self) -> Option<&'static str> {
        match &self.0 {
            Object::Sandbox(sb) => Some(sb.status().as_str()),
            _ => None,
        }
    }

    /// The run generation a live sandbox is bound to.
    #[getter]
    fn generation(&self) -> u64 {
        match &self.0 {
            Object::Sandbox(sb) => sb.generation(),
            _ => 0,
        }
    }

    fn __repr__(&self) -> String {
        match &self.0 {
            Object::Sandbox(sb) => format!(
                "NativeObject(sandbox, id={:?}, name={:?})",
                sb.id().to_string(),
                sb.name()
            ),
            Object::Process(_) => "NativeObject(process)".into(),
            Object::Logs(_) => "NativeObject(logs)".into(),
            Object::FileRead(_) => "NativeObject(file_reader)".into(),
            Object::FileWrite(_) => "NativeObject(file_writer)".into(),
        }
    }
}

/// Runs operation `op` (JSON text) on `target` (`None`: the module) with
/// the byte argument `data`.
#[pyfunction]
#[pyo3(signature = (target, op, data=None, *, blocking=false))]
fn call(
    py: Python<'_>,
    target: Option<&NativeObject>,
    op: &str,
    data: Option<PyBackedBytes>,
    blocking: bool,
) -> PyResult<Py<PyAny>> {
    let fut = burrow_binding::call(target.map(|t| &t.0), op, data.map(|d| d.to_vec()));
    bridge::run_call(py, blocking, fut)
}

/// Sets the burrow home for the calls that follow (`None`: `$BURROW_HOME`,
/// else `$XDG_DATA_HOME/burrow`, else `~/.local/share/burrow`).
#[pyfunction]
#[pyo3(signature = (home=None))]
fn configure(home: Option<PathBuf>) {
    burrow_binding::process::configure(home);
}

/// The core's error codes, in order.
#[pyfunction]
fn error_codes() -> Vec<&'static str> {
    burrow_binding::error_codes()
}

/// Calls of this process still running on the runtime (diagnostics: a
/// cancelled call must not linger).
#[pyfunction]
fn in_flight() -> usize {
    burrow_binding::run::in_flight()
}

/// Registered with `atexit` by the package: lets result deliveries under
/// way finish before the interpreter finalizes (see `bridge::at_exit`).
#[pyfunction]
fn _at_exit(py: Python<'_>) {
    bridge::at_exit(py);
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(call, m)?)?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(in_flight, m)?)?;
    m.add_function(wrap_pyfunction!(_at_exit, m)?)?;
    m.add_class::<NativeObject>()?;
    Ok(())
}
