//! The VM driver: every sandbox in its own QEMU microVM.
//!
//! One launch, in order: find QEMU and the guest kernel; choose KVM or TCG
//! (`accel.rs`: KVM only when a probe boot of the real guest works); get the
//! image as a cached ext4 disk (attached read-only) and the sandbox's own
//! writable ext4 disk (created on first start, kept across runs: the overlay
//! upper layer lives there); write the initramfs with the agent as `/init`
//! and its boot JSON (`initramfs.rs`, contract in
//! [`burrow_protocol::vm`]); start `qemu-system-x86_64 -M microvm` with the
//! agent's virtio console port and the QMP monitor on socketpairs it
//! inherits (no socket paths), the serial console on a pipe that becomes
//! the guest log, and the runtime-lifetime lock inherited so the lock is
//! released only when QEMU is gone.
//!
//! Readiness is the agent's hello, which the supervisor awaits within the
//! sandbox's `startup_timeout`; QEMU's exit code is never trusted for it.
//! Stop is the agent's orderly shutdown (sync, then it ends the VM through
//! the `isa-debug-exit` port); kill is SIGKILL to QEMU. If the supervisor
//! dies, the agent sees its port close and shuts the VM down the same way.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use burrow_protocol::vm::{VmBoot, VmMount, VmResume, WallClock};
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use super::{Driver, LaunchSpec, Launched};
use crate::engine::procs::ProcIdentity;
use crate::error::{Error, Result};

mod accel;
mod guest;
mod hibernate;
mod initramfs;
mod qemu;
mod qmp;
mod snapshot;
mod template;

pub use accel::AccelChoice;
pub use hibernate::{discard as discard_hibernation, is_hibernated};
pub use initramfs::write as write_initramfs;
pub use qemu::{bare_boot_args, locate_kernel, locate_qemu, Accel};
pub use snapshot::{BareMachine, BareVm};
pub use template::{
    prune as prune_templates, templates_dir, FileId, TemplateInputs, TEMPLATES_DIR,
};

use guest::VmGuest;
use qemu::{Machine, Share};
use qmp::StateFd;

/// Memory of a VM without a configured limit, in MiB.
pub const DEFAULT_MEMORY_MB: u64 = 512;
/// The most vCPUs a VM can have (the model's limit, checked at create).
const MAX_CPUS: u32 = crate::model::DriverKind::VM_MAX_CPUS;
/// Size of a sandbox's writable disk (sparse: only what is written counts).
const DATA_DISK_BYTES: u64 = 8 << 30;

/// Runs guests as QEMU microVMs.
#[derive(Debug, Clone, Default)]
pub struct VmDriver;

#[async_trait]
impl Driver for VmDriver {
    fn name(&self) -> &'static str {
        "vm"
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Launched> {
        let span = tracing::info_span!("vm_launch", sandbox = %spec.sandbox_id, name = %spec.name, generation = spec.generation);
        launch(spec).instrument(span).await
    }

    async fn reclaim_stale(
        &self,
        _sandbox_id: &crate::model::SandboxId,
        runtime_dir: &Path,
    ) -> Result<()> {
        reclaim_stale(runtime_dir).await
    }

    /// A VM whose CPUs were stopped (paused, or saved by a hibernation
    /// whose supervisor died) never powers itself off.
    fn reclaims_a_stuck_run(&self) -> bool {
        true
    }

    fn discard_saved(&self, sandbox_dir: &Path) -> Result<bool> {
        discard_hibernation(sandbox_dir)
    }

    /// Boot templates of removed images, or of a changed kernel, agent or
    /// QEMU.
    fn prune(&self, images_dir: &Path, removed: &[String]) -> Result<(u64, u64)> {
        prune_templates(images_dir, removed)
    }
}

/// What a working VM setup on this host consists of (for `burrow doctor`).
#[derive(Debug, Clone, Serialize)]
pub struct VmSupport {
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// QEMU's version line.
    pub qemu_version: String,
    /// The guest kernel.
    pub kernel: PathBuf,
    /// The acceleration guests get, and why.
    pub accel: AccelChoice,
}

