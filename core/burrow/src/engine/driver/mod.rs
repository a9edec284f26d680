//! Drivers: how the supervisor runs a guest (a namespace container, a
//! QEMU microVM).
//!
//! A driver turns a [`LaunchSpec`] into a running guest whose agent speaks the
//! burrow protocol on the returned channel. Everything above this trait
//! (supervisor, lifecycle, SDKs) is driver-independent.

use std::fmt::Debug;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::engine::image::PreparedImage;
use crate::error::Result;
use crate::model::{DriverKind, OciRuntime, SandboxConfig, SandboxId};

pub mod container;
pub(crate) mod net;
pub mod vm;

/// The first line of `<binary> --version` (for `burrow doctor`).
pub(crate) async fn version_line(binary: &std::path::Path) -> std::io::Result<String> {
    let out = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "`--version` failed ({})",
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// A resolved mount, ready for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMount {
    /// Host directory (volume directories already created).
    pub host_path: PathBuf,
    /// Absolute guest path.
    pub target: String,
    /// Read-only.
    pub read_only: bool,
    /// A named volume managed by burrow (a fresh, empty one is handed to the
    /// guest's root user); host directories are never re-owned.
    pub volume: bool,
}

/// Everything a driver needs to launch one runtime generation.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// Sandbox id.
    pub sandbox_id: SandboxId,
    /// Sandbox name (for hostnames and logs only).
    pub name: String,
    /// Runtime generation being started.
    pub generation: u64,
    /// Persisted configuration.
    pub config: SandboxConfig,
    /// The prepared image (read-only lower layer + defaults).
    pub image: PreparedImage,
    /// Persistent per-sandbox directory; the writable layer lives here and is
    /// kept across stop/start.
    pub sandbox_dir: PathBuf,
    /// Scratch directory for this generation (bundle, runtime state); the
    /// driver may delete and recreate it.
    pub runtime_dir: PathBuf,
    /// Image cache directory the driver may use for derived images.
    pub images_dir: PathBuf,
    /// Static guest agent binary.
    pub agent_bin: PathBuf,
    /// Resolved volumes and host mounts.
    pub mounts: Vec<ResolvedMount>,
    /// The guest log file (`logs/guest.log`); the supervisor writes it from
    /// [`Launched::log`].
    pub agent_log: PathBuf,
    /// File descriptors the runtime process must inherit (the runtime-lifetime
    /// lock). Everything else must be CLOEXEC.
    pub inherit_fds: Vec<RawFd>,
    /// The secrets the sandbox's network stack puts into its requests.
    pub secrets: Option<std::sync::Arc<burrow_net::secrets::Secrets>>,
}

/// How the guest runtime process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestExit {
    /// Exit code of the runtime process.
    pub code: Option<i32>,
    /// Signal that killed it.
    pub signal: Option<i32>,
    /// What the driver knows beyond code and signal (a VM's unannounced
    /// reset, ...).
    pub detail: Option<&'static str>,
}

/// A launched guest.
pub struct Launched {
    /// Control of the guest's runtime process.
    pub guest: Box<dyn GuestProcess>,
    /// Agent -> host byte stream.
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// Host -> agent byte stream.
    pub writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// The guest's log: the agent's stderr (which also carries the runtime's
    /// own last words), open until the guest has exited. Whoever launches
    /// keeps reading it to EOF (the supervisor copies it into
    /// `logs/guest.log`): unread, a full pipe stalls the guest's logging;
    /// dropped, the guest's log lines are lost. `None` when the driver keeps
    /// no log.
    pub log: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Plain-language notes for the sandbox log (e.g. "memory limit not
    /// enforced: no memory cgroup controller").
    pub notes: Vec<String>,
}

impl Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched")
            .field("guest", &self.guest)
            .field("log", &self.log.is_some())
            .field("notes", &self.notes)
            .finish_non_exhaustive()
    }
}

