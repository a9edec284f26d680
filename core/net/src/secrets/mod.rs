//! Secrets that never enter the sandbox.
//!
//! The guest holds a placeholder (`BURROW_SECRET_` and 32 hex digits) in
//! its environment; the stack puts the real value in place of the
//! placeholder in the values of the headers the secret names
//! (`Authorization` and `Proxy-Authorization` unless it names others) of
//! each HTTP request to a host the secret is for, over plain HTTP or over
//! HTTPS that it intercepts with a per-sandbox CA the guest trusts, and
//! masks the value out of what comes back. A placeholder anywhere else (the
//! request line, another header, a request to another host or naming two,
//! a body to a host it is not for, a connection that is not HTTP) closes
//! the connection as a refusal. This module has the model: what a secret's
//! host and headers may be and how a placeholder looks; [`http`] reads the
//! requests, [`answer`] the answers, [`redact`] masks the values (the
//! value, and its encodings), [`tls`] speaks to both ends of an
//! intercepted connection.

use std::fmt;
use std::net::Ipv4Addr;

#[cfg(feature = "stack")]
pub mod answer;
#[cfg(feature = "stack")]
mod head;
#[cfg(feature = "stack")]
pub mod http;
pub mod redact;
#[cfg(feature = "stack")]
pub mod tls;

/// What every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "BURROW_SECRET_";
/// Hex digits after the prefix.
pub const PLACEHOLDER_DIGITS: usize = 32;
/// Longest secret value, in bytes.
pub const MAX_VALUE: usize = 16 * 1024;
/// Most secrets of one sandbox.
pub const MAX_SECRETS: usize = 32;
/// Most hosts of one secret.
pub const MAX_HOSTS: usize = 32;
/// Most headers one secret names.
pub const MAX_HEADERS: usize = 16;
/// The headers a secret goes in when it names none.
pub const DEFAULT_HEADERS: [&str; 2] = ["Authorization", "Proxy-Authorization"];
/// Headers a secret may not name: they route or frame the request (a value
/// there would change where it goes or how it is read), or the stack
/// writes them itself.
pub const FORBIDDEN_HEADERS: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "accept-encoding",
];

/// Whether `s` is a placeholder's form.
pub fn is_placeholder(s: &str) -> bool {
    s.strip_prefix(PLACEHOLDER_PREFIX).is_some_and(|hex| {
        hex.len() == PLACEHOLDER_DIGITS && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A placeholder from 16 random bytes.
pub fn placeholder_from(random: [u8; 16]) -> String {
    let mut s = String::with_capacity(PLACEHOLDER_PREFIX.len() + PLACEHOLDER_DIGITS);
    s.push_str(PLACEHOLDER_PREFIX);
    for b in random {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A host a secret may be sent to: a domain, its subdomains (`*.` and the
/// domain), or an IPv4 address (the host's loopback is `127.0.0.1`, which
/// the guest reaches at its gateway).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SecretHost {
    /// Exactly this domain (lower case, no trailing dot).
    Domain(String),
    /// Any subdomain of this domain at any depth, not the domain itself
    /// (`*.example.com`).
    Subdomains(String),
    /// This address, where a request names it (`Host: 203.0.113.7`).
    Ip(Ipv4Addr),
}

/// A secret's host or name that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {text:?}: {reason}")]
pub struct SecretError {
    /// What was wrong: `secret name`, `secret host`, `secret value`.
    pub what: &'static str,
    /// The text given (cut to 80 characters; never a value).
    pub text: String,
    /// Why.
    pub reason: String,
}

impl SecretError {
    fn new(what: &'static str, text: &str, reason: impl Into<String>) -> SecretError {
        SecretError {
            what,
            text: text.chars().take(80).collect(),
            reason: reason.into(),
        }
    }
}

impl SecretHost {
    /// Parses `example.com`, `*.example.com` or `203.0.113.7`.
    pub fn parse(text: &str) -> Result<SecretHost, SecretError> {
        let bad = |reason: String| SecretError::new("secret host", text, reason);
        if text.len() > 255 {
            return Err(bad("longer than 255 bytes".into()));
        }
        if let Ok(ip) = text.parse::<Ipv4Addr>() {
            return Ok(SecretHost::Ip(ip));
        }
        if let Some(rest) = text.strip_prefix("*.") {
            return crate::policy::domain(rest)
                .map(SecretHost::Subdomains)
                .map_err(bad);
        }
        crate::policy::domain(text)
            .map(SecretHost::Domain)
            .map_err(bad)
    }

    /// Whether a request to `host` (a lower-case domain or an IPv4
    /// address's text) may carry the secret.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            SecretHost::Domain(d) => d == host,
            SecretHost::Subdomains(d) => {
                host.len() > d.len() + 1
                    && host.ends_with(d.as_str())
                    && host.as_bytes()[host.len() - d.len() - 1] == b'.'
            }
            SecretHost::Ip(ip) => host.parse::<Ipv4Addr>().is_ok_and(|h| h == *ip),
        }
    }
}

impl fmt::Display for SecretHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretHost::Domain(d) => f.write_str(d),
            SecretHost::Subdomains(d) => write!(f, "*.{d}"),
            SecretHost::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Checks a secret's name: an environment variable's (`[A-Za-z_][A-Za-z0-9_]*`,
/// at most 128 bytes).
pub fn check_name(name: &str) -> Result<(), SecretError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SecretError::new(
            "secret name",
            name,
            "not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128 bytes)",
        ))
    }
}

/// Checks a header name a secret names: an HTTP token (RFC 9110) of 1 to
/// 64 bytes, not one of [`FORBIDDEN_HEADERS`].
pub fn check_header(name: &str) -> Result<(), SecretError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > 64 || !name.bytes().all(token) {
        return Err(SecretError::new(
            "secret header",
            name,
            "not a header name (letters, digits and !#$%&'*+-.^_`|~, at most 64 bytes)",
        ));
    }
    if FORBIDDEN_HEADERS
        .iter()
        .any(|f| f.eq_ignore_ascii_case(name))
    {
        return Err(SecretError::new(
            "secret header",
            name,
            "it routes or frames the request (Host, Content-Length, Transfer-Encoding, Connection, ...); a secret goes only in headers that do neither",
        ));
    }
    Ok(())
}

