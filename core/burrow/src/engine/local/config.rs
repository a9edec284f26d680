//! The local backend's host defaults: what a sandbox that does not choose
//! gets on this host. They belong to the backend that runs the sandbox, not
//! to the model, so a remote client and its server never disagree: the
//! server's backend decides.

use crate::error::{Error, Result};
use crate::model::{DriverKind, OciRuntime};

/// Environment variable with the host's default driver (`container` or `vm`).
pub const ENV_DRIVER: &str = "BURROW_DRIVER";
/// Environment variable with the host's default OCI runtime of the
/// container driver (`runc`, `crun` or `runsc`).
pub const ENV_RUNTIME: &str = "BURROW_RUNTIME";
/// Environment variable that turns the host's default demand start off
/// (`0` or `false`).
pub const ENV_DEMAND_START: &str = "BURROW_DEMAND_START";
/// Environment variable with the memory a container sandbox that names
/// none is held to: a size (`2048`, `2G`) or `none`.
pub const ENV_DEFAULT_MEMORY: &str = "BURROW_DEFAULT_MEMORY";
/// Environment variable with the CPUs a container sandbox that names none
/// is held to: a count (`2`, `0.5`) or `none`.
pub const ENV_DEFAULT_CPUS: &str = "BURROW_DEFAULT_CPUS";
/// Environment variable with the processes a container sandbox that names
/// none may have: a count or `none`.
pub const ENV_DEFAULT_PIDS: &str = "BURROW_DEFAULT_PIDS";
/// Environment variable with the disk a sandbox that names none may fill:
/// a size (`8192`, `8G`) or `none`.
pub const ENV_DEFAULT_DISK: &str = "BURROW_DEFAULT_DISK";

/// The limits a sandbox that names none is given ([`LocalConfig::
/// default_limits`]; memory, CPUs and processes a container sandbox's, the
/// disk every sandbox's); `None`: that limit stays unset.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct DefaultLimits {
    /// Memory, MiB. Built in: 2048.
    pub memory_mb: Option<u64>,
    /// CPUs. Built in: 2.
    pub cpus: Option<f64>,
    /// Processes. Built in: 4096.
    pub pids_limit: Option<u64>,
    /// Disk of the writable layer, MiB. Built in: 8192.
    pub disk_mb: Option<u64>,
}

impl DefaultLimits {
    /// The built-in defaults: 2 GiB, 2 CPUs, 4096 processes, 8 GiB of
    /// disk.
    pub const BUILT_IN: DefaultLimits = DefaultLimits {
        memory_mb: Some(2048),
        cpus: Some(2.0),
        pids_limit: Some(4096),
        disk_mb: Some(8192),
    };

    /// No defaults: what a sandbox leaves out stays unlimited.
    pub const NONE: DefaultLimits = DefaultLimits {
        memory_mb: None,
        cpus: None,
        pids_limit: None,
        disk_mb: None,
    };
}

/// Host defaults of a [`LocalBackend`](crate::LocalBackend), applied when a
/// sandbox is created and recorded in its configuration.
///
/// [`LocalConfig::from_env`] is the one place that reads them from the
/// environment; [`LocalConfig::new`] gives the built-in defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LocalConfig {
    /// Driver of sandboxes whose configuration names none. Built in:
    /// container.
    pub default_driver: DriverKind,
    /// OCI runtime of container sandboxes whose configuration names none.
    /// Built in: runc.
    pub default_runtime: OciRuntime,
    /// Whether a sandbox with an idle timeout and no `demand_start` setting
    /// starts again on demand after an idle reclaim. Built in: on.
    pub demand_start_default: bool,
    /// The limits a container sandbox gets for those it leaves out, where
    /// this host can enforce them, recorded in its configuration at create
    /// (a microVM is always held to its memory and vCPUs: 512 MiB and one
    /// by default). A sandbox with `default_limits: false` gets none.
    /// Built in: [`DefaultLimits::BUILT_IN`].
    pub default_limits: DefaultLimits,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            default_driver: DriverKind::Container,
            default_runtime: OciRuntime::Runc,
            demand_start_default: true,
            default_limits: DefaultLimits::BUILT_IN,
        }
    }
}

