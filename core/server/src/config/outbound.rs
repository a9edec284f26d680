//! `[outbound]`: what the server's own outbound calls for its tenants (URL
//! gateway targets, webhooks, the pulls of a tenant's images) may reach of
//! the addresses the outbound guard denies (the host's own, loopback,
//! private, link-local, ...; see `burrow_net::ceiling`).
//!
//! ```toml
//! [outbound]
//! allow = ["tcp:127.0.0.1:9000", "10.20.0.0/16", "hooks.internal"]
//! ```
//!
//! Each entry is a network rule (`[tcp:]HOST[:PORTS]`: an address, a
//! CIDR, a domain, a `*.` wildcard); `BURROW_SERVE_OUTBOUND_ALLOW` takes
//! them comma-separated. Empty (the default): every denied address is
//! refused, for every tenant, the default one included.

use burrow_net::Rule;

use super::resolve::Raw;

/// Most entries of `outbound.allow`.
const MAX_ALLOW: usize = 256;

/// `[outbound]`: the operator's exceptions to the outbound guard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundConfig {
    /// Rules naming what the server's outbound calls may reach although
    /// the guard denies it (`127.0.0.1`, `tcp:10.0.0.5:5000`,
    /// `registry.internal`). Empty: nothing.
    pub allow: Vec<Rule>,
}

/// Parses `outbound.allow`: a TOML array of rule strings, or the
/// environment's comma-separated list.
pub(super) fn parse_allow(raw: &Raw<'_>) -> Result<Vec<Rule>, String> {
    let entries: Vec<&str> = match raw {
        Raw::Toml(toml::Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s.as_str()),
                other => Err(format!(
                    "expected an array of strings, found an element {} `{other}`",
                    other.type_str()
                )),
            })
            .collect::<Result<_, _>>()?,
        Raw::Toml(v) => {
            return Err(format!(
                "expected an array of rules such as [\"10.0.0.0/8\", \"tcp:127.0.0.1:9000\"], \
                 found {} `{v}`",
                v.type_str()
            ))
        }
        Raw::Env(s) => s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect(),
    };
    if entries.len() > MAX_ALLOW {
        return Err(format!("more than {MAX_ALLOW} rules"));
    }
    entries
        .into_iter()
        .map(|e| e.parse::<Rule>().map_err(|err| err.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_rules_from_the_file_and_the_environment() {
        let v: toml::Value =
            toml::from_str(r#"a = ["127.0.0.1", "tcp:10.0.0.0/8:5000", "hooks.internal"]"#)
                .unwrap();
        let rules = parse_allow(&Raw::Toml(&v["a"])).unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[1].to_string(), "tcp:10.0.0.0/8:5000");
        let rules = parse_allow(&Raw::Env(" 127.0.0.1 , [::1] ,")).unwrap();
        assert_eq!(rules.len(), 2);
        assert!(parse_allow(&Raw::Env("")).unwrap().is_empty());
        for bad in ["a..b", "10.0.0.0/33", "tcp:"] {
            assert!(parse_allow(&Raw::Env(bad)).is_err(), "{bad}");
        }
        let v: toml::Value = toml::from_str(r#"a = "127.0.0.1""#).unwrap();
        assert!(parse_allow(&Raw::Toml(&v["a"])).is_err());
    }
}