/// Checks that VMs can run here: QEMU, the kernel, the agent, and which
/// acceleration they get (runs the KVM probe if it has not run yet).
pub async fn check_support() -> Result<VmSupport> {
    let qemu = locate_qemu()?;
    let kernel = locate_kernel()?;
    let agent = crate::engine::procs::agent_bin()
        .ok_or_else(|| qemu::unavailable("the guest agent binary was not found".into()))?;
    let qemu_version = super::version_line(&qemu)
        .await
        .map_err(|e| qemu::unavailable(format!("running {} --version: {e}", qemu.display())))?;
    let accel = accel::choose(&qemu, &kernel, &agent).await?;
    Ok(VmSupport {
        qemu,
        qemu_version,
        kernel,
        accel,
    })
}

/// The QEMU process of a generation, recorded so that a later start or a
/// removal can kill it if its supervisor died.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    pid: u32,
    start: u64,
}

const RECORD_FILE: &str = "qemu.json";

async fn launch(spec: &LaunchSpec) -> Result<Launched> {
    let started = Instant::now();
    let qemu_bin = locate_qemu()?;
    let kernel = locate_kernel()?;
    let dir = &spec.runtime_dir;
    reclaim_stale(dir).await?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io("creating the runtime directory", Some(dir), e))?;
    let choice = accel::choose(&qemu_bin, &kernel, &spec.agent_bin).await?;
    tracing::debug!(accel = choice.accel.as_str(), reason = %choice.reason, "acceleration");

    let root_disk = {
        let images_dir = spec.images_dir.clone();
        let image = spec.image.clone();
        tokio::task::spawn_blocking(move || {
            crate::engine::image::ext4::disk_image_in(&images_dir, &image)
        })
        .await
        .map_err(|e| Error::io("preparing the disks", None, std::io::Error::other(e)))??
    };
    // The data disk is made when it is first needed: a first start from
    // a template gets a copy of the template's instead of a new one.
    let data_disk = spec.sandbox_dir.join("vm").join("data.ext4");
    let first_start = !crate::engine::image::ext4::is_ext4(&data_disk);
    let shares: Vec<Share> = spec
        .mounts
        .iter()
        .enumerate()
        .map(|(i, m)| Share {
            tag: share_tag(i),
            path: m.host_path.clone(),
            read_only: m.read_only,
        })
        .collect();
    let mut boot = boot_config(spec, &shares)?;
    let (memory_mb, cpus) = machine_size(&spec.config);
    let mut notes = launch_notes(spec, cpus, &choice);
    let (log_read, log_write) =
        std::io::pipe().map_err(|e| Error::io("creating the console pipe", None, e))?;
    let console: OwnedFd = log_write.into();

    let mut record = StartRecord {
        from: StartKind::Cold,
        template: None,
        reason: None,
    };
    let files = TemplateFiles {
        qemu: &qemu_bin,
        kernel: &kernel,
        agent: &spec.agent_bin,
        root_disk: &root_disk,
    };
    // A hibernated guest is resumed if the configuration still gives its
    // machine; otherwise it is dropped and the sandbox starts afresh.
    // The window a concurrent stop's discard lands in: the run begun, the
    // saved guest not yet claimed.
    crate::engine::fault::hold("vm.hibernate.before_claim").await;
    let mut saved = match hibernate::claim(&spec.sandbox_dir) {
        Ok(saved) => saved,
        Err(e) => {
            notes.push(format!("starting afresh: {e}"));
            None
        }
    };
    let from_template = match templates_wanted() {
        Err(reason) => Err(reason),
        Ok(()) => {
            let inputs = template_inputs(
                &files,
                choice.accel,
                memory_mb,
                cpus,
                spec.config.network,
                shares.len(),
            )?;
            let fresh = TemplateInputs {
                fresh_root: true,
                ..inputs.clone()
            };
            let (key, fresh_key) = (inputs.key(), fresh.key());
            let mut restored = Err(String::new());
            if let Some(claimed) = saved.take() {
                // Saved on the machine of either template.
                let machine = [&inputs, &fresh]
                    .into_iter()
                    .find(|i| i.key() == claimed.meta.template);
                if let (Some(machine), true) = (machine, shares.is_empty()) {
                    record.template = Some(claimed.meta.template.clone());
                    let console = dup(&console)?;
                    // Used at most once: what the restore did not consume
                    // is discarded.
                    let mut hibernated = Some(claimed);
                    restored = restore_template(
                        spec,
                        &files,
                        machine,
                        &data_disk,
                        &shares,
                        &boot,
                        console,
                        &mut hibernated,
                    )
                    .await
                    .map(|vm| (vm, StartKind::Hibernation))
                    .map_err(|e| e.to_string());
                    if let Some(left) = hibernated {
                        let _ = left.consume();
                    }
                    if let Err(e) = &restored {
                        tracing::warn!(error = %e, "the hibernated guest could not be restored; starting afresh");
                        notes.push(format!(
                            "starting afresh: the hibernated guest could not be restored: {e}"
                        ));
                    }
                } else {
                    notes.push(
                        "starting afresh: the hibernated guest was saved with another configuration"
                            .into(),
                    );
                    let _ = claimed.consume();
                }
            } else if first_start {
                // No disk yet: the template of first starts gives it one
                // with its root already set up.
                record.template = Some(fresh_key);
                restored =
                    first_start_restore(spec, &files, &fresh, &data_disk, &shares, &boot, &console)
                        .await
                        .map(|vm| (vm, StartKind::Template))
                        .map_err(|e| e.to_string());
                if let Err(e) = &restored {
                    tracing::warn!(error = %e, "the template of first starts could not be used");
                    notes.push(format!(
                        "the template of first starts could not be used: {e}"
                    ));
                }
            }
            match restored {
                Ok(vm) => Ok(vm),
                Err(_) => {
                    record.template = Some(key);
                    let console = dup(&console)?;
                    async {
                        prepare_data_disk(&data_disk).await?;
                        restore_template(
                            spec, &files, &inputs, &data_disk, &shares, &boot, console, &mut None,
                        )
                        .await
                    }
                    .await
                    .map(|vm| (vm, StartKind::Template))
                    .map_err(|e| e.to_string())
                }
            }
        }
    };
    if let Some(claimed) = saved {
        notes.push(
            "starting afresh: boot templates are off, so the hibernated guest cannot be restored"
                .into(),
        );
        let _ = claimed.consume();
    }
    let vm = match from_template {
        Ok((vm, kind)) => {
            record.from = kind;
            vm
        }
        Err(reason) => {
            if record.template.is_some() {
                tracing::warn!(%reason, "the boot template could not be used; booting cold");
                notes.push(format!(
                    "booted cold: the boot template could not be used: {reason}"
                ));
            }
            record.reason = Some(reason);
            prepare_data_disk(&data_disk).await?;
            boot.clock = Some(WallClock::now());
            let boot_json = serde_json::to_vec(&boot)
                .map_err(|e| Error::io("encoding the boot configuration", None, e.into()))?;
            let agent = std::fs::read(&spec.agent_bin)
                .map_err(|e| Error::io("reading the guest agent", Some(&spec.agent_bin), e))?;
            let initramfs = dir.join("initramfs.cpio");
            initramfs::write(&initramfs, &agent, &boot_json)?;
            tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "disks and initramfs ready"
            );
            let machine = Machine {
                kernel: &kernel,
                initramfs: &initramfs,
                root_disk: Some(&root_disk),
                data_disk: Some(&data_disk),
                accel: choice.accel,
                cpus,
                memory_mb,
                network: spec.config.network,
                shares: &shares,
                agent_fd: None,
                qmp_fd: None,
                start_paused: crate::engine::fault::enabled("vm.start_paused"),
                tsc_khz: qemu::host_tsc_khz(),
                memory_file: None,
                incoming: false,
                template: None,
            };
            match start_qemu(
                &qemu_bin,
                machine,
                spec.inherit_fds.clone(),
                console,
                Owner::Sandbox(dir),
            )
            .await
            {
                Ok(vm) => vm,
                Err(e) => {
                    let _ = clear_runtime_dir(dir);
                    return Err(e);
                }
            }
        }
    };
    write_start_record(dir, &record);
    let log = tokio::net::unix::pipe::Receiver::from_owned_fd(log_read.into())
        .map_err(|e| Error::io("reading the console pipe", None, e))?;
    tracing::info!(
        accel = choice.accel.as_str(),
        cpus,
        memory_mb,
        from = record.from.as_str(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "VM started"
    );
    let hibernation = match (&record.template, record.from) {
        _ if !shares.is_empty() => Err(
            "a host directory is shared into the VM (QEMU cannot save a mounted 9p share)".into(),
        ),
        (Some(key), StartKind::Template | StartKind::Hibernation) => Ok(hibernate::Target {
            vm_dir: spec.sandbox_dir.join("vm"),
            template: key.clone(),
        }),
        _ => Err(format!(
            "the VM was booted cold ({}), not restored from a boot template",
            record.reason.as_deref().unwrap_or("no template")
        )),
    };
    let (reader, writer) = vm.agent.into_split();
    Ok(Launched {
        guest: Box::new(VmGuest::new(
            vm.child,
            vm.qmp,
            dir.clone(),
            memory_mb,
            hibernation,
        )),
        reader: Box::new(reader),
        writer: Box::new(writer),
        log: Some(Box::new(log)),
        notes,
    })
}

