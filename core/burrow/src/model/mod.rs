//! The core model: identities, names, statuses and configuration.

mod config;
mod event;
mod fork;
mod id;
mod info;
mod modify;
mod name;
mod pool;
mod ports;
pub(crate) mod secrets;
mod snapshot;
mod status;

pub use config::{is_volume_name, volume_name_error, SCOPED_VOLUME_PREFIX};
pub use config::{
    DriverKind, IdleAction, Mount, MountSource, Network, NetworkPolicy, NetworkRule,
    NetworkRuleError, OciRuntime, SandboxConfig, MAX_DURATION, MAX_PIDS_LIMIT, RESERVED_MOUNT_DIRS,
    SANDBOX_CA_FILE,
};
pub use event::{EventKind, EventPage, SandboxEvent};
pub use fork::{ForkOptions, MAX_FORK_COUNT};
pub use id::SandboxId;
pub use info::{ExitReason, RunInfo, SandboxInfo};
pub use modify::{Applies, FieldChange, Modify, ModifyPlan};
pub use name::{split_scope, validate_base, validate_name, validate_scope, MAX_SCOPE_BYTES};
pub use pool::{PoolInfo, PoolSpec, MAX_POOL_SIZE, WARM_NAME_PREFIX};
pub use ports::{PortMapping, PortMappingError, PortProtocol, MAX_PORTS};
#[cfg(feature = "local")]
pub(crate) use secrets::new_placeholder;
pub use secrets::{Secret, SecretHost, SecretValue, MAX_HOSTS, MAX_SECRETS, MAX_VALUE};
pub use snapshot::{
    snapshot_of_image, validate_snapshot_base, validate_snapshot_name, SnapshotInfo, SnapshotKind,
    SnapshotOptions, MAX_SNAPSHOT_NAME, SNAPSHOT_IMAGE_PREFIX,
};
pub use status::Status;
