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

pub use crate::engine::paths::Home;

/// The per-sandbox supervisor process (`burrow __supervise`,
/// `burrow-supervisor`): the library spawns it; the binary parses its
/// arguments, calls [`supervisor::detach_from_starter`], sets up logging
/// and calls [`supervisor::main`].
pub mod supervisor {
    use std::path::Path;

    pub use crate::engine::driver::container::network::make_and_send_link;
    pub use crate::engine::driver::container::rootless::remove_in_user_namespace;
    pub use crate::engine::local::{unpack_layer_in_user_namespace, write_layer_in_user_namespace};
    pub use crate::engine::logs::rotating::RotatingFile;
    pub use crate::engine::supervisor::{detach_from_starter, main, SuperviseArgs};

    use crate::error::{Error, Result};
    use crate::logs::LogSource;
    use crate::model::SandboxId;

    /// Opens (creating its directory) the supervisor's own log of sandbox
    /// `id` under `home`: `sandboxes/<id>/logs/supervisor.log`, size-bound
    /// and rotated.
    pub fn open_log(home: &Path, id: &SandboxId) -> Result<RotatingFile> {
        let home = super::Home::at(home)?;
        let dir = crate::engine::logs::log_dir(&home.sandbox_dir(id));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("creating the log directory", Some(&dir), e))?;
        RotatingFile::open(dir.join(LogSource::Supervisor.file_name()))
    }
}

/// The static guest agent: the copy embedded in burrow's binaries and the
/// lookup of the one a sandbox runs.
pub mod agent {
    pub use crate::engine::procs::{
        locate_agent, set_embedded_agent, AgentLocation, AgentSource, EmbeddedAgent,
    };
}

pub use crate::engine::procs::{burrow_bin, set_embedded_supervisor, supervisor_bin};

/// The drivers (how the supervisor runs a guest).
pub mod driver {
    pub use crate::engine::driver::{
        for_kind, Driver, Enforceable, GuestExit, GuestProcess, LaunchSpec, Launched, ResolvedMount,
    };

    /// Namespace containers under an OCI runtime.
    pub mod container {
        pub use crate::engine::driver::container::spec::set_seccomp;
        pub use crate::engine::driver::container::{
            check_support, crun_private_cgroup_view, prepare_supervisor_process, ContainerDriver,
            ContainerSupport,
        };
    }

    /// QEMU microVMs.
    pub mod vm {
        pub use crate::engine::driver::vm::{
            bare_boot_args, check_support, is_hibernated, locate_kernel, locate_qemu, start_record,
            templates_dir, write_initramfs, Accel, BareMachine, BareVm, StartKind, StartRecord,
            VmSupport, DEFAULT_MEMORY_MB, START_RECORD, TEMPLATES_DIR, TEMPLATES_ENV,
        };
    }
}

/// Image resolution and the image store, addressed by home.
pub mod image {
    pub use crate::engine::image::registry::{
        list_images, prune, pull, remove_image, ImageReference,
    };
    pub use crate::engine::image::resolve::{normalize_reference, parse_reference, prepare};

    /// Writing OCI image layouts (tests and benches build their images).
    pub mod oci {
        pub use crate::engine::image::oci::{
            write_layout, LayerCompression, LayerEntry, LayerEntryKind, LayerSpec, LayoutWriter,
            Platform, WrittenImage,
        };
    }

    /// The vm driver's ext4 disk images.
    pub mod ext4 {
        pub use crate::engine::image::ext4::{disk_image, is_ext4};
    }
}

/// The entry points of the fuzz targets (`fuzz/` at the top of the
/// repository): the parsers and the layer unpacker that read untrusted
/// bytes, reachable without a home, a registry or a sandbox.
/// Fault-injection points for crash-safety and race tests (debug builds
/// only): `burrow serve` marks its own with these too.
pub mod fault {
    pub use crate::engine::fault::{
        enabled, hold, hold_blocking, point, Fault, FAULT_ENV, LAYER_BAIT, MARKER_ENV,
    };
}

pub mod fuzz {
    pub use crate::engine::image::fuzz::{
        parse_manifest, unpack_layers, unpack_layout, ParsedManifest,
    };
}

/// SQL migrations embedded in the binary (the server's store reads its own
/// with the same loader).
pub use crate::engine::store::migrations;
