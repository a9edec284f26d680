//! `burrow-binding`: the one core under every language SDK of burrow
//! (Python, TypeScript, Go, Ruby, and C).
//!
//! It owns what every binding would otherwise write again:
//!
//! - **The process**: one tokio runtime and one default backend per
//!   process, rebuilt in a fork child (never touching the parent's), with
//!   the same backend selection as the CLI and `burrow::default_backend`
//!   ([`process`]).
//! - **Objects**: opaque sandboxes (live, or metadata handles: one type),
//!   processes and followed logs; the streams are pull cursors ([`Object`]).
//! - **Calls**: an operation in JSON (tagged by `op`, inputs that are serde
//!   types, durations as seconds or `"1h30m"` text) on the module or an
//!   object, with an optional byte argument and an optional
//!   `call_timeout` ([`call`]). Run as a task with a completion callback
//!   and cancellation, or blocking ([`run::spawn`], [`run::block_on`]).
//! - **Errors**: [`Failure`], the core's `ErrorBody`, the payload the HTTP
//!   API answers too.
//!
//! A language adapter converts values and nothing else: it has no
//! validation and no lifecycle logic of its own.
//!
//! ```no_run
//! # async fn demo() -> Result<(), burrow_binding::Failure> {
//! use burrow_binding::{call, Object, Output};
//! let created = call(None, r#"{"op": "build", "name": "worker", "image": "python"}"#, None).await?;
//! let Output::Object(sb @ Object::Sandbox(_)) = created else { unreachable!() };
//! let out = call(Some(&sb), r#"{"op": "exec", "argv": ["echo", "hi"]}"#, None).await?;
//! # Ok(()) }
//! ```

mod failure;
mod files;
pub mod input;
mod objects;
mod ops;
pub mod process;
pub mod run;

pub use burrow::{ExecEvent, ExecOutput};
pub use failure::Failure;
pub use files::{FileReadObj, FileWriteObj};
pub use objects::{LogCursor, Object, ProcessObj, SandboxObj};
pub use ops::{answer_json, call, CallFuture, LogOp, ModuleOp, Output, ProcessOp, SandboxOp};

/// The core's error codes, in order (`burrow::ErrorCode::ALL`): every SDK
/// checks its error classes against this list both ways.
pub fn error_codes() -> Vec<&'static str> {
    burrow::ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}
