//! burrow: an embeddable sandbox lifecycle library.
//!
//! Application code creates a sandbox, runs commands and file operations in
//! it, stops and restarts it, or converges on it by name from many callers at
//! once. Each sandbox runs under a supervisor process spawned by the library;
//! its configuration and state persist in an embedded SQLite database under
//! the burrow home, so it can be found again by name or id.
//!
//! The same API drives a `burrow serve` manager through [`RemoteBackend`],
//! the default backend when `BURROW_URL` is set.

pub mod api;
pub mod backend;
pub mod driver;
mod duration;
pub mod error;
mod fault;
pub mod image;
pub mod lifecycle;
pub mod local;
pub mod locks;
pub mod logs;
pub mod model;
pub mod paths;
pub mod procs;
pub mod remote;
pub mod runtime;
mod sandbox;
pub mod store;

pub use backend::{
    ensure_identity, Backend, BackendExt, Capabilities, CreateRequest, ListFilter, Metrics,
    RuntimeStream, StartOptions, StopOptions,
};
pub use burrow_protocol::{DirEntry, FileKind, FileStat, GuestErrorCode};
pub use duration::{parse_duration, ParseDurationError};
pub use error::{Error, ErrorCode, Result};
pub use local::LocalBackend;
pub use logs::{LogLine, LogOptions, LogSource, LogStream};
pub use model::{
    Applies, DriverKind, ExitReason, FieldChange, Modify, ModifyPlan, Mount, MountSource,
    OciRuntime, SandboxConfig, SandboxId, SandboxInfo, Status,
};
pub use remote::RemoteBackend;
pub use sandbox::{
    ExecEvent, ExecOptions, ExecOutput, ExitStatus, Fs, Process, PublishedPort, ReplaceBuilder,
    Sandbox, SandboxBuilder, SandboxHandle, Tunnel,
};
