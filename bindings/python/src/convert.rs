//! Conversions between core values and Python objects, and the error map.
//!
//! Structured core values (`SandboxInfo`, `ModifyPlan`, `Metrics`, file
//! metadata, log lines) cross as their serde form, loaded by Python's `json`
//! into plain dicts; the pure-Python layer (`burrow.types`) makes typed
//! objects of them.

use std::time::Duration;

use burrow::{DirEntry, ExecOutput, FileStat, LogLine, Metrics, ModifyPlan, SandboxInfo, Status};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;

/// A call's result as a Python object (built with the GIL held).
pub(crate) trait ToPy {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>>;
}

impl ToPy for () {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }
}

impl ToPy for bool {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.into_py_any(py)
    }
}

impl ToPy for Duration {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.as_secs_f64().into_py_any(py)
    }
}

impl ToPy for Status {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.as_str().into_py_any(py)
    }
}

impl ToPy for Vec<u8> {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(PyBytes::new(py, &self).into_any().unbind())
    }
}

impl<T: ToPy> ToPy for Option<T> {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Some(v) => v.to_py(py),
            None => Ok(py.None()),
        }
    }
}

/// The serde form of a value, as Python objects (via `json.loads`).
pub(crate) fn json<T: serde::Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot encode a core value: {e}")))?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

macro_rules! via_json {
    ($($t:ty),*) => {$(
        impl ToPy for $t {
            fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                json(py, &self)
            }
        }
    )*};
}

via_json!(
    SandboxInfo,
    Vec<SandboxInfo>,
    ModifyPlan,
    Metrics,
    FileStat,
    Vec<DirEntry>,
    Vec<LogLine>,
    LogLine
);

/// `(stdout, stderr, exit_code, signal, timed_out)`.
impl ToPy for ExecOutput {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        (
            PyBytes::new(py, &self.stdout),
            PyBytes::new(py, &self.stderr),
            self.status.code,
            self.status.signal,
            self.status.timed_out,
        )
            .into_py_any(py)
    }
}

/// A core error as the matching `burrow.errors` exception, built by
/// `burrow.errors._from_core` so the classes live in Python.
pub(crate) fn core_error(py: Python<'_>, e: &burrow::Error) -> PyErr {
    let guest_code = match e {
        burrow::Error::Guest { source, .. } => serde_json::to_value(source.code())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned)),
        _ => None,
    };
    let built = py.import("burrow.errors").and_then(|m| {
        m.call_method1(
            "_from_core",
            (
                e.code().as_str(),
                e.to_string(),
                e.sandbox_id().map(|id| id.to_string()),
                e.name(),
                e.status().map(Status::as_str),
                guest_code,
            ),
        )
    });
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(import_failure) => import_failure,
    }
}

/// Seconds (Python float) to a `Duration`; negative or not finite is a
/// `ValueError` (the core has no such durations).
pub(crate) fn seconds(argument: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!(
            "{argument} must be a non-negative number of seconds, not {s}"
        ))
    })
}

pub(crate) fn opt_seconds(argument: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    s.map(|s| seconds(argument, s)).transpose()
}

/// A Python int that must fit a `u64` (negative: `ValueError`).
pub(crate) fn unsigned(argument: &str, v: i128) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| {
        PyValueError::new_err(format!(
            "{argument} must be a non-negative integer, not {v}"
        ))
    })
}
