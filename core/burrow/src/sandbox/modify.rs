//! The small values of the handles' calls: the `modify()` builder, a
//! ping's answer and a page of listed handles.

use std::sync::Arc;
use std::time::Duration;

use super::SandboxHandle;
use crate::backend::Backend;
use crate::duration::IntoDuration;
use crate::error::{Error, Result};
use crate::model::{IdleAction, Modify, ModifyPlan, SandboxId};

/// Collects changes to an existing sandbox:
/// `sb.modify().cpus(4).memory(4096).apply().await?`. Nothing changes until
/// [`ModifyBuilder::apply`]; the plan it returns says, per field, whether
/// the change applied live, applies to future execs, or at the next start.
#[derive(Debug)]
#[must_use = "nothing changes until apply() is called"]
pub struct ModifyBuilder<'a> {
    backend: &'a Arc<dyn Backend>,
    name: &'a str,
    id: &'a SandboxId,
    changes: Modify,
    /// The first field given a value that is not one (a negative duration).
    invalid: Option<String>,
}

impl<'a> ModifyBuilder<'a> {
    pub(super) fn new(backend: &'a Arc<dyn Backend>, name: &'a str, id: &'a SandboxId) -> Self {
        ModifyBuilder {
            backend,
            name,
            id,
            changes: Modify::default(),
            invalid: None,
        }
    }

    /// CPU limit in cores (`4`, `0.5`).
    pub fn cpus(mut self, cpus: impl Into<f64>) -> Self {
        self.changes.cpus = Some(Some(cpus.into()));
        self
    }

    /// Removes the CPU limit.
    pub fn no_cpu_limit(mut self) -> Self {
        self.changes.cpus = Some(None);
        self
    }

    /// Memory limit in MiB.
    pub fn memory(mut self, mib: u64) -> Self {
        self.changes.memory_mb = Some(Some(mib));
        self
    }

    /// Removes the memory limit.
    pub fn no_memory_limit(mut self) -> Self {
        self.changes.memory_mb = Some(None);
        self
    }

    /// Sets an environment variable for the processes started from now on.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.changes.env_set.insert(key.into(), value.into());
        self
    }

    /// Removes an environment variable.
    pub fn unset_env(mut self, key: impl Into<String>) -> Self {
        self.changes.env_unset.push(key.into());
        self
    }

    /// Sets a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.changes.labels_set.insert(key.into(), value.into());
        self
    }

    /// Removes a label.
    pub fn unset_label(mut self, key: impl Into<String>) -> Self {
        self.changes.labels_unset.push(key.into());
        self
    }

    /// Idle timeout: a [`Duration`] or a number of seconds.
    pub fn idle_timeout(mut self, d: impl IntoDuration) -> Self {
        self.changes.idle_timeout = Some(Some(self.duration("idle_timeout", d)));
        self
    }

    /// Removes the idle timeout (no idle reclaim).
    pub fn no_idle_timeout(mut self) -> Self {
        self.changes.idle_timeout = Some(None);
        self
    }

    /// What idle reclaim does.
    pub fn idle_action(mut self, action: IdleAction) -> Self {
        self.changes.idle_action = Some(action);
        self
    }

    /// Maximum duration of each run: a [`Duration`] or a number of seconds.
    pub fn max_duration(mut self, d: impl IntoDuration) -> Self {
        self.changes.max_duration = Some(Some(self.duration("max_duration", d)));
        self
    }

    /// Removes the maximum duration.
    pub fn no_max_duration(mut self) -> Self {
        self.changes.max_duration = Some(None);
        self
    }

    /// The network setting (see [`crate::SandboxBuilder::network`]): a
    /// running container's stack applies it at once and closes the
    /// connections it no longer allows.
    pub fn network(mut self, network: impl Into<crate::Network>) -> Self {
        self.changes.network = Some(network.into());
        self
    }

    /// The changes collected so far.
    pub fn changes(&self) -> &Modify {
        &self.changes
    }

    /// Applies the changes.
    pub async fn apply(self) -> Result<ModifyPlan> {
        if let Some(field) = self.invalid {
            return Err(not_a_duration(field));
        }
        self.backend.modify(self.name, self.id, &self.changes).await
    }

    fn duration(&mut self, field: &str, d: impl IntoDuration) -> Duration {
        invalid_duration(&mut self.invalid, field, d)
    }
}

/// `d` as a duration; the field of a value that is not one is remembered
/// in `invalid` (the first one wins) and reads as zero until the builder
/// refuses it with [`not_a_duration`].
pub(super) fn invalid_duration(
    invalid: &mut Option<String>,
    field: &str,
    d: impl IntoDuration,
) -> Duration {
    d.into_duration().unwrap_or_else(|| {
        invalid.get_or_insert_with(|| field.to_owned());
        Duration::ZERO
    })
}

/// The error of a builder given a `field` value that is not a duration
/// (`invalid_argument`, as every SDK answers the same value).
pub(super) fn not_a_duration(field: String) -> Error {
    Error::InvalidArgument {
        argument: field,
        reason: "not a duration: give a Duration or a number of seconds, zero or more".to_owned(),
    }
}

/// What [`super::Sandbox::ping`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ping {
    /// The round trip to the guest agent.
    pub latency: Duration,
}

/// Handles of listed sandboxes: `for handle in Sandbox::list().await?.sandboxes`.
/// Each handle carries the status it was listed with
/// ([`SandboxHandle::status_snapshot`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxPage {
    /// The handles, in the backend's order.
    pub sandboxes: Vec<SandboxHandle>,
}

impl IntoIterator for SandboxPage {
    type Item = SandboxHandle;
    type IntoIter = std::vec::IntoIter<SandboxHandle>;
    fn into_iter(self) -> Self::IntoIter {
        self.sandboxes.into_iter()
    }
}