/// The boot templates made (or found) ahead of the first start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WarmTemplate {
    /// The key of the template a first start restores (its directory under
    /// `images/vm-templates/`).
    pub key: String,
    /// The key of the template later starts restore.
    pub restart_key: String,
    /// Whether this call built either (false: both existed).
    pub built: bool,
}

/// Makes the boot templates that a vm sandbox of `config` (its image,
/// memory, CPUs, network and number of mounts) would start from, unless
/// they exist: the one of first starts and the one of later starts.
/// `burrow image warm`, so that even the first start restores.
pub async fn warm_template(
    home: &crate::engine::paths::Home,
    config: &crate::model::SandboxConfig,
) -> Result<WarmTemplate> {
    templates_wanted().map_err(qemu::unavailable)?;
    let qemu_bin = locate_qemu()?;
    let kernel = locate_kernel()?;
    let agent = crate::engine::procs::locate_agent()?.path;
    let choice = accel::choose(&qemu_bin, &kernel, &agent).await?;
    let image = crate::engine::image::prepare(home, &config.image).await?;
    let images_dir = home.images_dir();
    let root_disk = {
        let images_dir = images_dir.clone();
        tokio::task::spawn_blocking(move || {
            crate::engine::image::ext4::disk_image_in(&images_dir, &image)
        })
        .await
        .map_err(|e| Error::io("preparing the disk", None, std::io::Error::other(e)))??
    };
    let files = TemplateFiles {
        qemu: &qemu_bin,
        kernel: &kernel,
        agent: &agent,
        root_disk: &root_disk,
    };
    let (memory_mb, cpus) = machine_size(config);
    let inputs = template_inputs(
        &files,
        choice.accel,
        memory_mb,
        cpus,
        config.network,
        config.mounts.len(),
    )?;
    let fresh = TemplateInputs {
        fresh_root: true,
        ..inputs.clone()
    };
    let mut built = false;
    for inputs in [&fresh, &inputs] {
        built |= !templates_dir(&images_dir).join(inputs.key()).is_dir();
        ensure_template(&images_dir, &files, inputs).await?;
    }
    Ok(WarmTemplate {
        key: fresh.key(),
        restart_key: inputs.key(),
        built,
    })
}

