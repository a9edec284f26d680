//! The local engine (feature `local`): everything that runs sandboxes on
//! this host, and nothing a remote-only client or a custom backend needs.
//!
//! - `local`: [`LocalBackend`](local::LocalBackend), the [`crate::Backend`]
//!   of one burrow home (lookups, the per-name transitions in
//!   `local/transitions.rs`, spawning supervisors, host defaults);
//! - `supervisor`: the process per sandbox that owns a run (launch,
//!   readiness, the relay of client connections, idle and max-duration
//!   policies, drain, the end of the run);
//! - `driver`: how a supervisor runs a guest (a namespace container under
//!   an OCI runtime, a QEMU microVM), behind the [`driver::Driver`] trait
//!   and its one factory;
//! - `image`: image references, the OCI registry client, the content store,
//!   unpacking, ext4 disks;
//! - `store`: the SQLite state database and its migrations;
//! - `logs`: the log files (writing, rotation, capture, reading, follow);
//! - `paths` (the home's layout), `locks` (file locks), `procs` (process
//!   identity, the embedded guest agent), `fault` (fault points of the
//!   crash and race tests).

pub(crate) mod driver;
pub(crate) mod fault;
pub mod image;
pub mod local;
pub(crate) mod locks;
pub(crate) mod logs;
pub(crate) mod paths;
pub(crate) mod procs;
pub(crate) mod secrets;
pub(crate) mod snapshot;
pub(crate) mod store;
pub(crate) mod supervisor;
