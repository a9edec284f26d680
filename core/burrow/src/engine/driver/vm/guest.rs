//! Control of one running microVM: the QEMU process and its QMP monitor.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use burrow_protocol::Metrics;

use super::hibernate::Target;
use super::qmp::Qmp;
use crate::engine::driver::net::NetStack;
use crate::engine::driver::{GuestExit, GuestProcess};
use crate::error::{Error, Result};

/// How long a killed QEMU may take to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// One QEMU process.
#[derive(Debug)]
pub(super) struct VmGuest {
    child: tokio::process::Child,
    qmp: Qmp,
    runtime_dir: PathBuf,
    memory_mb: u64,
    /// The writable disk (its size is the disk limit).
    data_disk: PathBuf,
    exit: Option<GuestExit>,
    /// Where it is saved when hibernated, or why it cannot be.
    hibernation: std::result::Result<Target, String>,
    /// The stack its network card's frames go through (None: no card).
    network: Option<NetStack>,
}

impl VmGuest {
    pub(super) fn new(
        child: tokio::process::Child,
        qmp: Qmp,
        runtime_dir: PathBuf,
        memory_mb: u64,
        data_disk: PathBuf,
        hibernation: std::result::Result<Target, String>,
        network: Option<NetStack>,
    ) -> Self {
        VmGuest {
            child,
            qmp,
            runtime_dir,
            memory_mb,
            data_disk,
            exit: None,
            hibernation,
            network,
        }
    }

    fn record(&mut self, status: std::process::ExitStatus) -> GuestExit {
        let exit = exit_of(status);
        self.exit = Some(exit);
        exit
    }
}

/// QEMU's exit status in the guest's terms: the agent ends the VM through
/// the `isa-debug-exit` port, which makes QEMU exit with `2c + 1` for the
/// agent's code `c`. Status 0 is a reset nobody announced (a guest kernel
/// panic, which includes the agent dying).
pub(super) fn exit_of(status: std::process::ExitStatus) -> GuestExit {
    match (status.code(), status.signal()) {
        (Some(c), _) if c % 2 == 1 => GuestExit {
            code: Some((c - 1) / 2),
            signal: None,
            detail: None,
        },
        (Some(0), _) => GuestExit {
            code: None,
            signal: None,
            detail: Some(
                "the guest kernel reset without the agent's word (panic or crash of init)",
            ),
        },
        (Some(_), _) => GuestExit {
            code: None,
            signal: None,
            detail: Some("QEMU failed (see the guest log)"),
        },
        (None, signal) => GuestExit {
            code: None,
            signal,
            detail: None,
        },
    }
}

#[async_trait]
impl GuestProcess for VmGuest {
    async fn wait(&mut self) -> Result<GuestExit> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| Error::io("waiting for QEMU", None, e))?;
        Ok(self.record(status))
    }

    async fn kill(&mut self) -> Result<()> {
        if self.exit.is_some() {
            return Ok(());
        }
        let _ = self.child.start_kill();
        match tokio::time::timeout(KILL_WAIT, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.record(status);
                Ok(())
            }
            Ok(Err(e)) => Err(Error::io("waiting for QEMU", None, e)),
            Err(_) => Err(super::qemu::unavailable(
                "QEMU did not exit after SIGKILL".into(),
            )),
        }
    }

    async fn pause(&mut self) -> Result<()> {
        self.qmp.execute("stop").await.map(drop)
    }

    async fn resume(&mut self) -> Result<()> {
        self.qmp.execute("cont").await.map(drop)
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
        super::clear_runtime_dir(&self.runtime_dir)
    }

    async fn update(&mut self, cpus: Option<f64>, memory_mb: Option<u64>) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        if cpus.is_some() || memory_mb.is_some_and(|m| m != self.memory_mb) {
            notes.push(
                "a VM's CPUs and memory are fixed while it runs: the new values apply at its next start"
                    .to_owned(),
            );
        }
        Ok(notes)
    }

    fn layer_from_agent(&self) -> bool {
        true
    }

    async fn save_copy(&mut self, dir: &std::path::Path) -> Result<()> {
        let target = self
            .hibernation
            .clone()
            .map_err(|why| Error::unsupported(format!("saving this running VM ({why})")))?;
        let qmp = &mut self.qmp;
        // Every RAM page goes into the state (see `hibernate`).
        let saved = super::hibernate::save_copy(&target, dir, |state| async move {
            qmp.save_state(&state, false).await
        })
        .await;
        // Stopped by the save (also when it failed): the guest runs on.
        let resumed = self.qmp.execute("cont").await.map(drop);
        saved.and(resumed)
    }

    fn hibernation_blocker(&self) -> Option<String> {
        self.hibernation.as_ref().err().cloned()
    }

    async fn hibernate(&mut self) -> Result<()> {
        let target = self.hibernation.clone().map_err(super::qemu::unavailable)?;
        let qmp = &mut self.qmp;
        // Every RAM page goes into the state: the guest's RAM is a private
        // copy of the template's, which a restore maps again.
        super::hibernate::save(&target, |state| async move {
            qmp.save_state(&state, false).await
        })
        .await?;
        self.kill().await
    }

    fn set_network(&mut self, network: &burrow_net::Network) -> Option<String> {
        NetStack::set_on(self.network.as_ref(), network)
    }

    async fn metrics(&mut self) -> Result<Metrics> {
        let pid = self
            .child
            .id()
            .ok_or_else(|| super::qemu::unavailable("QEMU has exited".into()))?;
        let mut m = process_metrics(pid);
        m.memory_limit_bytes = Some(self.memory_mb << 20);
        crate::engine::driver::disk_use(&self.data_disk, &mut m);
        m.network = self.network.as_ref().map(NetStack::counters);
        if let Ok(status) = self.qmp.status().await {
            if status != "running" && status != "paused" {
                tracing::warn!(status, "the VM is in an unexpected run state");
            }
        }
        Ok(m)
    }
}

/// CPU time, resident memory and block I/O of the QEMU process (the guest's
/// whole cost on this host).
fn process_metrics(pid: u32) -> Metrics {
    let mut m = Metrics::default();
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            // Fields 14 (utime) and 15 (stime) are at 11 and 12 after ')'.
            let ticks: u64 = [11usize, 12]
                .iter()
                .filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok()))
                .sum();
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
            m.cpu_usage_ns = Some(ticks * (1_000_000_000 / hz));
        }
    }
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        m.memory_bytes = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib << 10);
    }
    if let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        m.io_read_bytes = field("read_bytes:");
        m.io_write_bytes = field("write_bytes:");
    }
    m
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_map_to_guest_terms() {
        let st = std::process::ExitStatus::from_raw;
        // Agent code 0 -> QEMU 1; agent code 3 -> QEMU 7.
        assert_eq!(exit_of(st(1 << 8)).code, Some(0));
        assert_eq!(exit_of(st(7 << 8)).code, Some(3));
        let reset = exit_of(st(0));
        assert_eq!((reset.code, reset.signal), (None, None));
        assert!(reset.detail.is_some());
        assert_eq!(exit_of(st(2 << 8)).code, None);
        assert_eq!(exit_of(st(libc::SIGKILL)).signal, Some(libc::SIGKILL));
    }

    #[test]
    fn own_process_metrics_are_read() {
        let m = process_metrics(std::process::id());
        assert!(m.memory_bytes.unwrap() > 0);
        assert!(m.cpu_usage_ns.is_some());
    }
}
