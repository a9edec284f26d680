//! The Node.js adapter of the binding core (`burrow-binding`), the native
//! module of the npm package `burrow` (`sdk-node`). It converts values and
//! nothing else: every call is an operation of the core (JSON, see
//! `burrow_binding::call`) run on the core's per-process runtime (shared by
//! every worker thread), answered through a promise.
//!
//! A failure rejects the promise with an `Error` whose message is the
//! core's error body as JSON; the TypeScript layer makes the typed error
//! class of its code. `cancel(callId)` aborts a call (its promise then never
//! settles: the TypeScript layer rejects its own with an `AbortError`).

// The napi classes and objects here are handed to JavaScript, never
// printed from Rust (and napi's `Buffer` has no `Debug`).
#![allow(missing_debug_implementations)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use burrow_binding::{run, ExecEvent, Failure, Object as CoreObject, Output};
use napi::bindgen_prelude::*;
use napi::JsDeferred;
use napi_derive::napi;
use serde_json::json;

/// An object of the core: a sandbox (live or a handle), a process or a
/// followed log.
#[napi]
pub struct NativeObject {
    inner: CoreObject,
}

#[napi]
impl NativeObject {
    /// `sandbox`, `process`, `logs`, `file_reader` or `file_writer`.
    #[napi(getter)]
    pub fn kind(&self) -> String {
        match &self.inner {
            CoreObject::Sandbox(_) => "sandbox",
            CoreObject::Process(_) => "process",
            CoreObject::Logs(_) => "logs",
            CoreObject::FileRead(_) => "file_reader",
            CoreObject::FileWrite(_) => "file_writer",
        }
        .to_owned()
    }

    /// A sandbox's id.
    #[napi(getter)]
    pub fn id(&self) -> Option<String> {
        match &self.inner {
            CoreObject::Sandbox(sb) => Some(sb.id().to_string()),
            _ => None,
        }
    }

    /// A sandbox's name.
    #[napi(getter)]
    pub fn name(&self) -> Option<String> {
        match &self.inner {
            CoreObject::Sandbox(sb) => Some(sb.name().to_owned()),
            _ => None,
        }
    }

    /// Whether a sandbox is live (else a metadata handle).
    #[napi(getter)]
    pub fn live(&self) -> bool {
        matches!(&self.inner, CoreObject::Sandbox(sb) if sb.is_live())
    }

    /// A sandbox's status as it was made with (a lookup's, a list's, a
    /// start's): the snapshot the TypeScript layer starts from.
    #[napi(getter)]
    pub fn status(&self) -> Option<String> {
        match &self.inner {
            CoreObject::Sandbox(sb) => Some(sb.status().as_str().to_owned()),
            _ => None,
        }
    }

    /// The run generation a live sandbox is bound to.
    #[napi(getter)]
    pub fn generation(&self) -> f64 {
        match &self.inner {
            CoreObject::Sandbox(sb) => sb.generation() as f64,
            _ => 0.0,
        }
    }
}

/// The result of an exec.
#[napi(object)]
pub struct ExecResult {
    pub stdout: Buffer,
    pub stderr: Buffer,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub truncated: bool,
}

/// A process event: `stdout`/`stderr` with `data`, or `exit`.
#[napi(object)]
pub struct ProcessEvent {
    pub kind: String,
    pub data: Option<Buffer>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: Option<bool>,
}

/// A call's value as JavaScript: `null`, a boolean, a number, a string, a
/// JSON value, a `Buffer`, an `ExecResult`, a `ProcessEvent` or a
/// `NativeObject`.
pub enum Value {
    Json(serde_json::Value),
    Bytes(Vec<u8>),
    Exec(ExecResult),
    Event(ProcessEvent),
    Object(CoreObject),
}

impl ToNapiValue for Value {
    unsafe fn to_napi_value(env: napi::sys::napi_env, val: Self) -> Result<napi::sys::napi_value> {
        // SAFETY: `env` is the valid env napi hands this conversion.
        unsafe {
            match val {
                Value::Json(v) => serde_json::Value::to_napi_value(env, v),
                Value::Bytes(b) => Buffer::to_napi_value(env, Buffer::from(b)),
                Value::Exec(e) => ExecResult::to_napi_value(env, e),
                Value::Event(e) => ProcessEvent::to_napi_value(env, e),
                Value::Object(o) => NativeObject::to_napi_value(env, NativeObject { inner: o }),
            }
        }
    }
}

