//! The arguments of steps, read as a Rust caller of the API builds them:
//! create options into a [`SandboxConfig`], durations, statuses, network
//! policies, secrets, and the plain JSON shapes every op takes.

use std::collections::BTreeMap;
use std::time::Duration;

use burrow::{IdleAction, Network, NetworkPolicy, SandboxConfig, Status};
use serde_json::{Map, Value};

use crate::ops::{kit, E};

/// The configuration of a create's `options` (the kit's image already
/// added), as a Rust caller builds it; `detached` and `replace` are the
/// builder's, not the configuration's.
pub(crate) fn config(opts: &Map<String, Value>) -> Result<SandboxConfig, E> {
    let mut config = SandboxConfig::new(opt_str(opts, "image")?.unwrap_or_default());
    config.cpus = opts.get("cpus").map(|v| as_f64("cpus", v)).transpose()?;
    config.memory_mb = opts
        .get("memory_mb")
        .map(|v| as_u64("memory_mb", v))
        .transpose()?;
    config.pids_limit = opts
        .get("pids_limit")
        .map(|v| as_u64("pids_limit", v))
        .transpose()?;
    config.disk_mb = opts
        .get("disk_mb")
        .map(|v| as_u64("disk_mb", v))
        .transpose()?;
    config.best_effort_limits = opt_bool(opts, "best_effort_limits")?.unwrap_or(false);
    config.default_limits = opt_bool(opts, "default_limits")?.unwrap_or(true);
    if let Some(v) = opts.get("seccomp_allow") {
        config.seccomp_allow = str_list("seccomp_allow", v)?;
    }
    config.env = opt_map(opts, "env")?;
    config.workdir = opt_str(opts, "workdir")?;
    config.labels = opt_map(opts, "labels")?;
    if let Some(v) = opts.get("network").filter(|v| !v.is_null()) {
        config.network = network(v)?;
    }
    if let Some(v) = opts.get("ports") {
        // As a Rust caller parses them: a bad one is the step's
        // `invalid_config`.
        config.ports = str_list("ports", v)?
            .iter()
            .map(|p| {
                p.parse::<burrow::PortMapping>()
                    .map_err(burrow::Error::from)
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(v) = opts.get("secrets") {
        config.secrets = secrets(v)?;
    }
    config.idle_timeout = opts
        .get("idle_timeout")
        .map(|v| seconds("idle_timeout", v))
        .transpose()?;
    if let Some(v) = opts.get("idle_action") {
        config.idle_action = idle_action(v)?;
    }
    config.max_duration = opts
        .get("max_duration")
        .map(|v| seconds("max_duration", v))
        .transpose()?;
    if let Some(v) = opts.get("startup_timeout") {
        config.startup_timeout = seconds("startup_timeout", v)?;
    }
    config.demand_start = opt_bool(opts, "demand_start")?;
    // Cases never name a driver: the backend's default, as every
    // interpreter does.
    config.driver = None;
    Ok(config)
}

/// The program and arguments: a list, or a string run through `sh -c`.
pub(crate) fn argv(v: &Value) -> Result<Vec<String>, E> {
    match v {
        Value::String(s) => Ok(vec!["sh".into(), "-c".into(), s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|a| match a {
                Value::String(s) => Ok(s.clone()),
                other => kit(format!("argv items must be strings, not {other}")),
            })
            .collect(),
        other => kit(format!("argv must be a list or a string, not {other}")),
    }
}

/// `data` cut into `chunks` pieces of `ceil(len / chunks)` bytes (the
/// last one shorter; none for empty data), as every interpreter cuts an
/// `fs_write_stream`'s data.
pub(crate) fn split_chunks(data: &[u8], chunks: u64) -> std::slice::Chunks<'_, u8> {
    let chunks = usize::try_from(chunks).unwrap_or(usize::MAX).max(1);
    data.chunks(data.len().div_ceil(chunks).max(1))
}

pub(crate) fn statuses(v: &Value) -> Result<Vec<Status>, E> {
    let Value::Array(items) = v else {
        return kit(format!("statuses must be a list, not {v}"));
    };
    items
        .iter()
        .map(|s| match s.as_str().map(str::parse::<Status>) {
            Some(Ok(st)) => Ok(st),
            _ => kit(format!("unknown status {s}")),
        })
        .collect()
}

pub(crate) fn str_map(key: &str, v: &Value) -> Result<BTreeMap<String, String>, E> {
    let Value::Object(obj) = v else {
        return kit(format!("{key} must be an object, not {v}"));
    };
    obj.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => kit(format!("{key}.{k} must be a string, not {other}")),
        })
        .collect()
}

/// The `secrets` option: a list of `{"name", "value", "hosts"}`, each
/// with optional `"headers"`.
pub(crate) fn secrets(v: &Value) -> Result<Vec<burrow::Secret>, E> {
    let Value::Array(items) = v else {
        return kit(format!("secrets must be a list, not {v}"));
    };
    items
        .iter()
        .map(|s| {
            let (Some(name), Some(value), Some(hosts)) = (
                s.get("name").and_then(Value::as_str),
                s.get("value").and_then(Value::as_str),
                s.get("hosts"),
            ) else {
                return kit(format!("a secret is {{name, value, hosts}}, not {s}"));
            };
            let headers = match s.get("headers") {
                Some(h) => str_list("headers", h)?,
                None => Vec::new(),
            };
            Ok(burrow::Secret::new(name, value, str_list("hosts", hosts)?).in_headers(headers))
        })
        .collect()
}

pub(crate) fn str_list(key: &str, v: &Value) -> Result<Vec<String>, E> {
    let Value::Array(items) = v else {
        return kit(format!("{key} must be a list, not {v}"));
    };
    items
        .iter()
        .map(|s| match s {
            Value::String(s) => Ok(s.clone()),
            other => kit(format!("{key} items must be strings, not {other}")),
        })
        .collect()
}

/// `null` (`None`: clear the setting), or a value read by `read`.
pub(crate) fn nullable<T>(
    v: &Value,
    read: impl FnOnce(&Value) -> Result<T, E>,
) -> Result<Option<T>, E> {
    if v.is_null() {
        Ok(None)
    } else {
        read(v).map(Some)
    }
}

/// A `network` as a Rust caller builds it: `true`/`false`, `"all"`/
/// `"none"`, or a policy made with `NetworkPolicy::allow(..).and_deny(..)`,
/// whose rule errors are the step's (`invalid_config`).
pub(crate) fn network(v: &Value) -> Result<Network, E> {
    let rules = |key: &str, p: &Map<String, Value>| -> Result<Vec<String>, E> {
        p.get(key).map_or(Ok(Vec::new()), |v| str_list(key, v))
    };
    match v {
        Value::Bool(on) => Ok((*on).into()),
        Value::String(w) if w == "all" => Ok(Network::All),
        Value::String(w) if w == "none" => Ok(Network::None),
        Value::Object(p) => {
            if let Some(k) = p.keys().find(|k| *k != "allow" && *k != "deny") {
                return kit(format!("unknown network policy key {k:?}"));
            }
            let (allow, deny) = (rules("allow", p)?, rules("deny", p)?);
            let policy = NetworkPolicy::allow(allow)
                .and_then(|pol| pol.and_deny(deny))
                .map_err(|e| E::from(burrow::Error::from(e)))?;
            Ok(Network::Policy(policy))
        }
        other => kit(format!(
            "network must be a boolean, \"all\", \"none\" or a policy, not {other}"
        )),
    }
}

/// An idle action by its name (`stop`, `hibernate`).
pub(crate) fn idle_action(v: &Value) -> Result<IdleAction, E> {
    match v.as_str().and_then(IdleAction::parse) {
        Some(a) => Ok(a),
        None => kit(format!(
            "idle_action must be \"stop\" or \"hibernate\", not {v}"
        )),
    }
}

pub(crate) fn opt_map(opts: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, E> {
    opts.get(key)
        .map(|v| str_map(key, v))
        .transpose()
        .map(Option::unwrap_or_default)
}

pub(crate) fn opt_str(opts: &Map<String, Value>, key: &str) -> Result<Option<String>, E> {
    match opts.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => kit(format!("{key} must be a string, not {other}")),
    }
}

pub(crate) fn opt_bool(opts: &Map<String, Value>, key: &str) -> Result<Option<bool>, E> {
    match opts.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => kit(format!("{key} must be a boolean, not {other}")),
    }
}

pub(crate) fn as_f64(key: &str, v: &Value) -> Result<f64, E> {
    v.as_f64()
        .map_or_else(|| kit(format!("{key} must be a number, not {v}")), Ok)
}

pub(crate) fn as_u64(key: &str, v: &Value) -> Result<u64, E> {
    v.as_u64().map_or_else(
        || kit(format!("{key} must be a non-negative integer, not {v}")),
        Ok,
    )
}

/// A duration in seconds (fractions allowed).
pub(crate) fn seconds(key: &str, v: &Value) -> Result<Duration, E> {
    match v.as_f64() {
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => kit(format!(
            "{key} must be a non-negative number of seconds, not {v}"
        )),
    }
}
