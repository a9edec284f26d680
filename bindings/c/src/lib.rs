//! The C ABI of the binding core (`burrow-binding`): `libburrow` and
//! `include/burrow.h`, for cgo (the Go SDK) and any language with a C FFI.
//!
//! The same calls as every SDK: an operation in JSON (tagged by `op`, see
//! `burrow_binding::SandboxOp` and friends) on the module (`target` NULL)
//! or an object, with an optional byte argument. A call answers a
//! [`BurrowResult`]: JSON text, `{"ok": VALUE}` or `{"error": BODY}` (the
//! core's error body, the one `burrow serve` answers), and the new object
//! when the value is one. Values: `null`, booleans, numbers (seconds),
//! strings (a status), bytes as base64 strings, the core's records as
//! JSON, an exec as `{"stdout", "stderr", "exit_code", "signal",
//! "timed_out"}`, a process event as `null` or `{"kind": "stdout" |
//! "stderr", "data"}` / `{"kind": "exit", "exit_code", "signal",
//! "timed_out"}`, an object as `{"object": {"kind", "id", "name", "live",
//! "generation"}}`.
//!
//! Memory: every `char *` and `BurrowResult` this library returns is owned
//! by the caller and freed with [`burrow_string_free`] /
//! [`burrow_result_free`]; an object with [`burrow_object_free`] (dropping
//! the last reference to a process cancels it in the guest).

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use burrow_binding::{run, Failure, Object, Output};
use serde_json::json;

/// An object of the core: a sandbox (live or a handle), a process, a
/// followed log. Opaque; freed with [`burrow_object_free`].
#[derive(Debug)]
pub struct BurrowObject(Object);

/// The answer of a call.
#[repr(C)]
#[derive(Debug)]
pub struct BurrowResult {
    /// `{"ok": VALUE}` or `{"error": BODY}` (NUL-terminated UTF-8).
    pub json: *mut c_char,
    /// The new object when the value is one, else NULL; owned by the
    /// caller.
    pub object: *mut BurrowObject,
}

/// Called once with the result of an asynchronous call (on a thread of the
/// library's runtime), unless the call was cancelled.
pub type BurrowCallback = Option<extern "C" fn(context: *mut c_void, result: BurrowResult)>;

/// A call's outcome as the result the caller owns.
fn result(outcome: Result<Output, Failure>) -> BurrowResult {
    let (json, object) = burrow_binding::answer_json(outcome);
    let object = match object {
        Some(o) => {
            LIVE_OBJECTS.fetch_add(1, Ordering::SeqCst);
            Box::into_raw(Box::new(BurrowObject(o)))
        }
        None => std::ptr::null_mut(),
    };
    BurrowResult {
        json: string(json),
        object,
    }
}

/// A string the caller owns (interior NULs cannot occur in JSON text).
fn string(text: String) -> *mut c_char {
    CString::new(text)
        .unwrap_or_else(|_| CString::from(c"{}"))
        .into_raw()
}

/// A call's target, operation text and data.
type Inputs = (Option<Object>, String, Option<Vec<u8>>);

/// The pieces of a call: its target, its operation text and its data.
///
/// # Safety
/// As [`burrow_call`].
unsafe fn inputs(
    target: *const BurrowObject,
    op: *const c_char,
    data: *const u8,
    data_len: usize,
) -> Result<Inputs, Failure> {
    // SAFETY: the caller passes NULL or a pointer from this library that it
    // has not freed.
    let target = unsafe { target.as_ref() }.map(|t| t.0.clone());
    if op.is_null() {
        return Err(Failure::argument("op", "NULL"));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let op = unsafe { CStr::from_ptr(op) }
        .to_str()
        .map_err(|_| Failure::argument("op", "not UTF-8"))?
        .to_owned();
    let data = if data.is_null() {
        None
    } else {
        // SAFETY: the caller passes `data_len` readable bytes at `data`.
        Some(unsafe { std::slice::from_raw_parts(data, data_len) }.to_vec())
    };
    Ok((target, op, data))
}

/// Runs operation `op` (JSON, NUL-terminated) on `target` (NULL: the
/// module) with the byte argument `data` (NULL: none), blocking until it
/// ends.
///
/// # Safety
/// `target` is NULL or an object of this library not yet freed; `op` is a
/// NUL-terminated string; `data` is NULL or points to `data_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn burrow_call(
    target: *const BurrowObject,
    op: *const c_char,
    data: *const u8,
    data_len: usize,
) -> BurrowResult {
    // SAFETY: forwarded from this function's contract.
    let (target, op, data) = match unsafe { inputs(target, op, data, data_len) } {
        Ok(parts) => parts,
        Err(f) => return result(Err(f)),
    };
    let fut = burrow_binding::call(target.as_ref(), &op, data);
    match run::block_on(fut, || Ok::<(), ()>(())) {
        Ok(outcome) => result(outcome),
        Err(()) => result(Err(Failure::internal("interrupted"))),
    }
}

static CALLS: Mutex<Option<HashMap<u64, run::Cancel>>> = Mutex::new(None);
static LIVE_OBJECTS: AtomicUsize = AtomicUsize::new(0);
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

