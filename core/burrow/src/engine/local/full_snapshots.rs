//! Full snapshots: a running vm sandbox saved whole (memory, processes and
//! files) under a name, restored into new sandboxes.
//!
//! The supervisor saves the running guest (as for a fork, see `fork.rs`)
//! into a scratch directory; the directory is then named by the digest of
//! its machine state and moved to `<home>/snapshots/full/<hex>`, and the
//! record is written last (its `digest` is that one). A sandbox created
//! from `snapshot:NAME` of a full snapshot is a vm sandbox of the same
//! machine (memory, CPUs, network: else it boots afresh from the saved
//! disk, its files kept): its directory is given the saved guest before its
//! record exists, as a fork's copy's is, and its first start restores it as
//! itself, with the snapshot's processes running. Its image is the
//! snapshot's base image (`snapshot:NAME` resolves to it), which an image
//! prune keeps while the snapshot exists.
//!
//! A kill at any point leaves at most a scratch directory (the next
//! snapshot or fork removes it) or a directory of `snapshots/full` no
//! record names (the next full snapshot removes it); never a record that
//! names a missing directory.

use std::path::{Path, PathBuf};

use super::snapshots::{scratch_dir, sweep_scratch, Scratch};
use super::LocalBackend;
use crate::engine::image::snapshot::blocking;
use crate::engine::locks::FileLock;
use crate::error::{Error, Result};
use crate::model::{DriverKind, SandboxId, SandboxInfo, SnapshotInfo, SnapshotKind, Status};

/// The directory of the full snapshot whose record's digest is `digest`.
fn saved_dir(home: &crate::engine::paths::Home, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    full_dir(home).join(hex)
}

fn full_dir(home: &crate::engine::paths::Home) -> PathBuf {
    home.root().join("snapshots").join("full")
}

impl LocalBackend {
    /// Saves the running vm sandbox `info` whole as the full snapshot
    /// `snapshot` (its name checked and free).
    pub(super) async fn full_snapshot(
        &self,
        info: &SandboxInfo,
        snapshot: &str,
    ) -> Result<SnapshotInfo> {
        if info.config.driver.unwrap_or_default() != DriverKind::Vm {
            return Err(Error::unsupported(
                "full snapshots of a container sandbox (its memory and processes: a vm sandbox's only)",
            ));
        }
        if info.status != Status::Running {
            return Err(Error::InvalidState {
                operation: "snapshot".into(),
                name: info.name.clone(),
                id: info.id.clone(),
                status: info.status,
            });
        }
        let scratch = scratch_dir(&self.home)?;
        sweep_scratch(&scratch);
        self.sweep_full().await;
        let saved = Scratch::new(&scratch, "full");
        self.save_guest(info, &saved.0, "snapshot").await?;
        // From the move into the store until the record: no sweep runs.
        let _store = self.full_store_lock().await?;
        let (from, home) = (saved.0.clone(), self.home.clone());
        let (digest, size) = blocking("storing the full snapshot", move || {
            let state = from.join("state");
            let (digest, _) = crate::engine::image::snapshot::hash_file(&state)
                .map_err(|e| Error::io("reading the saved guest", Some(&state), e))?;
            let size = allocated(&from)?;
            let to = saved_dir(&home, &digest.to_string());
            std::fs::create_dir_all(full_dir(&home))
                .map_err(|e| Error::io("creating the full snapshot store", Some(&to), e))?;
            match std::fs::rename(&from, &to) {
                Ok(()) => Ok((digest.to_string(), size)),
                // The same state saved before (never in practice: a state
                // holds the guest's clock): that copy serves.
                Err(_) if to.join("state").is_file() => Ok((digest.to_string(), size)),
                Err(e) => Err(Error::io("storing the full snapshot", Some(&to), e)),
            }
        })
        .await?;
        crate::engine::fault::point(crate::engine::fault::Fault::SnapshotBeforeRecord);
        let snap = SnapshotInfo {
            name: snapshot.to_owned(),
            kind: SnapshotKind::Full,
            image: format!("{}{snapshot}", crate::model::SNAPSHOT_IMAGE_PREFIX),
            digest,
            size,
            source_id: info.id.clone(),
            source_name: info.name.clone(),
            base_image: info.config.image.clone(),
            driver: DriverKind::Vm,
            created_at_ms: crate::engine::store::now_ms(),
        };
        if let Err(e) = self.store.insert_snapshot(&snap).await {
            let _ = std::fs::remove_dir_all(saved_dir(&self.home, &snap.digest));
            return Err(e);
        }
        tracing::info!(sandbox = %info.id, name = %info.name, snapshot, size, "full snapshot taken");
        Ok(snap)
    }

    /// For a create from `snapshot:NAME` of a full snapshot: checks the
    /// configuration (a vm's) and gives the new sandbox `id` the saved
    /// guest. Returns the removal lock of its directory, to be held until
    /// its record exists (None: not a full snapshot, nothing done).
    pub(super) async fn seed_from_full_snapshot(
        &self,
        config: &crate::model::SandboxConfig,
        id: &SandboxId,
    ) -> Result<Option<FileLock>> {
        let Some(name) = crate::model::snapshot_of_image(&config.image) else {
            return Ok(None);
        };
        let Some(snap) = self.store.get_snapshot(name).await? else {
            return Ok(None);
        };
        if snap.kind != SnapshotKind::Full {
            return Ok(None);
        }
        if config.driver.unwrap_or_default() != DriverKind::Vm {
            return Err(Error::InvalidConfig {
                field: "image".into(),
                reason: format!(
                    "{:?} is a full snapshot of a vm sandbox: it restores into a vm sandbox (driver vm)",
                    config.image
                ),
            });
        }
        // Held until the record exists.
        let (dir, making) = self.make_unrecorded_dir(id).await?;
        let (from, to) = (saved_dir(&self.home, &snap.digest), dir);
        blocking("giving the sandbox the saved guest", move || {
            crate::engine::driver::vm::seed_from_copy(&from, &to)
        })
        .await?;
        Ok(Some(making))
    }

    async fn full_store_lock(&self) -> Result<FileLock> {
        let dir = self.home.root().join("snapshots");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("creating the snapshot directory", Some(&dir), e))?;
        FileLock::acquire(&dir.join("full.lock")).await
    }

    /// Removes the saved guest of a removed full snapshot.
    pub(super) fn forget_full_snapshot(&self, digest: &str) {
        let dir = saved_dir(&self.home, digest);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %dir.display(), error = %e, "removing a full snapshot's saved guest");
            }
        }
    }

    /// Removes directories of `snapshots/full` that no record names (a full
    /// snapshot killed between its move into the store and its record).
    async fn sweep_full(&self) {
        let Ok(entries) = std::fs::read_dir(full_dir(&self.home)) else {
            return;
        };
        let Ok(_store) = self.full_store_lock().await else {
            return;
        };
        let Ok(known) = self.store.list_snapshots().await else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let named = known.iter().any(|s| {
                s.kind == SnapshotKind::Full && saved_dir(&self.home, &s.digest) == entry.path()
            });
            if !named {
                tracing::debug!(dir = %name, "removing the saved guest of an interrupted full snapshot");
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// The bytes the files under `dir` take on disk (a sparse disk counts what
/// it holds).
fn allocated(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io("reading the saved guest", Some(dir), e))?;
    for entry in entries.flatten() {
        if let Ok(m) = entry.metadata() {
            total += m.blocks() * 512;
        }
    }
    Ok(total)
}