/// Control of a running guest.
#[async_trait]
pub trait GuestProcess: Send + Sync + Debug {
    /// Waits until the runtime process has exited.
    async fn wait(&mut self) -> Result<GuestExit>;
    /// Kills the guest immediately (idempotent).
    async fn kill(&mut self) -> Result<()>;
    /// Suspends every guest process.
    async fn pause(&mut self) -> Result<()>;
    /// Resumes after [`GuestProcess::pause`].
    async fn resume(&mut self) -> Result<()>;
    /// Releases runtime state after exit (container state, mounts). Idempotent.
    async fn cleanup(&mut self) -> Result<()>;
    /// Changes the CPU and memory limits of the running guest. Returns notes
    /// for limits the host cannot apply live.
    async fn update(&mut self, cpus: Option<f64>, memory_mb: Option<u64>) -> Result<Vec<String>>;
    /// Applies a new network setting to the running guest's stack. Returns
    /// a note when it cannot be applied live.
    fn set_network(&mut self, _network: &burrow_net::Network) -> Option<String> {
        Some("this driver changes a sandbox's network at its next start".into())
    }
    /// Gives the running guest the hostname of the sandbox name `name` (a
    /// claimed warm sandbox's), in the system and in its `/etc` files.
    async fn set_hostname(&mut self, name: &str) -> Result<()> {
        let _ = name;
        Err(crate::error::Error::unsupported(
            "changing a running sandbox's hostname with this driver",
        ))
    }
    /// Resource usage of the guest.
    async fn metrics(&mut self) -> Result<burrow_protocol::Metrics>;
    /// Checks, once the guest answered the hello, that what answered is
    /// burrow's agent and not a file of the guest's run in its place
    /// (`protocol` otherwise). By default there is nothing the guest could
    /// have replaced (a microVM's agent lives in its initramfs).
    fn verify_agent(&self) -> Result<()> {
        Ok(())
    }
    /// Writes the guest's writable layer to the new file `layer` as an OCI
    /// layer tar (see `engine::snapshot::layer`); the caller froze it.
    /// Returns the file's digest (`sha256:<hex>`) and size.
    async fn write_layer(&mut self, layer: &std::path::Path) -> Result<(String, u64)> {
        let _ = layer;
        Err(crate::error::Error::unsupported(
            "filesystem snapshots of a running sandbox of this driver",
        ))
    }
    /// Whether the guest's agent writes its writable layer (a VM's, on its
    /// own disk: `Request::WriteLayer`) rather than [`Self::write_layer`].
    fn layer_from_agent(&self) -> bool {
        false
    }
    /// Saves the whole running guest (its agent suspended by the caller)
    /// into the new directory `dir` and lets it run on: see
    /// [`burrow_protocol::Control::SaveGuest`].
    async fn save_copy(&mut self, dir: &std::path::Path) -> Result<()> {
        let _ = dir;
        Err(crate::error::Error::unsupported(
            "saving a running guest of this driver (a fork or a full snapshot)",
        ))
    }
    /// Why this guest cannot be hibernated (None: it can be).
    fn hibernation_blocker(&self) -> Option<String> {
        Some("this driver cannot hibernate a guest".into())
    }
    /// Saves the whole guest (its agent suspended) next to the sandbox and
    /// ends it; the next launch resumes it. On error the guest is left for
    /// the caller to kill.
    async fn hibernate(&mut self) -> Result<()> {
        Err(crate::error::Error::Runtime {
            runtime: "driver".into(),
            reason: "this driver cannot hibernate a guest".into(),
        })
    }
}

/// Which limits a driver can enforce on this host, for this user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforceable {
    pub memory: bool,
    pub cpus: bool,
    pub pids: bool,
    /// Why what of memory, CPUs and processes cannot be enforced cannot.
    pub why: String,
    /// The writable layer's size.
    pub disk: bool,
    /// Why the disk limit cannot be enforced, if it cannot.
    pub disk_why: String,
}

