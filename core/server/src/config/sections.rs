//! The validated types: listen addresses, the database URL, the backend,
//! the log format, and the sections (`[gateway]`, `[reaper]`, ...).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A listen address of the HTTP API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP socket (`host:port`, the host an IP address).
    Tcp(SocketAddr),
    /// A unix socket at this absolute path (`unix:/path`).
    Unix(PathBuf),
}

impl Listen {
    /// Whether this is a TCP address that is not loopback.
    pub fn is_public(&self) -> bool {
        match self {
            Listen::Tcp(addr) => !addr.ip().to_canonical().is_loopback(),
            Listen::Unix(_) => false,
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The database URL: SQLite for one replica, Postgres for several.
///
/// `Display` and `Debug` hide the password; [`DatabaseUrl::as_str`] is the
/// full URL to connect with.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A `sqlite:` URL.
    Sqlite(String),
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl DatabaseUrl {
    /// The full URL, password included: for connecting, never for logging.
    pub fn as_str(&self) -> &str {
        match self {
            DatabaseUrl::Sqlite(url) | DatabaseUrl::Postgres(url) => url,
        }
    }

    /// Whether this is a Postgres database (several replicas can share it).
    pub fn is_postgres(&self) -> bool {
        matches!(self, DatabaseUrl::Postgres(_))
    }

    /// The URL with any password (in the user info or a `password=` query
    /// parameter) replaced by `***`: safe to log.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseUrl::Sqlite(url) => url.clone(),
            DatabaseUrl::Postgres(url) => redact_url(url),
        }
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::Sqlite(_) => write!(f, "Sqlite({:?})", self.redacted()),
            DatabaseUrl::Postgres(_) => write!(f, "Postgres({:?})", self.redacted()),
        }
    }
}

/// Replaces the password of `scheme://user:password@host/...?password=...`.
fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(parts) => parts,
        None => return url.to_owned(),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***{host}"),
                None => authority.to_owned(),
            }
        }
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((q, frag)) => (q, Some(frag)),
                None => (query, None),
            };
            let query = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            match fragment {
                Some(frag) => format!("{path}?{query}#{frag}"),
                None => format!("{path}?{query}"),
            }
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// The engine backend the server runs sandboxes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The embedded local backend (supervisor processes on this host).
    Local,
    /// Sandboxes as pods on a Kubernetes cluster (`burrow-kube`; the
    /// `[kubernetes]` settings).
    Kubernetes,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendKind::Local => f.write_str("local"),
            BackendKind::Kubernetes => f.write_str("kubernetes"),
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogFormat::Text => f.write_str("text"),
            LogFormat::Json => f.write_str("json"),
        }
    }
}

/// `[database_pool]`: the connection pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most connections the pool opens (1..=1000).
    pub max_connections: u32,
    /// How long a request waits for a free connection before failing (> 0).
    pub acquire_timeout: Duration,
}

/// `[auth]`: API tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// Whether TCP listeners require an API token. Unix-socket listeners
    /// never do (the socket's file permissions guard them).
    pub required: bool,
    /// Requests one token may make per minute on one replica (a
    /// sixth of it at once); more are answered `rate_limited` (429, with
    /// `Retry-After`). `None`: no limit.
    pub requests_per_minute: Option<u32>,
}

/// `[gateway]`: the demand gateway and its leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Bound on one demand start (> 0).
    pub startup_timeout: Duration,
    /// `Retry-After` of a 503 answered while a start is in progress (whole
    /// seconds, >= 1s).
    pub retry_after: Duration,
    /// How long a lease lives without a heartbeat (>= 1s).
    pub lease_ttl: Duration,
    /// How often a running call renews its lease (> 0, < `lease_ttl`).
    pub heartbeat_interval: Duration,
    /// How long the gateway keeps an MCP session it re-establishes after a
    /// reclaim, counted from its last call (>= 1m).
    pub mcp_session_ttl: Duration,
    /// The gateway's own listeners: sandbox content on an origin of its
    /// own, routed by host name (`{id}.{domain}`, `{port}-{id}.{domain}`),
    /// never on the API's and the console's. Empty: none.
    pub listen: Vec<Listen>,
    /// The domain the gateway's host names end in, with the port browsers
    /// use when it is not the scheme's default (`localhost:8081`,
    /// `sandboxes.example.com`). `None` when there is no gateway listener.
    pub domain: Option<GatewayDomain>,
}