/// Checks a secret's value: 1 to [`MAX_VALUE`] bytes, without NUL, CR or
/// LF (it goes into a request line or a header). The error never quotes
/// the value.
pub fn check_value(value: &str) -> Result<(), SecretError> {
    if value.is_empty() || value.len() > MAX_VALUE {
        return Err(SecretError::new(
            "secret value",
            "",
            format!("the value is empty or longer than {MAX_VALUE} bytes"),
        ));
    }
    if value.bytes().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
        return Err(SecretError::new(
            "secret value",
            "",
            "the value has a NUL, CR or LF byte",
        ));
    }
    Ok(())
}

/// A secret as the stack holds it.
#[derive(Clone)]
pub struct Secret {
    /// Its name (the guest's environment variable).
    pub name: String,
    /// What the guest holds.
    pub placeholder: String,
    /// The value.
    pub value: String,
    /// Where it may go.
    pub hosts: Vec<SecretHost>,
    /// The headers whose values get it (empty: [`DEFAULT_HEADERS`]).
    pub headers: Vec<String>,
}

impl Secret {
    /// Whether a request to `host` may carry it.
    pub fn allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.matches(host))
    }

    /// Whether it goes in the value of the header `name` (any case).
    pub fn goes_in(&self, name: &str) -> bool {
        if FORBIDDEN_HEADERS
            .iter()
            .any(|f| f.eq_ignore_ascii_case(name))
        {
            return false;
        }
        if self.headers.is_empty() {
            DEFAULT_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
        } else {
            self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
        }
    }

    /// The headers it goes in, as a log says them.
    pub fn header_names(&self) -> String {
        if self.headers.is_empty() {
            DEFAULT_HEADERS.join(", ")
        } else {
            self.headers.join(", ")
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;

/// The secrets of one sandbox's stack, the TLS interceptor of the hosts
/// they are for (`None`: HTTPS is not intercepted, so secrets go only into
/// plain HTTP requests), and the forms of their values that are masked
/// out of answers.
#[cfg(feature = "stack")]
#[derive(Debug)]
pub struct Secrets {
    /// The secrets.
    pub list: std::sync::Arc<[Secret]>,
    /// The interceptor.
    pub tls: Option<tls::Interceptor>,
    forms: std::sync::Arc<redact::Forms>,
}

#[cfg(feature = "stack")]
impl Secrets {
    /// The secrets `list`, intercepting HTTPS with `tls`.
    pub fn new(list: Vec<Secret>, tls: Option<tls::Interceptor>) -> Secrets {
        let forms = redact::Forms::new(list.iter().map(|s| s.value.as_bytes()));
        Secrets {
            list: std::sync::Arc::from(list),
            tls,
            forms: std::sync::Arc::new(forms),
        }
    }

    /// The forms of the values, to mask.
    pub fn forms(&self) -> std::sync::Arc<redact::Forms> {
        self.forms.clone()
    }

    /// Whether some secret may go to `name` (so that its HTTPS is
    /// intercepted).
    pub fn for_host(&self, name: &str) -> bool {
        self.list.iter().any(|s| s.allowed(name))
    }
}