impl Enforceable {
    /// Every limit.
    pub fn all() -> Self {
        Enforceable {
            memory: true,
            cpus: true,
            pids: true,
            why: String::new(),
            disk: true,
            disk_why: String::new(),
        }
    }
}

/// Refuses a configuration that asks for a limit its driver cannot enforce
/// here, unless it says limits are best effort, or that its driver judges
/// wrong ([`Driver::check_config`]): `invalid_config`, naming the field
/// (the request as given cannot be honoured on this host).
pub fn check_limits(config: &crate::model::SandboxConfig) -> Result<()> {
    let driver = for_config(config);
    driver.check_config(config)?;
    if config.best_effort_limits {
        return Ok(());
    }
    let can = driver.enforceable();
    let asked = [
        (
            "memory_mb",
            config.memory_mb.is_some(),
            can.memory,
            &can.why,
        ),
        ("cpus", config.cpus.is_some(), can.cpus, &can.why),
        (
            "pids_limit",
            config.pids_limit.is_some(),
            can.pids,
            &can.why,
        ),
        ("disk_mb", config.disk_mb.is_some(), can.disk, &can.disk_why),
    ];
    match asked.iter().find(|(_, asked, ok, _)| *asked && !*ok) {
        Some((field, _, _, why)) => Err(crate::error::Error::InvalidConfig {
            field: (*field).to_owned(),
            reason: format!(
                "this host cannot enforce it ({why}); ask for best-effort limits to run without it"
            ),
        }),
        None => Ok(()),
    }
}

/// Gives a configuration the host's default limits for those it leaves
/// out, where its driver takes them ([`Driver::takes_default_limits`]; the
/// disk's, every driver that can enforce it) and can enforce them here (a
/// default is never a reason to refuse), unless it asks for none
/// (`default_limits: false`).
pub fn fill_default_limits(
    config: &mut crate::model::SandboxConfig,
    defaults: &crate::engine::local::DefaultLimits,
) {
    let driver = for_config(config);
    if !config.default_limits {
        return;
    }
    let can = driver.enforceable();
    if can.disk && config.disk_mb.is_none() {
        config.disk_mb = defaults.disk_mb;
    }
    if !driver.takes_default_limits() {
        return;
    }
    if can.memory && config.memory_mb.is_none() {
        config.memory_mb = defaults.memory_mb;
    }
    if can.cpus && config.cpus.is_none() {
        config.cpus = defaults.cpus;
    }
    if can.pids && config.pids_limit.is_none() {
        config.pids_limit = defaults.pids_limit;
    }
}

/// Fills a sample's disk figures from a sandbox's disk image: what its
/// sparse file holds on the host's disk, and its size (the disk limit).
pub(crate) fn disk_use(image: &std::path::Path, m: &mut burrow_protocol::Metrics) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = std::fs::metadata(image) {
        m.disk_bytes = Some(meta.blocks() * 512);
        m.disk_limit_bytes = Some(meta.len());
    }
}

/// What a driver's supervisor setup keeps running until the guest is
/// launched (a helper thread); dropped then.
pub type SupervisorAid = Box<dyn std::any::Any + Send>;

/// A way of running guests, and everything the engine asks of one besides
/// a launch. The engine holds a `Box<dyn Driver>` from [`for_kind`] (the
/// one place that knows the drivers) and never names a concrete driver: a
/// new driver is a new implementation and a new arm there.
#[async_trait]
pub trait Driver: Send + Sync + Debug {
    /// Short name (`container`).
    fn name(&self) -> &'static str;

    /// Sets up the supervisor process for this driver, before its async
    /// runtime starts, while it is still single-threaded (a mount namespace
    /// applies to the whole process then). What it returns is kept until
    /// the guest is launched. Default: nothing to do.
    fn prepare_supervisor(&self) -> Result<Option<SupervisorAid>> {
        Ok(None)
    }

