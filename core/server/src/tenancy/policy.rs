//! A tenant's policy: the most its sandboxes may be and reach, checked by
//! the tenant's view of the engine ([`super::Scoped`]) on every path that
//! creates or changes a sandbox — create (a restore from a snapshot and a
//! claim from a pool are creates), pool definitions, modify, fork and
//! start — so that no path forgets one.
//!
//! Today it holds the egress ceiling ([`burrow_net::ceiling`]): every
//! tenant but the default one gets it on each of its sandboxes, whatever
//! the request said (the stack then refuses the host's own, loopback,
//! private, link-local and other non-public addresses even where a rule
//! names them, and the pulls of its image go through the outbound guard);
//! and a rule or an image reference that names such an address outright is
//! refused at once (`invalid_config`), so nothing is accepted that could
//! never work. The default tenant keeps the engine's own freedom (it is
//! the operator's).
//!
//! It holds the limits of the tenant's sandboxes too ([`SandboxLimits`]):
//! a sandbox that names none is given what the tenant's quotas count it
//! at (no more than the operator's maximum for one sandbox), so that none
//! runs with more than it is counted for; and one that asks for more than
//! that maximum is refused (`invalid_config`, `memory_mb` or `cpus`).
//!
//! Its sandboxes run under burrow's seccomp profile as it is, and get the
//! engine's default limits for those the tenant's leave out: adding
//! syscalls (`seccomp_allow`) and going without defaults
//! (`default_limits: false`) are refused (`invalid_config`).
//!
//! And the images and registries its sandboxes may use ([`ImageAllow`]),
//! a snapshot's by the image it was taken from. The operator sets them and
//! the maximums per tenant (`burrow serve tenant create|set`); they are
//! read from the server's database for each request ([`TenantPolicy::
//! with_rules`]). Mount targets are not a tenant's setting: the ones that
//! reach the agent or the kernel's files are refused for everybody by
//! `SandboxConfig::validate`, and host directories for every tenant but
//! the default one.

use burrow::{Backend, Error, Modify, Network, Result, SandboxConfig};
use burrow_net::ceiling::{host_addresses, rule_reaches_denied};
use burrow_net::{Ceiling, Rule};

pub use super::images::ImageAllow;
pub use super::limits::SandboxLimits;
use crate::store::TenantRules;

/// What a tenant's sandboxes may be and reach.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantPolicy {
    /// The egress ceiling put on each of the tenant's sandboxes (`None`:
    /// none, the default tenant's freedom).
    pub egress: Option<Ceiling>,
    /// The limits each of the tenant's sandboxes is given and may ask for
    /// (`None`: the engine's, the default tenant's freedom).
    pub limits: Option<SandboxLimits>,
    /// The images its sandboxes may use (`None`: any).
    pub images: Option<ImageAllow>,
}

impl TenantPolicy {
    /// The default tenant's: nothing beyond the engine's own checks.
    pub fn unrestricted() -> TenantPolicy {
        TenantPolicy::default()
    }

    /// Another tenant's: the egress ceiling, its images' pulls reaching
    /// the denied addresses the operator's `[outbound] allow` names; and
    /// limits, by default what its quotas count.
    pub fn scoped(outbound_allow: &[Rule]) -> TenantPolicy {
        TenantPolicy {
            egress: Some(Ceiling {
                pull_allow: outbound_allow.to_vec(),
            }),
            limits: Some(SandboxLimits::counted()),
            images: None,
        }
    }

    /// The same with the operator's rules for the tenant (the default
    /// tenant's policy stays unrestricted: its rules are never set).
    pub fn with_rules(mut self, rules: &TenantRules) -> TenantPolicy {
        if let Some(limits) = &mut self.limits {
            limits.max_memory_mb = rules.sandbox_max_memory_mb;
            limits.max_cpus = rules.sandbox_max_cpus;
        }
        if self.egress.is_some()
            && (rules.allowed_images.is_some() || rules.allowed_registries.is_some())
        {
            self.images = Some(ImageAllow {
                images: rules.allowed_images.clone().unwrap_or_default(),
                registries: rules.allowed_registries.clone().unwrap_or_default(),
            });
        }
        self
    }

    /// The policy of the tenant whose scope is `scope` (`None`: the
    /// default tenant).
    pub fn for_scope(scope: Option<&str>, outbound_allow: &[Rule]) -> TenantPolicy {
        match scope {
            Some(_) => TenantPolicy::scoped(outbound_allow),
            None => TenantPolicy::unrestricted(),
        }
    }

