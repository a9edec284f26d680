//! [`SandboxHandle`]: a metadata handle bound to one sandbox id.

use std::sync::Arc;

use super::{ModifyBuilder, Sandbox, SandboxPage};
use crate::backend::{Backend, ListFilter, StartOptions, StopOptions};
use crate::error::{Error, Result};
use crate::model::{Modify, ModifyPlan, SandboxConfig, SandboxId, SandboxInfo, Status};

/// A handle to one persisted sandbox (running or not), bound to its id.
#[derive(Debug, Clone)]
pub struct SandboxHandle {
    backend: Arc<dyn Backend>,
    id: SandboxId,
    name: String,
    /// The status when this handle was made (see [`Self::status_snapshot`]).
    snapshot: Status,
}

impl SandboxHandle {
    /// A handle bound to `id` (known by `name`) in `backend`, with `status`
    /// as its snapshot. Nothing is looked up: every call on it checks the
    /// identity, so a handle made for an id that is gone, or for a name that
    /// another id now holds, answers `not_found` or `sandbox_replaced`.
    pub fn new(backend: Arc<dyn Backend>, id: SandboxId, name: String, status: Status) -> Self {
        SandboxHandle {
            backend,
            id,
            name,
            snapshot: status,
        }
    }

    /// A handle of the sandbox `info` describes, its status as the snapshot.
    pub fn from_info(backend: Arc<dyn Backend>, info: &SandboxInfo) -> Self {
        SandboxHandle::new(backend, info.id.clone(), info.name.clone(), info.status)
    }

    /// The sandbox currently named `name` in `backend`.
    pub async fn get_in(backend: Arc<dyn Backend>, name: &str) -> Result<SandboxHandle> {
        let info = backend.get(name).await?;
        Ok(SandboxHandle::from_info(backend, &info))
    }

    /// Exactly `id` in `backend`.
    pub async fn get_by_id_in(backend: Arc<dyn Backend>, id: &SandboxId) -> Result<SandboxHandle> {
        let info = backend.get_by_id(id).await?;
        Ok(SandboxHandle::from_info(backend, &info))
    }

    /// Handles of the sandboxes in `backend` that match `filter`, each with
    /// its status as it was listed.
    pub async fn list_in(backend: Arc<dyn Backend>, filter: &ListFilter) -> Result<SandboxPage> {
        let infos = backend.list(filter).await?;
        Ok(SandboxPage {
            sandboxes: infos
                .iter()
                .map(|info| SandboxHandle::from_info(backend.clone(), info))
                .collect(),
        })
    }