    /// Work for a start that the engine does on the host while the
    /// supervisor spawns and sets up (a head start, off the start's
    /// critical path); what it returns is held until the supervisor
    /// reports. A failure is left for the supervisor to meet (it does the
    /// same work itself). Blocking. Default: nothing.
    fn head_start(
        &self,
        _sandbox_dir: &std::path::Path,
        _images_dir: &std::path::Path,
        _config: &crate::model::SandboxConfig,
    ) -> Option<SupervisorAid> {
        None
    }

    /// Whether this driver can pause a guest here, for this user. Default:
    /// yes.
    fn pauses(&self) -> bool {
        true
    }

    /// Whether this driver takes filesystem snapshots of its sandboxes.
    /// Default: no.
    fn snapshots(&self) -> bool {
        false
    }

    /// Whether this driver enforces a network policy (under this runtime).
    /// Default: no.
    fn enforces_network_policy(&self) -> bool {
        false
    }

    /// Which limits this driver can enforce here, for this user. Default:
    /// every one.
    fn enforceable(&self) -> Enforceable {
        Enforceable::all()
    }

    /// What confines this driver's guests on this host, for this user, as
    /// `(what, how)` lines (`burrow doctor` shows them). Default: nothing
    /// said.
    fn confinement(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Whether a sandbox that leaves its memory, CPUs or processes out gets
    /// the host's defaults ([`fill_default_limits`]). Default: yes.
    fn takes_default_limits(&self) -> bool {
        true
    }

    /// Checks what of a configuration only this driver can judge (the
    /// names of the syscalls it adds to a container's filter). Default:
    /// nothing.
    fn check_config(&self, _config: &crate::model::SandboxConfig) -> Result<()> {
        Ok(())
    }

    /// Launches a guest. On error nothing of this generation is left running.
    async fn launch(&self, spec: &LaunchSpec) -> Result<Launched>;

    /// Releases what a run whose supervisor died left in `runtime_dir`
    /// (runtime state, cgroups, mounts, a guest process). Idempotent.
    async fn reclaim_stale(&self, sandbox_id: &SandboxId, runtime_dir: &Path) -> Result<()>;

    /// Whether a previous run still holding the runtime-lifetime lock past
    /// its grace may be reclaimed by force ([`Driver::reclaim_stale`]): a
    /// guest whose CPUs were stopped never exits by itself. Default: no
    /// (the lock's holder is waited for).
    fn reclaims_a_stuck_run(&self) -> bool {
        false
    }

    /// Discards the saved guest of a hibernated sandbox (an explicit stop).
    /// Returns whether there was one; a start that claimed it first keeps
    /// it. Default: there never is one.
    fn discard_saved(&self, _sandbox_dir: &Path) -> Result<bool> {
        Ok(false)
    }

    /// Removes what this driver derived from images under `images_dir` for
    /// the images whose keys are `removed`, and whatever else of its own is
    /// stale. Returns the artifacts removed and the bytes freed. Default:
    /// nothing derived.
    fn prune(&self, _images_dir: &Path, _removed: &[String]) -> Result<(u64, u64)> {
        Ok((0, 0))
    }
}

/// The driver of `kind` (container ones under `runtime`): the one place
/// that maps a [`DriverKind`] to its implementation.
pub fn for_kind(kind: DriverKind, runtime: OciRuntime) -> Box<dyn Driver> {
    match kind {
        DriverKind::Container => Box::new(container::ContainerDriver::new(runtime)),
        DriverKind::Vm => Box::new(vm::VmDriver),
    }
}

/// The driver a sandbox of `config` runs under.
pub fn for_config(config: &SandboxConfig) -> Box<dyn Driver> {
    for_kind(config.driver.unwrap_or_default(), config.oci_runtime())
}

/// Every driver, for work over a whole home (pruning what they derived).
pub fn all() -> Vec<Box<dyn Driver>> {
    DriverKind::ALL
        .into_iter()
        .map(|k| for_kind(k, OciRuntime::default()))
        .collect()
}