    /// Checks a new sandbox's configuration (a create, a restore, a claim)
    /// and puts the tenant's ceiling and limits on it. `engine` (the
    /// tenant's view) finds the image a snapshot was taken from.
    pub async fn check_create(
        &self,
        config: &mut SandboxConfig,
        engine: Option<&dyn Backend>,
    ) -> Result<()> {
        if let Some(ceiling) = &self.egress {
            check_network(&config.network, "network")?;
            check_image(&config.image, ceiling)?;
            check_operators_own(config)?;
        }
        if let Some(images) = &self.images {
            images.check(&config.image, engine).await?;
        }
        if let Some(limits) = &self.limits {
            limits.fill(config)?;
        }
        if let Some(ceiling) = &self.egress {
            config.egress_ceiling = Some(ceiling.clone());
        }
        Ok(())
    }

    /// Checks a pool's configuration, which each of its sandboxes runs.
    pub async fn check_pool(
        &self,
        config: &mut SandboxConfig,
        engine: Option<&dyn Backend>,
    ) -> Result<()> {
        self.check_create(config, engine).await
    }

    /// Checks changes to one of the tenant's sandboxes (a limit removed
    /// gets the tenant's default instead).
    pub fn check_modify(&self, changes: &mut Modify) -> Result<()> {
        if let (Some(_), Some(network)) = (&self.egress, &changes.network) {
            check_network(network, "network")?;
        }
        match &self.limits {
            Some(limits) => limits.fill_modify(changes),
            None => Ok(()),
        }
    }

    /// Checks a sandbox about to be copied (its copies keep its
    /// configuration, ceiling included).
    pub fn check_fork(&self, parent: &SandboxConfig) -> Result<()> {
        self.holds(parent)
    }

    /// Checks a sandbox about to start.
    pub fn check_start(&self, config: &SandboxConfig) -> Result<()> {
        self.holds(config)
    }

    /// Whether a stored configuration is under the tenant's ceiling and
    /// has its limits (one made before the tenant had them does not: it is
    /// refused, never run without).
    fn holds(&self, config: &SandboxConfig) -> Result<()> {
        if self.egress.is_some() && config.egress_ceiling.is_none() {
            return Err(Error::InvalidConfig {
                field: "network".into(),
                reason: "the sandbox was made without its tenant's egress ceiling; \
                         create it again"
                    .into(),
            });
        }
        if self.egress.is_some() {
            check_operators_own(config)?;
        }
        if let Some(images) = &self.images {
            images.check_stored(&config.image)?;
        }
        match &self.limits {
            Some(limits) => limits.holds(config),
            None => Ok(()),
        }
    }
}

/// Refuses what only the operator may choose for a sandbox: syscalls
/// added to its seccomp filter (the kernel's surface), and no default
/// limits (a sandbox the host's defaults do not hold).
fn check_operators_own(config: &SandboxConfig) -> Result<()> {
    if !config.seccomp_allow.is_empty() {
        return Err(Error::InvalidConfig {
            field: "seccomp_allow".into(),
            reason: "a tenant's sandboxes run under burrow's seccomp profile; only the \
                     default tenant's may add syscalls to it"
                .into(),
        });
    }
    if !config.default_limits {
        return Err(Error::InvalidConfig {
            field: "default_limits".into(),
            reason: "a tenant's sandboxes get the limits they leave out; only the default \
                     tenant's may go without"
                .into(),
        });
    }
    Ok(())
}

/// Refuses an allow rule that names an address above the ceiling.
fn check_network(network: &Network, field: &str) -> Result<()> {
    let Network::Policy(policy) = network else {
        // `none`, and `all` (whose one rule names no denied address).
        return Ok(());
    };
    let host = host_addresses();
    for (i, rule) in policy.allow.iter().enumerate() {
        if let Some(range) = rule_reaches_denied(rule, &host) {
            return Err(above(&format!("{field}.allow[{i}]"), rule, &range));
        }
    }
    Ok(())
}

fn above(field: &str, rule: &Rule, range: &str) -> Error {
    Error::InvalidConfig {
        field: field.to_owned(),
        reason: format!(
            "rule {rule} names {range}: the server's host, loopback, private, link-local and \
             other non-public addresses are not open to a tenant's sandboxes"
        ),
    }
}