fn calls<T>(f: impl FnOnce(&mut HashMap<u64, run::Cancel>) -> T) -> T {
    let mut guard = CALLS.lock().unwrap_or_else(PoisonError::into_inner);
    f(guard.get_or_insert_with(HashMap::new))
}

/// A `*mut c_void` handed to another thread: the caller's context, which
/// the contract of [`burrow_call_async`] makes sendable.
struct Context(*mut c_void);
// SAFETY: the caller of `burrow_call_async` guarantees its context may be
// used from the library's threads.
unsafe impl Send for Context {}

/// Starts operation `op` like [`burrow_call`] and returns at once with a
/// call id (0 if it could not start: then `callback` has been called with
/// the error). `callback(context, result)` is called once, on a thread of
/// the library, unless [`burrow_cancel`] cancels the call first.
///
/// # Safety
/// As [`burrow_call`]; `callback` is callable from any thread, and
/// `context` usable from any thread until the callback has run or the call
/// was cancelled.
#[no_mangle]
pub unsafe extern "C" fn burrow_call_async(
    target: *const BurrowObject,
    op: *const c_char,
    data: *const u8,
    data_len: usize,
    callback: BurrowCallback,
    context: *mut c_void,
) -> u64 {
    let Some(callback) = callback else {
        return 0;
    };
    // SAFETY: forwarded from this function's contract.
    let (target, op, data) = match unsafe { inputs(target, op, data, data_len) } {
        Ok(parts) => parts,
        Err(f) => {
            callback(context, result(Err(f)));
            return 0;
        }
    };
    // The runtime first, so that a failure to start it reaches the
    // callback with its context.
    if let Err(f) = burrow_binding::process::state() {
        callback(context, result(Err(f)));
        return 0;
    }
    let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
    let context = Context(context);
    let fut = burrow_binding::call(target.as_ref(), &op, data);
    // The registry lock is held while the call starts, so its completion
    // (which removes it) cannot run before it is registered.
    calls(|map| {
        let started = run::spawn(fut, move |outcome| {
            let context = context;
            calls(|map| map.remove(&id));
            callback(context.0, result(outcome));
        });
        match started {
            Ok(cancel) => {
                map.insert(id, cancel);
                id
            }
            // Unreachable: the runtime exists (checked above).
            Err(_) => 0,
        }
    })
}

/// Cancels call `call` of [`burrow_call_async`]: its callback will not be
/// called, and a guest request it had in flight is cancelled. False if
/// the call has already ended (its callback ran or is running).
#[no_mangle]
pub extern "C" fn burrow_cancel(call: u64) -> bool {
    match calls(|map| map.remove(&call)) {
        Some(cancel) => {
            cancel.cancel();
            true
        }
        None => false,
    }
}

/// Frees a result's JSON text (its object, if any, stays the caller's).
///
/// # Safety
/// `result` came from this library and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn burrow_result_free(result: BurrowResult) {
    // SAFETY: as documented, the text is this library's and freed once.
    unsafe { burrow_string_free(result.json) }
}

/// Frees a string returned by this library (NULL: nothing).
///
/// # Safety
/// `s` came from this library and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn burrow_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by `CString::into_raw` here, freed once.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Frees an object (NULL: nothing). A process whose last reference goes
/// is cancelled in the guest; a sandbox goes on running.
///
/// # Safety
/// `object` came from this library and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn burrow_object_free(object: *mut BurrowObject) {
    if !object.is_null() {
        // SAFETY: made by `Box::into_raw` here, freed once.
        drop(unsafe { Box::from_raw(object) });
        LIVE_OBJECTS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Objects this library handed out and that are not freed yet (a leak
/// check for bindings: it returns to its earlier value once a binding has
/// freed what it dropped).
#[no_mangle]
pub extern "C" fn burrow_objects_live() -> usize {
    LIVE_OBJECTS.load(Ordering::SeqCst)
}

/// The object as JSON (`{"kind", "id", "name", "live", "generation"}`).
///
/// # Safety
/// `object` is an object of this library not yet freed.
#[no_mangle]
pub unsafe extern "C" fn burrow_object_describe(object: *const BurrowObject) -> *mut c_char {
    // SAFETY: as documented.
    match unsafe { object.as_ref() } {
        Some(o) => string(o.0.describe().to_string()),
        None => string("null".into()),
    }
}

/// Sets the burrow home of the calls that follow (NULL: `$BURROW_HOME`,
/// else the default).
///
/// # Safety
/// `home` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn burrow_configure(home: *const c_char) {
    let home = if home.is_null() {
        None
    } else {
        // SAFETY: as documented.
        let text = unsafe { CStr::from_ptr(home) };
        Some(PathBuf::from(text.to_string_lossy().into_owned()))
    };
    burrow_binding::process::configure(home);
}

/// The core's error codes, in order, as a JSON array.
#[no_mangle]
pub extern "C" fn burrow_error_codes() -> *mut c_char {
    string(json!(burrow_binding::error_codes()).to_string())
}

/// Calls of this process still running (a cancelled call must not
/// linger).
#[no_mangle]
pub extern "C" fn burrow_in_flight() -> usize {
    run::in_flight()
}
