//! The quota rules and the lock a start holds while it checks them.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use burrow::{Error, Result, SandboxInfo, Status};
use tokio::sync::{Mutex, MutexGuard};

/// Limits on the running sandboxes of one namespace (a sandbox is running
/// while it has a runtime: Starting, Running, Draining or Paused).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quota {
    /// At most this many running sandboxes.
    pub max_running: Option<usize>,
    /// At most this many running sandboxes per value of this label
    /// (`("team", 2)`: two running for `team=a`, two for `team=b`, ...;
    /// sandboxes without the label are not limited by it).
    pub max_running_per_label: Option<(String, usize)>,
}

impl Quota {
    /// No limits.
    pub fn new() -> Quota {
        Quota::default()
    }

    /// At most `n` running sandboxes.
    #[must_use]
    pub fn max_running(mut self, n: usize) -> Quota {
        self.max_running = Some(n);
        self
    }

    /// At most `n` running sandboxes per value of the label `key`.
    #[must_use]
    pub fn max_running_per_label(mut self, key: impl Into<String>, n: usize) -> Quota {
        self.max_running_per_label = Some((key.into(), n));
        self
    }

    /// Whether `starting` may start while `running` run (`starting` itself
    /// is not among them): the error says which limit is reached.
    pub(crate) fn admits(&self, starting: &SandboxInfo, running: &[SandboxInfo]) -> Result<()> {
        let others: Vec<&SandboxInfo> = running.iter().filter(|i| i.id != starting.id).collect();
        if let Some(max) = self.max_running {
            if others.len() >= max {
                return Err(exceeded(format!(
                    "{} of at most {max} sandboxes are running; {:?} cannot start",
                    others.len(),
                    starting.name
                )));
            }
        }
        if let Some((key, max)) = &self.max_running_per_label {
            if let Some(value) = starting.config.labels.get(key) {
                let same = others
                    .iter()
                    .filter(|i| i.config.labels.get(key) == Some(value))
                    .count();
                if same >= *max {
                    return Err(exceeded(format!(
                        "{same} of at most {max} sandboxes with label {key}={value} are running; {:?} cannot start",
                        starting.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The statuses that count against the quota.
pub(crate) fn running_statuses() -> impl Iterator<Item = Status> {
    Status::ALL.into_iter().filter(|s| s.has_runtime())
}

/// A start refused by the quota: the runtime capacity this backend grants
/// is used up (`runtime_unavailable`; nothing was changed, the sandbox is
/// as it was).
fn exceeded(reason: String) -> Error {
    Error::Runtime {
        runtime: "quota".into(),
        reason,
    }
}

/// Serialises the starts of every backend on one burrow home, in this
/// process and in others: an in-process mutex (so waiting tasks do not
/// each hold a blocking thread) and an exclusive `flock` on a file of the
/// home (so other processes wait too).
#[derive(Debug)]
pub(crate) struct StartLock {
    path: PathBuf,
    local: Mutex<()>,
}

/// Held while a start is checked and made; dropping it releases both locks
/// (closing the file releases the `flock`).
#[derive(Debug)]
pub(crate) struct StartGuard<'a> {
    _file: File,
    _local: MutexGuard<'a, ()>,
}

impl StartLock {
    pub(crate) fn new(path: PathBuf) -> StartLock {
        StartLock {
            path,
            local: Mutex::new(()),
        }
    }

    pub(crate) async fn acquire(&self) -> Result<StartGuard<'_>> {
        let local = self.local.lock().await;
        let path = self.path.clone();
        let io = |source| Error::Io {
            context: "taking the quota lock".into(),
            path: Some(self.path.clone()),
            source,
        };
        let file = tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|e| io(std::io::Error::other(e)))?
        .map_err(io)?;
        Ok(StartGuard {
            _file: file,
            _local: local,
        })
    }
}
