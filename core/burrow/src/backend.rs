//! The `Backend` trait: where sandboxes live.
//!
//! Handles hold an `Arc<dyn Backend>` plus their captured id. Name-addressed
//! methods exist for convenience; every mutating and status method also has
//! an `*_identified` form taking the id the caller is bound to. Built-in
//! backends implement those atomically (check and act under the same lock or
//! in the same statement). The default `*_identified` implementations below
//! are for custom backends and are **racy**: they look the name up, compare
//! the id, then act by name, so a replacement between the two steps is not
//! detected.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{Error, Result};
use crate::logs::{LogOptions, LogStream};
use crate::model::{Modify, ModifyPlan, SandboxConfig, SandboxId, SandboxInfo, Status};

pub use burrow_protocol::Metrics;

/// How long a caller waits for a run that stopped taking work to record its
/// end (a stop's grace period, the guest's sync and shutdown and the
/// runtime's cleanup fit in it many times over); past it, a `timeout`.
pub(crate) const RUN_END_BOUND: Duration = Duration::from_secs(120);

/// A request to create a sandbox.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// Name (validated by the backend).
    pub name: String,
    /// Configuration (validated by the backend).
    pub config: SandboxConfig,
    /// Survive the creating process.
    pub detached: bool,
}

/// Filter for [`Backend::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only these statuses (empty: all).
    pub statuses: Vec<Status>,
    /// Only sandboxes carrying all of these labels.
    pub labels: BTreeMap<String, String>,
}

impl ListFilter {
    /// Whether `info` passes the filter.
    pub fn matches(&self, info: &SandboxInfo) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&info.status))
            && self
                .labels
                .iter()
                .all(|(k, v)| info.config.labels.get(k) == Some(v))
    }
}

/// Options of a graceful stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopOptions {
    /// Time between SIGTERM and SIGKILL for guest processes.
    pub grace: Duration,
    /// Record the stop with reason `owner_exited` instead of `stopped`: for
    /// a server stopping the attached sandboxes of a client that went away.
    pub owner_exited: bool,
}

impl Default for StopOptions {
    fn default() -> Self {
        StopOptions {
            grace: Duration::from_secs(10),
            owner_exited: false,
        }
    }
}

impl StopOptions {
    /// A requested stop with this grace period.
    pub fn with_grace(grace: Duration) -> Self {
        StopOptions {
            grace,
            ..StopOptions::default()
        }
    }
}

/// Options of a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartOptions {
    /// Start attached to (`Some(false)`) or detached from (`Some(true)`) the
    /// calling process; `None` keeps the persisted choice.
    pub detached: Option<bool>,
}

/// A byte stream to a runtime speaking the burrow protocol.
pub struct RuntimeStream {
    /// Read half.
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// Write half.
    pub writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// The runtime generation the stream reaches (checked at hello).
    pub generation: u64,
}

impl Debug for RuntimeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeStream")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// Checks that `info` (looked up by name) is the sandbox `id`.
pub fn ensure_identity(name: &str, id: &SandboxId, info: &SandboxInfo) -> Result<()> {
    if &info.id == id {
        Ok(())
    } else {
        Err(Error::SandboxReplaced {
            name: name.to_owned(),
            expected: id.clone(),
            actual: info.id.clone(),
        })
    }
}

/// Where sandboxes live. Object-safe: handles hold `Arc<dyn Backend>`.
#[async_trait]
pub trait Backend: Send + Sync + Debug {
    /// Creates a sandbox in status Created. Strict: a taken name is
    /// [`Error::AlreadyExists`], reported once the winner's create finished.
    async fn create(&self, req: CreateRequest) -> Result<SandboxInfo>;
    /// Looks a sandbox up by name.
    async fn get(&self, name: &str) -> Result<SandboxInfo>;
    /// Looks a sandbox up by id.
    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo>;
    /// Lists sandboxes.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>>;

