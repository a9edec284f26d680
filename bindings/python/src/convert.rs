//! Core outputs as Python values, and failures as `burrow.errors`
//! exceptions.
//!
//! Structured values (sandbox records, plans, metrics, file metadata, log
//! lines) cross as their serde form, loaded by Python's `json` into plain
//! dicts; the pure-Python layer (`burrow.types`) makes typed objects of
//! them.

use burrow::ExecEvent;
use burrow_binding::{Failure, Output};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;

use crate::NativeObject;

/// A call's output as a Python object (built with the GIL held):
/// `None`, `bool`, `float` (seconds), `bytes`, `str` (a status), a JSON
/// value, an exec result `(stdout, stderr, exit_code, signal, timed_out)`,
/// a process event (`None`, `("stdout" | "stderr", bytes)`,
/// `("exit", (exit_code, signal, timed_out))`), or a `NativeObject`.
pub(crate) fn output(py: Python<'_>, out: Output) -> PyResult<Py<PyAny>> {
    match out {
        Output::Unit => Ok(py.None()),
        Output::Bool(b) => b.into_py_any(py),
        Output::Seconds(s) => s.into_py_any(py),
        Output::Bytes(b) => Ok(PyBytes::new(py, &b).into_any().unbind()),
        Output::Status(s) => s.into_py_any(py),
        Output::Json(text) => Ok(py.import("json")?.call_method1("loads", (text,))?.unbind()),
        Output::Exec(out) => (
            PyBytes::new(py, &out.stdout),
            PyBytes::new(py, &out.stderr),
            out.status.code,
            out.status.signal,
            out.status.timed_out,
            out.truncated,
        )
            .into_py_any(py),
        Output::Event(None) => Ok(py.None()),
        Output::Event(Some(ExecEvent::Stdout(d))) => {
            ("stdout", PyBytes::new(py, &d)).into_py_any(py)
        }
        Output::Event(Some(ExecEvent::Stderr(d))) => {
            ("stderr", PyBytes::new(py, &d)).into_py_any(py)
        }
        Output::Event(Some(ExecEvent::Exit(s))) => {
            ("exit", (s.code, s.signal, s.timed_out)).into_py_any(py)
        }
        Output::Object(o) => Ok(Py::new(py, NativeObject(o))?.into_any()),
    }
}

/// A failure as the matching `burrow.errors` exception, built by
/// `burrow.errors._from_body` from the error body's JSON, so the classes
/// live in Python.
pub(crate) fn failure(py: Python<'_>, f: &Failure) -> PyErr {
    let built = py
        .import("burrow.errors")
        .and_then(|m| m.call_method1("_from_body", (f.to_json(),)));
    match built {
        Ok(exc) => PyErr::from_value(exc),
        Err(import_failure) => import_failure,
    }
}
