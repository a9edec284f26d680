//! Changing an existing sandbox's configuration without recreating it, and
//! the plan that says where each change lands.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DriverKind, IdleAction, Network, SandboxConfig, SandboxInfo, Status};
use crate::error::Result;

/// Requested changes. `None` leaves a field alone; for limits and timeouts
/// `Some(None)` removes the setting.
///
/// As JSON (the `burrow serve` API): an absent key leaves a field alone,
/// `null` removes the setting; durations are milliseconds
/// (`{"memory_mb": 512, "idle_timeout_ms": null}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "ModifyWire", into = "ModifyWire")]
#[non_exhaustive]
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
    /// What idle reclaim does.
    pub idle_action: Option<IdleAction>,
    /// Maximum duration of each run.
    pub max_duration: Option<Option<Duration>>,
    /// The network setting (a running container's stack applies it at
    /// once, closing connections it no longer allows).
    pub network: Option<Network>,
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
    /// `idle_action`, `max_duration`, `network`).
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
        if let Some(v) = self.idle_action {
            c.idle_action = v;
        }
        if let Some(v) = self.max_duration {
            c.max_duration = v;
        }
        if let Some(v) = &self.network {
            c.network = v.clone();
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
            ("idle_action", self.idle_action.is_some()),
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
        if self.network.is_some() {
            out.push(if live {
                change("network", Applies::Live, None)
            } else {
                later("network")
            });
        }
        out
    }
}

/// JSON form of [`Modify`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModifyWire {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "finite_cpus",
        deserialize_with = "double_option::deserialize"
    )]
    cpus: Option<Option<f64>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    memory_mb: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env_set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    env_unset: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels_set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    labels_unset: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    idle_timeout_ms: Option<Option<u64>>,
    /// Absent leaves it alone; there is nothing to remove, so `null` is
    /// refused (the OpenAPI document says a string).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "value_only"
    )]
    idle_action: Option<IdleAction>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    max_duration_ms: Option<Option<u64>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "value_only"
    )]
    network: Option<Network>,
}

fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<Modify> for ModifyWire {
    fn from(m: Modify) -> Self {
        ModifyWire {
            cpus: m.cpus,
            memory_mb: m.memory_mb,
            env_set: m.env_set,
            env_unset: m.env_unset,
            labels_set: m.labels_set,
            labels_unset: m.labels_unset,
            idle_timeout_ms: m.idle_timeout.map(|o| o.map(to_ms)),
            idle_action: m.idle_action,
            max_duration_ms: m.max_duration.map(|o| o.map(to_ms)),
            network: m.network,
        }
    }
}

impl From<ModifyWire> for Modify {
    fn from(w: ModifyWire) -> Self {
        Modify {
            cpus: w.cpus,
            memory_mb: w.memory_mb,
            env_set: w.env_set,
            env_unset: w.env_unset,
            labels_set: w.labels_set,
            labels_unset: w.labels_unset,
            idle_timeout: w.idle_timeout_ms.map(|o| o.map(Duration::from_millis)),
            idle_action: w.idle_action,
            max_duration: w.max_duration_ms.map(|o| o.map(Duration::from_millis)),
            network: w.network,
        }
    }
}

/// A requested CPU limit: a finite number or `null` (removal), never a
/// NaN written as `null` (see `SandboxConfig::check_cpus`).
fn finite_cpus<S: serde::Serializer>(v: &Option<Option<f64>>, s: S) -> Result<S::Ok, S::Error> {
    SandboxConfig::check_cpus(v.flatten()).map_err(serde::ser::Error::custom)?;
    double_option::serialize(v, s)
}

/// A present key's value, never `null` (absence is `None`, by `default`).
fn value_only<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `Option<Option<T>>` as JSON: absent key, `null`, or a value.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    #[test]
    fn modify_json_keeps_absent_null_and_values_apart() {
        let m = Modify {
            memory_mb: Some(Some(512)),
            idle_timeout: Some(None),
            idle_action: Some(IdleAction::Hibernate),
            labels_set: [("a".to_string(), "b".to_string())].into(),
            ..Modify::default()
        };
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"memory_mb": 512, "idle_timeout_ms": null, "idle_action": "hibernate", "labels_set": {"a": "b"}})
        );
        let back: Modify = serde_json::from_value(json).unwrap();
        assert_eq!(back, m);
        assert!(serde_json::from_str::<Modify>(r#"{"colour": 1}"#).is_err());
        assert!(serde_json::from_str::<Modify>(r#"{"idle_action": null}"#).is_err());
        assert!(serde_json::from_str::<Modify>(r#"{"idle_action": "nap"}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Modify>(r#"{"idle_action": "stop"}"#)
                .unwrap()
                .idle_action,
            Some(IdleAction::Stop)
        );
    }

    /// Found by the `config` fuzz target: a NaN CPU limit was written as
    /// `null`, the removal of the limit, instead of being refused.
    #[test]
    fn a_nan_cpu_limit_is_not_written_as_its_removal() {
        let m = Modify {
            cpus: Some(Some(f64::NAN)),
            ..Modify::default()
        };
        assert!(serde_json::to_vec(&m).is_err());
        let removal = Modify {
            cpus: Some(None),
            ..Modify::default()
        };
        assert_eq!(
            serde_json::to_value(&removal).unwrap(),
            serde_json::json!({"cpus": null})
        );
    }
}
