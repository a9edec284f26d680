//! The container driver: the image rootfs under an OCI runtime binary.
//!
//! One launch, in order: find the runtime binary; clear what an earlier
//! generation of this sandbox may have left in its runtime directory; mount
//! the writable layer over the image, presented as owned by the container's
//! user-namespace ids (`rootfs.rs`);
//! write the OCI config (`spec.rs`); start `<runtime> run` in the foreground
//! with the agent's stdin/stdout as the protocol pipes and its stderr as a
//! third pipe, the guest's log, which the caller copies; wait until the container runs; attach
//! user-mode networking if enabled (`network.rs`). The runtime process is the
//! guest's lifetime: [`GuestProcess::wait`] waits for it.
//!
//! The network is attached after the container's process has started and
//! before `launch` returns, so nothing the agent is asked to run can start
//! without it.
//!
//! As root, each container has a user namespace of its own over a range of
//! host ids. As an unprivileged user, the supervisor first enters a user
//! namespace of its own (`rootless.rs`), and its containers run in that one.
//!
//! [`GuestProcess::wait`]: super::GuestProcess::wait

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::model::{OciRuntime, SandboxId};

use super::{Driver, LaunchSpec, Launched};

mod bpf;
mod cgroups;
mod guest;
mod hostname;
mod idmap;
pub(crate) mod layer_disk;
pub(crate) mod network;
mod oci;
mod procstats;
mod rootfs;
pub(crate) mod rootless;
mod seccomp;
mod shift;
pub(crate) mod spec;
mod staging;
mod syscalls_x86_64;
mod writable;

pub(crate) use cgroups::MigrationLockWarmer;
pub use oci::crun_private_cgroup_view;
pub(crate) mod users;

pub(crate) use oci::{bind_to_parent, find_on_path, spawn_long_lived};

pub(crate) use writable::{
    remove_sandbox_dir, seed_writable_layer, with_writable_layer, writable_layer_of,
};

use guest::{ContainerGuest, Generation};
use oci::Runtime;

/// Runs guests as OCI containers with runc, crun or runsc.
#[derive(Debug, Clone)]
pub struct ContainerDriver {
    runtime: OciRuntime,
}

impl ContainerDriver {
    /// A driver using `runtime` (a sandbox's own `config.runtime` wins).
    pub fn new(runtime: OciRuntime) -> Self {
        ContainerDriver { runtime }
    }
}

/// Process-wide preparation the supervisor performs while still
/// single-threaded (before any async runtime exists): enter a private mount
/// namespace so the overlay mounts of this runtime vanish with it.
///
/// The namespace is a slave of the host's: host mount changes still reach
/// us, ours never reach the host. crun's need for a cgroup view without the
/// hybrid cgroup2 mount is met per invocation, so no runtime is needed here.
pub fn prepare_supervisor_process() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // An unprivileged user: root of a user namespace of its own.
        let mapping = rootless::Mapping::for_current_user();
        rootless::enter(&mapping)?;
        tracing::debug!(?mapping, "entered a user namespace (rootless)");
    }
    // The caller guarantees we are single-threaded, so the new namespace
    // applies to the whole process.
    rootfs::enter_mount_namespace(0, libc::MS_SLAVE)
        .map_err(|e| Error::io("entering a private mount namespace", None, e))?;
    Ok(())
}

/// What a working container setup on this host consists of (for `burrow
/// doctor`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContainerSupport {
    /// The OCI runtime binary.
    pub binary: std::path::PathBuf,
    /// Its version line.
    pub version: String,
    /// `root`, or `rootless` (an unprivileged user, in a user namespace).
    pub mode: &'static str,
    /// Rootless: the ids mapped besides root (0: this user has no
    /// subordinate ids, so images that run as another user cannot start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subordinate_ids: Option<u32>,
}

