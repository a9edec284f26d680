//! The limits a tenant's sandboxes run with, part of its policy
//! ([`super::TenantPolicy`]): what a sandbox that names no limit is given
//! (what the tenant's quotas count it at: [`DEFAULT_MEMORY_MB`] and
//! [`DEFAULT_CPUS`]), and the most one sandbox may ask for.
//!
//! Checked where the policy is, on every path that makes or changes a
//! sandbox: a create (a restore and a pool's claim are creates) and a
//! pool's definition get the defaults for what they leave out; a modify
//! that removes a limit gets the default back; a stored configuration
//! without limits (made before its tenant had them) is refused at start
//! and fork (`invalid_config`), never run or copied without; a fork's
//! copies keep their parent's.
//!
//! Where the engine's host cannot enforce a limit (an unprivileged user
//! without a delegated cgroup v2), the engine refuses it by name
//! (`invalid_config`, `memory_mb` or `cpus`) unless the sandbox asks for
//! best-effort limits. A tenant's sandbox that named no limit of its own
//! is then made with best-effort limits ([`Scoped::on_this_host`]): its
//! limits are recorded (the answer shows them, with
//! `best_effort_limits: true` saying they may not hold here), each one the
//! host cannot enforce is left out with a note in the sandbox's log, and
//! its quota counts them all the same. A sandbox that names a limit of its
//! own follows the engine's rule as it asked.

use std::future::Future;

use burrow::{Error, Modify, Result, SandboxConfig};

use super::quota::{DEFAULT_CPUS, DEFAULT_MEMORY_MB};
use super::Scoped;

/// A tenant's sandboxes' limits.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxLimits {
    /// The memory (MiB) a sandbox that names none is given.
    pub default_memory_mb: u64,
    /// The CPUs a sandbox that names none is given.
    pub default_cpus: f64,
    /// The most memory (MiB) one sandbox may ask for (`None`: no more than
    /// the tenant's quotas allow).
    pub max_memory_mb: Option<u64>,
    /// The most CPUs one sandbox may ask for (`None`: as above).
    pub max_cpus: Option<f64>,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits::counted()
    }
}

impl SandboxLimits {
    /// Defaults equal to what the tenant's quotas count a sandbox without
    /// limits at, and no maximum of its own.
    pub fn counted() -> SandboxLimits {
        SandboxLimits {
            default_memory_mb: DEFAULT_MEMORY_MB,
            default_cpus: DEFAULT_CPUS,
            max_memory_mb: None,
            max_cpus: None,
        }
    }

    /// Checks a new sandbox's (or a pool's) limits against the maximums
    /// and fills in the defaults for what it leaves out.
    pub fn fill(&self, config: &mut SandboxConfig) -> Result<()> {
        self.within(config.memory_mb, config.cpus)?;
        config.memory_mb.get_or_insert(self.memory_given());
        config.cpus.get_or_insert(self.cpus_given());
        Ok(())
    }

    /// Checks changes of a sandbox's limits; a limit removed gets the
    /// default instead.
    pub fn fill_modify(&self, changes: &mut Modify) -> Result<()> {
        let memory = changes.memory_mb.flatten();
        let cpus = changes.cpus.flatten();
        self.within(memory, cpus)?;
        if let Some(m) = &mut changes.memory_mb {
            m.get_or_insert(self.memory_given());
        }
        if let Some(c) = &mut changes.cpus {
            c.get_or_insert(self.cpus_given());
        }
        Ok(())
    }

    /// Whether a stored configuration has its limits (one made before the
    /// tenant had them does not: it is refused, never run without).
    pub fn holds(&self, config: &SandboxConfig) -> Result<()> {
        let missing = match (config.memory_mb, config.cpus) {
            (None, _) => "memory_mb",
            (_, None) => "cpus",
            _ => return self.within(config.memory_mb, config.cpus),
        };
        Err(Error::InvalidConfig {
            field: missing.into(),
            reason: "the sandbox was made without its tenant's limits; give it limits \
                     (memory_mb and cpus) or create it again"
                .into(),
        })
    }

    /// The memory a sandbox that names none is given: the default, at
    /// most the maximum.
    fn memory_given(&self) -> u64 {
        self.max_memory_mb
            .map_or(self.default_memory_mb, |m| m.min(self.default_memory_mb))
    }

    /// The CPUs a sandbox that names none is given: the default, at most
    /// the maximum.
    fn cpus_given(&self) -> f64 {
        self.max_cpus
            .map_or(self.default_cpus, |m| m.min(self.default_cpus))
    }

    /// Whether the limits asked for are under the maximums.
    fn within(&self, memory: Option<u64>, cpus: Option<f64>) -> Result<()> {
        if let (Some(asked), Some(max)) = (memory, self.max_memory_mb) {
            if asked > max {
                return Err(over(
                    "memory_mb",
                    &format!("{asked} MiB"),
                    &format!("{max} MiB"),
                ));
            }
        }
        if let (Some(asked), Some(max)) = (cpus, self.max_cpus) {
            if asked > max + 1e-9 {
                return Err(over("cpus", &format!("{asked} CPUs"), &format!("{max}")));
            }
        }
        Ok(())
    }
}

fn over(field: &str, asked: &str, max: &str) -> Error {
    Error::InvalidConfig {
        field: field.to_owned(),
        reason: format!("{asked} is more than a sandbox of this tenant may have ({max})"),
    }
}