/// The domain of the gateway's origins: each target is `{id}.{host}` (and
/// `{port}-{id}.{host}`), reached at `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayDomain {
    /// The host name the targets' names end in (lower case, no dot at
    /// either end).
    pub host: String,
    /// The port in the links the server hands out (`None`: the scheme's
    /// default).
    pub port: Option<u16>,
}

impl GatewayDomain {
    /// Parses `host[:port]`: a DNS name of letters, digits, `-` and `.`.
    pub fn parse(text: &str) -> Result<GatewayDomain, String> {
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("`{text}`: {p:?} is not a port"))?,
                ),
            ),
            None => (text, None),
        };
        let host = host.to_ascii_lowercase();
        let ok = !host.is_empty()
            && host.len() <= 200
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !ok {
            return Err(format!(
                "`{text}` is not a domain (host[:port], e.g. localhost:8081 or sandboxes.example.com)"
            ));
        }
        Ok(GatewayDomain { host, port })
    }

    /// The authority of a target's origin: `{label}.{host}[:port]`.
    pub fn authority(&self, label: &str) -> String {
        match self.port {
            Some(p) => format!("{label}.{}:{p}", self.host),
            None => format!("{label}.{}", self.host),
        }
    }

    /// The label a `Host` header names under this domain (the part before
    /// `.{host}`, one label, lower case), if it is one of ours.
    pub fn label_of<'a>(&self, host_header: &'a str) -> Option<&'a str> {
        let name = match host_header.rsplit_once(':') {
            Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => host_header,
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.len() <= self.host.len() + 1 {
            return None;
        }
        let (label, rest) = name.split_at(name.len() - self.host.len() - 1);
        let rest = &rest[1..];
        (rest.eq_ignore_ascii_case(&self.host)
            && name.as_bytes()[label.len()] == b'.'
            && !label.is_empty()
            && !label.contains('.'))
        .then_some(label)
    }
}

/// `[audit]`: the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// How long entries are kept; `None` when configured as `0` (kept
    /// until deleted by hand).
    pub retention: Option<Duration>,
}

/// `[events]`: the lifecycle event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// How long events (and finished webhook deliveries) are kept; `None`
    /// when configured as `0` (kept until deleted by hand).
    pub retention: Option<Duration>,
}

/// `[webhooks]`: posting events to the tenants' webhooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhooksConfig {
    /// The longest an attempt may take, connection to answer (> 0, <= 5m).
    pub timeout: Duration,
    /// The wait after a first failed attempt, doubled after each next one
    /// (at most 10m; > 0).
    pub backoff: Duration,
    /// Attempts before a delivery is given up (1..=50).
    pub max_attempts: u32,
}

/// `[tls]`: TLS on the TCP listeners (unix-socket listeners stay plain
/// HTTP). The files are read when the server starts, and again whenever
/// they change while it runs (see `crate::tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain, PEM: the server's certificate first, then
    /// the intermediates (absolute).
    pub cert: PathBuf,
    /// The private key of that certificate, PEM: PKCS#8, PKCS#1 (RSA) or
    /// SEC1 (EC) (absolute).
    pub key: PathBuf,
}

/// `[reaper]`: idle reclaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaperConfig {
    /// Idle time after which a sandbox is reclaimed; `None` when configured
    /// as `0`, which disables reclaim.
    pub idle_timeout: Option<Duration>,
    /// How often the reaper looks for idle sandboxes and expired leases (> 0).
    pub sweep_interval: Duration,
}

impl ReaperConfig {
    /// Whether idle reclaim is on.
    pub fn enabled(&self) -> bool {
        self.idle_timeout.is_some()
    }
}

/// `[log]`: logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Output format.
    pub format: LogFormat,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        let cases = [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?password=secret&sslmode=require",
                "postgres://h/db?password=***&sslmode=require",
            ),
            ("postgres://u:secret@h", "postgres://u:***@h"),
        ];
        for (url, want) in cases {
            let db = DatabaseUrl::Postgres(url.into());
            assert_eq!(db.redacted(), want);
            assert_eq!(db.to_string(), want);
            assert!(!format!("{db:?}").contains("secret"));
            assert!(!format!("{db:?}").contains("ss@"));
        }
        let db = DatabaseUrl::Sqlite("sqlite:///x.db".into());
        assert_eq!(db.redacted(), "sqlite:///x.db");
    }
}