/// The VM's memory (MiB) and whole vCPUs for `config`.
fn machine_size(config: &crate::model::SandboxConfig) -> (u64, u32) {
    let memory_mb = config.memory_mb.unwrap_or(DEFAULT_MEMORY_MB);
    let cpus = config
        .cpus
        .map(|c| c.ceil().clamp(1.0, MAX_CPUS as f64) as u32)
        .unwrap_or(1);
    (memory_mb, cpus)
}

/// The 9p tag of the `i`th share.
fn share_tag(i: usize) -> String {
    format!("burrow{i}")
}

/// The notes of a launch, for the sandbox log.
fn launch_notes(spec: &LaunchSpec, cpus: u32, choice: &AccelChoice) -> Vec<String> {
    let mut notes = Vec::new();
    if spec.config.cpus.is_some_and(|c| c.fract() != 0.0) {
        notes.push(format!(
            "the VM has {cpus} whole vCPU(s): fractional CPU limits are rounded up"
        ));
    }
    if spec.config.pids_limit.is_some() {
        notes.push("pids_limit is not enforced inside a VM".into());
    }
    if choice.accel == Accel::Tcg {
        notes.push(format!(
            "running under TCG (software emulation): {}",
            choice.reason
        ));
    }
    notes
}

/// Environment variable that turns boot templates off (`0`).
pub const TEMPLATES_ENV: &str = "BURROW_VM_TEMPLATES";

