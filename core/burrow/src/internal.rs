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
/// arguments, calls [`supervisor::detach_from_starter`], sets up logging
/// and calls [`supervisor::main`].
pub mod supervisor {
    use std::path::Path;

    pub use crate::logs::rotating::RotatingFile;
    pub use crate::runtime::supervisor::{detach_from_starter, main, SuperviseArgs};

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
            bare_boot_args, check_support, is_hibernated, locate_kernel, locate_qemu, start_record,
            templates_dir, write_initramfs, Accel, BareMachine, BareVm, StartKind, StartRecord,
            VmSupport, DEFAULT_MEMORY_MB, START_RECORD, TEMPLATES_DIR, TEMPLATES_ENV,
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

/// The entry points of the fuzz targets (`fuzz/` at the top of the
/// repository): the parsers and the layer unpacker that read untrusted
/// bytes, reachable without a home, a registry or a sandbox.
/// Fault-injection points for crash-safety and race tests (debug builds
/// only): `burrow serve` marks its own with these too.
pub mod fault {
    pub use crate::fault::{enabled, hold, point};
}

pub mod fuzz {
    pub use crate::image::fuzz::{parse_manifest, unpack_layers, unpack_layout, ParsedManifest};
}

/// SQL migrations embedded in the binary, read as `sqlx::migrate!` reads a
/// directory, without its proc macro (which compiles sqlx's Postgres and
/// SQLite drivers a second time, for the host, in every build).
pub mod migrations {
    use std::borrow::Cow;

    use sqlx::migrate::{Migration, MigrationType, Migrator};

    /// A migrator over `files`: (file name, SQL) pairs, the file names as
    /// `sqlx::migrate!` wants them (`<version>_<description>.sql`, the
    /// description's `_` read as spaces; `.up.sql`/`.down.sql` for
    /// reversible ones; SQL starting with `-- no-transaction` runs outside a
    /// transaction). The checksums (SHA-384 of the SQL) are the macro's, so
    /// databases it migrated are recognised.
    ///
    /// # Panics
    /// On a file name without a numeric version: a bug of the caller's
    /// constant list, caught by its first test.
    pub fn embedded(files: &[(&'static str, &'static str)]) -> Migrator {
        let mut migrations: Vec<Migration> = files
            .iter()
            .map(|(file, sql)| {
                let (version, rest) = file
                    .split_once('_')
                    .unwrap_or_else(|| panic!("migration {file:?}: no <version>_ prefix"));
                let version: i64 = version
                    .parse()
                    .unwrap_or_else(|_| panic!("migration {file:?}: the version is not a number"));
                let kind = MigrationType::from_filename(rest);
                let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
                Migration::new(
                    version,
                    Cow::Owned(description),
                    kind,
                    Cow::Borrowed(sql),
                    sql.starts_with("-- no-transaction"),
                )
            })
            .collect();
        migrations.sort_by_key(|m| m.version);
        Migrator {
            migrations: Cow::Owned(migrations),
            ..Migrator::DEFAULT
        }
    }

    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    mod tests {
        use super::*;

        #[test]
        fn files_read_as_the_macro_reads_them() {
            let m = embedded(&[
                (
                    "0002_more_tables.sql",
                    "-- no-transaction\nCREATE INDEX x ON t(a);",
                ),
                ("0001_init.sql", "CREATE TABLE t (a INTEGER);"),
            ]);
            let got: Vec<_> = m
                .migrations
                .iter()
                .map(|m| {
                    (
                        m.version,
                        m.description.to_string(),
                        m.no_tx,
                        m.migration_type,
                    )
                })
                .collect();
            assert_eq!(
                got,
                vec![
                    (1, "init".to_owned(), false, MigrationType::Simple),
                    (2, "more tables".to_owned(), true, MigrationType::Simple)
                ]
            );
            // SHA-384 of the SQL, as the macro computes it (what databases
            // it migrated have recorded).
            let hex: String = m.migrations[0]
                .checksum
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(
                hex,
                "b0ed7bd50572279eb890b21694792ba9cbdb4e7fd5c62c381f08a0ab38dbc5da84fe0f21b4441ea20e2ccfb56adcd112"
            );
            let again = embedded(&[("0001_init.sql", "CREATE TABLE t (a INTEGER);")]);
            assert_eq!(again.migrations[0].checksum, m.migrations[0].checksum);
        }
    }
}
