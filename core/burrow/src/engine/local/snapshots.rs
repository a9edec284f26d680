//! Snapshots of the local backend's sandboxes.
//!
//! A filesystem snapshot is the sandbox's writable layer written as an OCI
//! layer on top of its image's layers, stored in the image store (see
//! `engine::image::snapshot`) and recorded in the `snapshots` table last:
//! a snapshot interrupted at any point left at most unreferenced blobs
//! (which `image prune` removes) and a scratch file (removed by the next
//! snapshot once its writer is dead), never a record that names missing
//! content.
//!
//! A running sandbox's layer is written by its supervisor, which freezes
//! the guest for the copy. A stopped one's is written here, under the
//! sandbox's transition lock so that no start begins meanwhile (rootless,
//! by the supervisor program in a user namespace, where the layer's files
//! of subordinate ids can be read).

use std::path::{Path, PathBuf};

use burrow_protocol::{Control, GuestErrorCode, Response};

use super::transitions::ControlError;
use super::LocalBackend;
use crate::engine::fault::{self, Fault};
use crate::engine::image::snapshot as image;
use crate::engine::image::snapshot::blocking;
use crate::engine::paths::Home;
use crate::engine::snapshot::layer;
use crate::engine::store::snapshots::Removed;
use crate::error::{Error, Result};
use crate::model::{
    snapshot_of_image, validate_snapshot_name, DriverKind, SandboxId, SandboxInfo, SnapshotInfo,
    SnapshotKind, SnapshotOptions, Status,
};

/// Where snapshots keep their files in progress: `<home>/snapshots/tmp`.
pub(super) fn scratch_dir(home: &Home) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home.root().join("snapshots").join("tmp");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::io("creating the snapshot scratch directory", Some(&dir), e))?;
    Ok(dir)
}

/// Removes the scratch files of snapshots whose process is gone (killed
/// mid-copy). Files are named `<pid>-...`.
pub(super) fn sweep_scratch(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            tracing::debug!(path = %entry.path().display(), "removing the scratch file of an interrupted snapshot");
            remove_scratch(&entry.path());
        }
    }
}