/// Whether `config` names none of the limits the engine may refuse on a
/// host that cannot enforce them (its limits are then all the tenant's
/// defaults).
pub(super) fn names_no_limit(config: &SandboxConfig) -> bool {
    config.memory_mb.is_none() && config.cpus.is_none() && config.pids_limit.is_none()
}

/// Whether `e` is the engine's refusal of a memory or CPU limit its host
/// cannot enforce.
fn unenforceable(e: &Error) -> bool {
    matches!(e, Error::InvalidConfig { field, .. } if field == "memory_mb" || field == "cpus")
}

impl Scoped {
    /// Makes a sandbox (or a pool) of `config` with `make`. When the
    /// tenant's defaults are all its limits (`defaulted`) and the host
    /// refuses them as unenforceable, makes it again with best-effort
    /// limits: recorded, noted, counted (see the module's doc).
    pub(super) async fn on_this_host<T, F, Fut>(
        &self,
        config: SandboxConfig,
        defaulted: bool,
        make: F,
    ) -> Result<T>
    where
        F: Fn(SandboxConfig) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if !defaulted || config.best_effort_limits {
            return make(config).await;
        }
        match make(config.clone()).await {
            Err(e) if unenforceable(&e) => {
                tracing::info!(
                    error = %e,
                    "a tenant's default limits are not enforceable on this host: best effort"
                );
                let mut config = config;
                config.best_effort_limits = true;
                make(config).await
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SandboxLimits {
        SandboxLimits {
            max_memory_mb: Some(2048),
            max_cpus: Some(2.0),
            ..SandboxLimits::counted()
        }
    }

    fn field(e: Error) -> String {
        match e {
            Error::InvalidConfig { field, .. } => field,
            e => panic!("{e}"),
        }
    }

    #[test]
    fn the_defaults_are_what_quotas_count() {
        let mut c = SandboxConfig::new("busybox");
        assert!(names_no_limit(&c));
        SandboxLimits::counted().fill(&mut c).unwrap();
        assert_eq!(
            (c.memory_mb, c.cpus),
            (Some(DEFAULT_MEMORY_MB), Some(DEFAULT_CPUS))
        );
        assert!(!names_no_limit(&c));
        SandboxLimits::counted().holds(&c).unwrap();
        // What a sandbox names is kept, under the maximums.
        let mut c = SandboxConfig::new("busybox");
        c.memory_mb = Some(64);
        limits().fill(&mut c).unwrap();
        assert_eq!((c.memory_mb, c.cpus), (Some(64), Some(DEFAULT_CPUS)));
        let mut big = SandboxConfig::new("busybox");
        big.memory_mb = Some(4096);
        assert_eq!(field(limits().fill(&mut big).unwrap_err()), "memory_mb");
        let mut big = SandboxConfig::new("busybox");
        big.cpus = Some(2.5);
        assert_eq!(field(limits().fill(&mut big).unwrap_err()), "cpus");
        assert_eq!(big.memory_mb, None, "a refused config is not filled");
        // Under a maximum below the default, the default is the maximum.
        let small = SandboxLimits {
            max_memory_mb: Some(256),
            max_cpus: Some(0.5),
            ..SandboxLimits::counted()
        };
        let mut c = SandboxConfig::new("busybox");
        small.fill(&mut c).unwrap();
        assert_eq!((c.memory_mb, c.cpus), (Some(256), Some(0.5)));
        let mut m = Modify::default();
        m.memory_mb = Some(None);
        small.fill_modify(&mut m).unwrap();
        assert_eq!(m.memory_mb, Some(Some(256)));
    }

    #[test]
    fn a_removed_limit_gets_the_default_back() {
        let mut m = Modify::default();
        m.memory_mb = Some(None);
        m.cpus = Some(None);
        limits().fill_modify(&mut m).unwrap();
        assert_eq!(m.memory_mb, Some(Some(DEFAULT_MEMORY_MB)));
        assert_eq!(m.cpus, Some(Some(DEFAULT_CPUS)));
        // Untouched stays untouched; a change stays under the maximum.
        let mut m = Modify::default();
        limits().fill_modify(&mut m).unwrap();
        assert_eq!((m.memory_mb, m.cpus), (None, None));
        m.memory_mb = Some(Some(8192));
        assert_eq!(
            field(limits().fill_modify(&mut m).unwrap_err()),
            "memory_mb"
        );
    }

    #[test]
    fn a_stored_configuration_without_limits_does_not_hold() {
        let bare = SandboxConfig::new("busybox");
        assert_eq!(field(limits().holds(&bare).unwrap_err()), "memory_mb");
        let mut half = bare.clone();
        half.memory_mb = Some(128);
        assert_eq!(field(limits().holds(&half).unwrap_err()), "cpus");
        half.cpus = Some(4.0);
        assert_eq!(field(limits().holds(&half).unwrap_err()), "cpus");
        half.cpus = Some(1.0);
        limits().holds(&half).unwrap();
    }

    #[test]
    fn only_memory_and_cpu_refusals_are_unenforceable_ones() {
        let refusal = |f: &str| Error::InvalidConfig {
            field: f.into(),
            reason: "cannot".into(),
        };
        assert!(unenforceable(&refusal("memory_mb")));
        assert!(unenforceable(&refusal("cpus")));
        assert!(!unenforceable(&refusal("pids_limit")));
        assert!(!unenforceable(&refusal("image")));
    }
}