fn value(out: Output) -> Value {
    match out {
        Output::Unit | Output::Event(None) => Value::Json(serde_json::Value::Null),
        Output::Bool(b) => Value::Json(json!(b)),
        Output::Seconds(s) => Value::Json(json!(s)),
        Output::Status(s) => Value::Json(json!(s)),
        Output::Json(text) => {
            Value::Json(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
        }
        Output::Bytes(b) => Value::Bytes(b),
        Output::Exec(e) => Value::Exec(ExecResult {
            stdout: e.stdout.into(),
            stderr: e.stderr.into(),
            exit_code: e.status.code,
            signal: e.status.signal,
            timed_out: e.status.timed_out,
            truncated: e.truncated,
        }),
        Output::Event(Some(ev)) => Value::Event(match ev {
            ExecEvent::Stdout(d) => stream_event("stdout", d),
            ExecEvent::Stderr(d) => stream_event("stderr", d),
            ExecEvent::Exit(s) => ProcessEvent {
                kind: "exit".into(),
                data: None,
                exit_code: s.code,
                signal: s.signal,
                timed_out: Some(s.timed_out),
            },
        }),
        Output::Object(o) => Value::Object(o),
    }
}

fn stream_event(kind: &str, data: Vec<u8>) -> ProcessEvent {
    ProcessEvent {
        kind: kind.into(),
        data: Some(data.into()),
        exit_code: None,
        signal: None,
        timed_out: None,
    }
}

fn rejection(f: &Failure) -> Error {
    Error::new(Status::GenericFailure, f.to_json())
}

/// A promise not yet settled: settled once, by the call's end or by its
/// cancel (an unsettled promise would keep Node's event loop alive).
type Deferred = JsDeferred<Value, Box<dyn FnOnce(Env) -> Result<Value> + Send>>;
type Pending = Arc<Mutex<Option<Deferred>>>;

static CALLS: Mutex<Option<HashMap<u32, (run::Cancel, Pending)>>> = Mutex::new(None);

fn calls<T>(f: impl FnOnce(&mut HashMap<u32, (run::Cancel, Pending)>) -> T) -> T {
    let mut guard = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(HashMap::new))
}

fn take(pending: &Pending) -> Option<Deferred> {
    pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

/// Runs operation `op` (JSON text) on `target` (`null`: the module) with
/// the byte argument `data`; `callId` (chosen by the caller, unique among
/// its calls in flight) is what `cancel` takes.
#[napi]
pub fn call<'env>(
    env: &'env Env,
    call_id: u32,
    target: Option<&NativeObject>,
    op: String,
    data: Option<Buffer>,
) -> Result<Object<'env>> {
    let (deferred, promise) = env.create_deferred()?;
    let pending: Pending = Arc::new(Mutex::new(Some(deferred)));
    let fut = burrow_binding::call(target.map(|t| &t.inner), &op, data.map(|d| d.to_vec()));
    // The registry lock is held while the call starts, so its completion
    // (which removes it) cannot run before it is registered.
    let mine = pending.clone();
    calls(|map| {
        let started = run::spawn(fut, move |outcome| {
            calls(|map| map.remove(&call_id));
            let Some(deferred) = take(&mine) else { return };
            match outcome {
                Ok(out) => {
                    let v = value(out);
                    deferred.resolve(Box::new(move |_env| Ok(v)));
                }
                Err(f) => deferred.reject(rejection(&f)),
            }
        });
        match started {
            Ok(cancel) => {
                map.insert(call_id, (cancel, pending));
                Ok(())
            }
            Err(f) => Err(rejection(&f)),
        }
    })?;
    Ok(promise)
}

/// Cancels call `callId`: a guest request it had in flight is cancelled,
/// and its promise is rejected with the error body of code `cancelled`
/// (the TypeScript layer rejects the caller's promise with the signal's
/// reason). False if it had already ended.
#[napi]
pub fn cancel(call_id: u32) -> bool {
    match calls(|map| map.remove(&call_id)) {
        Some((c, pending)) => {
            c.cancel();
            if let Some(deferred) = take(&pending) {
                deferred.reject(Error::new(
                    Status::Cancelled,
                    r#"{"code":"cancelled","message":"the call was cancelled"}"#,
                ));
            }
            true
        }
        None => false,
    }
}

/// Sets the burrow home of the calls that follow (`null`: `$BURROW_HOME`,
/// else the default).
#[napi]
pub fn configure(home: Option<String>) {
    burrow_binding::process::configure(home.map(Into::into));
}

/// The core's error codes, in order.
#[napi]
pub fn error_codes() -> Vec<String> {
    burrow_binding::error_codes()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Calls of this process still running on the runtime.
#[napi]
pub fn in_flight() -> u32 {
    u32::try_from(run::in_flight()).unwrap_or(u32::MAX)
}