/// Refuses an image reference whose registry is a denied address written
/// out (or `localhost`) that the ceiling's pulls may not reach; names are
/// vetted when the pull connects.
fn check_image(image: &str, ceiling: &Ceiling) -> Result<()> {
    let Some((host, port)) = registry_of(image) else {
        return Ok(());
    };
    let guard = burrow_net::outbound::Guard::new(ceiling.pull_allow.clone());
    match guard.refuses_literal(&host, port) {
        None => Ok(()),
        Some(e) => {
            tracing::info!("refused a tenant's image {image:?}: {e}");
            Err(Error::InvalidConfig {
                field: "image".into(),
                reason: "the registry is an address of the server's host or of a private \
                         network, which a tenant's pulls do not reach"
                    .into(),
            })
        }
    }
}

/// The registry `host` and port of an image reference that names one
/// (`REGISTRY/REPO[:TAG]`: a first component with a `.` or a `:`, or
/// `localhost`); `None` for the default registry, a snapshot, a path.
fn registry_of(image: &str) -> Option<(String, u16)> {
    if image.starts_with(burrow::SNAPSHOT_IMAGE_PREFIX) {
        return None;
    }
    let (first, _) = image.split_once('/')?;
    if !(first.contains('.') || first.contains(':') || first == "localhost") {
        return None;
    }
    let (host, port) = if let Some(rest) = first.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match first.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (first, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 443,
    };
    Some((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn config(network: serde_json::Value, image: &str) -> SandboxConfig {
        serde_json::from_value(serde_json::json!({"image": image, "network": network})).unwrap()
    }

    #[tokio::test]
    async fn a_tenant_gets_the_ceiling_and_no_rule_naming_a_denied_address() {
        let p = TenantPolicy::scoped(&["10.0.0.5".parse().unwrap()]);
        let mut ok = config(
            serde_json::json!({"allow": ["pypi.org", "*", "0.0.0.0/0", "8.8.8.8"]}),
            "busybox",
        );
        ok.egress_ceiling = None;
        p.check_create(&mut ok, None).await.unwrap();
        assert_eq!(
            ok.egress_ceiling.as_ref().unwrap().pull_allow,
            vec!["10.0.0.5".parse::<Rule>().unwrap()]
        );
        for (i, rule) in [
            "tcp:127.0.0.1:7878",
            "10.0.0.0/8",
            "169.254.169.254",
            "[::ffff:127.0.0.1]",
            "localhost",
            "0x7f000001",
        ]
        .iter()
        .enumerate()
        {
            let mut c = config(serde_json::json!({"allow": ["pypi.org", rule]}), "busybox");
            let e = p.check_create(&mut c, None).await.unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig, "{i} {rule}");
            assert!(c.egress_ceiling.is_none());
            let mut changes = Modify::default();
            changes.network = Some(c.network.clone());
            assert!(p.check_modify(&mut changes).is_err(), "{rule}");
        }
        // The host's own addresses, by their exact IP.
        if let Some(a) = host_addresses().into_iter().find(|a| !a.is_loopback()) {
            let rule = match a {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            let mut c = config(serde_json::json!({"allow": [rule]}), "busybox");
            assert!(p.check_create(&mut c, None).await.is_err(), "{a}");
        }
        // The default tenant keeps its freedom.
        let mut c = config(
            serde_json::json!({"allow": ["127.0.0.1"]}),
            "127.0.0.1:5000/x",
        );
        TenantPolicy::unrestricted()
            .check_create(&mut c, None)
            .await
            .unwrap();
        assert!(c.egress_ceiling.is_none());
        assert_eq!((c.memory_mb, c.cpus), (None, None));
    }

    #[tokio::test]
    async fn a_tenants_sandbox_gets_the_limits_its_quota_counts() {
        use crate::tenancy::quota::{DEFAULT_CPUS, DEFAULT_MEMORY_MB};
        let p = TenantPolicy::scoped(&[]);
        let mut c = config(serde_json::json!("none"), "busybox");
        p.check_create(&mut c, None).await.unwrap();
        assert_eq!(
            (c.memory_mb, c.cpus),
            (Some(DEFAULT_MEMORY_MB), Some(DEFAULT_CPUS))
        );
        let mut pool = config(serde_json::json!("none"), "busybox");
        pool.memory_mb = Some(256);
        p.check_pool(&mut pool, None).await.unwrap();
        assert_eq!((pool.memory_mb, pool.cpus), (Some(256), Some(DEFAULT_CPUS)));
        let mut unset = Modify::default();
        unset.memory_mb = Some(None);
        p.check_modify(&mut unset).unwrap();
        assert_eq!(unset.memory_mb, Some(Some(DEFAULT_MEMORY_MB)));
        // A limit of the policy's own maximum.
        let capped = TenantPolicy {
            limits: Some(SandboxLimits {
                max_memory_mb: Some(1024),
                ..SandboxLimits::counted()
            }),
            ..TenantPolicy::scoped(&[])
        };
        let mut big = config(serde_json::json!("none"), "busybox");
        big.memory_mb = Some(2048);
        let e = capped.check_create(&mut big, None).await.unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig);
        assert!(
            big.egress_ceiling.is_none(),
            "a refused config is left alone"
        );
        // The default tenant's: the engine's freedom.
        let mut unset = Modify::default();
        unset.memory_mb = Some(None);
        TenantPolicy::unrestricted()
            .check_modify(&mut unset)
            .unwrap();
        assert_eq!(unset.memory_mb, Some(None));
    }

    #[tokio::test]
    async fn registries_at_denied_addresses_are_refused_unless_the_operator_allows() {
        let p = TenantPolicy::scoped(&["tcp:10.0.0.5:5000".parse().unwrap()]);
        for image in [
            "127.0.0.1:5000/x:1",
            "[::1]:5000/x",
            "localhost/x",
            "localhost:5000/x",
            "2130706433:5000/x",
            "169.254.169.254/x",
            "10.0.0.5:5001/x",
            "10.0.0.5/x",
        ] {
            let mut c = config(serde_json::json!("none"), image);
            let e = p.check_create(&mut c, None).await.unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig, "{image}");
        }
        for image in [
            "busybox",
            "library/busybox:1",
            "ghcr.io/x/y:1",
            "registry.example.com:5000/x",
            "10.0.0.5:5000/x",
            "snapshot:mine",
        ] {
            let mut c = config(serde_json::json!("none"), image);
            p.check_create(&mut c, None).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_stored_configuration_without_the_ceiling_does_not_start_or_fork() {
        let p = TenantPolicy::scoped(&[]);
        let bare = config(serde_json::json!("all"), "busybox");
        assert!(p.check_start(&bare).is_err());
        assert!(p.check_fork(&bare).is_err());
        let mut held = bare.clone();
        p.check_create(&mut held, None).await.unwrap();
        p.check_start(&held).unwrap();
        p.check_fork(&held).unwrap();
        TenantPolicy::unrestricted().check_start(&bare).unwrap();
        // Under the ceiling but without limits (made before the tenant had
        // them): refused too, by the limit's name.
        let mut unlimited = held.clone();
        unlimited.memory_mb = None;
        for e in [
            p.check_start(&unlimited).unwrap_err(),
            p.check_fork(&unlimited).unwrap_err(),
        ] {
            assert!(
                matches!(&e, Error::InvalidConfig { field, .. } if field == "memory_mb"),
                "{e}"
            );
        }
    }

    #[tokio::test]
    async fn only_the_default_tenant_widens_the_filter_or_drops_the_defaults() {
        let mut wide = config(serde_json::json!("none"), "busybox");
        wide.seccomp_allow = vec!["io_uring_setup".into()];
        let p = TenantPolicy::scoped(&[]);
        let field = |e: Error| match e {
            Error::InvalidConfig { field, .. } => field,
            other => panic!("{other}"),
        };
        assert_eq!(
            field(p.check_create(&mut wide.clone(), None).await.unwrap_err()),
            "seccomp_allow"
        );
        assert_eq!(
            field(p.check_pool(&mut wide.clone(), None).await.unwrap_err()),
            "seccomp_allow"
        );
        // Stored somehow (a record from before): never started or copied.
        let mut held = config(serde_json::json!("none"), "busybox");
        p.check_create(&mut held, None).await.unwrap();
        held.seccomp_allow = wide.seccomp_allow.clone();
        assert_eq!(field(p.check_start(&held).unwrap_err()), "seccomp_allow");
        assert_eq!(field(p.check_fork(&held).unwrap_err()), "seccomp_allow");
        let mut bare = config(serde_json::json!("none"), "busybox");
        bare.default_limits = false;
        assert_eq!(
            field(p.check_create(&mut bare.clone(), None).await.unwrap_err()),
            "default_limits"
        );
        let mut own = wide.clone();
        TenantPolicy::unrestricted()
            .check_create(&mut own, None)
            .await
            .unwrap();
        assert_eq!(own.seccomp_allow, wide.seccomp_allow);
    }
}
