//! Changing an existing sandbox's configuration without recreating it, and
//! the plan that says where each change lands.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DriverKind, SandboxConfig, SandboxInfo, Status};
use crate::error::Result;

/// Requested changes. `None` leaves a field alone; for limits and timeouts
/// `Some(None)` removes the setting.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Modify {
    /// CPU limit in cores.
    pub cpus: Option<Option<f64>>,
    /// Memory limit in MiB.
    pub memory_mb: Option<Option<u64>>,
    /// Environment variables to set.
    pub env_set: BTreeMap<String, String>,
    /// Environment variables to remove.
    pub env_unset: Vec<String>,
    /// Labels to set.
    pub labels_set: BTreeMap<String, String>,
    /// Labels to remove.
    pub labels_unset: Vec<String>,
    /// Idle timeout.
    pub idle_timeout: Option<Option<Duration>>,
    /// Maximum duration of each run.
    pub max_duration: Option<Option<Duration>>,
}

/// Where a change takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applies {
    /// Right away on the running sandbox (e.g. a cgroup limit, a timer).
    Live,
    /// To commands started from now on; running ones keep what they had.
    FutureExecs,
    /// At the next start (the sandbox is not running, or the change cannot
    /// be made live).
    NextStart,
    /// Metadata, visible at once (labels).
    Immediately,
}

/// One field's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    /// Field name (`cpus`, `memory_mb`, `env`, `labels`, `idle_timeout`,
    /// `max_duration`).
    pub field: String,
    /// Where it lands.
    pub applies: Applies,
    /// Why, when it lands later than one would hope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The result of a modify: what changed where, and the new snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModifyPlan {
    /// One entry per field that changed.
    pub changes: Vec<FieldChange>,
    /// The sandbox after the change.
    pub info: SandboxInfo,
}

impl Modify {
    /// Whether nothing is requested.
    pub fn is_empty(&self) -> bool {
        *self == Modify::default()
    }

    /// The configuration with these changes applied (validated).
    pub fn apply_to(&self, config: &SandboxConfig) -> Result<SandboxConfig> {
        let mut c = config.clone();
        if let Some(v) = self.cpus {
            c.cpus = v;
        }
        if let Some(v) = self.memory_mb {
            c.memory_mb = v;
        }
        for k in &self.env_unset {
            c.env.remove(k);
        }
        c.env.extend(self.env_set.clone());
        for k in &self.labels_unset {
            c.labels.remove(k);
        }
        c.labels.extend(self.labels_set.clone());
        if let Some(v) = self.idle_timeout {
            c.idle_timeout = v;
        }
        if let Some(v) = self.max_duration {
            c.max_duration = v;
        }
        c.validate()?;
        Ok(c)
    }

    /// Where each requested change lands for a sandbox in `status`.
    pub fn plan(&self, status: Status, driver: DriverKind) -> Vec<FieldChange> {
        let live = status.has_runtime();
        // A VM's vCPUs and memory are fixed for the life of its QEMU process.
        let resizable = driver == DriverKind::Container;
        let change = |field: &str, applies: Applies, note: Option<&str>| FieldChange {
            field: field.into(),
            applies,
            note: note.map(str::to_owned),
        };
        let later = |field: &str| change(field, Applies::NextStart, None);
        let mut out = Vec::new();
        for (field, value) in [
            ("cpus", self.cpus.map(|v| v.is_some())),
            ("memory_mb", self.memory_mb.map(|v| v.is_some())),
        ] {
            match value {
                None => {}
                Some(_) if !live => out.push(later(field)),
                Some(_) if !resizable => out.push(change(
                    field,
                    Applies::NextStart,
                    Some("a VM's CPUs and memory change at its next start"),
                )),
                Some(true) => out.push(change(field, Applies::Live, None)),
                Some(false) => out.push(change(
                    field,
                    Applies::NextStart,
                    Some("removing a limit takes effect at the next start"),
                )),
            }
        }
        if !self.env_set.is_empty() || !self.env_unset.is_empty() {
            if !live {
                out.push(later("env"));
            } else if self.env_unset.is_empty() {
                out.push(change("env", Applies::FutureExecs, None));
            } else {
                out.push(change(
                    "env",
                    Applies::NextStart,
                    Some("new values reach future execs now; removed variables disappear at the next start"),
                ));
            }
        }
        if !self.labels_set.is_empty() || !self.labels_unset.is_empty() {
            out.push(change("labels", Applies::Immediately, None));
        }
        for (field, set) in [
            ("idle_timeout", self.idle_timeout.is_some()),
            ("max_duration", self.max_duration.is_some()),
        ] {
            if set {
                out.push(if live {
                    change(field, Applies::Live, None)
                } else {
                    later(field)
                });
            }
        }
        out
    }
}