/// Checks that containers can run here with `runtime`: as root, or as a
/// user who may create a user namespace; and the runtime binary present
/// and answering `--version`.
pub async fn check_support(runtime: OciRuntime) -> Result<ContainerSupport> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let subordinate_ids = if root {
        None
    } else {
        probe_user_namespace().await?;
        Some(rootless::Mapping::for_current_user().extra_ids())
    };
    let rt = Runtime::locate(runtime, "/nonexistent".into(), "/nonexistent".into())?;
    let version = super::version_line(&rt.binary)
        .await
        .map_err(|e| rt.error(format!("running {} --version: {e}", rt.binary.display())))?;
    Ok(ContainerSupport {
        binary: rt.binary,
        version,
        mode: if root { "root" } else { "rootless" },
        subordinate_ids,
    })
}

/// Whether this user may create a user namespace: a child that tries.
async fn probe_user_namespace() -> Result<()> {
    let mut probe = tokio::process::Command::new("/bin/true");
    // SAFETY: the hook only calls unshare(2), which is async-signal-safe.
    unsafe {
        probe.pre_exec(|| match libc::unshare(libc::CLONE_NEWUSER) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    match probe.status().await {
        Ok(s) if s.success() => Ok(()),
        outcome => Err(Error::Runtime {
            runtime: "user namespace".into(),
            reason: format!(
                "an unprivileged user runs containers in a user namespace, and this host refuses one ({}); as root: sysctl -w user.max_user_namespaces=15000",
                match outcome {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                }
            ),
        }),
    }
}

/// The supervisor runs the driver as root: the host's, or its own user
/// namespace's (see [`prepare_supervisor_process`]).
fn require_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::Runtime {
            runtime: "container".into(),
            reason: "the container driver runs in the supervisor, as root or as root of the supervisor's user namespace".into(),
        });
    }
    Ok(())
}

/// The agent is executed by the container's root, an unprivileged host uid:
/// the binary must be readable and executable by others.
fn check_agent(agent: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let unusable = |reason: String| Error::Runtime {
        runtime: "burrow-agent".into(),
        reason,
    };
    let meta = fs::metadata(agent).map_err(|e| unusable(format!("{}: {e}", agent.display())))?;
    if !meta.is_file() || meta.permissions().mode() & 0o005 != 0o005 {
        return Err(unusable(format!(
            "{} must be a regular file readable and executable by others (o+rx): the container's root is an unprivileged host uid",
            agent.display()
        )));
    }
    Ok(())
}

/// The runtime's container id for one generation: `burrow-<id>-<generation>`.
fn container_id(sandbox: &SandboxId, generation: u64) -> String {
    format!("{}{generation}", container_prefix(sandbox))
}

/// The part of the container id shared by all generations of a sandbox.
fn container_prefix(sandbox: &SandboxId) -> String {
    let id = sandbox.as_str();
    format!("burrow-{}-", id.strip_prefix("sb_").unwrap_or(id)).to_ascii_lowercase()
}

#[async_trait]
impl Driver for ContainerDriver {
    fn name(&self) -> &'static str {
        "container"
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Launched> {
        if spec.config.oci_runtime() != self.runtime {
            tracing::debug!(driver = ?self.runtime, sandbox = ?spec.config.oci_runtime(), "using the sandbox's configured runtime");
        }
        let span = tracing::info_span!("container_launch", sandbox = %spec.sandbox_id, name = %spec.name, generation = spec.generation);
        launch(spec).instrument(span).await
    }

    /// A private mount namespace, and from the first moment the warmer of
    /// the cgroup migration lock (the runtime's placement comes soon).
    fn prepare_supervisor(&self) -> Result<Option<super::SupervisorAid>> {
        prepare_supervisor_process()?;
        Ok(Some(Box::new(MigrationLockWarmer::start())))
    }

    async fn reclaim_stale(&self, sandbox_id: &SandboxId, runtime_dir: &Path) -> Result<()> {
        reclaim_stale(self.runtime, sandbox_id, runtime_dir).await
    }

    fn head_start(
        &self,
        sandbox_dir: &Path,
        images_dir: &Path,
        config: &crate::model::SandboxConfig,
    ) -> Option<super::SupervisorAid> {
        // The layer disk made and its loop device attached while the
        // supervisor spawns: the supervisor only mounts it then.
        let bytes = config.disk_mb? << 20;
        if !self.enforceable().disk || sandbox_dir.join("upper").exists() {
            return None;
        }
        let held = layer_disk::create(sandbox_dir, bytes, Some(images_dir))
            .and_then(|()| layer_disk::attach_held(sandbox_dir));
        match held {
            Ok(device) => device.map(|d| Box::new(d) as super::SupervisorAid),
            Err(e) => {
                tracing::debug!(error = %e, "no head start on the layer disk");
                None
            }
        }
    }

