//! Control of one launched container generation: the foreground `runc run`
//! process, and everything that must be released after it (runtime state,
//! rootfs mount, bundle, network helper).

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use crate::engine::driver::{GuestExit, GuestProcess};
use crate::error::{Error, Result};
use crate::model::OciRuntime;

use super::cgroups;
use super::oci::Runtime;
use super::rootfs;
use crate::engine::driver::net::NetStack;

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
    /// Bundle directory (config.json).
    pub bundle: PathBuf,
    /// The generated guest files' directory (see `staging`), once made.
    pub etc: Option<PathBuf>,
    pub network: Option<NetStack>,
    /// The container's host pid, once it runs.
    pub pid: Option<i32>,
    /// The agent file the container binds, as `(device, inode)`: what its
    /// first process must be running once it answered the hello (`None`:
    /// nothing to check: under runsc the pid is gVisor's, and the
    /// `BURROW_AGENT_ARGS` test hook runs something else on purpose).
    pub agent: Option<(u64, u64)>,
    released: bool,
}

impl Generation {
    pub(super) fn new(runtime: Runtime, id: String, bundle: PathBuf) -> Self {
        Generation {
            runtime,
            id,
            mounts: Vec::new(),
            bundle,
            etc: None,
            network: None,
            pid: None,
            agent: None,
            released: false,
        }
    }

    /// Stops the network helper, deletes the container, unmounts the rootfs
    /// and removes the bundle. Idempotent; reports the first failure.
    pub(super) async fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        // The stack ends with its link.
        self.network.take();
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
        // The network stack ends when `self.network` drops.
    }
}

/// A running container generation.
#[derive(Debug)]
pub(super) struct ContainerGuest {
    /// The foreground `run` process; it exits when the container does.
    child: tokio::process::Child,
    exit: Option<GuestExit>,
    generation: Generation,
    /// The sandbox's directory (its writable layer is there).
    sandbox_dir: PathBuf,
}

impl ContainerGuest {
    pub(super) fn new(
        child: tokio::process::Child,
        generation: Generation,
        sandbox_dir: &std::path::Path,
    ) -> Self {
        ContainerGuest {
            child,
            exit: None,
            generation,
            sandbox_dir: sandbox_dir.to_path_buf(),
        }
    }

    fn record(&mut self, status: std::process::ExitStatus) -> GuestExit {
        let exit = GuestExit {
            code: status.code(),
            signal: status.signal(),
            detail: None,
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
                super::oci::COMMAND_TIMEOUT,
            )
            .await
            .map(drop)
    }
}