/// A scratch file removed when dropped (moved into the store before then,
/// there is nothing left to remove).
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(dir: &Path, what: &str) -> Scratch {
        Scratch(dir.join(format!(
            "{}-{what}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        )))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_scratch(&self.0);
    }
}

/// Removes a scratch file or directory (a fork's saved guest).
fn remove_scratch(path: &Path) {
    if std::fs::remove_file(path).is_err() {
        let _ = std::fs::remove_dir_all(path);
    }
}

impl LocalBackend {
    pub(super) async fn do_snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &SnapshotOptions,
    ) -> Result<SnapshotInfo> {
        validate_snapshot_name(snapshot)?;
        let info = self
            .wait_until(name, id, |i| i.status != Status::Starting)
            .await?;
        if self.store.get_snapshot(snapshot).await?.is_some() {
            return Err(Error::SnapshotExists {
                name: snapshot.to_owned(),
            });
        }
        if opts.kind == SnapshotKind::Full {
            return self.full_snapshot(&info, snapshot).await;
        }
        let scratch = scratch_dir(&self.home)?;
        sweep_scratch(&scratch);

        // The image under the layer: a full snapshot's sandboxes run its
        // base image; a filesystem snapshot is an image of the store.
        let mut base_ref = info.config.image.clone();
        let mut stored = None;
        while let Some(base) = snapshot_of_image(&base_ref).map(str::to_owned) {
            let snap = self
                .store
                .get_snapshot(&base)
                .await?
                .ok_or_else(|| crate::engine::store::snapshots::not_found(&base))?;
            if snap.kind == SnapshotKind::Full {
                base_ref = snap.base_image;
                continue;
            }
            stored = Some(snap.digest);
            break;
        }
        let base = image::base(&self.home, &base_ref, stored.as_deref(), &scratch).await?;

        let tmp = Scratch::new(&scratch, "layer.tar");
        let (digest, size) = self.write_sandbox_layer(name, id, &tmp.0).await?;
        let home = self.home.clone();
        let created_by = format!("burrow snapshot {snapshot} of sandbox {name:?} ({id})");
        let tmp_path = tmp.0.clone();
        let manifest = blocking("storing the snapshot", move || {
            let top = image::store_file(&home, &tmp_path, &digest, size)?;
            image::write_image(&home, base, top, &created_by)
        })
        .await?;
        fault::point(Fault::SnapshotBeforeRecord);
        let snap = SnapshotInfo {
            name: snapshot.to_owned(),
            kind: SnapshotKind::Filesystem,
            image: format!("{}{snapshot}", crate::model::SNAPSHOT_IMAGE_PREFIX),
            digest: manifest.to_string(),
            size,
            source_id: info.id.clone(),
            source_name: info.name.clone(),
            base_image: info.config.image.clone(),
            driver: info.config.driver.unwrap_or_default(),
            created_at_ms: crate::engine::store::now_ms(),
        };
        self.store.insert_snapshot(&snap).await?;
        tracing::info!(sandbox = %id, name, snapshot, size, digest = %snap.digest, "snapshot taken");
        Ok(snap)
    }

    /// Writes the sandbox's writable layer to `tmp`: by its supervisor if
    /// it runs, else here under its transition lock. Returns the layer's
    /// digest and size.
    pub(super) async fn write_sandbox_layer(
        &self,
        name: &str,
        id: &SandboxId,
        tmp: &Path,
    ) -> Result<(crate::engine::image::digest::Digest, u64)> {
        loop {
            let info = self.lookup(name, id).await?.info;
            match info.status {
                Status::Starting => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Status::Running | Status::Draining | Status::Paused => {
                    let body = Control::Snapshot {
                        layer: tmp.to_string_lossy().into_owned(),
                    };
                    match self.control_answer(&info, body).await {
                        // Hashed as it was written.
                        Ok(Response::Layer { digest, size }) => {
                            let digest = crate::engine::image::digest::Digest::parse(&digest)
                                .map_err(Error::protocol)?;
                            return Ok((digest, size));
                        }
                        Ok(_) => {
                            let tmp = tmp.to_path_buf();
                            return blocking("reading the snapshot layer", move || {
                                image::hash_file(&tmp).map_err(|e| {
                                    Error::io("reading the snapshot layer", Some(&tmp), e)
                                })
                            })
                            .await;
                        }
                        // Stopped meanwhile: taken from the stopped sandbox.
                        Err(ControlError::Ended) => {
                            let _ = std::fs::remove_file(tmp);
                        }
                        Err(ControlError::Refused(g)) if g.code == GuestErrorCode::Unsupported => {
                            return Err(Error::unsupported(g.message));
                        }
                        Err(ControlError::Refused(g)) => {
                            return Err(Error::Guest {
                                operation: "snapshot".into(),
                                failure: crate::error::GuestFailure(g),
                            })
                        }
                        Err(ControlError::Failed(e)) => return Err(e),
                    }
                }
                Status::Created | Status::Stopped | Status::Crashed => {
                    let _lock = self.name_lock(name).await?;
                    let now = self.lookup(name, id).await?.info;
                    if now.status.has_runtime() {
                        continue;
                    }
                    return self.write_stopped_layer(&now, tmp).await;
                }
            }
        }
    }

    /// The layer of a sandbox that is not running (its transition lock
    /// held by the caller).
    async fn write_stopped_layer(
        &self,
        info: &SandboxInfo,
        tmp: &Path,
    ) -> Result<(crate::engine::image::digest::Digest, u64)> {
        let dir = self.home.sandbox_dir(&info.id);
        if info.config.driver.unwrap_or_default() == DriverKind::Vm {
            // Read by a guest of its own disk: the host cannot read the
            // overlay's ext4 (nor its markers) without root.
            return crate::engine::driver::vm::write_stopped_layer(&dir, tmp).await;
        }
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            // The layer holds files of the user's subordinate ids: read in a
            // user namespace where they are the guest's ids.
            let upper = dir.join("upper");
            crate::engine::driver::container::rootless::helper(
                &["__layer".as_ref(), upper.as_os_str(), tmp.as_os_str()],
                "writing the snapshot layer",
            )
            .await?;
            let tmp = tmp.to_path_buf();
            return blocking("reading the snapshot layer", move || {
                image::hash_file(&tmp)
                    .map_err(|e| Error::io("reading the snapshot layer", Some(&tmp), e))
            })
            .await;
        }
        let tmp = tmp.to_path_buf();
        blocking("writing the snapshot layer", move || {
            crate::engine::driver::container::with_writable_layer(&dir, |upper, owners| {
                image::write_file_hashed(&tmp, |out| {
                    layer::write_layer(upper, owners, layer::FaultAfter::new(out)).map(drop)
                })
                .map_err(|e| Error::io("writing the snapshot layer", Some(&tmp), e))
            })
        })
        .await
    }

    pub(super) async fn do_list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.store.list_snapshots().await
    }

    pub(super) async fn do_get_snapshot(&self, snapshot: &str) -> Result<SnapshotInfo> {
        validate_snapshot_name(snapshot)?;
        self.store
            .get_snapshot(snapshot)
            .await?
            .ok_or_else(|| crate::engine::store::snapshots::not_found(snapshot))
    }

    pub(super) async fn do_remove_snapshot(&self, snapshot: &str) -> Result<()> {
        validate_snapshot_name(snapshot)?;
        match self.store.remove_snapshot(snapshot).await? {
            Removed::Yes(digest) => {
                // A full snapshot's saved guest (nothing for a filesystem
                // snapshot, whose blobs go at the next image prune).
                self.forget_full_snapshot(&digest);
                tracing::info!(snapshot, %digest, "snapshot removed");
                Ok(())
            }
            Removed::Missing => Err(crate::engine::store::snapshots::not_found(snapshot)),
            Removed::InUse(sandboxes) => Err(Error::SnapshotInUse {
                name: snapshot.to_owned(),
                sandboxes,
            }),
        }
    }

    /// Pushes the filesystem snapshot `snapshot` to the registry reference
    /// `target` (a tag) as an ordinary OCI image (credentials and plain
    /// HTTP as for pulls: `opts.credentials`, the Docker config file,
    /// `opts.insecure` or the insecure registries of the home). Any backend
    /// then creates sandboxes from `target`.
    pub async fn push_snapshot(
        &self,
        snapshot: &str,
        target: &str,
        opts: &crate::engine::image::PullOptions,
    ) -> Result<crate::engine::image::PushReport> {
        let info = self.do_get_snapshot(snapshot).await?;
        if info.kind != SnapshotKind::Filesystem {
            return Err(Error::unsupported(
                "pushing a full snapshot (only a filesystem snapshot is an image)",
            ));
        }
        crate::engine::image::registry::push(&self.home, &info.image, &info.digest, target, opts)
            .await
    }

    /// The manifest digests of every snapshot (roots an image prune keeps).
    pub(super) async fn snapshot_digests(&self) -> Result<Vec<String>> {
        Ok(self
            .store
            .list_snapshots()
            .await?
            .into_iter()
            .filter(|s| s.kind == SnapshotKind::Filesystem)
            .map(|s| s.digest)
            .collect())
    }
}