    fn pauses(&self) -> bool {
        // A rootless container freezes only in a cgroup delegated to the
        // user (see ContainerGuest::pause).
        !cgroups::rootless() || cgroups::Controllers::detect().freezer
    }

    fn snapshots(&self) -> bool {
        true
    }

    fn enforces_network_policy(&self) -> bool {
        // gVisor has no network here yet (SandboxConfig::validate).
        self.runtime != OciRuntime::Runsc
    }

    fn confinement(&self) -> Vec<(&'static str, String)> {
        let filter = match self.runtime {
            OciRuntime::Runc => "runc installs it from the profile (libseccomp) before the first instruction; the agent installs it again",
            OciRuntime::Crun if seccomp::compat32() => "crun installs it from the profile (libseccomp: 32-bit ABIs allowed) before the first instruction",
            OciRuntime::Crun => "crun installs burrow's compiled program before the first instruction; the agent installs it again",
            OciRuntime::Runsc => "gVisor applies the profile in its own kernel",
        };
        let can = self.enforceable();
        let held: Vec<&str> = [
            ("memory", can.memory),
            ("cpus", can.cpus),
            ("pids", can.pids),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
        let limits = if held.len() == 3 {
            "memory, cpus and pids held by cgroups".to_owned()
        } else if held.is_empty() {
            format!("none held here: {}", can.why)
        } else {
            format!("{} held; the rest not: {}", held.join(", "), can.why)
        };
        vec![
            (
                "seccomp",
                format!("Docker's allowlist without io_uring, native x86-64 only: {filter}"),
            ),
            (
                "capabilities",
                "Docker's default set, no new privileges".to_owned(),
            ),
            (
                "user namespace",
                if rootless::in_user_namespace() || cgroups::rootless() {
                    "this user's own (the sandbox's root is this user)".to_owned()
                } else {
                    "a host id range of the sandbox's own".to_owned()
                },
            ),
            ("limits", limits),
            (
                "disk",
                if can.disk {
                    "the writable layer on an ext4 image of its disk_mb (a loop device): ENOSPC at the limit".to_owned()
                } else {
                    format!("not held: {}", can.disk_why)
                },
            ),
        ]
    }

    fn check_config(&self, config: &crate::model::SandboxConfig) -> Result<()> {
        match config.seccomp_allow.iter().position(|n| !bpf::known(n)) {
            Some(i) => Err(Error::InvalidConfig {
                field: format!("seccomp_allow[{i}]"),
                reason: format!(
                    "{} is not an x86-64 syscall this host's filter knows",
                    config.seccomp_allow[i]
                ),
            }),
            None => Ok(()),
        }
    }

    fn enforceable(&self) -> super::Enforceable {
        let c = cgroups::Controllers::detect();
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0 && !rootless::in_user_namespace();
        let why = if cgroups::rootless() {
            "an unprivileged user's containers are limited through a cgroup v2 subtree delegated to it, and none is".to_owned()
        } else {
            "this host lacks the cgroup controller".to_owned()
        };
        super::Enforceable {
            memory: c.memory,
            cpus: c.cpu,
            pids: c.pids,
            why,
            // A layer disk needs a loop device and an ext4 mount: root's.
            disk: as_root,
            disk_why: "an unprivileged user's container keeps its writable layer in a directory (no loop device, no ext4 mount, and overlayfs takes no FUSE upper); the vm driver's disk holds it".into(),
        }
    }
}

async fn launch(spec: &LaunchSpec) -> Result<Launched> {
    require_root()?;
    let started = Instant::now();
    let dir = &spec.runtime_dir;
    let runtime = Runtime::locate(
        spec.config.oci_runtime(),
        dir.join("state"),
        dir.join("runtime.log"),
    )?;
    check_agent(&spec.agent_bin)?;
    let id = container_id(&spec.sandbox_id, spec.generation);
    tracing::debug!(runtime = %runtime.binary.display(), container = %id, "launching");

    clear_runtime_dir(&runtime, dir, &spec.sandbox_id).await?;
    let bundle = dir.join("bundle");
    for d in [&runtime.root, &bundle] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| Error::io("creating the runtime directory", Some(d), e))?;
    }
    let mut generation = Generation::new(runtime, id, bundle);
    let mut notes = Vec::new();
    match start(spec, &mut generation, &mut notes, started).await {
        Ok((mut child, reader, writer)) => {
            tracing::info!(container = %generation.id, elapsed_ms = started.elapsed().as_millis() as u64, "container running");
            let log = child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Send + Unpin>);
            Ok(Launched {
                guest: Box::new(ContainerGuest::new(child, generation, &spec.sandbox_dir)),
                reader: Box::new(reader),
                writer: Box::new(writer),
                log,
                notes,
            })
        }
        Err(e) => {
            if let Err(rollback) = generation.release().await {
                tracing::warn!(error = %rollback, "rolling back a failed launch also failed");
                return Err(Error::Runtime {
                    runtime: generation.runtime.kind.binary().into(),
                    reason: format!("{e}; rolling back also failed: {rollback}"),
                });
            }
            Err(e)
        }
    }
}

