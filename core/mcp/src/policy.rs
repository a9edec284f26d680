//! What an agent may do through one server.

use burrow::Error;

use crate::CreateArgs;

/// What an agent may do.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Images it may use (empty: any).
    pub allowed_images: Vec<String>,
    /// Sandboxes it may have at once (its own, by [`crate::LABEL`]; `None`:
    /// no limit).
    pub max_sandboxes: Option<usize>,
    /// The most CPUs one sandbox may ask for (`None`: no limit).
    pub max_cpus: Option<f64>,
    /// The most memory one sandbox may ask for, in MiB (`None`: no limit).
    pub max_memory_mb: Option<u64>,
    /// Whether a sandbox may have a network at all (default: none).
    pub allow_network: bool,
}

impl Policy {
    /// Checks a create's arguments; a refusal is `invalid_config` naming
    /// the field. (The count of sandboxes is the server's to check: it
    /// needs the backend.)
    pub fn check(&self, a: &CreateArgs) -> Result<(), Error> {
        let refuse = |field: &str, reason: String| {
            Err(Error::InvalidConfig {
                field: field.into(),
                reason,
            })
        };
        if !self.allowed_images.is_empty() && !self.allowed_images.contains(&a.image) {
            return refuse(
                "image",
                format!("{:?} is not an image this server allows", a.image),
            );
        }
        if let (Some(max), Some(c)) = (self.max_cpus, a.cpus) {
            if c > max {
                return refuse("cpus", format!("{c} is over this server's limit of {max}"));
            }
        }
        if let (Some(max), Some(m)) = (self.max_memory_mb, a.memory_mb) {
            if m > max {
                return refuse(
                    "memory_mb",
                    format!("{m} is over this server's limit of {max}"),
                );
            }
        }
        if a.network_allow.is_some() && !self.allow_network {
            return refuse(
                "network_allow",
                "this server's sandboxes have no network".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(image: &str) -> CreateArgs {
        CreateArgs {
            name: "a".into(),
            image: image.into(),
            cpus: None,
            memory_mb: None,
            network_allow: None,
            idle_timeout_s: None,
        }
    }

    fn refused_field(p: &Policy, a: &CreateArgs) -> Option<String> {
        match p.check(a) {
            Ok(()) => None,
            Err(Error::InvalidConfig { field, .. }) => Some(field),
            Err(e) => panic!("not invalid_config: {e:?}"),
        }
    }

    #[test]
    fn each_limit_refuses_its_own_field_and_the_default_allows_all_but_network() {
        let open = Policy::default();
        assert_eq!(refused_field(&open, &args("busybox")), None);
        let mut net = args("busybox");
        net.network_allow = Some(vec![]);
        assert_eq!(refused_field(&open, &net).as_deref(), Some("network_allow"));

        let p = Policy {
            allowed_images: vec!["busybox".into()],
            max_cpus: Some(1.0),
            max_memory_mb: Some(256),
            allow_network: true,
            ..Policy::default()
        };
        assert_eq!(refused_field(&p, &net), None);
        assert_eq!(refused_field(&p, &args("alpine")).as_deref(), Some("image"));
        let mut big = args("busybox");
        big.cpus = Some(1.5);
        assert_eq!(refused_field(&p, &big).as_deref(), Some("cpus"));
        big.cpus = Some(1.0);
        big.memory_mb = Some(257);
        assert_eq!(refused_field(&p, &big).as_deref(), Some("memory_mb"));
        big.memory_mb = Some(256);
        assert_eq!(refused_field(&p, &big), None);
    }
}