/// Whether launches restore boot templates (Err: why not).
fn templates_wanted() -> std::result::Result<(), String> {
    if std::env::var(TEMPLATES_ENV).is_ok_and(|v| v == "0") {
        return Err(format!("boot templates are off ({TEMPLATES_ENV}=0)"));
    }
    if crate::engine::fault::enabled("vm.start_paused") {
        return Err("the vm.start_paused fault point is on".into());
    }
    Ok(())
}

/// The files a template is made of and restored with.
struct TemplateFiles<'a> {
    qemu: &'a Path,
    kernel: &'a Path,
    agent: &'a Path,
    root_disk: &'a Path,
}

fn template_inputs(
    files: &TemplateFiles<'_>,
    accel: Accel,
    memory_mb: u64,
    cpus: u32,
    network: bool,
    shares: usize,
) -> Result<TemplateInputs> {
    Ok(TemplateInputs {
        format: template::FORMAT,
        image_key: files
            .root_disk
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        image_disk: FileId::of(files.root_disk)?,
        kernel: FileId::of(files.kernel)?,
        agent: FileId::of(files.agent)?,
        qemu: FileId::of(files.qemu)?,
        accel,
        tsc_khz: qemu::host_tsc_khz(),
        memory_mb,
        cpus,
        network,
        shares,
        fresh_root: false,
    })
}

/// The boot configuration a template is built with: its disks and channel,
/// nothing of a sandbox. The `/etc` files are placeholders of those every
/// sandbox of the template writes (a template of first starts writes them,
/// so that a sandbox's own replace files of the data disk).
fn template_boot(network: bool) -> VmBoot {
    VmBoot {
        root_serial: qemu::ROOT_SERIAL.into(),
        data_serial: qemu::DATA_SERIAL.into(),
        channel: qemu::AGENT_PORT.into(),
        // Placeholders no shorter than any sandbox's files and no longer
        // (the guest then rewrites them without truncating): one
        // character, one line, and a machine id of the same length.
        hostname: "x".into(),
        env: Default::default(),
        cwd: "/".into(),
        uid: 0,
        gid: 0,
        hosts: "\n".into(),
        resolv_conf: network.then(|| "\n".into()),
        mounts: Vec::new(),
        machine_id: Some("0".repeat(32)),
        clock: None,
    }
}

/// The template for `inputs`, built first if there is none.
async fn ensure_template(
    images_dir: &Path,
    files: &TemplateFiles<'_>,
    inputs: &TemplateInputs,
) -> Result<template::Template> {
    template::ensure(
        images_dir,
        inputs,
        &template::Ingredients {
            qemu: files.qemu,
            kernel: files.kernel,
            agent: files.agent,
            root_disk: files.root_disk,
            boot: &template_boot(inputs.network),
            data_disk_bytes: DATA_DISK_BYTES,
        },
    )
    .await
}

/// A sandbox's first start from the template of first starts (`fresh`,
/// built first if there is none): a copy of the template's data disk
/// becomes the sandbox's, then the guest is restored.
#[allow(clippy::too_many_arguments)]
async fn first_start_restore(
    spec: &LaunchSpec,
    files: &TemplateFiles<'_>,
    fresh: &TemplateInputs,
    data_disk: &Path,
    shares: &[Share],
    boot: &VmBoot,
    console: &OwnedFd,
) -> Result<Started> {
    let template = ensure_template(&spec.images_dir, files, fresh).await?;
    let to = data_disk.to_path_buf();
    tokio::task::spawn_blocking(move || template.copy_data_disk(&to))
        .await
        .map_err(|e| Error::io("copying the data disk", None, std::io::Error::other(e)))??;
    restore_template(
        spec,
        files,
        fresh,
        data_disk,
        shares,
        boot,
        dup(console)?,
        &mut None,
    )
    .await
}