impl LocalConfig {
    /// The built-in defaults (container driver, runc, demand start on).
    pub fn new() -> Self {
        Self::default()
    }

    /// The host defaults from the environment: `$BURROW_DRIVER` (`container`
    /// or `vm`; unset or empty: container), `$BURROW_RUNTIME` (`runc`, `crun`
    /// or `runsc`; unset or empty: runc) and `$BURROW_DEMAND_START` (`0` or
    /// `false` turn demand start off). An unknown driver or runtime is
    /// [`Error::InvalidConfig`] for its variable, never a silent fallback.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`LocalConfig::from_env`], reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut c = Self::new();
        if let Some(v) = get(ENV_DRIVER).filter(|v| !v.is_empty()) {
            c.default_driver = v.parse().map_err(|e| for_variable(ENV_DRIVER, e))?;
        }
        if let Some(v) = get(ENV_RUNTIME).filter(|v| !v.is_empty()) {
            c.default_runtime = v.parse().map_err(|e| for_variable(ENV_RUNTIME, e))?;
        }
        if let Some(v) = get(ENV_DEMAND_START) {
            c.demand_start_default = v != "0" && v != "false";
        }
        let limit = |variable: &str| get(variable).filter(|v| !v.trim().is_empty());
        if let Some(v) = limit(ENV_DEFAULT_MEMORY) {
            c.default_limits.memory_mb = none_or(ENV_DEFAULT_MEMORY, &v, |t| {
                let mib = crate::parse_mib(t).map_err(|e| e.to_string())?;
                as_in_a_config(|c| c.memory_mb = Some(mib)).map(|()| mib)
            })?;
        }
        if let Some(v) = limit(ENV_DEFAULT_CPUS) {
            c.default_limits.cpus = none_or(ENV_DEFAULT_CPUS, &v, |t| {
                let n: f64 = t.parse().map_err(|_| format!("{t:?} is not a CPU count"))?;
                as_in_a_config(|c| c.cpus = Some(n)).map(|()| n)
            })?;
        }
        if let Some(v) = limit(ENV_DEFAULT_PIDS) {
            c.default_limits.pids_limit = none_or(ENV_DEFAULT_PIDS, &v, |t| {
                t.parse::<u64>()
                    .ok()
                    .filter(|n| (8..=crate::model::MAX_PIDS_LIMIT).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "{t:?} is not a process count in 8..={}",
                            crate::model::MAX_PIDS_LIMIT
                        )
                    })
            })?;
        }
        if let Some(v) = limit(ENV_DEFAULT_DISK) {
            c.default_limits.disk_mb = none_or(ENV_DEFAULT_DISK, &v, |t| {
                let mib = crate::parse_mib(t).map_err(|e| e.to_string())?;
                as_in_a_config(|c| c.disk_mb = Some(mib)).map(|()| mib)
            })?;
        }
        Ok(c)
    }

    /// Sets the default limits.
    #[must_use]
    pub fn default_limits(mut self, limits: DefaultLimits) -> Self {
        self.default_limits = limits;
        self
    }

    /// Sets the default driver.
    #[must_use]
    pub fn default_driver(mut self, driver: DriverKind) -> Self {
        self.default_driver = driver;
        self
    }

    /// Sets the default OCI runtime.
    #[must_use]
    pub fn default_runtime(mut self, runtime: OciRuntime) -> Self {
        self.default_runtime = runtime;
        self
    }

    /// Sets the default demand start.
    #[must_use]
    pub fn demand_start_default(mut self, on: bool) -> Self {
        self.demand_start_default = on;
        self
    }
}

/// Whether a default limit is one a sandbox's configuration may name (the
/// reason it may not).
fn as_in_a_config(set: impl FnOnce(&mut crate::model::SandboxConfig)) -> Result<(), String> {
    let mut probe = crate::model::SandboxConfig::new("-");
    set(&mut probe);
    match probe.validate() {
        Err(Error::InvalidConfig { reason, .. }) => Err(reason),
        _ => Ok(()),
    }
}

