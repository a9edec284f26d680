//! What a run leaves in its runtime directory: the QEMU process it
//! started (so a later start or a remove can reclaim it) and how the start
//! went (fresh boot, template, hibernation).

use super::*;

/// The QEMU process of a generation, recorded so that a later start or a
/// removal can kill it if its supervisor died.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Recorded {
    pid: u32,
    start: u64,
}

pub(super) const RECORD_FILE: &str = "qemu.json";

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
    pub(super) fn as_str(self) -> &'static str {
        match self {
            StartKind::Cold => "cold",
            StartKind::Template => "template",
            StartKind::Hibernation => "hibernation",
        }
    }
}

/// The file of a [`StartRecord`] in a runtime directory.
pub const START_RECORD: &str = "start.json";

pub(super) fn write_start_record(dir: &Path, record: &StartRecord) {
    if let Ok(text) = serde_json::to_vec(record) {
        let _ = std::fs::write(dir.join(START_RECORD), text);
    }
}

/// How the VM of the generation running in `runtime_dir` was started.
pub fn start_record(runtime_dir: &Path) -> Option<StartRecord> {
    let bytes = std::fs::read(runtime_dir.join(START_RECORD)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

pub(super) fn record_process(dir: &Path, pid: u32) {
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

pub(super) fn clear_runtime_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("clearing the runtime directory", Some(dir), e))
        }
        _ => Ok(()),
    }
}