/// Formats the sandbox's data disk unless it has one.
async fn prepare_data_disk(path: &Path) -> Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || ensure_data_disk(&path))
        .await
        .map_err(|e| Error::io("preparing the data disk", None, std::io::Error::other(e)))?
}

/// A second descriptor of the console pipe (each QEMU tried gets one).
fn dup(console: &OwnedFd) -> Result<OwnedFd> {
    console
        .try_clone()
        .map_err(|e| Error::io("duplicating the console pipe", None, e))
}

/// Starts the guest from its template (built first if there is none):
/// QEMU with the template's machine and this sandbox's disk, shares and
/// channels, the saved state brought in (the template's, or the
/// `hibernated` guest's, taken and consumed once it is loaded, before the
/// guest runs; left to the caller to discard on an earlier failure), and
/// the agent handed the sandbox's identity, fresh entropy and the time.
#[allow(clippy::too_many_arguments)]
async fn restore_template(
    spec: &LaunchSpec,
    files: &TemplateFiles<'_>,
    inputs: &TemplateInputs,
    data_disk: &Path,
    shares: &[Share],
    boot: &VmBoot,
    console: OwnedFd,
    hibernated: &mut Option<hibernate::Claimed>,
) -> Result<Started> {
    let size = std::fs::metadata(data_disk)
        .map_err(|e| Error::io("reading the writable disk", Some(data_disk), e))?
        .len();
    if size != DATA_DISK_BYTES {
        return Err(qemu::unavailable(format!(
            "the writable disk has {size} bytes, not the template's {DATA_DISK_BYTES}"
        )));
    }
    let template = ensure_template(&spec.images_dir, files, inputs).await?;
    let (ram, initramfs) = (template.ram(), template.initramfs());
    // The state QEMU restores, inherited by it.
    let state = StateFd::open(&match hibernated {
        Some(saved) => saved.state(),
        None => template.state(),
    })?;
    let mut inherit = spec.inherit_fds.clone();
    inherit.push(state.raw());
    let machine = template::machine(
        files.kernel,
        &initramfs,
        files.root_disk,
        data_disk,
        inputs,
        shares,
        &ram,
        true,
    );
    let mut vm = start_qemu(
        files.qemu,
        machine,
        inherit,
        console,
        Owner::Sandbox(&spec.runtime_dir),
    )
    .await?;
    let resumed = async {
        // On an error a hibernated state is still `hibernated`'s, which
        // the caller discards.
        vm.qmp.load_state(&state, hibernated.is_none()).await?;
        drop(state);
        if let Some(saved) = hibernated.take() {
            // Loaded, never run: a start killed here leaves the claimed
            // state, which the next start restores.
            crate::engine::fault::point("vm.hibernate.loaded");
            saved.consume()?;
        }
        let mut entropy = rand::random::<[u8; 32]>().to_vec();
        entropy.extend(rand::random::<[u8; 32]>());
        let mut boot = boot.clone();
        boot.clock = Some(WallClock::now());
        let frame = burrow_protocol::encode(&VmResume {
            boot,
            entropy: entropy.into(),
        });
        // Written before the guest runs: waiting in the channel, it is
        // the first thing the guest reads.
        tokio::io::AsyncWriteExt::write_all(&mut vm.agent, &frame)
            .await
            .map_err(|e| qemu::unavailable(format!("handing the guest its identity: {e}")))?;
        vm.qmp.execute("cont").await.map(drop)
    };
    if let Err(e) = resumed.await {
        vm.kill().await;
        return Err(e);
    }
    tracing::debug!(template = %template.key, "restored from the boot template");
    Ok(vm)
}

/// How a generation's VM was started, recorded in its runtime directory
/// (`start.json`) for `burrow doctor`, tests and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRecord {
    /// Restored from a boot template, or booted.
    pub from: StartKind,
    /// The template's key, when templates were tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Why a cold boot it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// See [`StartRecord::from`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartKind {
    /// A boot from the kernel up.
    Cold,
    /// A restore of a boot template.
    Template,
    /// A restore of the sandbox's own hibernated guest.
    Hibernation,
}

impl StartKind {
    fn as_str(self) -> &'static str {
        match self {
            StartKind::Cold => "cold",
            StartKind::Template => "template",
            StartKind::Hibernation => "hibernation",
        }
    }
}

