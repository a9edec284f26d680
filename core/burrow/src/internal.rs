//! **Not API.** The local engine's internals that burrow's own binaries,
//! tests and benches reach into: the supervisor entry of the `burrow`
//! binary, the driver checks of `burrow doctor`, and the pieces the engine's
//! integration tests and benches drive directly (the home layout, drivers,
//! image resolution and OCI layout writing).
//!
//! Hidden from the documentation and exempt from semver: anything here may
//! change or go in any release. Applications use [`crate::LocalBackend`]
//! and the handles.
#![doc(hidden)]

pub use crate::paths::Home;

/// The per-sandbox supervisor process (`burrow __supervise`,
/// `burrow-supervisor`): the library spawns it; the binary parses its
/// arguments, sets up logging and calls [`supervisor::main`].
pub mod supervisor {
    use std::path::Path;

    pub use crate::logs::rotating::RotatingFile;
    pub use crate::runtime::supervisor::{main, SuperviseArgs};

    use crate::error::{Error, Result};
    use crate::logs::LogSource;
    use crate::model::SandboxId;

    /// Opens (creating its directory) the supervisor's own log of sandbox
    /// `id` under `home`: `sandboxes/<id>/logs/supervisor.log`, size-bound
    /// and rotated.
    pub fn open_log(home: &Path, id: &SandboxId) -> Result<RotatingFile> {
        let home = super::Home::at(home)?;
        let dir = crate::logs::log_dir(&home.sandbox_dir(id));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("creating the log directory", Some(&dir), e))?;
        RotatingFile::open(dir.join(LogSource::Supervisor.file_name()))
    }
}

/// The static guest agent: the copy embedded in burrow's binaries and the
/// lookup of the one a sandbox runs.
pub mod agent {
    pub use crate::procs::{
        locate_agent, set_embedded_agent, AgentLocation, AgentSource, EmbeddedAgent,
    };
}

pub use crate::procs::burrow_bin;

/// The drivers (how the supervisor runs a guest).
pub mod driver {
    pub use crate::driver::{Driver, GuestExit, GuestProcess, LaunchSpec, Launched, ResolvedMount};

    /// Namespace containers under an OCI runtime.
    pub mod container {
        pub use crate::driver::container::{
            check_support, crun_private_cgroup_view, prepare_supervisor_process, ContainerDriver,
            ContainerSupport,
        };
    }

    /// QEMU microVMs.
    pub mod vm {
        pub use crate::driver::vm::{
            bare_boot_args, check_support, locate_kernel, Accel, VmSupport, DEFAULT_MEMORY_MB,
        };
    }
}

/// Image resolution and the image store, addressed by home.
pub mod image {
    pub use crate::image::registry::{list_images, prune, pull, remove_image};
    pub use crate::image::resolve::{normalize_reference, parse_reference, prepare};

    /// Writing OCI image layouts (tests and benches build their images).
    pub mod oci {
        pub use crate::image::oci::{
            write_layout, LayerCompression, LayerEntry, LayerEntryKind, LayerSpec, LayoutWriter,
            Platform, WrittenImage,
        };
    }

    /// The vm driver's ext4 disk images.
    pub mod ext4 {
        pub use crate::image::ext4::{disk_image, is_ext4};
    }
}
