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
//!
//! The files: `launch.rs` (one launch), `from_template.rs` (starts from
//! boot templates: warming, building, restoring), `template.rs` (the
//! templates and their keys), `snapshot.rs` and `hibernate.rs` (saved
//! guests), `disks.rs` (the writable disk), `records.rs` (what a run leaves
//! in its runtime directory), `qemu.rs` and `qmp.rs` (the machine and its
//! monitor), `accel.rs` (KVM or TCG), `initramfs.rs`, `guest.rs` (a running
//! guest's control).

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
mod disks;
mod from_template;
mod guest;
mod hibernate;
mod initramfs;
mod launch;
mod layer_boot;
mod qemu;
mod qmp;
mod records;
mod snapshot;
mod template;

pub use accel::AccelChoice;
pub use hibernate::{discard as discard_hibernation, is_hibernated, seed_from_copy};
pub use initramfs::write as write_initramfs;
pub(crate) use layer_boot::receive_layer;
pub use layer_boot::write_stopped_layer;
pub use qemu::{bare_boot_args, locate_kernel, locate_qemu, Accel};
pub use snapshot::{BareMachine, BareVm};
pub use template::{
    prune as prune_templates, templates_dir, FileId, TemplateInputs, TEMPLATES_DIR,
};

use guest::VmGuest;
use qemu::{Machine, Share};
use qmp::StateFd;

use disks::*;
use from_template::*;
pub use from_template::{warm_template, WarmTemplate, TEMPLATES_ENV};
use launch::*;
use records::*;
pub use records::{reclaim_stale, start_record, StartKind, StartRecord, START_RECORD};

/// Memory of a VM without a configured limit, in MiB.
pub const DEFAULT_MEMORY_MB: u64 = 512;
/// The most vCPUs a VM can have (the model's limit, checked at create).
const MAX_CPUS: u32 = crate::model::DriverKind::VM_MAX_CPUS;

/// Runs guests as QEMU microVMs.
#[derive(Debug, Clone, Default)]
pub struct VmDriver;

#[async_trait]
impl Driver for VmDriver {
    fn enforces_network_policy(&self) -> bool {
        true
    }

    /// Of a running VM, through its agent (its writable layer is on its
    /// own disk).
    fn snapshots(&self) -> bool {
        true
    }

    fn confinement(&self) -> Vec<(&'static str, String)> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        vec![
            (
                "boundary",
                "the guest's own kernel in a QEMU microVM".to_owned(),
            ),
            (
                "qemu seccomp",
                format!(
                    "-sandbox {} (no new process, no change of ids)",
                    qemu::SANDBOX
                ),
            ),
            (
                "qemu user",
                if root {
                    "root (not yet dropped: issue 57)".to_owned()
                } else {
                    "this user".to_owned()
                },
            ),
            (
                "shares",
                if root {
                    "9p, passthrough (the guest's owners are the host's)".to_owned()
                } else {
                    "9p, none (every file is this user's)".to_owned()
                },
            ),
            ("limits", "the guest's memory and vCPUs".to_owned()),
            (
                "disk",
                "the guest's data disk, a sparse file of its disk_mb: ENOSPC at the limit"
                    .to_owned(),
            ),
        ]
    }

    fn takes_default_limits(&self) -> bool {
        // A guest always has its memory and vCPUs (DEFAULT_MEMORY_MB, one),
        // which templates and saved guests are made for.
        false
    }

    fn enforceable(&self) -> super::Enforceable {
        // QEMU holds the guest to its memory and CPUs; the guest's process
        // count is the guest kernel's own.
        super::Enforceable {
            pids: false,
            why: "a VM's processes are its own kernel's, not counted by the host".into(),
            ..super::Enforceable::all()
        }
    }

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