/// Removes what earlier generations of a sandbox left behind when their
/// supervisor died: runtime state (the container, if still there, is
/// killed), empty cgroups, the rootfs mount and the runtime directory.
///
/// [`ContainerDriver::launch`] does this itself before each start; call it
/// also when a sandbox is removed after a supervisor crash.
pub async fn reclaim_stale(
    runtime: OciRuntime,
    sandbox_id: &SandboxId,
    runtime_dir: &Path,
) -> Result<()> {
    let runtime = Runtime::locate(
        runtime,
        runtime_dir.join("state"),
        runtime_dir.join("runtime.log"),
    )?;
    clear_runtime_dir(&runtime, runtime_dir, sandbox_id).await
}

async fn clear_runtime_dir(runtime: &Runtime, dir: &Path, sandbox_id: &SandboxId) -> Result<()> {
    if let Ok(entries) = fs::read_dir(&runtime.root) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            tracing::info!(container = %name, "removing a stale container of an earlier generation");
            runtime.delete_force(&name).await?;
        }
    }
    let prefix = container_prefix(sandbox_id);
    cgroups::remove_leftovers(|name| name.starts_with(&prefix));
    rootfs::unmount_recorded(&dir.join("mounts"));
    // Nothing is ever mounted inside the runtime directory (the rootfs lives
    // under the mount directory), so removing it cannot reach into a layer.
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("clearing the runtime directory", Some(dir), e))
        }
        _ => Ok(()),
    }
}

type Pipes = (
    tokio::process::Child,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
);

