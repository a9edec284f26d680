//! Saving a running microVM to files and restoring it into a new QEMU: the
//! mechanism under boot templates and hibernation.
//!
//! The guest's RAM lives in a file (`memory-backend-file`). The VM that
//! makes a snapshot maps it shared, so the guest's writes reach the file;
//! [`Qmp::save_state`] then stops the CPUs and migrates the device state
//! into a state file with `x-ignore-shared`, which leaves the RAM out (the
//! state file is tens of KB). A restore starts QEMU with the same machine,
//! the same RAM file mapped private (copy-on-write: any number of guests
//! restore from one file and each pays only for the pages it writes), and
//! `-incoming defer`; [`Qmp::restore_state`] brings the state in and
//! continues the guest where it stopped. QEMU 7.2 (Debian 12's) has neither
//! a `file:` migration URI nor `mapped-ram`: the state goes through a
//! descriptor, handed to QEMU over QMP (`getfd`) to save, inherited to
//! restore; QEMU never spawns a process nor opens the file itself.
//!
//! Constraints the caller keeps: the memory size and the devices must be
//! the same on both sides; a mounted 9p share blocks the save; the guest's
//! clock is behind by the snapshot's age and its random state is the
//! snapshot's (a restored guest must be given fresh entropy and the time
//! before it runs anything of a user's).

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use super::guest::exit_of;
use super::qemu::{Accel, Machine, MemoryFile};
use super::qmp::{Qmp, StateFd};
use crate::engine::driver::GuestExit;
use crate::error::{Error, Result};

/// A guest of the real kernel and agent without disks or channel, with its
/// RAM in a file and a QMP monitor: what the snapshot mechanism is proven
/// and measured on.
#[derive(Debug)]
pub struct BareVm {
    child: tokio::process::Child,
    qmp: Qmp,
}

/// The machine of a [`BareVm`]: the same on the saving and the restoring
/// side.
#[derive(Debug, Clone, Copy)]
pub struct BareMachine<'a> {
    /// QEMU.
    pub qemu: &'a Path,
    /// The guest kernel.
    pub kernel: &'a Path,
    /// An initramfs with the agent as `/init` (see `initramfs::write`).
    pub initramfs: &'a Path,
    /// KVM or TCG.
    pub accel: Accel,
    /// Guest RAM, in MiB (exactly the RAM file's size).
    pub memory_mb: u64,
    /// The RAM file.
    pub ram: &'a Path,
    /// Where the serial console (and QEMU's own messages) go.
    pub console: &'a Path,
}

impl BareVm {
    /// Boots the guest with its RAM shared in `m.ram` (created by QEMU).
    pub async fn boot(m: &BareMachine<'_>) -> Result<BareVm> {
        Self::spawn(m, true, None).await
    }

    /// Starts a guest from `state` (saved by [`BareVm::save`] from a guest
    /// of the same machine) with a private copy of `m.ram`, and runs it.
    /// Returns it and how long the restore took, from the spawn of QEMU to
    /// the guest running again.
    pub async fn restore(m: &BareMachine<'_>, state: &Path) -> Result<(BareVm, Duration)> {
        let started = Instant::now();
        let state = StateFd::open(state)?;
        let mut vm = Self::spawn(m, false, Some(&state)).await?;
        if let Err(e) = vm.qmp.restore_state(&state).await {
            vm.kill().await;
            return Err(e);
        }
        Ok((vm, started.elapsed()))
    }

    /// Saves the guest's state to `state` (its RAM is the RAM file) and
    /// ends this QEMU: the guest lives on only in the files.
    pub async fn save(mut self, state: &Path) -> Result<()> {
        let saved = self.qmp.save_state(state, true).await;
        self.kill().await;
        saved
    }

    /// The QEMU process's id (None once it was reaped).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the guest to end (the agent's exit code, through QEMU's).
    pub async fn wait(mut self) -> Result<GuestExit> {
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| Error::io("waiting for QEMU", None, e))?;
        Ok(exit_of(status))
    }

    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// Starts QEMU: booting, or waiting for `incoming` (inherited).
    async fn spawn(
        m: &BareMachine<'_>,
        shared: bool,
        incoming: Option<&StateFd>,
    ) -> Result<BareVm> {
        let (qmp_host, qmp_guest) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| Error::io("creating the QMP channel", None, e))?;
        let console = std::fs::File::create(m.console)
            .map_err(|e| Error::io("creating the console log", Some(m.console), e))?;
        let machine = Machine {
            kernel: m.kernel,
            initramfs: m.initramfs,
            root_disk: None,
            data_disk: None,
            accel: m.accel,
            cpus: 1,
            memory_mb: m.memory_mb,
            network: false,
            shares: &[],
            agent_fd: None,
            net_fd: None,
            qmp_fd: Some(qmp_guest.as_raw_fd()),
            start_paused: false,
            tsc_khz: super::qemu::host_tsc_khz(),
            memory_file: Some(MemoryFile {
                path: m.ram,
                shared,
            }),
            incoming: incoming.is_some(),
            template: None,
            layer: false,
        };
        let mut child = super::spawn_qemu(
            m.qemu,
            &machine,
            [Some(qmp_guest.as_raw_fd()), incoming.map(StateFd::raw)]
                .into_iter()
                .flatten()
                .collect(),
            Some(console.into()),
            true,
        )
        .await?;
        drop(qmp_guest);
        let qmp = match async { Qmp::handshake(super::to_tokio(qmp_host)?).await }.await {
            Ok(q) => q,
            Err(e) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(e);
            }
        };
        Ok(BareVm { child, qmp })
    }
}
