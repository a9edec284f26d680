//! The core model: identities, names, statuses and configuration.

mod config;
mod id;
mod info;
mod name;
mod status;

pub use config::{DriverKind, Mount, MountSource, OciRuntime, SandboxConfig};
pub use id::SandboxId;
pub use info::{ExitReason, RunInfo, SandboxInfo};
pub use name::validate_name;
pub use status::Status;
