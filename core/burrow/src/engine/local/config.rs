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

/// Host defaults of a [`LocalBackend`](crate::LocalBackend), applied when a
/// sandbox is created and recorded in its configuration.
///
/// [`LocalConfig::from_env`] is the one place that reads them from the
/// environment; [`LocalConfig::new`] gives the built-in defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            default_driver: DriverKind::Container,
            default_runtime: OciRuntime::Runc,
            demand_start_default: true,
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
        Ok(c)
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
}
