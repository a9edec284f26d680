//! Forks of the local backend's running sandboxes.
//!
//! A container sandbox is forked by its files: its supervisor writes its
//! writable layer, frozen (as a filesystem snapshot does), and each copy's
//! writable layer is that layer unpacked; its processes are not copied
//! (each copy starts its image's command afresh).
//!
//! A vm sandbox is forked whole: its supervisor saves the running guest
//! (every RAM page and a copy of its writable disk, the guest stopped for
//! the save and then let run on, see `Control::SaveGuest`) into a scratch
//! directory; each copy is a new sandbox of the parent's configuration
//! whose directory is given that saved guest as its hibernated one before
//! its record exists, so that its first start restores it, as itself (its
//! own id, hostname, machine id, entropy and clock), with the parent's
//! processes running. The copies start at once, each from the one saved
//! state (read, not copied).
//!
//! A copy's directory is made under its removal lock and its record is
//! written last: a fork killed at any point leaves at most directories
//! without a record (removed by the next backend that opens the home), a
//! scratch file or directory (removed by the next snapshot or fork), and
//! copies already recorded, each whole (not started: a start runs it as the
//! copy it is), never a sandbox that is not the copy it claims to be. A
//! fork that fails (rather than being killed) after copies were recorded
//! removes them: all or nothing.

use burrow_protocol::{Control, GuestErrorCode, Response};

use super::snapshots::{scratch_dir, sweep_scratch, Scratch};
use super::transitions::ControlError;
use super::LocalBackend;
use crate::backend::{Backend, StartOptions};
use crate::error::{Error, Result};
use crate::model::{DriverKind, ForkOptions, SandboxId, SandboxInfo, Status};

impl LocalBackend {
    pub(super) async fn do_fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        opts.validate()?;
        let parent = self
            .wait_until(name, id, |i| i.status != Status::Starting)
            .await?;
        if parent.status != Status::Running {
            return Err(Error::InvalidState {
                operation: "fork".into(),
                name: parent.name,
                id: parent.id,
                status: parent.status,
            });
        }
        // `<parent>-fork-<n>` for the first n from 1 not taken.
        let names = if opts.names.is_empty() {
            let mut names = Vec::new();
            let mut n = 1u64;
            while names.len() < opts.copies() {
                let candidate = format!("{}-fork-{n}", parent.name);
                if self.store.get_by_name(&candidate).await?.is_none() {
                    names.push(candidate);
                }
                n += 1;
            }
            names
        } else {
            opts.names.clone()
        };

        let scratch = scratch_dir(&self.home)?;
        sweep_scratch(&scratch);
        let saved = Scratch::new(&scratch, "fork");
        let began = std::time::Instant::now();
        let vm = parent.config.driver.unwrap_or_default() == DriverKind::Vm;
        if vm {
            self.save_guest(&parent, &saved.0, "fork").await?;
        } else {
            self.write_sandbox_layer(name, id, &saved.0).await?;
        }
        let save_ms = began.elapsed().as_millis() as u64;
        let sealed = self.store.sealed_secrets(&parent.id).await?;

        let mut made: Vec<(String, SandboxId)> = Vec::new();
        let result = async {
            for child in &names {
                let child_id = SandboxId::new();
                // Recorded before the copy's directory is written, so that
                // a failure removes what was made.
                made.push((child.clone(), child_id.clone()));
                self.insert_copy(
                    &parent,
                    child,
                    &child_id,
                    opts.detached,
                    sealed.as_deref(),
                    &saved.0,
                )
                .await?;
                if made.len() == 1 {
                    crate::engine::fault::point(crate::engine::fault::Fault::ForkAfterCopy);
                }
            }
            // All at once, each restoring the one saved state.
            let mut starts = tokio::task::JoinSet::new();
            for (k, (n, i)) in made.iter().cloned().enumerate() {
                let backend = self.clone();
                starts.spawn(
                    async move { (k, backend.start(&n, &i, StartOptions::default()).await) },
                );
            }
            let mut copies: Vec<Option<SandboxInfo>> = vec![None; made.len()];
            while let Some(joined) = starts.join_next().await {
                let (k, started) = joined
                    .map_err(|e| Error::io("starting a copy", None, std::io::Error::other(e)))?;
                copies[k] = Some(started?);
            }
            Ok(copies.into_iter().flatten().collect::<Vec<_>>())
        }
        .await;
        match result {
            Ok(copies) => {
                tracing::info!(
                    sandbox = %id,
                    name,
                    copies = copies.len(),
                    save_ms,
                    total_ms = began.elapsed().as_millis() as u64,
                    "forked"
                );
                Ok(copies)
            }
            Err(e) => {
                for (n, i) in &made {
                    match self.destroy(n, i).await {
                        Ok(()) | Err(Error::NotFound { .. }) => {}
                        Err(d) => {
                            tracing::warn!(sandbox = %i, error = %d, "removing a copy of a failed fork")
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// Has the parent's supervisor save its running guest into `dir`
    /// (for `operation`, named in errors).
    pub(super) async fn save_guest(
        &self,
        parent: &SandboxInfo,
        dir: &std::path::Path,
        operation: &'static str,
    ) -> Result<()> {
        let body = Control::SaveGuest {
            dir: dir.to_string_lossy().into_owned(),
        };
        match self.control_answer(parent, body).await {
            Ok(Response::Done) => Ok(()),
            Ok(other) => Err(Error::protocol(format!(
                "the supervisor answered {other:?} to a save of the guest"
            ))),
            Err(ControlError::Ended) => {
                let now = self.lookup(&parent.name, &parent.id).await?.info;
                Err(Error::InvalidState {
                    operation: operation.into(),
                    name: now.name,
                    id: now.id,
                    status: now.status,
                })
            }
            Err(ControlError::Refused(g)) if g.code == GuestErrorCode::Unsupported => {
                Err(Error::unsupported(g.message))
            }
            Err(ControlError::Refused(g)) => Err(Error::Guest {
                operation: operation.into(),
                failure: crate::error::GuestFailure(g),
            }),
            Err(ControlError::Failed(e)) => Err(e),
        }
    }

    /// Makes one copy: its directory given the saved guest (under its
    /// removal lock, so that no sweep takes it for a leftover), then its
    /// record.
    async fn insert_copy(
        &self,
        parent: &SandboxInfo,
        name: &str,
        id: &SandboxId,
        detached: bool,
        sealed: Option<&str>,
        saved: &std::path::Path,
    ) -> Result<()> {
        let (dir, _making) = self.make_unrecorded_dir(id).await?;
        if parent.config.driver.unwrap_or_default() == DriverKind::Vm {
            let (from, to) = (saved.to_path_buf(), dir.clone());
            crate::engine::image::snapshot::blocking("giving a copy the saved guest", move || {
                crate::engine::driver::vm::seed_from_copy(&from, &to)
            })
            .await?;
        } else {
            let parent_dir = self.home.sandbox_dir(&parent.id);
            crate::engine::driver::container::seed_writable_layer(
                &parent_dir,
                &dir,
                saved,
                &self.home.images_dir(),
            )
            .await?;
        }
        let sealed = match sealed {
            Some(s) => Some(crate::engine::secrets::reseal(
                &self.home, &parent.id, id, s,
            )?),
            None => None,
        };
        let _lock = self.name_lock(name).await?;
        self.store
            .insert(id, name, &parent.config, detached, sealed.as_deref())
            .await
    }
}
