//! Secrets of a sandbox's configuration: values the guest never holds.
//!
//! Each secret has a name (the guest's environment variable), the hosts it
//! is for, optionally the headers it goes in, and a value. The guest's
//! variable holds a placeholder; the sandbox's network stack puts the
//! value in its place in those headers (`Authorization` and
//! `Proxy-Authorization` unless others are named) of HTTP requests to
//! those hosts only, and masks it out of their answers (see
//! docs/networking.md). The value is given at create
//! and never read back: a configuration a backend returns has each
//! secret's name, hosts and placeholder, and no value; the local backend
//! keeps the values sealed (ChaCha20-Poly1305) with a key file outside its
//! database.

use std::fmt;

use serde::{Deserialize, Serialize};

use burrow_net::secrets::MAX_HEADERS;
pub use burrow_net::secrets::{SecretHost, MAX_HOSTS, MAX_SECRETS, MAX_VALUE};

use crate::error::{Error, Result};

/// A secret's value: shown nowhere (`Debug` and `Display` write
/// `<redacted>`), and never serialized.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> SecretValue {
        SecretValue(value.into())
    }

    /// The value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for SecretValue {
    fn from(s: String) -> Self {
        SecretValue(s)
    }
}

impl From<&str> for SecretValue {
    fn from(s: &str) -> Self {
        SecretValue(s.to_owned())
    }
}

/// A secret of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Secret {
    /// The guest's environment variable that holds the placeholder
    /// (`[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// The hosts whose HTTP requests get the value: `api.example.com`,
    /// `*.example.com` (its subdomains), or an IPv4 address (`127.0.0.1`
    /// for the host's loopback, which the guest reaches at its gateway).
    pub hosts: Vec<String>,
    /// The request headers whose values get it (any case): absent or
    /// empty, `Authorization` and `Proxy-Authorization`. Naming headers
    /// replaces those two. Never `Host` or another header that routes or
    /// frames a request (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// The value: given at create, never serialized (so never in a
    /// configuration a backend returns, nor in its records).
    #[serde(default, skip_serializing)]
    pub value: Option<SecretValue>,
    /// What the guest's variable holds (`BURROW_SECRET_` and 32 hex
    /// digits), chosen by the backend at create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
}

impl Secret {
    /// The secret `name` with `value`, for `hosts`.
    pub fn new<I, S>(name: impl Into<String>, value: impl Into<SecretValue>, hosts: I) -> Secret
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Secret {
            name: name.into(),
            hosts: hosts.into_iter().map(Into::into).collect(),
            headers: Vec::new(),
            value: Some(value.into()),
            placeholder: None,
        }
    }

    /// The same secret, going in the headers `headers` instead of
    /// `Authorization` and `Proxy-Authorization`:
    /// `Secret::new("KEY", key, ["api.example.com"]).in_headers(["X-Api-Key"])`.
    pub fn in_headers<I, S>(mut self, headers: I) -> Secret
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.headers = headers.into_iter().map(Into::into).collect();
        self
    }

    /// The hosts, parsed (they were validated with the configuration).
    pub fn parsed_hosts(&self) -> Vec<SecretHost> {
        self.hosts
            .iter()
            .filter_map(|h| SecretHost::parse(h).ok())
            .collect()
    }
}

/// Puts the values of `secrets` into `config`, a configuration serialized
/// for a create request (`config.secrets[i].value`), where they are
/// given; the one place a value is written out.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn attach_values(config: &mut serde_json::Value, secrets: &[Secret]) {
    let Some(list) = config.get_mut("secrets").and_then(|s| s.as_array_mut()) else {
        return;
    };
    for (json, s) in list.iter_mut().zip(secrets) {
        if let (Some(obj), Some(v)) = (json.as_object_mut(), &s.value) {
            obj.insert(
                "value".into(),
                serde_json::Value::String(v.expose().to_owned()),
            );
        }
    }
}

/// A fresh placeholder.
#[cfg(any(feature = "local", test))]
pub(crate) fn new_placeholder() -> String {
    burrow_net::secrets::placeholder_from(rand::random())
}

