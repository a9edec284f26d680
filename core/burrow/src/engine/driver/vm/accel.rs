//! Choosing between KVM and TCG.
//!
//! `/dev/kvm` existing proves nothing: on some hosts (nested, PVM) KVM
//! accepts the VM and then cannot run this guest, and QEMU hangs paused
//! instead of exiting. So KVM counts as usable only when the real guest
//! (our kernel, the agent as init) boots under it and the agent reports back
//! within a short deadline. The verdict is cached per host boot, kernel and
//! QEMU binary, so the probe runs once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::qemu::{Accel, Machine};
use crate::error::{Error, Result};

/// How long the probe guest gets to reach the agent under KVM (a good boot
/// takes well under a second).
const PROBE_DEADLINE: Duration = Duration::from_secs(4);

/// The decision and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccelChoice {
    /// The accelerator used.
    pub accel: Accel,
    /// Plain-language reason (shown by `burrow doctor` and in the log).
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    key: String,
    choice: AccelChoice,
}

/// The accelerator for guests of `kernel` run by `qemu`.
/// `BURROW_VM_ACCEL=kvm|tcg` forces one (no probe); `auto` (default) probes.
pub async fn choose(qemu: &Path, kernel: &Path, agent: &Path) -> Result<AccelChoice> {
    match std::env::var("BURROW_VM_ACCEL").as_deref() {
        Ok("kvm") => {
            return Ok(AccelChoice {
                accel: Accel::Kvm,
                reason: "forced by BURROW_VM_ACCEL=kvm".into(),
            })
        }
        Ok("tcg") => {
            return Ok(AccelChoice {
                accel: Accel::Tcg,
                reason: "forced by BURROW_VM_ACCEL=tcg".into(),
            })
        }
        Ok("auto") | Ok("") | Err(_) => {}
        Ok(other) => {
            return Err(Error::InvalidConfig {
                field: "BURROW_VM_ACCEL".into(),
                reason: format!("{other:?} is not kvm, tcg or auto"),
            })
        }
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Ok(AccelChoice {
            accel: Accel::Tcg,
            reason: if e.kind() == std::io::ErrorKind::PermissionDenied {
                format!("/dev/kvm is not usable ({e}); using TCG. For KVM (as root): usermod -aG kvm {}, then log in again", user_name())
            } else {
                format!("/dev/kvm is not usable ({e}); using TCG")
            },
        });
    }
    let key = cache_key(qemu, kernel);
    let path = cache_file();
    // Concurrent processes wait for one probe instead of each booting one.
    let _lock = crate::engine::locks::FileLock::acquire(&path.with_extension("lock"))
        .await
        .ok();
    if let Some(hit) = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Cached>(&b).ok())
        .filter(|c| c.key == key)
    {
        return Ok(hit.choice);
    }
    let choice = probe(qemu, kernel, agent).await?;
    tracing::info!(accel = choice.accel.as_str(), reason = %choice.reason, "VM acceleration probed");
    if let Ok(text) = serde_json::to_vec(&Cached {
        key,
        choice: choice.clone(),
    }) {
        write_cache(&path, &text);
    }
    Ok(choice)
}

/// Boots the guest under KVM with no disks: the agent, finding nothing to
/// boot, reports its failure through the exit port, which ends QEMU with an
/// odd status. Any odd status within the deadline proves the guest ran.
async fn probe(qemu: &Path, kernel: &Path, agent: &Path) -> Result<AccelChoice> {
    let initramfs = cache_dir().join(format!("kvm-probe-{}.cpio", std::process::id()));
    let agent_bytes =
        std::fs::read(agent).map_err(|e| Error::io("reading the agent", Some(agent), e))?;
    super::initramfs::write(&initramfs, &agent_bytes, b"{}")?;
    let result = probe_with(qemu, kernel, &initramfs).await;
    let _ = std::fs::remove_file(&initramfs);
    result
}

async fn probe_with(qemu: &Path, kernel: &Path, initramfs: &Path) -> Result<AccelChoice> {
    let (host_end, guest_end) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::io("creating the probe channel", None, e))?;
    let machine = Machine {
        kernel,
        initramfs,
        root_disk: None,
        data_disk: None,
        accel: Accel::Kvm,
        cpus: 1,
        memory_mb: 128,
        network: false,
        shares: &[],
        agent_fd: Some(std::os::fd::AsRawFd::as_raw_fd(&guest_end)),
        net_fd: None,
        qmp_fd: None,
        start_paused: false,
        tsc_khz: None,
        memory_file: None,
        incoming: false,
        template: None,
        layer: false,
    };
    let started = Instant::now();
    let mut child = super::spawn_qemu(
        qemu,
        &machine,
        vec![std::os::fd::AsRawFd::as_raw_fd(&guest_end)],
        None,
        true,
    )
    .await?;
    drop(guest_end);
    let outcome = tokio::time::timeout(PROBE_DEADLINE, child.wait()).await;
    drop(host_end);
    let choice = match outcome {
        Ok(Ok(status)) if status.code().is_some_and(|c| c % 2 == 1 && c > 1) => AccelChoice {
            accel: Accel::Kvm,
            reason: format!(
                "KVM probe boot reached the agent in {} ms",
                started.elapsed().as_millis()
            ),
        },
        Ok(Ok(status)) => AccelChoice {
            accel: Accel::Tcg,
            reason: format!("KVM probe boot failed ({status}); using TCG"),
        },
        Ok(Err(e)) => AccelChoice {
            accel: Accel::Tcg,
            reason: format!("KVM probe could not be awaited ({e}); using TCG"),
        },
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            AccelChoice {
                accel: Accel::Tcg,
                reason: format!(
                    "the guest did not boot under KVM within {} s (QEMU hung); using TCG",
                    PROBE_DEADLINE.as_secs()
                ),
            }
        }
    };
    Ok(choice)
}

/// Host boot, kernel and QEMU binary identities: any change re-probes.
fn cache_key(qemu: &Path, kernel: &Path) -> String {
    let mut h = Sha256::new();
    for p in [qemu, kernel] {
        h.update(p.as_os_str().as_encoded_bytes());
        if let Ok(m) = std::fs::metadata(p) {
            use std::os::unix::fs::MetadataExt;
            h.update(m.len().to_le_bytes());
            h.update(m.mtime().to_le_bytes());
            h.update(m.mtime_nsec().to_le_bytes());
            h.update(m.ino().to_le_bytes());
        }
    }
    for f in [
        "/proc/sys/kernel/random/boot_id",
        "/proc/sys/kernel/osrelease",
    ] {
        h.update(std::fs::read(f).unwrap_or_default());
    }
    hex::encode(&h.finalize()[..16])
}

/// Replaces a cache file atomically (readers never see half of it). Best
/// effort: a cache that cannot be written is measured again next time.
pub(super) fn write_cache(path: &Path, content: &[u8]) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, content).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// `$BURROW_CACHE_DIR`, else `$XDG_CACHE_HOME/burrow`, else
/// `$HOME/.cache/burrow`, else `/var/tmp/burrow`.
pub(super) fn cache_dir() -> PathBuf {
    let dir = std::env::var_os("BURROW_CACHE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(|d| PathBuf::from(d).join("burrow"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|d| PathBuf::from(d).join(".cache/burrow"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/tmp/burrow"));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn cache_file() -> PathBuf {
    cache_dir().join("vm-accel.json")
}

/// The current user's name, for the fix it is told.
fn user_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "$USER".into())
}
