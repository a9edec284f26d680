//! burrow: an embeddable sandbox lifecycle library.
//!
//! Application code creates a sandbox, runs commands and file operations in
//! it, stops and restarts it, or converges on it by name from many callers at
//! once. Each sandbox runs under a supervisor process spawned by the library;
//! its configuration and state persist in an embedded SQLite database under
//! the burrow home, so it can be found again by name or id.
//!
//! The same API drives a `burrow serve` manager through `RemoteBackend`,
//! the default backend when `BURROW_URL` is set (see [`default_backend`]).
//!
//! # Features
//!
//! - `local` (default): `LocalBackend`, the embedded engine (SQLite state,
//!   supervisor, container and vm drivers, image store).
//! - `remote` (default): `RemoteBackend`, the HTTP client of `burrow serve`.
//! - `copy` (default): `Fs::copy_in` and `Fs::copy_out`, host files and
//!   trees to and from a sandbox over any backend (tar streams).
//!
//! Without either, the crate is the model, the errors, the [`Backend`]
//! contract, the handles and the wire contract ([`api`]): what a custom
//! backend or a remote-only client needs, without SQLite, an OCI client or
//! an HTTP stack.

#[macro_use]
mod listed;

pub mod api;
pub mod backend;
mod channel;
mod duration;
pub mod error;
pub mod lifecycle;
pub mod logs;
pub mod model;
mod sandbox;
mod select;
mod size;

/// The local engine: everything that runs sandboxes on this host.
#[cfg(feature = "local")]
mod engine;
#[cfg(feature = "local")]
pub mod internal;
#[cfg(feature = "local")]
pub use engine::{image, local};

#[cfg(feature = "remote")]
pub mod remote;

pub use backend::{
    ensure_identity, Backend, BackendExt, Capabilities, CreateRequest, ListFilter, Metrics,
    RuntimeStream, StartOptions, StopOptions,
};
/// The wire protocol between hosts, relays and the guest agent (frames,
/// requests, control requests, responses): what a [`relay::RelayControl`]
/// answers.
pub use burrow_protocol as protocol;
pub use burrow_protocol::{DirEntry, FileKind, FileStat, GuestErrorCode};
pub use channel::relay;
pub use duration::{parse_duration, IntoDuration, ParseDurationError};
#[cfg(feature = "local")]
pub use engine::driver::vm::WarmTemplate;
pub use error::{Error, ErrorCode, Result};
#[cfg(feature = "local")]
pub use local::{DefaultLimits, LocalBackend, LocalConfig};
pub use logs::{LogLine, LogOptions, LogSource, LogStream};
pub use model::{
    snapshot_of_image, validate_snapshot_name, ForkOptions, MAX_FORK_COUNT, MAX_SNAPSHOT_NAME,
};
pub use model::{
    Applies, DriverKind, ExitReason, FieldChange, IdleAction, Modify, ModifyPlan, Mount,
    MountSource, Network, NetworkPolicy, NetworkRule, NetworkRuleError, OciRuntime, PortMapping,
    PortMappingError, PortProtocol, RunInfo, SandboxConfig, SandboxId, SandboxInfo, Secret,
    SecretHost, SecretValue, SnapshotInfo, SnapshotKind, SnapshotOptions, Status, MAX_DURATION,
    MAX_PIDS_LIMIT, MAX_PORTS, SANDBOX_CA_FILE, SNAPSHOT_IMAGE_PREFIX,
};
pub use model::{EventKind, EventPage, SandboxEvent};
pub use model::{PoolInfo, PoolSpec, MAX_POOL_SIZE};
#[cfg(feature = "remote")]
pub use remote::RemoteBackend;
pub use sandbox::{
    ExecEvent, ExecOptions, ExecOutput, ExitStatus, FileReader, FileWriter, Fs, ModifyBuilder,
    Ping, Process, ProcessStdin, PublishedPort, ReplaceBuilder, Sandbox, SandboxBuilder,
    SandboxHandle, SandboxPage, Tunnel,
};
pub use select::{default_backend, BackendSelection};
pub use size::{parse_mib, ParseSizeError};