/// A default limit's variable: `none`, or a value `parse` reads.
fn none_or<T>(
    variable: &str,
    text: &str,
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Option<T>> {
    let text = text.trim();
    if text == "none" {
        return Ok(None);
    }
    parse(text)
        .map(Some)
        .map_err(|reason| Error::InvalidConfig {
            field: variable.into(),
            reason: format!("{reason} (or none)"),
        })
}

/// A parse error of a variable's value, named by the variable.
fn for_variable(variable: &str, e: Error) -> Error {
    match e {
        Error::InvalidConfig { reason, .. } => Error::InvalidConfig {
            field: variable.into(),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<LocalConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        LocalConfig::from_lookup(|k| vars.get(k).cloned())
    }

    #[test]
    fn the_environment_sets_the_host_defaults() {
        assert_eq!(from(&[]).unwrap(), LocalConfig::new());
        assert_eq!(from(&[(ENV_DRIVER, "")]).unwrap(), LocalConfig::new());
        let c = from(&[
            (ENV_DRIVER, "vm"),
            (ENV_RUNTIME, "runsc"),
            (ENV_DEMAND_START, "0"),
        ])
        .unwrap();
        assert_eq!(c.default_driver, DriverKind::Vm);
        assert_eq!(c.default_runtime, OciRuntime::Runsc);
        assert_eq!(from(&[(ENV_RUNTIME, "")]).unwrap(), LocalConfig::new());
        assert!(!c.demand_start_default);
        assert!(
            !from(&[(ENV_DEMAND_START, "false")])
                .unwrap()
                .demand_start_default
        );
        assert!(
            from(&[(ENV_DEMAND_START, "1")])
                .unwrap()
                .demand_start_default
        );
    }

    #[test]
    fn an_unknown_driver_or_runtime_is_invalid_config_for_the_variable() {
        for (var, value) in [(ENV_DRIVER, "firecracker"), (ENV_RUNTIME, "kata")] {
            match from(&[(var, value)]).unwrap_err() {
                Error::InvalidConfig { field, .. } => assert_eq!(field, var),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn the_environment_sets_or_drops_the_default_limits() {
        assert_eq!(from(&[]).unwrap().default_limits, DefaultLimits::BUILT_IN);
        let c = from(&[
            (ENV_DEFAULT_MEMORY, "1G"),
            (ENV_DEFAULT_CPUS, "0.5"),
            (ENV_DEFAULT_PIDS, "none"),
            (ENV_DEFAULT_DISK, "64M"),
        ])
        .unwrap();
        assert_eq!(c.default_limits.disk_mb, Some(64));
        assert_eq!(c.default_limits.memory_mb, Some(1024));
        assert_eq!(c.default_limits.cpus, Some(0.5));
        assert_eq!(c.default_limits.pids_limit, None);
        let none = from(&[
            (ENV_DEFAULT_MEMORY, "none"),
            (ENV_DEFAULT_CPUS, " none "),
            (ENV_DEFAULT_PIDS, "none"),
            (ENV_DEFAULT_DISK, "none"),
        ])
        .unwrap();
        assert_eq!(none.default_limits, DefaultLimits::NONE);
        for (var, value) in [
            (ENV_DEFAULT_MEMORY, "lots"),
            (ENV_DEFAULT_MEMORY, "8M"),
            (ENV_DEFAULT_CPUS, "0"),
            (ENV_DEFAULT_CPUS, "two"),
            (ENV_DEFAULT_PIDS, "4"),
            (ENV_DEFAULT_PIDS, "-1"),
            (ENV_DEFAULT_DISK, "16M"),
            (ENV_DEFAULT_DISK, "a lot"),
        ] {
            match from(&[(var, value)]).unwrap_err() {
                Error::InvalidConfig { field, .. } => assert_eq!(field, var, "{value}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