/// The file of a [`StartRecord`] in a runtime directory.
pub const START_RECORD: &str = "start.json";

fn write_start_record(dir: &Path, record: &StartRecord) {
    if let Ok(text) = serde_json::to_vec(record) {
        let _ = std::fs::write(dir.join(START_RECORD), text);
    }
}

/// How the VM of the generation running in `runtime_dir` was started.
pub fn start_record(runtime_dir: &Path) -> Option<StartRecord> {
    let bytes = std::fs::read(runtime_dir.join(START_RECORD)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A QEMU just started, its monitor connected.
struct Started {
    child: tokio::process::Child,
    qmp: qmp::Qmp,
    agent: tokio::net::UnixStream,
}

impl Started {
    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// Whose QEMU is started.
#[derive(Debug, Clone, Copy)]
enum Owner<'a> {
    /// A sandbox's generation, whose runtime directory records the process
    /// at once (a later start or removal kills it if this supervisor dies
    /// at any point after the spawn). It outlives the supervisor: the
    /// agent powers the VM off when its channel closes.
    Sandbox(&'a Path),
    /// A template build: it dies with the process that builds it.
    Builder,
}

/// Starts QEMU for `machine` with fresh agent and QMP channels (their
/// descriptors are filled in here), `inherit` open in it too, the console
/// on `console`; connects the monitor. A QEMU that fails that far is
/// killed.
async fn start_qemu(
    qemu_bin: &Path,
    mut machine: Machine<'_>,
    mut inherit: Vec<RawFd>,
    console: OwnedFd,
    owner: Owner<'_>,
) -> Result<Started> {
    let (agent_host, agent_guest) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::io("creating the agent channel", None, e))?;
    let (qmp_host, qmp_guest) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::io("creating the QMP channel", None, e))?;
    machine.agent_fd = Some(agent_guest.as_raw_fd());
    machine.qmp_fd = Some(qmp_guest.as_raw_fd());
    inherit.extend([agent_guest.as_raw_fd(), qmp_guest.as_raw_fd()]);
    let die_with_parent = matches!(owner, Owner::Builder);
    let mut child = spawn_qemu(qemu_bin, &machine, inherit, Some(console), die_with_parent).await?;
    if let (Owner::Sandbox(dir), Some(pid)) = (owner, child.id()) {
        record_process(dir, pid);
    }
    // Only QEMU holds the guest ends now: when it exits, ours see EOF.
    drop((agent_guest, qmp_guest));
    let setup = async {
        let qmp = qmp::Qmp::handshake(to_tokio(qmp_host)?).await?;
        Ok::<_, Error>((qmp, to_tokio(agent_host)?))
    };
    match setup.await {
        Ok((qmp, agent)) => Ok(Started { child, qmp, agent }),
        Err(e) => {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            Err(e)
        }
    }
}

fn to_tokio(s: std::os::unix::net::UnixStream) -> Result<tokio::net::UnixStream> {
    s.set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(s))
        .map_err(|e| Error::io("registering a QEMU channel", None, e))
}

/// Starts QEMU with `inherit` open in it (everything else stays
/// close-on-exec); the serial console and QEMU's own messages go to
/// `console` (None: discarded).
async fn spawn_qemu(
    qemu: &Path,
    machine: &Machine<'_>,
    inherit: Vec<RawFd>,
    console: Option<OwnedFd>,
    die_with_parent: bool,
) -> Result<tokio::process::Child> {
    let mut cmd = std::process::Command::new(qemu);
    cmd.args(machine.args()).stdin(Stdio::null());
    match console {
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        Some(fd) => {
            // One pipe for both: the serial console writes to stdout, QEMU's
            // own errors to stderr.
            let copy = dup(&fd)?;
            cmd.stdout(Stdio::from(fd)).stderr(Stdio::from(copy));
        }
    }
    // A sandbox's QEMU gets no parent-death signal: if the supervisor
    // dies, the agent sees its port close and powers the VM off after
    // syncing; QEMU (holding the runtime lock) exits only then.
    crate::engine::driver::container::bind_to_parent(&mut cmd, inherit, die_with_parent);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    crate::engine::driver::container::spawn_long_lived(cmd)
        .await
        .map_err(|e| qemu::unavailable(format!("starting {}: {e}", qemu.display())))
}