async fn start(
    spec: &LaunchSpec,
    generation: &mut Generation,
    notes: &mut Vec<String>,
    started: Instant,
) -> Result<Pipes> {
    // Root filesystem. As root, the container's ids are a host range of
    // its own; rootless, the supervisor's user namespace's (no base).
    let base = if rootless::in_user_namespace() {
        None
    } else {
        Some(rootfs::mapping_base(&spec.sandbox_dir)?)
    };
    if let Some(base) = base {
        for m in spec.mounts.iter().filter(|m| m.volume) {
            rootfs::adopt_fresh_volume(&m.host_path, base)?;
        }
    }
    let target = rootfs::assemble(
        &spec.image.rootfs,
        &spec.images_dir,
        &spec.sandbox_dir,
        base,
        spec.config.disk_mb.map(|mb| mb << 20),
        &generation.id,
        &spec.runtime_dir.join("mounts"),
        &mut generation.mounts,
    )
    .await?;
    if let (Some(mb), false) = (spec.config.disk_mb, layer_disk::has_disk(&spec.sandbox_dir)) {
        notes.push(format!(
            "disk limit ({mb} MiB) not enforced: {}",
            match base {
                None => "an unprivileged user's container keeps its writable layer in a directory",
                Some(_) => "the writable layer was made before it had a size",
            }
        ));
    }
    let _ = std::os::unix::fs::symlink(&target, spec.runtime_dir.join("rootfs"));
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "rootfs ready"
    );

    // Process settings.
    let image = &spec.image;
    let (uid, gid) = users::resolve(&target, image.config.user.as_deref(), &image.reference)?;
    if base.is_none() {
        rootless::check_mapped(uid, gid, &image.reference)?;
    }
    let hostname = spec::hostname(&spec.name);
    let (etc, files) = staging::generated_files(
        &generation.id,
        &spec.runtime_dir.join("mounts"),
        &mut generation.mounts,
        &hostname,
        spec.config.network.is_enabled(),
    )?;
    generation.etc = Some(etc);
    let agent_bin = staging::agent(&spec.agent_bin)?;
    let hooked = std::env::var_os("BURROW_AGENT_ARGS").is_some();
    if spec.config.oci_runtime() != OciRuntime::Runsc && !hooked {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(&agent_bin)
            .map_err(|e| Error::io("reading the agent", Some(&agent_bin), e))?;
        // Test hook: expect another file than the one bound, as when a
        // file of the guest's ran in the agent's place.
        let other = u64::from(std::env::var_os("BURROW_TEST_AGENT_MISMATCH").is_some());
        generation.agent = Some((meta.dev(), meta.ino() ^ other));
    }
    let controllers = cgroups::Controllers::detect();
    let (resources, limit_notes) = spec::Resources::plan(&spec.config, &controllers);
    notes.extend(limit_notes);
    let runtime = spec.config.oci_runtime();
    let input = spec::SpecInput {
        rootfs: &target,
        args: spec::agent_args(runtime, &spec.config.seccomp_allow)?,
        env: spec::environment(&image.config, &spec.config, &hostname),
        cwd: spec::working_dir(&spec.config, &image.config, &image.reference)?,
        uid,
        gid,
        hostname,
        id_base: base,
        agent_bin: &agent_bin,
        mounts: &spec.mounts,
        files,
        nofile: spec::nofile_limit(),
        resources,
        cgroups_path: format!("burrow/{}", generation.id),
        runtime,
        seccomp_allow: &spec.config.seccomp_allow,
    };
    let config_path = generation.bundle.join("config.json");
    let text = serde_json::to_vec_pretty(&spec::config(&input))
        .map_err(|e| Error::io("encoding config.json", None, e.into()))?;
    fs::write(&config_path, text)
        .map_err(|e| Error::io("writing config.json", Some(&config_path), e))?;

    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "runtime config written"
    );

    // The runtime process.
    let pid_file = spec.runtime_dir.join("pid");
    let mut child = spawn_run(spec, generation, &pid_file).await?;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "runtime spawned"
    );
    let pid = match wait_running(
        &mut child,
        generation,
        &pid_file,
        spec.config.startup_timeout,
    )
    .await
    {
        Ok(pid) => pid,
        Err(e) => {
            stop_runtime(&mut child, generation).await;
            return Err(e);
        }
    };
    tracing::debug!(
        pid,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "container started"
    );
    generation.pid = Some(pid);
    if spec.config.network.is_enabled() {
        match network::attach(
            pid,
            &spec.config.network,
            spec.config.egress_ceiling.as_ref(),
            &spec.sandbox_id.to_string(),
            spec.secrets.clone(),
        )
        .await
        {
            Ok(net) => generation.network = Some(net),
            Err(e) => {
                stop_runtime(&mut child, generation).await;
                return Err(e);
            }
        }
    }
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        stop_runtime(&mut child, generation).await;
        return Err(generation
            .runtime
            .error("the runtime process has no stdio pipes".into()));
    };
    Ok((child, stdout, stdin))
}