/// Writes the writable layer `upper` of a rootless sandbox to the new file
/// `out`, as root of a user namespace of this user's (entered here: call it
/// only in a process of its own, single-threaded; `burrow __layer`).
pub fn write_layer_in_user_namespace(upper: &Path, out: &Path) -> Result<()> {
    use crate::engine::driver::container::rootless::{enter, Mapping};
    enter(&Mapping::for_current_user())?;
    layer::write_layer_file_blocking(upper, layer::Owners { shift: 0 }, out)
        .map(drop)
        .map_err(|e| Error::io("writing the snapshot layer", Some(out), e))
}

/// Unpacks the layer file `layer` into the writable layer `upper` of a
/// rootless sandbox that never ran, as its user namespace's ids (a fork's
/// copy; callable only in a process of its own, single-threaded; `burrow
/// __unlayer`).
pub fn unpack_layer_in_user_namespace(layer: &Path, upper: &Path) -> Result<()> {
    use crate::engine::driver::container::rootless::{enter, Mapping};
    let file = std::fs::File::open(layer)
        .map_err(|e| Error::io("reading the writable layer", Some(layer), e))?;
    enter(&Mapping::for_current_user())?;
    burrow_layer::unpack_layer(
        std::io::BufReader::new(file),
        upper,
        layer::Owners { shift: 0 },
        "user.overlay.opaque",
    )
    .map_err(|e| Error::io("unpacking the writable layer", Some(upper), e))
}
