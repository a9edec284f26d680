//! Warm pools: sandboxes of one configuration kept started and unclaimed,
//! so that a create of that configuration claims one instead of starting.

use serde::{Deserialize, Serialize};

use super::{validate_name, SandboxConfig};
use crate::error::{Error, Result};

/// The most warm sandboxes one pool keeps.
pub const MAX_POOL_SIZE: u32 = 64;

/// The prefix of a warm sandbox's name: `pool/<pool>/<n>`. A sandbox name
/// cannot contain `/`, so no create can take one.
pub const WARM_NAME_PREFIX: &str = "pool/";

/// A pool's definition: the configuration its sandboxes run and how many
/// of them the backend keeps started and unclaimed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PoolSpec {
    /// The pool's name (a sandbox name's rules).
    pub name: String,
    /// What its sandboxes run. A create claims from the pool when its own
    /// configuration is this one but for what a claim sets
    /// ([`PoolSpec::claimable_by`]).
    pub config: SandboxConfig,
    /// How many warm sandboxes to keep: 0 to [`MAX_POOL_SIZE`].
    pub size: u32,
}

impl PoolSpec {
    /// A pool of `size` sandboxes of `config`.
    pub fn new(name: impl Into<String>, config: SandboxConfig, size: u32) -> Self {
        PoolSpec {
            name: name.into(),
            config,
            size,
        }
    }

    /// Checks the definition: its name, its size, its configuration, and
    /// that nothing in it belongs to one sandbox only (host ports, which
    /// two warm sandboxes could not both hold; secrets, sealed for one
    /// sandbox; labels, set by each claim).
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        if self.size > MAX_POOL_SIZE {
            return Err(Error::InvalidArgument {
                argument: "size".into(),
                reason: format!(
                    "a pool keeps at most {MAX_POOL_SIZE} sandboxes, not {}",
                    self.size
                ),
            });
        }
        self.config.validate()?;
        let per_sandbox = [
            (
                !self.config.ports.is_empty(),
                "ports",
                "host ports belong to one sandbox",
            ),
            (
                !self.config.secrets.is_empty(),
                "secrets",
                "secrets are sealed for one sandbox",
            ),
            (
                !self.config.labels.is_empty(),
                "labels",
                "each claim gives its own",
            ),
        ];
        if let Some((_, field, why)) = per_sandbox.iter().find(|(set, ..)| *set) {
            return Err(Error::InvalidConfig {
                field: (*field).into(),
                reason: format!("a pool's configuration cannot have them: {why}"),
            });
        }
        Ok(())
    }

    /// The configuration a warm sandbox is started with: the pool's, but
    /// for what a claim sets (a warm sandbox is never reclaimed for
    /// idleness nor stopped for its age: its claimer's timeouts apply).
    pub fn warm_config(&self) -> SandboxConfig {
        SandboxConfig {
            env: self.config.env.clone(),
            ..launch_part(&self.config)
        }
    }

    /// Whether a create of `config` named `name` may claim a sandbox of
    /// this pool: a name in the pool's scope (a `burrow serve` tenant's
    /// creates claim from its own pools only) and the same configuration
    /// once what a claim sets is left out (labels, environment, timeouts,
    /// the idle action and demand starts).
    pub fn claimable_by(&self, name: &str, config: &SandboxConfig) -> bool {
        super::name::split_scope(&self.name).0 == super::name::split_scope(name).0
            && launch_part(&self.config) == launch_part(config)
    }
}

/// What of a configuration a running sandbox was started with: what a
/// claim sets taken out.
fn launch_part(config: &SandboxConfig) -> SandboxConfig {
    SandboxConfig {
        env: Default::default(),
        labels: Default::default(),
        idle_timeout: None,
        idle_action: Default::default(),
        max_duration: None,
        demand_start: None,
        startup_timeout: SandboxConfig::new("").startup_timeout,
        ..config.clone()
    }
}

/// A pool as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The pool's name.
    pub name: String,
    /// What its sandboxes run.
    pub config: SandboxConfig,
    /// How many warm sandboxes it keeps.
    pub size: u32,
    /// Warm sandboxes running and unclaimed now.
    pub warm: u32,
    /// Warm sandboxes still starting.
    pub starting: u32,
    /// Creates that claimed one of its sandboxes.
    pub claims: u64,
    /// Creates of its configuration that found none warm and started cold.
    pub misses: u64,
    /// How long the last refill took to start its sandboxes, in ms.
    pub last_refill_ms: Option<u64>,
    /// When it was defined (ms since the epoch).
    pub created_at_ms: i64,
}

impl PoolInfo {
    /// A pool of `size` sandboxes of `config` with nothing counted yet
    /// (for backends that describe their pools).
    pub fn new(name: impl Into<String>, config: SandboxConfig, size: u32) -> Self {
        PoolInfo {
            name: name.into(),
            config,
            size,
            warm: 0,
            starting: 0,
            claims: 0,
            misses: 0,
            last_refill_ms: None,
            created_at_ms: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PortMapping;
    use std::time::Duration;

    fn spec() -> PoolSpec {
        PoolSpec::new("web", SandboxConfig::new("alpine"), 2)
    }

    #[test]
    fn definitions_are_checked() {
        assert!(spec().validate().is_ok());
        let bad = |f: fn(&mut PoolSpec)| {
            let mut s = spec();
            f(&mut s);
            s.validate().unwrap_err().code()
        };
        use crate::ErrorCode;
        assert_eq!(bad(|s| s.name = "a/b/c".into()), ErrorCode::InvalidName);
        assert_eq!(
            bad(|s| s.size = MAX_POOL_SIZE + 1),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            bad(|s| s.config.ports = vec!["8080:80".parse::<PortMapping>().unwrap()]),
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            bad(|s| {
                s.config.labels.insert("k".into(), "v".into());
            }),
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            bad(|s| s.config.cpus = Some(-1.0)),
            ErrorCode::InvalidConfig
        );
    }

    #[test]
    fn claims_match_all_but_what_a_claim_sets() {
        let pool = spec();
        let mut c = SandboxConfig::new("alpine");
        c.env.insert("TASK".into(), "1".into());
        c.labels.insert("team".into(), "a".into());
        c.idle_timeout = Some(Duration::from_secs(5));
        c.max_duration = Some(Duration::from_secs(50));
        c.startup_timeout = Duration::from_secs(3);
        c.demand_start = Some(true);
        assert!(pool.claimable_by("x", &c));
        // Only creates in the pool's scope claim.
        assert!(!pool.claimable_by("team/x", &c));
        let scoped = PoolSpec::new("team/p", pool.config.clone(), 1);
        assert!(scoped.claimable_by("team/x", &c));
        assert!(!scoped.claimable_by("x", &c) && !scoped.claimable_by("other/x", &c));
        let mut other = c.clone();
        other.memory_mb = Some(256);
        assert!(!pool.claimable_by("x", &other));
        let mut other = c.clone();
        other.image = "debian".into();
        assert!(!pool.claimable_by("x", &other));
        let mut other = c;
        other.command = Some(vec!["sleep".into(), "1".into()]);
        assert!(!pool.claimable_by("x", &other));
    }
}
