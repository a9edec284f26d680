//! Control of one launched container generation: the foreground `runc run`
//! process, and everything that must be released after it (runtime state,
//! rootfs mount, bundle, network helper).

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use crate::driver::{GuestExit, GuestProcess};
use crate::error::{Error, Result};
use crate::model::OciRuntime;

use super::cgroups;
use super::network::Network;
use super::rootfs;
use super::runtime::Runtime;

/// How long a killed container gets to be reaped by its runtime process
/// before that process is killed too.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Host-side resources of one generation. Released by [`Self::release`], or
/// on drop (best effort, blocking) if a launch is abandoned half-way.
#[derive(Debug)]
pub(super) struct Generation {
    pub runtime: Runtime,
    /// Container id.
    pub id: String,
    /// Mount points of this generation (rootfs and helpers), innermost last.
    pub mounts: Vec<PathBuf>,
    /// Bundle directory (config.json and generated files).
    pub bundle: PathBuf,
    pub network: Option<Network>,
    released: bool,
}

impl Generation {
    pub(super) fn new(runtime: Runtime, id: String, bundle: PathBuf) -> Self {
        Generation {
            runtime,
            id,
            mounts: Vec::new(),
            bundle,
            network: None,
            released: false,
        }
    }

    /// Stops the network helper, deletes the container, unmounts the rootfs
    /// and removes the bundle. Idempotent; reports the first failure.
    pub(super) async fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        if let Some(mut net) = self.network.take() {
            net.stop().await;
        }
        let deleted = self.runtime.delete_force(&self.id).await;
        self.forget_incomplete_state();
        cgroups::remove_leftovers(|name| name == self.id);
        let mut unmounted = Ok(());
        while let Some(m) = self.mounts.last() {
            if let Err(e) = rootfs::unmount(m) {
                unmounted = Err(e);
                break;
            }
            self.mounts.pop();
        }
        let removed = match std::fs::remove_dir_all(&self.bundle) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("removing the bundle", Some(&self.bundle), e))
            }
            _ => Ok(()),
        };
        deleted.and(unmounted).and(removed)?;
        self.released = true;
        tracing::debug!(container = %self.id, "container generation released");
        Ok(())
    }
}

impl Generation {
    /// A runtime killed while creating may leave a state directory without a
    /// state file, which `delete` does not recognise: remove it.
    fn forget_incomplete_state(&self) {
        let marker = match self.runtime.kind {
            OciRuntime::Runc => "state.json",
            OciRuntime::Crun => "status",
            OciRuntime::Runsc => return,
        };
        let state = self.runtime.root.join(&self.id);
        if !state.join(marker).exists() {
            let _ = std::fs::remove_dir_all(&state);
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Only reached when a launch was abandoned (cancelled or failed
        // without its rollback) or a guest was dropped without cleanup.
        tracing::warn!(container = %self.id, "releasing an abandoned container generation");
        self.runtime.delete_force_blocking(&self.id);
        self.forget_incomplete_state();
        cgroups::remove_leftovers(|name| name == self.id);
        for m in self.mounts.drain(..).rev() {
            let _ = rootfs::unmount(&m);
        }
        let _ = std::fs::remove_dir_all(&self.bundle);
        // The network helper is killed when `self.network` drops.
    }
}

/// A running container generation.
#[derive(Debug)]
pub(super) struct ContainerGuest {
    /// The foreground `run` process; it exits when the container does.
    child: tokio::process::Child,
    exit: Option<GuestExit>,
    generation: Generation,
}

impl ContainerGuest {
    pub(super) fn new(child: tokio::process::Child, generation: Generation) -> Self {
        ContainerGuest {
            child,
            exit: None,
            generation,
        }
    }

    fn record(&mut self, status: std::process::ExitStatus) -> GuestExit {
        let exit = GuestExit {
            code: status.code(),
            signal: status.signal(),
        };
        self.exit = Some(exit);
        exit
    }

    async fn control(&self, verb: &str) -> Result<()> {
        if self.exit.is_some() {
            return Err(self.generation.runtime.error(format!(
                "cannot {verb} container {}: it has exited",
                self.generation.id
            )));
        }
        self.generation
            .runtime
            .invoke(
                &[verb, self.generation.id.as_str()],
                super::runtime::COMMAND_TIMEOUT,
            )
            .await
            .map(drop)
    }
}

#[async_trait]
impl GuestProcess for ContainerGuest {
    async fn wait(&mut self) -> Result<GuestExit> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| Error::io("waiting for the container runtime", None, e))?;
        let exit = self.record(status);
        tracing::info!(container = %self.generation.id, ?exit, "container runtime exited");
        Ok(exit)
    }

    async fn kill(&mut self) -> Result<()> {
        if self.exit.is_some() {
            return Ok(());
        }
        // Killing the container's init ends every process of its pid
        // namespace; the runtime process then tidies up and exits.
        if let Err(e) = self
            .generation
            .runtime
            .invoke(
                &["kill", self.generation.id.as_str(), "KILL"],
                Duration::from_secs(5),
            )
            .await
        {
            // Usually "not running": it is exiting already.
            tracing::debug!(container = %self.generation.id, error = %e, "runtime kill");
        }
        if let Ok(Ok(status)) = tokio::time::timeout(KILL_GRACE, self.child.wait()).await {
            self.record(status);
            return Ok(());
        }
        let _ = self.child.start_kill();
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => {
                self.record(status);
                Ok(())
            }
            Ok(Err(e)) => Err(Error::io(
                "waiting for the killed container runtime",
                None,
                e,
            )),
            Err(_) => Err(self
                .generation
                .runtime
                .error("the runtime process did not exit after SIGKILL".into())),
        }
    }

    async fn pause(&mut self) -> Result<()> {
        self.control("pause").await
    }

    async fn resume(&mut self) -> Result<()> {
        self.control("resume").await
    }

    async fn cleanup(&mut self) -> Result<()> {
        if self.exit.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.record(status);
                }
                _ => self.kill().await?,
            }
        }
        self.generation.release().await
    }
}
