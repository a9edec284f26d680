//! [`SandboxHandle`]: a metadata handle bound to one sandbox id.

use std::sync::Arc;

use super::Sandbox;
use crate::backend::{Backend, StartOptions, StopOptions};
use crate::error::Result;
use crate::model::{SandboxConfig, SandboxId, SandboxInfo, Status};

/// A handle to one persisted sandbox (running or not), bound to its id.
#[derive(Debug, Clone)]
pub struct SandboxHandle {
    backend: Arc<dyn Backend>,
    id: SandboxId,
    name: String,
}

impl SandboxHandle {
    pub(crate) fn bind(backend: Arc<dyn Backend>, id: SandboxId, name: String) -> Self {
        SandboxHandle { backend, id, name }
    }

    /// The sandbox currently named `name` in `backend`.
    pub async fn get_in(backend: Arc<dyn Backend>, name: &str) -> Result<SandboxHandle> {
        let info = backend.get(name).await?;
        Ok(SandboxHandle::bind(backend, info.id, info.name))
    }

    /// Exactly `id` in `backend`.
    pub async fn get_by_id_in(backend: Arc<dyn Backend>, id: &SandboxId) -> Result<SandboxHandle> {
        let info = backend.get_by_id(id).await?;
        Ok(SandboxHandle::bind(backend, info.id, info.name))
    }

    /// The id this handle is bound to.
    pub fn id(&self) -> &SandboxId {
        &self.id
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A fresh snapshot.
    pub async fn info(&self) -> Result<SandboxInfo> {
        self.backend.status(&self.name, &self.id).await
    }

    /// The current status.
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

    /// Changes the configuration; see [`crate::model::ModifyPlan`].
    pub async fn modify(&self, changes: &crate::model::Modify) -> Result<crate::model::ModifyPlan> {
        self.backend.modify(&self.name, &self.id, changes).await
    }

    /// Resource usage of the running sandbox.
    pub async fn metrics(&self) -> Result<crate::backend::Metrics> {
        self.backend.metrics(&self.name, &self.id).await
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
            return Err(crate::Error::InvalidState {
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