/// The agent's boot configuration for this launch.
fn boot_config(spec: &LaunchSpec, shares: &[Share]) -> Result<VmBoot> {
    use crate::engine::driver::container::{spec as oci, users};
    let image = &spec.image;
    let hostname = oci::hostname(&spec.name);
    let (uid, gid) = users::resolve(
        &image.rootfs,
        image.config.user.as_deref(),
        &image.reference,
    )?;
    let env = oci::environment(&image.config, &spec.config, &hostname)
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect();
    Ok(VmBoot {
        root_serial: qemu::ROOT_SERIAL.into(),
        data_serial: qemu::DATA_SERIAL.into(),
        channel: qemu::AGENT_PORT.into(),
        hosts: format!(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
        ),
        hostname,
        env,
        cwd: oci::working_dir(&spec.config, &image.config, &image.reference)?,
        uid,
        gid,
        resolv_conf: spec
            .config
            .network
            .then(|| format!("nameserver {}\n", qemu::GUEST_DNS)),
        mounts: shares
            .iter()
            .zip(&spec.mounts)
            .map(|(s, m)| VmMount {
                tag: s.tag.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect(),
        machine_id: Some(machine_id(&spec.sandbox_id)),
        clock: None,
    })
}

/// The guest's `/etc/machine-id`: derived from the sandbox id, so it is
/// the same across the sandbox's restarts and differs between sandboxes.
fn machine_id(id: &crate::model::SandboxId) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(format!("burrow machine-id {}", id.as_str()))[..16])
}

/// Creates the sandbox's writable disk on its first start: a sparse file
/// with an empty ext4 (the agent makes `upper/` and `work/` on it).
fn ensure_data_disk(path: &Path) -> Result<()> {
    if crate::engine::image::ext4::is_ext4(path) {
        return Ok(());
    }
    format_data_disk(path, DATA_DISK_BYTES)
}

/// Formats a new, empty data disk of `bytes` at `path` (put in place by a
/// rename).
fn format_data_disk(path: &Path, bytes: u64) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io("creating the disk directory", Some(dir), e))?;
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp)
        .map_err(|e| Error::io("creating the writable disk", Some(&tmp), e))?;
    file.set_len(bytes)
        .map_err(|e| Error::io("sizing the writable disk", Some(&tmp), e))?;
    drop(file);
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "burrow-data", "-E"])
        .arg("root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1")
        .arg(&tmp)
        .output()
        .map_err(|e| Error::io("running mkfs.ext4 (package e2fsprogs)", None, e))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(
            "formatting the writable disk",
            Some(&tmp),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        ));
    }
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::io("publishing the writable disk", Some(path), e))
}

fn record_process(dir: &Path, pid: u32) {
    let Some(me) = ProcIdentity::of(pid) else {
        return;
    };
    let rec = Recorded {
        pid: me.pid,
        start: me.start,
    };
    if let Ok(text) = serde_json::to_vec(&rec) {
        let _ = std::fs::write(dir.join(RECORD_FILE), text);
    }
}

/// Kills a QEMU an earlier generation left running (its supervisor died and
/// the guest did not power off) and clears the runtime directory. Call it
/// also when a sandbox is removed after a supervisor crash.
pub async fn reclaim_stale(runtime_dir: &Path) -> Result<()> {
    let recorded = std::fs::read(runtime_dir.join(RECORD_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Recorded>(&b).ok());
    if let Some(rec) = recorded {
        let id = ProcIdentity {
            pid: rec.pid,
            start: rec.start,
        };
        if id.is_alive() {
            tracing::info!(pid = rec.pid, "killing the QEMU of an earlier generation");
            // SAFETY: kill on a pid whose identity (start time) we just
            // checked; at worst it races with that process's own exit.
            unsafe { libc::kill(rec.pid as libc::pid_t, libc::SIGKILL) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while id.is_alive() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    clear_runtime_dir(runtime_dir)
}

fn clear_runtime_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("clearing the runtime directory", Some(dir), e))
        }
        _ => Ok(()),
    }
}