/// Checks the secrets of a configuration whose environment is `env`:
/// names, hosts, values where given, and that each has a value or (one
/// read back) a placeholder. The first problem is
/// [`Error::InvalidConfig`] naming the field (`secrets[1].hosts[0]`).
pub(crate) fn validate(
    secrets: &[Secret],
    env: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    let bad = |field: String, reason: String| Err(Error::InvalidConfig { field, reason });
    if secrets.len() > MAX_SECRETS {
        return bad("secrets".into(), format!("more than {MAX_SECRETS} secrets"));
    }
    let mut names = std::collections::HashSet::new();
    for (i, s) in secrets.iter().enumerate() {
        let field = |part: &str| format!("secrets[{i}].{part}");
        if let Err(e) = burrow_net::secrets::check_name(&s.name) {
            return bad(field("name"), e.reason);
        }
        if !names.insert(s.name.as_str()) {
            return bad(field("name"), format!("two secrets are named {}", s.name));
        }
        if env.contains_key(&s.name) {
            return bad(
                field("name"),
                format!(
                    "{} is also set in env; a secret's variable is its own",
                    s.name
                ),
            );
        }
        if s.hosts.is_empty() || s.hosts.len() > MAX_HOSTS {
            return bad(
                field("hosts"),
                format!("a secret is for 1 to {MAX_HOSTS} hosts"),
            );
        }
        for (j, h) in s.hosts.iter().enumerate() {
            if let Err(e) = SecretHost::parse(h) {
                return bad(format!("secrets[{i}].hosts[{j}]"), e.reason);
            }
        }
        if s.headers.len() > MAX_HEADERS {
            return bad(
                field("headers"),
                format!("a secret names at most {MAX_HEADERS} headers"),
            );
        }
        for (j, h) in s.headers.iter().enumerate() {
            let field = format!("secrets[{i}].headers[{j}]");
            if let Err(e) = burrow_net::secrets::check_header(h) {
                return bad(field, e.reason);
            }
            if s.headers[..j].iter().any(|o| o.eq_ignore_ascii_case(h)) {
                return bad(field, format!("{h} is named twice"));
            }
        }
        match (&s.value, &s.placeholder) {
            (Some(v), _) => {
                if let Err(e) = burrow_net::secrets::check_value(v.expose()) {
                    return bad(field("value"), e.reason);
                }
            }
            (None, Some(p)) if burrow_net::secrets::is_placeholder(p) => {}
            (None, _) => return bad(field("value"), "no value given".into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_value_is_never_written_nor_shown() {
        let s = Secret::new("GH", "ghp_x", ["api.github.com"]);
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("ghp_x"), "{json}");
        assert!(!format!("{s:?}").contains("ghp_x"));
        let back: Secret =
            serde_json::from_str(r#"{"name":"GH","hosts":["a.b"],"value":"v"}"#).unwrap();
        assert_eq!(back.value.unwrap().expose(), "v");
    }

    #[test]
    fn bad_secrets_name_their_field() {
        let env = Default::default();
        let field = |s: Vec<Secret>| match validate(&s, &env) {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(vec![Secret::new("1X", "v", ["a.b"])]),
            "secrets[0].name"
        );
        assert_eq!(
            field(vec![Secret::new("X", "v", ["a.b", "bad host"])]),
            "secrets[0].hosts[1]"
        );
        assert_eq!(
            field(vec![Secret::new("X", "v\n", ["a.b"])]),
            "secrets[0].value"
        );
        assert_eq!(
            field(vec![
                Secret::new("X", "v", ["a.b"]),
                Secret::new("X", "w", ["a.b"])
            ]),
            "secrets[1].name"
        );
        let none: Vec<&str> = Vec::new();
        assert_eq!(field(vec![Secret::new("X", "v", none)]), "secrets[0].hosts");
        let mut s = Secret::new("X", "v", ["a.b"]);
        s.value = None;
        assert_eq!(field(vec![s.clone()]), "secrets[0].value");
        s.placeholder = Some(new_placeholder());
        validate(&[s], &env).unwrap();
        let env = [("X".to_owned(), "1".to_owned())].into();
        assert!(validate(&[Secret::new("X", "v", ["a.b"])], &env).is_err());
    }

    #[test]
    fn headers_are_optional_checked_and_kept() {
        let env = Default::default();
        let plain = Secret::new("X", "v", ["a.b"]);
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("headers"), "{json}");
        let named = plain.clone().in_headers(["X-Api-Key", "x-other"]);
        validate(std::slice::from_ref(&named), &env).unwrap();
        let json = serde_json::to_value(&named).unwrap();
        assert_eq!(json["headers"], serde_json::json!(["X-Api-Key", "x-other"]));
        let back: Secret = serde_json::from_value(json).unwrap();
        assert_eq!(back.headers, named.headers);
        let field = |s: Secret| match validate(&[s], &env) {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        for bad in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "x y",
            "",
            "a:b",
        ] {
            assert_eq!(
                field(plain.clone().in_headers(["Authorization", bad])),
                "secrets[0].headers[1]",
                "{bad}"
            );
        }
        assert_eq!(
            field(plain.clone().in_headers(["X-A", "x-a"])),
            "secrets[0].headers[1]"
        );
        let many: Vec<String> = (0..=MAX_HEADERS).map(|i| format!("X-{i}")).collect();
        assert_eq!(field(plain.clone().in_headers(many)), "secrets[0].headers");
        // Unknown fields are still refused.
        assert!(serde_json::from_str::<Secret>(
            r#"{"name":"GH","hosts":["a.b"],"value":"v","header":["X"]}"#
        )
        .is_err());
    }
}