/// Starts `<runtime> run` in the foreground: stdin/stdout are the protocol
/// pipes, stderr is a third pipe (the guest's log, handed out as
/// [`Launched::log`]), and the inherited descriptors stay open in the
/// runtime process (never in the container: the runtime closes everything
/// above stdio before exec).
///
/// If the supervisor dies, the agent's log writes fail with `EPIPE` (which
/// it ignores); the container still ends when the agent's channel closes.
async fn spawn_run(
    spec: &LaunchSpec,
    generation: &Generation,
    pid_file: &Path,
) -> Result<tokio::process::Child> {
    let mut cmd = generation.runtime.command();
    if generation.runtime.kind == OciRuntime::Runsc && !spec.config.network.is_enabled() {
        // gVisor's own loopback and nothing else (`sandbox`, its default,
        // copies the host namespace's interfaces, where loopback is down).
        cmd.arg("--network=none");
    }
    cmd.arg("run")
        .arg("--bundle")
        .arg(&generation.bundle)
        .arg("--pid-file")
        .arg(pid_file)
        .arg(&generation.id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // No parent-death signal here: if the supervisor dies, the agent sees
    // its channel close and exits, the container ends, and only then does
    // `run` exit and release the runtime-lifetime lock it inherited. Killing
    // `run` early would release the lock while the container still lives.
    oci::bind_to_parent(&mut cmd, spec.inherit_fds.clone(), false);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    oci::spawn_long_lived(cmd).await.map_err(|e| {
        generation.runtime.error(format!(
            "starting {}: {e}",
            generation.runtime.binary.display()
        ))
    })
}

/// Waits until the runtime has written the container's pid (it is running)
/// or has exited (its error is returned).
async fn wait_running(
    child: &mut tokio::process::Child,
    generation: &Generation,
    pid_file: &Path,
    timeout: Duration,
) -> Result<i32> {
    let deadline = Instant::now() + timeout;
    // The start is on the critical path of every create: woken by the
    // file's close where inotify works, else looking each millisecond.
    let watch = pid_file.parent().and_then(CloseWatch::new);
    loop {
        if let Some(pid) = fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|p| *p > 0)
        {
            return Ok(pid);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(generation.runtime.error(format!(
                "`{} run` exited ({status}) before the container started: {}",
                generation.runtime.kind.binary(),
                generation.runtime.log_errors()
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                operation: "creating the container".into(),
                after: timeout,
            });
        }
        match &watch {
            // Bounded: the runtime's exit is noticed by the next look.
            Some(w) => w.next(Duration::from_millis(20)).await,
            None => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

/// Files closed after writing in one directory (inotify), as a wake-up.
struct CloseWatch(Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>);

impl Drop for CloseWatch {
    fn drop(&mut self) {
        // Closing an inotify instance waits out an SRCU grace period (8 to
        // 20 ms measured here): done on a thread of its own, off the start.
        if let Some(fd) = self.0.take() {
            let fd = fd.into_inner();
            let _ = std::thread::Builder::new()
                .name("burrow-close".into())
                .spawn(move || drop(fd));
        }
    }
}

impl CloseWatch {
    fn new(dir: &Path) -> Option<CloseWatch> {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: inotify_init1 has no memory preconditions; the new
        // descriptor is owned here only.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: as above.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: a valid inotify descriptor and a NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                path.as_ptr(),
                libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO,
            )
        };
        if wd < 0 {
            return None;
        }
        // SAFETY: the descriptor is owned by the AsyncFd from here on and
        // stays open (the same inotify instance) until it is dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .ok()
        .map(|fd| CloseWatch(Some(fd)))
    }

    /// Returns at the next event (events are drained) or after `at_most`.
    async fn next(&self, at_most: Duration) {
        let Some(fd) = &self.0 else {
            return;
        };
        let wait = async {
            if let Ok(mut guard) = fd.readable().await {
                let mut buf = [0u8; 4096];
                let _ = guard.try_io(|fd| {
                    // SAFETY: reads into a buffer of the given length.
                    let n = unsafe {
                        libc::read(
                            std::os::fd::AsRawFd::as_raw_fd(fd.get_ref()),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                        )
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
            }
        };
        let _ = tokio::time::timeout(at_most, wait).await;
    }
}

/// Kills a runtime process that was started but must not stay.
async fn stop_runtime(child: &mut tokio::process::Child, generation: &Generation) {
    let _ = generation
        .runtime
        .invoke(
            &["kill", generation.id.as_str(), "KILL"],
            Duration::from_secs(5),
        )
        .await;
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_short_and_lowercase() {
        let id = container_id(&SandboxId::new(), u64::MAX);
        assert!(id.len() <= 64, "{id}");
        assert!(id.starts_with("burrow-"));
        let spec_id = id;
        assert!(spec_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    }
}