    /// Starts the sandbox currently named `name` in `backend` (Created,
    /// Stopped or Crashed): the same sandbox, its id and configuration
    /// kept. If the name is removed and taken again between the lookup and
    /// the start, the sandbox that holds it then is the one started.
    pub async fn start_by_name_in(backend: Arc<dyn Backend>, name: &str) -> Result<Sandbox> {
        let mut tries = 0;
        loop {
            let handle = SandboxHandle::get_in(backend.clone(), name).await?;
            match handle.start().await {
                Err(Error::NotFound { .. } | Error::SandboxReplaced { .. }) if tries < 8 => {
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// The id this handle is bound to.
    pub fn id(&self) -> &SandboxId {
        &self.id
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The status when this handle was made (by a lookup, a list, a
    /// define), without a call. [`Self::status`] asks again.
    pub fn status_snapshot(&self) -> Status {
        self.snapshot
    }

    /// A fresh snapshot.
    pub async fn info(&self) -> Result<SandboxInfo> {
        self.backend.status(&self.name, &self.id).await
    }

    /// The current status (a call; [`Self::status_snapshot`] is the one
    /// this handle was made with).
    pub async fn status(&self) -> Result<Status> {
        Ok(self.info().await?.status)
    }

    /// The persisted configuration.
    pub async fn config(&self) -> Result<SandboxConfig> {
        Ok(self.info().await?.config)
    }

    /// Starts it (Created, Stopped or Crashed) and returns a live handle.
    pub async fn start(&self) -> Result<Sandbox> {
        let info = self
            .backend
            .start(&self.name, &self.id, StartOptions::default())
            .await?;
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }

    /// Starts it with options.
    pub async fn start_with(&self, opts: StartOptions) -> Result<Sandbox> {
        let info = self.backend.start(&self.name, &self.id, opts).await?;
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }

    /// Converges on the running sandbox: waits through Starting, starts it
    /// when Created/Stopped/Crashed, rejects Draining/Paused.
    pub async fn connect_or_start(&self) -> Result<Sandbox> {
        let info = self
            .backend
            .connect_or_start(&self.name, &self.id, StartOptions::default())
            .await?;
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }

    /// Graceful stop.
    pub async fn stop(&self) -> Result<SandboxInfo> {
        self.backend
            .stop(&self.name, &self.id, StopOptions::default())
            .await
    }

    /// Graceful stop with options.
    pub async fn stop_with(&self, opts: StopOptions) -> Result<SandboxInfo> {
        self.backend.stop(&self.name, &self.id, opts).await
    }

    /// Immediate stop.
    pub async fn kill(&self) -> Result<SandboxInfo> {
        self.backend.kill(&self.name, &self.id).await
    }

    /// Drains: no new work; stops when in-flight work ends.
    pub async fn request_drain(&self) -> Result<SandboxInfo> {
        self.backend.request_drain(&self.name, &self.id).await
    }

    /// Stop then start; same id and configuration.
    pub async fn restart(&self) -> Result<Sandbox> {
        let info = self
            .backend
            .restart(&self.name, &self.id, StopOptions::default())
            .await?;
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }

    /// Kills (if running) and removes exactly this sandbox.
    pub async fn destroy(&self) -> Result<()> {
        self.backend.destroy(&self.name, &self.id).await
    }

    /// Removes this sandbox (it must not be running).
    pub async fn remove(&self) -> Result<()> {
        self.backend.remove(&self.name, &self.id).await
    }

    /// Waits, without a deadline, until the status is one of `statuses`.
    pub async fn wait_for_status(&self, statuses: &[Status]) -> Result<SandboxInfo> {
        self.backend
            .wait_for_status(&self.name, &self.id, statuses)
            .await
    }

    /// Explicit keepalive (counts as activity for the idle timeout).
    pub async fn touch(&self) -> Result<()> {
        self.backend.touch(&self.name, &self.id).await
    }

    /// Suspends every process of the sandbox.
    pub async fn pause(&self) -> Result<SandboxInfo> {
        self.backend.pause(&self.name, &self.id).await
    }

    /// Continues after a pause.
    pub async fn resume(&self) -> Result<SandboxInfo> {
        self.backend.resume(&self.name, &self.id).await
    }

    /// Changes the configuration: `handle.modify().cpus(4).memory(4096).apply()`;
    /// the plan says where each change lands.
    pub fn modify(&self) -> ModifyBuilder<'_> {
        ModifyBuilder::new(&self.backend, &self.name, &self.id)
    }

    /// Applies `changes`; see [`crate::model::ModifyPlan`].
    pub async fn modify_with(&self, changes: &Modify) -> Result<ModifyPlan> {
        self.backend.modify(&self.name, &self.id, changes).await
    }

    /// Resource usage of the running sandbox.
    pub async fn metrics(&self) -> Result<crate::backend::Metrics> {
        self.backend.metrics(&self.name, &self.id).await
    }

    /// Copies the running sandbox into new sandboxes (see
    /// [`crate::Backend::fork`]); returns their handles.
    pub async fn fork(&self, opts: &crate::ForkOptions) -> Result<Vec<SandboxHandle>> {
        let copies = self.backend.fork(&self.name, &self.id, opts).await?;
        Ok(copies
            .iter()
            .map(|info| SandboxHandle::from_info(self.backend.clone(), info))
            .collect())
    }

    /// Saves the sandbox's files under `snapshot` (see
    /// [`SandboxHandle::snapshot_with`]).
    pub async fn snapshot(&self, snapshot: &str) -> Result<crate::SnapshotInfo> {
        self.snapshot_with(snapshot, &crate::SnapshotOptions::default())
            .await
    }

    /// Saves the sandbox under `snapshot`: its writable layer over its
    /// image as an image of the snapshot store (`snapshot:NAME` creates
    /// sandboxes from it), or, with [`crate::SnapshotOptions::full`], a
    /// running vm sandbox whole. A running sandbox is frozen for the copy
    /// and goes on; a stopped one stays stopped. A taken name is
    /// [`crate::Error::SnapshotExists`].
    pub async fn snapshot_with(
        &self,
        snapshot: &str,
        opts: &crate::SnapshotOptions,
    ) -> Result<crate::SnapshotInfo> {
        self.backend
            .snapshot(&self.name, &self.id, snapshot, opts)
            .await
    }

    /// The sandbox's logs (running, stopped or crashed).
    pub async fn logs(&self, opts: &crate::logs::LogOptions) -> Result<crate::logs::LogStream> {
        self.backend.logs(&self.name, &self.id, opts).await
    }

    /// A live handle bound to this id without checking its status: calls
    /// through it start a sandbox reclaimed for idleness (demand start), or
    /// fail with `invalid_state`.
    pub async fn sandbox(&self) -> Result<Sandbox> {
        let info = self.info().await?;
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }

    /// A live handle, if it is running (no start).
    pub async fn connect(&self) -> Result<Sandbox> {
        let info = self.info().await?;
        if info.status != Status::Running {
            return Err(Error::InvalidState {
                operation: "connect".into(),
                name: info.name,
                id: info.id,
                status: info.status,
            });
        }
        Ok(Sandbox::bind(self.backend.clone(), &info))
    }
}

impl Sandbox {
    /// Creates a live handle for an already-known sandbox snapshot.
    pub fn from_info(backend: Arc<dyn Backend>, info: &SandboxInfo) -> Sandbox {
        Sandbox::bind(backend, info)
    }
}

impl PartialEq for SandboxHandle {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