#[async_trait]
impl GuestProcess for ContainerGuest {
    fn verify_agent(&self) -> Result<()> {
        let (Some((dev, ino)), Some(pid)) = (self.generation.agent, self.generation.pid) else {
            return Ok(());
        };
        // The file the first process runs, as the kernel sees it: a bind
        // mount keeps its source's device and inode, whatever the guest's
        // paths say. Its owner may read it (it owns the user namespace).
        let exe = format!("/proc/{pid}/exe");
        let meta = std::fs::metadata(&exe).map_err(|e| {
            Error::io(
                "reading the guest's first process",
                Some(Path::new(&exe)),
                e,
            )
        })?;
        if (meta.dev(), meta.ino()) == (dev, ino) {
            Ok(())
        } else {
            Err(Error::protocol(
                "the sandbox's first process is not burrow's agent (something of the guest's ran in its place)",
            ))
        }
    }

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
        // Rootless, the runtime freezes through a cgroup only if one was
        // delegated to the user.
        if cgroups::rootless() && !cgroups::Controllers::detect().freezer {
            return Err(Error::unsupported(
                "pausing a rootless sandbox (no cgroup is delegated to this user to freeze it in)",
            ));
        }
        self.control("pause").await
    }

    async fn resume(&mut self) -> Result<()> {
        self.control("resume").await
    }

    async fn write_layer(&mut self, layer: &std::path::Path) -> Result<(String, u64)> {
        let (writable, owners) = super::writable_layer_of(&self.sandbox_dir)?;
        let written = crate::engine::snapshot::layer::write_layer_file(
            writable.upper.clone(),
            owners,
            layer.to_path_buf(),
        )
        .await?;
        drop(writable);
        tracing::debug!(
            entries = written.stats.entries,
            bytes = written.stats.content_bytes,
            digest = %written.digest,
            "snapshot layer written"
        );
        Ok((written.digest.to_string(), written.size))
    }

    async fn update(&mut self, cpus: Option<f64>, memory_mb: Option<u64>) -> Result<Vec<String>> {
        if cgroups::rootless() && !cgroups::Controllers::detect().memory {
            // Nothing to change: the limits were accepted as best effort.
            return Ok(vec![
                "CPU and memory limits are not enforced for this rootless sandbox (no cgroup is delegated to the user)".into(),
            ]);
        }
        let mut args: Vec<String> = vec!["update".into()];
        if let Some(mb) = memory_mb {
            let bytes = mb * 1024 * 1024;
            // Swap equal to memory: no extra swap on top of the limit.
            args.extend([
                "--memory".into(),
                bytes.to_string(),
                "--memory-swap".into(),
                bytes.to_string(),
            ]);
        }
        if let Some(c) = cpus {
            let period = 100_000u64;
            args.extend([
                "--cpu-period".into(),
                period.to_string(),
                "--cpu-quota".into(),
                ((c * period as f64).round() as u64).max(1000).to_string(),
            ]);
        }
        if args.len() == 1 {
            return Ok(Vec::new());
        }
        args.push(self.generation.id.clone());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.generation
            .runtime
            .invoke(&refs, Duration::from_secs(10))
            .await?;
        Ok(Vec::new())
    }

    fn set_network(&mut self, network: &burrow_net::Network) -> Option<String> {
        NetStack::set_on(self.generation.network.as_ref(), network)
    }

    async fn set_hostname(&mut self, name: &str) -> Result<()> {
        // gVisor's kernel keeps its own name, out of the host's reach.
        if self.generation.runtime.kind == OciRuntime::Runsc {
            return Err(Error::unsupported(
                "changing a running gVisor sandbox's hostname",
            ));
        }
        let pid = self.generation.pid.ok_or_else(|| {
            self.generation
                .runtime
                .error("the container's process is not known".into())
        })?;
        let etc = self.generation.etc.as_deref().ok_or_else(|| {
            self.generation
                .runtime
                .error("the container's generated files are not known".into())
        })?;
        super::hostname::set(etc, pid, &super::spec::hostname(name)).await
    }

    async fn metrics(&mut self) -> Result<burrow_protocol::Metrics> {
        let mut m = self.resource_metrics().await?;
        crate::engine::driver::disk_use(&self.sandbox_dir.join(super::layer_disk::IMAGE), &mut m);
        if let Some(stack) = &self.generation.network {
            m.network = Some(stack.counters());
        }
        Ok(m)
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

impl ContainerGuest {
    async fn resource_metrics(&mut self) -> Result<burrow_protocol::Metrics> {
        // Rootless without a delegated cgroup the runtime has no statistics:
        // the container's processes are counted from /proc instead.
        if cgroups::rootless() && !cgroups::Controllers::detect().memory {
            let pid = self.generation.pid.ok_or_else(|| {
                self.generation
                    .runtime
                    .error("the container's process is not known".into())
            })?;
            return Ok(super::procstats::of_pid_namespace(pid));
        }
        let out = self
            .generation
            .runtime
            .invoke(
                &["events", "--stats", self.generation.id.as_str()],
                Duration::from_secs(10),
            )
            .await?;
        let mut m = parse_stats(&String::from_utf8_lossy(&out.stdout));
        if self.generation.runtime.kind == OciRuntime::Runsc {
            // gVisor reports its own memory, with no limit: the limit is
            // the host cgroup's, which runsc set from the spec.
            m.memory_limit_bytes = self.generation.pid.and_then(cgroups::memory_limit);
        }
        Ok(m)
    }
}

/// Reads `runc events --stats` output (one JSON object).
fn parse_stats(out: &str) -> burrow_protocol::Metrics {
    let v: serde_json::Value = out
        .lines()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .unwrap_or_default();
    let d = &v["data"];
    let u = |p: &serde_json::Value| p.as_u64();
    let io = |op: &str| {
        d["blkio"]["ioServiceBytesRecursive"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["op"].as_str().is_some_and(|o| o.eq_ignore_ascii_case(op)))
                    .filter_map(|e| e["value"].as_u64())
                    .sum()
            })
    };
    burrow_protocol::Metrics {
        cpu_usage_ns: u(&d["cpu"]["usage"]["total"]),
        memory_bytes: u(&d["memory"]["usage"]["usage"]),
        // cgroup v1 says "no limit" with a number near 2^63.
        memory_limit_bytes: u(&d["memory"]["usage"]["limit"]).filter(|l| *l < 1 << 62),
        io_read_bytes: io("read"),
        io_write_bytes: io("write"),
        pids: u(&d["pids"]["current"]),
        network: None,
        disk_bytes: None,
        disk_limit_bytes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlimited_cgroup_v1_reports_no_limit() {
        let stats = |limit: u64| {
            format!(
                r#"{{"type":"stats","data":{{"memory":{{"usage":{{"usage":4096,"limit":{limit}}}}}}}}}"#
            )
        };
        let m = parse_stats(&stats(9_223_372_036_854_771_712));
        assert_eq!((m.memory_bytes, m.memory_limit_bytes), (Some(4096), None));
        let m = parse_stats(&stats(64 << 20));
        assert_eq!(m.memory_limit_bytes, Some(64 << 20));
    }
}