    /// Starts a startable sandbox (Created, Stopped, Crashed) and waits until
    /// it is Running.
    async fn start(&self, name: &str, opts: StartOptions) -> Result<SandboxInfo>;
    /// Converges on a running sandbox: waits through Starting, starts
    /// Created/Stopped/Crashed, returns Running; rejects Draining/Paused.
    async fn connect_or_start(&self, name: &str, opts: StartOptions) -> Result<SandboxInfo>;
    /// Graceful stop; a no-op for a sandbox that is not running.
    async fn stop(&self, name: &str, opts: StopOptions) -> Result<SandboxInfo>;
    /// Immediate stop.
    async fn kill(&self, name: &str) -> Result<SandboxInfo>;
    /// Stop accepting work; stop when in-flight work is done.
    async fn request_drain(&self, name: &str) -> Result<SandboxInfo>;
    /// Stop then start (same id, same configuration).
    async fn restart(&self, name: &str, opts: StopOptions) -> Result<SandboxInfo>;
    /// Removes a sandbox that is not running. Keeps images, named volumes
    /// and host mounts.
    async fn remove(&self, name: &str) -> Result<()>;
    /// Kills (if running) and removes.
    async fn destroy(&self, name: &str) -> Result<()>;
    /// Waits until the status is one of `statuses` (no implicit deadline).
    async fn wait_for_status(&self, name: &str, statuses: &[Status]) -> Result<SandboxInfo>;
    /// Opens a protocol stream to the running sandbox. With `wake`, a
    /// sandbox reclaimed for idleness is started again first (demand start,
    /// when enabled for it); health checks pass `false`.
    async fn open_runtime(&self, name: &str, wake: bool) -> Result<RuntimeStream>;
    /// Lets a running attached sandbox survive its owner from now on.
    async fn detach(&self, name: &str) -> Result<SandboxInfo>;
    /// Explicit keepalive (counts as activity for the idle timeout).
    async fn touch(&self, name: &str) -> Result<()>;
    /// Suspends every guest process (status Paused).
    async fn pause(&self, name: &str) -> Result<SandboxInfo>;
    /// Continues after a pause (status Running).
    async fn resume(&self, name: &str) -> Result<SandboxInfo>;
    /// Changes the configuration; the plan says where each change lands.
    async fn modify(&self, name: &str, changes: &Modify) -> Result<ModifyPlan>;
    /// Resource usage of the running sandbox.
    async fn metrics(&self, name: &str) -> Result<Metrics>;
    /// The sandbox's logs.
    async fn logs(&self, name: &str, opts: &LogOptions) -> Result<LogStream>;

    /// Status of exactly `id`.
    async fn status_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        let info = self.get(name).await?;
        ensure_identity(name, id, &info)?;
        Ok(info)
    }
    /// [`Backend::start`] bound to `id`.
    async fn start_identified(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.start(name, opts).await
    }
    /// [`Backend::connect_or_start`] bound to `id`.
    async fn connect_or_start_identified(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.connect_or_start(name, opts).await
    }
    /// [`Backend::stop`] bound to `id`.
    async fn stop_identified(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StopOptions,
    ) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.stop(name, opts).await
    }
    /// [`Backend::kill`] bound to `id`.
    async fn kill_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.kill(name).await
    }
    /// [`Backend::request_drain`] bound to `id`.
    async fn request_drain_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.request_drain(name).await
    }
    /// [`Backend::restart`] bound to `id`.
    async fn restart_identified(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StopOptions,
    ) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.restart(name, opts).await
    }
    /// [`Backend::remove`] bound to `id`.
    async fn remove_identified(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.status_identified(name, id).await?;
        self.remove(name).await
    }
    /// [`Backend::destroy`] bound to `id`.
    async fn destroy_identified(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.status_identified(name, id).await?;
        self.destroy(name).await
    }
    /// [`Backend::wait_for_status`] bound to `id`.
    async fn wait_for_status_identified(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.wait_for_status(name, statuses).await
    }
    /// [`Backend::detach`] bound to `id`.
    async fn detach_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.detach(name).await
    }
    /// [`Backend::touch`] bound to `id`.
    async fn touch_identified(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.status_identified(name, id).await?;
        self.touch(name).await
    }
    /// [`Backend::pause`] bound to `id`.
    async fn pause_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.pause(name).await
    }
    /// [`Backend::resume`] bound to `id`.
    async fn resume_identified(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.status_identified(name, id).await?;
        self.resume(name).await
    }
    /// [`Backend::modify`] bound to `id`.
    async fn modify_identified(
        &self,
        name: &str,
        id: &SandboxId,
        changes: &Modify,
    ) -> Result<ModifyPlan> {
        self.status_identified(name, id).await?;
        self.modify(name, changes).await
    }
    /// [`Backend::metrics`] bound to `id`.
    async fn metrics_identified(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.status_identified(name, id).await?;
        self.metrics(name).await
    }
    /// [`Backend::logs`] bound to `id`.
    async fn logs_identified(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &LogOptions,
    ) -> Result<LogStream> {
        self.status_identified(name, id).await?;
        self.logs(name, opts).await
    }
    /// [`Backend::open_runtime`] bound to `id`.
    async fn open_runtime_identified(
        &self,
        name: &str,
        id: &SandboxId,
        wake: bool,
    ) -> Result<RuntimeStream> {
        self.status_identified(name, id).await?;
        self.open_runtime(name, wake).await
    }
}
