//! The Ruby adapter of the binding core (`burrow-binding`): the native
//! extension `burrow_native` of the gem `burrow`. It converts values and
//! nothing else: `Burrow::Native.call(target, op_json, data)` runs one
//! operation of the core with the GVL released (other Ruby threads run),
//! and answers `[json, object]` where `json` is `{"ok": VALUE}` or
//! `{"error": BODY}` (`burrow_binding::answer_json`, as in the C ABI) and `object` the
//! new `Burrow::NativeObject`, if any. An interrupt of the calling thread
//! (Ctrl-C, `Thread#raise`, `Timeout.timeout`) cancels the call in the
//! core, then Ruby raises it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use burrow_binding::{run, Failure, Object, Output};
use magnus::{function, method, prelude::*, Error, RString, Ruby};

/// An object of the core: a sandbox (live or a handle), a process, a log.
#[magnus::wrap(class = "Burrow::NativeObject", free_immediately, size)]
struct NativeObject(Object);

impl NativeObject {
    /// `{"kind", "id", "name", "live", "generation"}` as JSON.
    fn describe(&self) -> String {
        self.0.describe().to_string()
    }
}

/// What the wait without the GVL works on.
struct Waiting {
    rx: mpsc::Receiver<Result<Output, Failure>>,
    interrupted: AtomicBool,
    result: Option<Result<Output, Failure>>,
}

extern "C" fn wait_blocking(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the `Waiting` that `call` owns and keeps alive
    // until rb_thread_call_without_gvl2 returns; the unblocking function
    // only stores an atomic flag in it meanwhile.
    let w = unsafe { &mut *arg.cast::<Waiting>() };
    loop {
        match w.rx.recv_timeout(Duration::from_millis(50)) {
            Ok(outcome) => {
                w.result = Some(outcome);
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if w.interrupted.load(Ordering::SeqCst) {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                w.result = Some(Err(Failure::internal("the call ended without an answer")));
                break;
            }
        }
    }
    std::ptr::null_mut()
}

extern "C" fn unblock(arg: *mut c_void) {
    // SAFETY: as in `wait_blocking`; an atomic store only.
    let w = unsafe { &*arg.cast::<Waiting>() };
    w.interrupted.store(true, Ordering::SeqCst);
}

/// `Burrow::Native.call(target, op_json, data) -> [json, object]`.
///
/// The call runs as a task of the core's runtime while this thread waits
/// for it without the GVL. Ruby wakes the wait for any interrupt of the
/// thread; then, with the GVL, pending interrupts are handled: one that
/// raises (Ctrl-C, `Thread#raise`, `Timeout.timeout`) cancels the call in
/// the core and propagates; one that does not (a signal Ruby handles
/// itself, such as SIGCHLD) goes back to waiting for the same call.
fn call(
    target: Option<&NativeObject>,
    op: String,
    data: Option<RString>,
) -> Result<(String, Option<NativeObject>), Error> {
    // SAFETY: the bytes are copied before any Ruby code can run.
    let data = data.map(|d| unsafe { d.as_slice() }.to_vec());
    let (tx, rx) = mpsc::channel();
    let fut = burrow_binding::call(target.map(|t| &t.0), &op, data);
    let cancel = match run::spawn(fut, move |outcome| {
        let _ = tx.send(outcome);
    }) {
        Ok(cancel) => cancel,
        Err(f) => return Ok(answer(Err(f))),
    };
    let mut w = Waiting {
        rx,
        interrupted: AtomicBool::new(false),
        result: None,
    };
    loop {
        w.interrupted.store(false, Ordering::SeqCst);
        let arg = (&mut w as *mut Waiting).cast::<c_void>();
        // Ruby may raise a pending interrupt (a signal's, such as Ctrl-C's
        // Interrupt) as the blocking region ends: caught here too, so that
        // the call is cancelled and this frame unwinds normally.
        let waited = magnus::rb_sys::protect(|| {
            // SAFETY: `w` outlives the call; `wait_blocking` takes no Ruby
            // object and calls no Ruby API; `unblock` stores an atomic flag.
            unsafe {
                rb_sys::rb_thread_call_without_gvl2(Some(wait_blocking), arg, Some(unblock), arg);
            }
            rb_sys::Qnil as rb_sys::VALUE
        });
        let handled = waited.and_then(|_| {
            if w.result.is_some() {
                return Ok(rb_sys::Qnil as rb_sys::VALUE);
            }
            magnus::rb_sys::protect(|| {
                // SAFETY: the GVL is held here; a raise is caught by protect.
                unsafe { rb_sys::rb_thread_check_ints() };
                rb_sys::Qnil as rb_sys::VALUE
            })
        });
        if let Err(e) = handled {
            // Gone before Ruby raises: nothing of the call is left running.
            cancel.cancel_and_wait(Duration::from_secs(2));
            return Err(e);
        }
        if let Some(outcome) = w.result.take() {
            return Ok(answer(outcome));
        }
    }
}

fn answer(outcome: Result<Output, Failure>) -> (String, Option<NativeObject>) {
    let (json, obj) = burrow_binding::answer_json(outcome);
    (json, obj.map(NativeObject))
}

/// `Burrow::Native.spawn_call(target, op_json)`: starts the call and
/// returns at once; its outcome is dropped. For finalizers, which must
/// not block (the release of a garbage-collected owner).
fn spawn_call(target: &NativeObject, op: String) {
    let fut = burrow_binding::call(Some(&target.0), &op, None);
    // Dropping the Cancel leaves the task running to its end.
    let _ = run::spawn(fut, |_| {});
}

/// Sets the burrow home of the calls that follow (nil: `$BURROW_HOME`).
fn configure(home: Option<String>) {
    burrow_binding::process::configure(home.map(Into::into));
}

fn error_codes() -> Vec<&'static str> {
    burrow_binding::error_codes()
}

fn in_flight() -> usize {
    run::in_flight()
}

#[magnus::init(name = "burrow_native")]
fn init(ruby: &Ruby) -> Result<(), Error> {
    let burrow = ruby.define_module("Burrow")?;
    let class = burrow.define_class("NativeObject", ruby.class_object())?;
    class.define_method("describe", method!(NativeObject::describe, 0))?;
    let native = burrow.define_module("Native")?;
    native.define_module_function("call", function!(call, 3))?;
    native.define_module_function("spawn_call", function!(spawn_call, 2))?;
    native.define_module_function("configure", function!(configure, 1))?;
    native.define_module_function("error_codes", function!(error_codes, 0))?;
    native.define_module_function("in_flight", function!(in_flight, 0))?;
    Ok(())
}
