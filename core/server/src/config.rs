//! Configuration of `burrow serve`.
//!
//! The configuration comes from an optional TOML file and from environment
//! variables; an environment variable overrides the file, the file overrides
//! the built-in default. Everything is validated while loading, and a bad
//! value stops the server with an error that names the key and where it came
//! from (the file and the key, or the environment variable). Nothing falls
//! back silently: an unknown key in the file or an unknown `BURROW_SERVE_*`
//! variable is an error too, so typos are caught.
//!
//! | file key                          | environment variable               | default                      |
//! |-----------------------------------|------------------------------------|------------------------------|
//! | `listen`                          | `BURROW_SERVE_LISTEN` (commas)     | `["127.0.0.1:7878"]`         |
//! | `allow_public`                    | `BURROW_SERVE_ALLOW_PUBLIC`        | `false`                      |
//! | `database`                        | `BURROW_SERVE_DATABASE`            | `sqlite://<home>/serve.db?mode=rwc` |
//! | `home`                            | `BURROW_HOME`                      | as [`burrow::paths::Home::from_env`] |
//! | `backend`                         | `BURROW_SERVE_BACKEND`             | `"local"`                    |
//! | `replica_id`                      | `BURROW_SERVE_REPLICA_ID`          | `<hostname>-<pid>`           |
//! | `database_pool.max_connections`   | `BURROW_SERVE_MAX_CONNECTIONS`     | `10`                         |
//! | `database_pool.acquire_timeout`   | `BURROW_SERVE_ACQUIRE_TIMEOUT`     | `5s`                         |
//! | `auth.required`                   | `BURROW_SERVE_AUTH_REQUIRED`       | `true`                       |
//! | `gateway.startup_timeout`         | `BURROW_SERVE_STARTUP_TIMEOUT`     | `60s`                        |
//! | `gateway.retry_after`             | `BURROW_SERVE_RETRY_AFTER`         | `1s`                         |
//! | `gateway.lease_ttl`               | `BURROW_SERVE_LEASE_TTL`           | `30s`                        |
//! | `gateway.heartbeat_interval`      | `BURROW_SERVE_HEARTBEAT_INTERVAL`  | `lease_ttl / 3`              |
//! | `reaper.idle_timeout`             | `BURROW_SERVE_IDLE_TIMEOUT`        | `15m` (`0` disables reclaim) |
//! | `reaper.sweep_interval`           | `BURROW_SERVE_SWEEP_INTERVAL`      | `30s`                        |
//! | `log.format`                      | `BURROW_SERVE_LOG_FORMAT`          | `"text"` (or `"json"`)       |
//!
//! The file itself is the `file` argument of [`ServeConfig::load`], else
//! `BURROW_SERVE_CONFIG`; without either only the environment and the
//! defaults apply.
//!
//! Durations are written `250ms`, `30s`, `10m`, `1h`, `1h30m`, or as a bare
//! integer number of seconds (a TOML integer or string; a string in the
//! environment). Booleans in the environment are `true`, `false`, `1` or `0`.
//!
//! ```toml
//! listen = ["127.0.0.1:7878", "unix:/run/burrow/serve.sock"]
//! database = "postgres://burrow@db.internal/burrow"
//!
//! [gateway]
//! lease_ttl = "30s"
//!
//! [reaper]
//! idle_timeout = "10m"
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Environment variable naming the configuration file when no file is given.
pub const CONFIG_ENV: &str = "BURROW_SERVE_CONFIG";

/// Prefix of the environment variables `burrow serve` reads; any other
/// variable with this prefix is rejected as a typo.
pub const ENV_PREFIX: &str = "BURROW_SERVE_";

/// Longest unix socket path the kernel accepts (`sun_path` minus the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Upper bound of every duration setting, so later arithmetic cannot overflow.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest replica id.
const MAX_REPLICA_ID: usize = 64;

/// One setting: its key path in the file and its environment variable.
#[derive(Debug, Clone, Copy)]
struct Setting {
    key: &'static str,
    env: &'static str,
}

const LISTEN: Setting = Setting {
    key: "listen",
    env: "BURROW_SERVE_LISTEN",
};
const ALLOW_PUBLIC: Setting = Setting {
    key: "allow_public",
    env: "BURROW_SERVE_ALLOW_PUBLIC",
};
const DATABASE: Setting = Setting {
    key: "database",
    env: "BURROW_SERVE_DATABASE",
};
const HOME: Setting = Setting {
    key: "home",
    env: "BURROW_HOME",
};
const BACKEND: Setting = Setting {
    key: "backend",
    env: "BURROW_SERVE_BACKEND",
};
const REPLICA_ID: Setting = Setting {
    key: "replica_id",
    env: "BURROW_SERVE_REPLICA_ID",
};
const MAX_CONNECTIONS: Setting = Setting {
    key: "database_pool.max_connections",
    env: "BURROW_SERVE_MAX_CONNECTIONS",
};
const ACQUIRE_TIMEOUT: Setting = Setting {
    key: "database_pool.acquire_timeout",
    env: "BURROW_SERVE_ACQUIRE_TIMEOUT",
};
const AUTH_REQUIRED: Setting = Setting {
    key: "auth.required",
    env: "BURROW_SERVE_AUTH_REQUIRED",
};
const STARTUP_TIMEOUT: Setting = Setting {
    key: "gateway.startup_timeout",
    env: "BURROW_SERVE_STARTUP_TIMEOUT",
};
const RETRY_AFTER: Setting = Setting {
    key: "gateway.retry_after",
    env: "BURROW_SERVE_RETRY_AFTER",
};
const LEASE_TTL: Setting = Setting {
    key: "gateway.lease_ttl",
    env: "BURROW_SERVE_LEASE_TTL",
};
const HEARTBEAT_INTERVAL: Setting = Setting {
    key: "gateway.heartbeat_interval",
    env: "BURROW_SERVE_HEARTBEAT_INTERVAL",
};
const IDLE_TIMEOUT: Setting = Setting {
    key: "reaper.idle_timeout",
    env: "BURROW_SERVE_IDLE_TIMEOUT",
};
const SWEEP_INTERVAL: Setting = Setting {
    key: "reaper.sweep_interval",
    env: "BURROW_SERVE_SWEEP_INTERVAL",
};
const LOG_FORMAT: Setting = Setting {
    key: "log.format",
    env: "BURROW_SERVE_LOG_FORMAT",
};

/// Every setting, in the order `describe` and the docs use.
const SETTINGS: &[Setting] = &[
    LISTEN,
    ALLOW_PUBLIC,
    DATABASE,
    HOME,
    BACKEND,
    REPLICA_ID,
    MAX_CONNECTIONS,
    ACQUIRE_TIMEOUT,
    AUTH_REQUIRED,
    STARTUP_TIMEOUT,
    RETRY_AFTER,
    LEASE_TTL,
    HEARTBEAT_INTERVAL,
    IDLE_TIMEOUT,
    SWEEP_INTERVAL,
    LOG_FORMAT,
];

/// Tables of the file (`[name]`); every other top-level key is a value.
const TABLES: &[&str] = &["database_pool", "auth", "gateway", "reaper", "log"];

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A key in this configuration file.
    File(PathBuf),
    /// This environment variable.
    Env(String),
    /// The built-in default.
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "in configuration file {}", path.display()),
            Origin::Env(name) => write!(f, "from environment variable {name}"),
            Origin::Default => f.write_str("(built-in default)"),
        }
    }
}

/// A configuration that cannot be used; the server must not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file has a key no setting uses (a typo, or a key in the wrong table).
    #[error(
        "unknown key `{key}` in configuration file {}{}",
        path.display(),
        did_you_mean(suggestion.as_deref(), "`")
    )]
    UnknownKey {
        /// The configuration file.
        path: PathBuf,
        /// Dotted path of the key, e.g. `reaper.idle_timout`.
        key: String,
        /// The closest known key, if one is close.
        suggestion: Option<String>,
    },
    /// A value is malformed or out of range.
    #[error("invalid `{key}` {origin}: {reason}")]
    Invalid {
        /// Where the value came from.
        origin: Origin,
        /// Dotted path of the setting's key in the file, e.g. `gateway.lease_ttl`.
        key: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The configuration file cannot be read.
    #[error("cannot read configuration file {}: {error}", path.display())]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The configuration file is not valid TOML.
    #[error("configuration file {} is not valid TOML: {reason}", path.display())]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// The backend type is not one this server supports.
    #[error("unknown backend type \"{value}\" for `backend` {origin}; supported: local")]
    UnknownBackend {
        /// Where the value came from.
        origin: Origin,
        /// The backend type asked for.
        value: String,
    },
    /// A `BURROW_SERVE_*` environment variable that no setting uses.
    #[error(
        "unknown environment variable {name}: no burrow serve setting reads it{}",
        did_you_mean(suggestion.as_deref(), "")
    )]
    UnknownEnv {
        /// The variable's name.
        name: String,
        /// The closest known variable, if one is close.
        suggestion: Option<String>,
    },
}

fn did_you_mean(suggestion: Option<&str>, quote: &str) -> String {
    match suggestion {
        Some(s) => format!("; did you mean {quote}{s}{quote}?"),
        None => String::new(),
    }
}

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
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendKind::Local => f.write_str("local"),
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

/// The validated configuration of `burrow serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The configuration file that was read, if any.
    pub file: Option<PathBuf>,
    /// Addresses the HTTP API listens on (at least one, no duplicates; TCP
    /// addresses are loopback unless `allow_public`).
    pub listen: Vec<Listen>,
    /// Whether non-loopback TCP listen addresses are allowed.
    pub allow_public: bool,
    /// The server's database.
    pub database: DatabaseUrl,
    /// The engine's home directory (absolute; not created by loading).
    pub home: PathBuf,
    /// The engine backend.
    pub backend: BackendKind,
    /// This replica's id (1..=64 of `[A-Za-z0-9._-]`), unique among replicas.
    pub replica_id: String,
    /// `[database_pool]`.
    pub database_pool: PoolConfig,
    /// `[auth]`.
    pub auth: AuthConfig,
    /// `[gateway]`.
    pub gateway: GatewayConfig,
    /// `[reaper]`.
    pub reaper: ReaperConfig,
    /// `[log]`.
    pub log: LogConfig,
}

impl ServeConfig {
    /// Loads and validates the configuration: `file` (else the file named by
    /// `BURROW_SERVE_CONFIG` in `env`, else none), overridden by the
    /// variables in `env` (pass `std::env::vars().collect()`).
    pub fn load(file: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        check_env_names(env)?;
        let file = match file {
            Some(path) => Some(path.to_path_buf()),
            None => match env.get(CONFIG_ENV) {
                Some(path) if path.is_empty() => {
                    return Err(ConfigError::Invalid {
                        origin: Origin::Env(CONFIG_ENV.into()),
                        key: "configuration file".into(),
                        reason: "the path is empty; unset the variable to run without a file"
                            .into(),
                    })
                }
                Some(path) => Some(PathBuf::from(path)),
                None => None,
            },
        };
        let values = match &file {
            Some(path) => read_file(path)?,
            None => BTreeMap::new(),
        };
        let layers = Layers {
            file: file.as_deref(),
            values: &values,
            env,
        };
        layers.resolve(file.clone())
    }

    /// Whether a listener needs an API token: TCP listeners when
    /// `auth.required`, unix-socket listeners never.
    pub fn requires_token(&self, listen: &Listen) -> bool {
        match listen {
            Listen::Tcp(_) => self.auth.required,
            Listen::Unix(_) => false,
        }
    }

    /// A short multi-line summary to log at startup (the database password
    /// is hidden).
    pub fn describe(&self) -> String {
        let listen = self
            .listen
            .iter()
            .map(|l| {
                let mut notes = Vec::new();
                if l.is_public() {
                    notes.push("public");
                }
                notes.push(match (l, self.requires_token(l)) {
                    (_, true) => "token required",
                    (Listen::Unix(_), false) => "no token: unix socket",
                    (Listen::Tcp(_), false) => "no token: auth.required = false",
                });
                format!("{l} ({})", notes.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let file = match &self.file {
            Some(path) => path.display().to_string(),
            None => "none (defaults and environment)".into(),
        };
        let reaper = match self.reaper.idle_timeout {
            Some(idle) => format!(
                "idle timeout {}, sweep every {}",
                format_duration(idle),
                format_duration(self.reaper.sweep_interval)
            ),
            None => format!(
                "idle reclaim disabled (idle_timeout = 0), lease sweep every {}",
                format_duration(self.reaper.sweep_interval)
            ),
        };
        let g = &self.gateway;
        format!(
            "config file: {file}\n\
             listen:      {listen}\n\
             database:    {} (max {} connections, acquire timeout {})\n\
             home:        {}\n\
             backend:     {}\n\
             replica:     {}\n\
             gateway:     startup timeout {}, retry-after {}, lease ttl {}, heartbeat every {}\n\
             reaper:      {reaper}\n\
             log format:  {}",
            self.database.redacted(),
            self.database_pool.max_connections,
            format_duration(self.database_pool.acquire_timeout),
            self.home.display(),
            self.backend,
            self.replica_id,
            format_duration(g.startup_timeout),
            format_duration(g.retry_after),
            format_duration(g.lease_ttl),
            format_duration(g.heartbeat_interval),
            self.log.format,
        )
    }
}

/// Parses a duration: `250ms`, `30s`, `10m`, `1h`, `1h30m` (units `ms`, `s`,
/// `m`, `h`, combinable), or a bare integer number of seconds. At most 365
/// days.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const HINT: &str = "use e.g. 250ms, 30s, 10m, 1h30m or a number of seconds";
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty duration; {HINT}"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs = s
            .parse::<u64>()
            .map_err(|_| format!("`{text}` is too large; at most 365 days"))?;
        return bounded(Duration::from_secs(secs), text);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("`{text}` is not a duration; {HINT}"));
        }
        let (number, after) = rest.split_at(digits);
        let letters = after
            .bytes()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        let (unit, after) = after.split_at(letters);
        let n = number
            .parse::<u64>()
            .map_err(|_| format!("`{text}` is too large; at most 365 days"))?;
        let part = match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3600).map(Duration::from_secs),
            "" => return Err(format!("`{text}` has a number without a unit; {HINT}")),
            other => {
                return Err(format!(
                    "unknown unit `{other}` in `{text}`; units are ms, s, m and h"
                ))
            }
        };
        total = part
            .and_then(|p| total.checked_add(p))
            .ok_or_else(|| format!("`{text}` is too large; at most 365 days"))?;
        rest = after;
    }
    bounded(total, text)
}

fn bounded(d: Duration, text: &str) -> Result<Duration, String> {
    if d > MAX_DURATION {
        Err(format!("`{text}` is too large; at most 365 days"))
    } else {
        Ok(d)
    }
}

/// Formats a duration the way [`parse_duration`] reads it (`1h30m`, `250ms`,
/// `0s`); sub-millisecond durations use `Debug` notation.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{d:?}");
    }
    let secs = d.as_secs();
    let mut out = String::new();
    for (n, unit) in [
        (secs / 3600, "h"),
        (secs % 3600 / 60, "m"),
        (secs % 60, "s"),
        (u64::from(d.subsec_millis()), "ms"),
    ] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// Rejects `BURROW_SERVE_*` variables that no setting reads.
fn check_env_names(env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let known: Vec<&str> = SETTINGS
        .iter()
        .map(|s| s.env)
        .chain([CONFIG_ENV])
        .filter(|name| name.starts_with(ENV_PREFIX))
        .collect();
    for name in env.keys() {
        if name.starts_with(ENV_PREFIX) && !known.contains(&name.as_str()) {
            return Err(ConfigError::UnknownEnv {
                name: name.clone(),
                suggestion: closest(name, known.iter().copied()),
            });
        }
    }
    Ok(())
}

/// The candidate closest to `word` by edit distance, if close enough to be a
/// plausible typo.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let leaf = word.rsplit('.').next().unwrap_or(word);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        // A known key in the wrong table (`gateway.idle_timeout`) is a match.
        let d = if word.contains('.') && c.rsplit('.').next() == Some(leaf) {
            0
        } else {
            edit_distance(word, c)
        };
        if best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    let limit = (word.chars().count() / 3).clamp(1, 4);
    best.filter(|(d, _)| *d <= limit).map(|(_, c)| c.to_owned())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Reads the file and flattens it to `dotted.key -> value`, rejecting
/// unknown keys.
fn read_file(path: &Path) -> Result<BTreeMap<String, toml::Value>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            reason: toml_reason(&text, &e),
        })?;
    let known: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let unknown = |key: String| ConfigError::UnknownKey {
        path: path.to_path_buf(),
        suggestion: closest(&key, known.iter().copied()),
        key,
    };
    let mut values = BTreeMap::new();
    for (key, value) in table {
        if TABLES.contains(&key.as_str()) {
            let toml::Value::Table(inner) = value else {
                return Err(ConfigError::Invalid {
                    origin: Origin::File(path.to_path_buf()),
                    reason: format!(
                        "expected a table ([{key}]), found {} `{value}`",
                        value.type_str()
                    ),
                    key,
                });
            };
            for (sub, value) in inner {
                let full = format!("{key}.{sub}");
                if !known.contains(full.as_str()) {
                    return Err(unknown(full));
                }
                values.insert(full, value);
            }
        } else if known.contains(key.as_str()) && !key.contains('.') {
            values.insert(key, value);
        } else {
            return Err(unknown(key));
        }
    }
    Ok(values)
}

/// One-line reason of a TOML error: `line L, column C: message`.
fn toml_reason(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// A raw value before it is parsed.
#[derive(Debug)]
enum Raw<'a> {
    Toml(&'a toml::Value),
    Env(&'a str),
}

/// A raw value and where it came from.
#[derive(Debug)]
struct Found<'a> {
    origin: Origin,
    raw: Raw<'a>,
}

/// A parsed value and where it came from.
#[derive(Debug)]
struct Val<T> {
    value: T,
    origin: Origin,
}

/// The file's values and the environment, in order of precedence.
#[derive(Debug)]
struct Layers<'a> {
    file: Option<&'a Path>,
    values: &'a BTreeMap<String, toml::Value>,
    env: &'a BTreeMap<String, String>,
}

impl<'a> Layers<'a> {
    /// The values given for a setting, lowest precedence first.
    fn found(&self, s: Setting) -> Vec<Found<'a>> {
        let mut out = Vec::new();
        if let (Some(path), Some(v)) = (self.file, self.values.get(s.key)) {
            out.push(Found {
                origin: Origin::File(path.to_path_buf()),
                raw: Raw::Toml(v),
            });
        }
        if let Some(v) = self.env.get(s.env) {
            out.push(Found {
                origin: Origin::Env(s.env.to_owned()),
                raw: Raw::Env(v),
            });
        }
        out
    }

    /// Parses every given value of a setting (so a bad file value is an
    /// error even when the environment overrides it) and keeps the one with
    /// the highest precedence.
    fn layered<T>(
        &self,
        s: Setting,
        parse: impl Fn(&Found<'a>) -> Result<T, ConfigError>,
    ) -> Result<Option<Val<T>>, ConfigError> {
        let mut out = None;
        for found in self.found(s) {
            out = Some(Val {
                value: parse(&found)?,
                origin: found.origin,
            });
        }
        Ok(out)
    }

    /// [`Layers::layered`] with a parser whose error is the reason of an
    /// [`ConfigError::Invalid`].
    fn get<T>(
        &self,
        s: Setting,
        parse: impl Fn(&Raw<'a>) -> Result<T, String>,
    ) -> Result<Option<Val<T>>, ConfigError> {
        self.layered(s, |found| {
            parse(&found.raw).map_err(|reason| invalid(&found.origin, s, reason))
        })
    }

    fn resolve(&self, file: Option<PathBuf>) -> Result<ServeConfig, ConfigError> {
        let allow_public = self.get(ALLOW_PUBLIC, parse_bool)?;
        let allow_public_value = allow_public.as_ref().is_some_and(|v| v.value);
        let listen = match self.get(LISTEN, parse_listen)? {
            Some(v) => {
                if let (Some(public), false) =
                    (v.value.iter().find(|l| l.is_public()), allow_public_value)
                {
                    return Err(invalid(
                        &v.origin,
                        LISTEN,
                        format!(
                            "{public} is not a loopback address; set `allow_public = true` \
                             (or {}=true) to listen on a public address",
                            ALLOW_PUBLIC.env
                        ),
                    ));
                }
                v.value
            }
            None => vec![Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 7878)))],
        };

        let home = match self.env.get(HOME.env).filter(|h| !h.is_empty()) {
            // The file's value must still be valid.
            Some(h) => {
                self.file_only(HOME, parse_file_home)?;
                absolute(PathBuf::from(h), &Origin::Env(HOME.env.into()))?
            }
            None => match self.file_only(HOME, parse_file_home)? {
                Some(h) => h,
                None => default_home(self.env)?,
            },
        };

        let database = match self.get(DATABASE, parse_database)? {
            Some(v) => v.value,
            None => default_database(&home)?,
        };

        let backend = self
            .layered(BACKEND, |found| {
                let value = as_str(&found.raw).map_err(|r| invalid(&found.origin, BACKEND, r))?;
                match value {
                    "local" => Ok(BackendKind::Local),
                    other => Err(ConfigError::UnknownBackend {
                        origin: found.origin.clone(),
                        value: other.to_owned(),
                    }),
                }
            })?
            .map_or(BackendKind::Local, |v| v.value);

        let replica_id = match self.get(REPLICA_ID, parse_replica_id)? {
            Some(v) => v.value,
            None => default_replica_id(),
        };

        let max_connections = self
            .get(MAX_CONNECTIONS, |raw| {
                let n = parse_int(raw)?;
                if (1..=1000).contains(&n) {
                    u32::try_from(n).map_err(|e| e.to_string())
                } else {
                    Err(format!("{n} is out of range; must be 1..=1000"))
                }
            })?
            .map_or(10, |v| v.value);
        let acquire_timeout = self
            .get(ACQUIRE_TIMEOUT, positive_duration)?
            .map_or(Duration::from_secs(5), |v| v.value);

        let auth_required = self.get(AUTH_REQUIRED, parse_bool)?.is_none_or(|v| v.value);

        let startup_timeout = self
            .get(STARTUP_TIMEOUT, positive_duration)?
            .map_or(Duration::from_secs(60), |v| v.value);
        let retry_after = self
            .get(RETRY_AFTER, |raw| {
                let d = parse_duration_raw(raw)?;
                if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
                    Err(format!(
                        "{} is not a whole number of seconds >= 1s (Retry-After is in seconds)",
                        format_duration(d)
                    ))
                } else {
                    Ok(d)
                }
            })?
            .map_or(Duration::from_secs(1), |v| v.value);
        let lease_ttl = self.get(LEASE_TTL, |raw| {
            let d = parse_duration_raw(raw)?;
            if d < Duration::from_secs(1) {
                Err(format!(
                    "{} is too short; must be at least 1s",
                    format_duration(d)
                ))
            } else {
                Ok(d)
            }
        })?;
        let lease_ttl_origin = lease_ttl
            .as_ref()
            .map_or(Origin::Default, |v| v.origin.clone());
        let lease_ttl = lease_ttl.map_or(Duration::from_secs(30), |v| v.value);
        let heartbeat_interval = match self.get(HEARTBEAT_INTERVAL, positive_duration)? {
            Some(v) if v.value >= lease_ttl => {
                return Err(invalid(
                    &v.origin,
                    HEARTBEAT_INTERVAL,
                    format!(
                        "{} must be shorter than gateway.lease_ttl ({}) so leases are renewed \
                         before they expire",
                        format_duration(v.value),
                        match &lease_ttl_origin {
                            Origin::Default => format!("{} by default", format_duration(lease_ttl)),
                            origin => format!("{} {origin}", format_duration(lease_ttl)),
                        },
                    ),
                ))
            }
            Some(v) => v.value,
            None => lease_ttl / 3,
        };

        let idle_timeout = match self.get(IDLE_TIMEOUT, parse_duration_raw)? {
            Some(v) if v.value.is_zero() => None,
            Some(v) => Some(v.value),
            None => Some(Duration::from_secs(15 * 60)),
        };
        let sweep_interval = self
            .get(SWEEP_INTERVAL, positive_duration)?
            .map_or(Duration::from_secs(30), |v| v.value);

        let format = self
            .get(LOG_FORMAT, |raw| match as_str(raw)? {
                "text" => Ok(LogFormat::Text),
                "json" => Ok(LogFormat::Json),
                other => Err(format!(
                    "`{other}` is not a log format; use \"text\" or \"json\""
                )),
            })?
            .map_or(LogFormat::Text, |v| v.value);

        Ok(ServeConfig {
            file,
            listen,
            allow_public: allow_public_value,
            database,
            home,
            backend,
            replica_id,
            database_pool: PoolConfig {
                max_connections,
                acquire_timeout,
            },
            auth: AuthConfig {
                required: auth_required,
            },
            gateway: GatewayConfig {
                startup_timeout,
                retry_after,
                lease_ttl,
                heartbeat_interval,
            },
            reaper: ReaperConfig {
                idle_timeout,
                sweep_interval,
            },
            log: LogConfig { format },
        })
    }

    /// The file's value of a setting, ignoring the environment.
    fn file_only<T>(
        &self,
        s: Setting,
        parse: impl Fn(&Raw<'a>) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        let (Some(path), Some(v)) = (self.file, self.values.get(s.key)) else {
            return Ok(None);
        };
        parse(&Raw::Toml(v))
            .map(Some)
            .map_err(|reason| invalid(&Origin::File(path.to_path_buf()), s, reason))
    }
}

fn invalid(origin: &Origin, s: Setting, reason: String) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.clone(),
        key: s.key.to_owned(),
        reason,
    }
}

fn found_desc(v: &toml::Value) -> String {
    format!("{} `{v}`", v.type_str())
}

fn as_str<'a>(raw: &Raw<'a>) -> Result<&'a str, String> {
    match raw {
        Raw::Env(s) => Ok(s),
        Raw::Toml(toml::Value::String(s)) => Ok(s),
        Raw::Toml(v) => Err(format!("expected a string, found {}", found_desc(v))),
    }
}

fn parse_bool(raw: &Raw<'_>) -> Result<bool, String> {
    match raw {
        Raw::Toml(toml::Value::Boolean(b)) => Ok(*b),
        Raw::Toml(v) => Err(format!(
            "expected a boolean (true or false), found {}",
            found_desc(v)
        )),
        Raw::Env(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(format!("expected true, false, 1 or 0, found `{s}`")),
        },
    }
}

fn parse_int(raw: &Raw<'_>) -> Result<i64, String> {
    match raw {
        Raw::Toml(toml::Value::Integer(n)) => Ok(*n),
        Raw::Toml(v) => Err(format!("expected an integer, found {}", found_desc(v))),
        Raw::Env(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("expected an integer, found `{s}`")),
    }
}

fn parse_duration_raw(raw: &Raw<'_>) -> Result<Duration, String> {
    match raw {
        Raw::Toml(toml::Value::Integer(n)) => match u64::try_from(*n) {
            Ok(secs) => bounded(Duration::from_secs(secs), &n.to_string()),
            Err(_) => Err(format!("{n} is negative")),
        },
        Raw::Toml(toml::Value::String(s)) => parse_duration(s),
        Raw::Toml(v) => Err(format!(
            "expected a duration (a string like \"30s\" or an integer number of seconds), found {}",
            found_desc(v)
        )),
        Raw::Env(s) => parse_duration(s),
    }
}

fn positive_duration(raw: &Raw<'_>) -> Result<Duration, String> {
    let d = parse_duration_raw(raw)?;
    if d.is_zero() {
        Err("must be greater than zero".into())
    } else {
        Ok(d)
    }
}

fn parse_listen(raw: &Raw<'_>) -> Result<Vec<Listen>, String> {
    let entries: Vec<&str> = match raw {
        Raw::Toml(toml::Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                toml::Value::String(s) => Ok(s.as_str()),
                other => Err(format!(
                    "expected an array of strings, found an element {}",
                    found_desc(other)
                )),
            })
            .collect::<Result<_, _>>()?,
        Raw::Toml(v) => {
            return Err(format!(
                "expected an array of strings such as [\"127.0.0.1:7878\"], found {}",
                found_desc(v)
            ))
        }
        Raw::Env(s) => s.split(',').map(str::trim).collect(),
    };
    if entries.iter().all(|e| e.is_empty()) {
        return Err("at least one listen address is required".into());
    }
    let mut out: Vec<Listen> = Vec::with_capacity(entries.len());
    for entry in entries {
        let listen = parse_listen_entry(entry)?;
        if out.contains(&listen) {
            return Err(format!("{listen} is listed twice"));
        }
        out.push(listen);
    }
    Ok(out)
}

fn parse_listen_entry(entry: &str) -> Result<Listen, String> {
    if entry.is_empty() {
        return Err("an empty listen address".into());
    }
    if let Some(path) = entry.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!(
                "`{entry}`: a unix socket path must be absolute (unix:/path/to/socket)"
            ));
        }
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "`{entry}`: a unix socket path is at most {MAX_SOCKET_PATH} bytes"
            ));
        }
        return Ok(Listen::Unix(path));
    }
    SocketAddr::from_str(entry).map(Listen::Tcp).map_err(|_| {
        format!(
            "`{entry}` is neither an IP address and port (127.0.0.1:7878, [::1]:7878; host \
             names are not accepted) nor unix:/absolute/path"
        )
    })
}

fn parse_database(raw: &Raw<'_>) -> Result<DatabaseUrl, String> {
    let url = as_str(raw)?;
    if url.is_empty() {
        return Err("the database URL is empty".into());
    }
    if url.starts_with("sqlite:") {
        sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .map_err(|e| format!("not a valid SQLite URL: {e}"))?;
        Ok(DatabaseUrl::Sqlite(url.to_owned()))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        sqlx::postgres::PgConnectOptions::from_str(url)
            .map_err(|e| format!("not a valid Postgres URL: {e}"))?;
        Ok(DatabaseUrl::Postgres(url.to_owned()))
    } else {
        // Never echo the URL: it may hold a password.
        let scheme = match url.split_once(':') {
            Some((scheme, _))
                if !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                format!("scheme `{scheme}` is not supported")
            }
            _ => "not a URL".to_owned(),
        };
        Err(format!(
            "{scheme}; accepted: sqlite:<path>, postgres://... or postgresql://..."
        ))
    }
}

fn parse_replica_id(raw: &Raw<'_>) -> Result<String, String> {
    let id = as_str(raw)?;
    let len = id.chars().count();
    if !(1..=MAX_REPLICA_ID).contains(&len) {
        return Err(format!(
            "`{id}` is {len} characters long; a replica id is 1..={MAX_REPLICA_ID}"
        ));
    }
    if let Some(c) = id.chars().find(|c| !replica_char(*c)) {
        return Err(format!(
            "`{id}` contains {c:?}; a replica id uses only A-Z, a-z, 0-9, '.', '_' and '-'"
        ));
    }
    Ok(id.to_owned())
}

fn replica_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// `<hostname>-<pid>`, the hostname sanitised and shortened to fit.
fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "burrow".to_owned());
    let pid = std::process::id().to_string();
    let room = MAX_REPLICA_ID - pid.len() - 1;
    let host: String = host
        .chars()
        .map(|c| if replica_char(c) { c } else { '-' })
        .take(room)
        .collect();
    format!("{host}-{pid}")
}

fn parse_file_home(raw: &Raw<'_>) -> Result<PathBuf, String> {
    let home = as_str(raw)?;
    let path = PathBuf::from(home);
    if home.is_empty() || !path.is_absolute() {
        return Err(format!("`{home}` is not an absolute path"));
    }
    Ok(path)
}

/// Like `burrow::paths::Home::at`: a relative path is taken from the current
/// directory.
fn absolute(path: PathBuf, origin: &Origin) -> Result<PathBuf, ConfigError> {
    if path.is_absolute() {
        return Ok(path);
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(&path))
        .map_err(|e| {
            invalid(
                origin,
                HOME,
                format!(
                    "{} is relative and the current directory is unknown: {e}",
                    path.display()
                ),
            )
        })
}

/// What `burrow::paths::Home::from_env` picks without `BURROW_HOME`:
/// `$XDG_DATA_HOME/burrow`, else `$HOME/.local/share/burrow`.
fn default_home(env: &BTreeMap<String, String>) -> Result<PathBuf, ConfigError> {
    let nonempty = |name: &str| env.get(name).filter(|v| !v.is_empty());
    let path = if let Some(xdg) = nonempty("XDG_DATA_HOME") {
        PathBuf::from(xdg).join("burrow")
    } else if let Some(home) = nonempty("HOME") {
        PathBuf::from(home).join(".local/share/burrow")
    } else {
        return Err(invalid(
            &Origin::Default,
            HOME,
            "neither BURROW_HOME, XDG_DATA_HOME nor HOME is set; set `home` or BURROW_HOME".into(),
        ));
    };
    absolute(path, &Origin::Default)
}

/// `sqlite://<home>/serve.db?mode=rwc` (created if missing).
fn default_database(home: &Path) -> Result<DatabaseUrl, ConfigError> {
    let path = home.join("serve.db");
    let Some(path) = path.to_str() else {
        return Err(invalid(
            &Origin::Default,
            DATABASE,
            format!(
                "{} is not valid UTF-8 and cannot be a database URL; set `database`",
                path.display()
            ),
        ));
    };
    // The SQLite URL parser percent-decodes the path and splits at `?`.
    let encoded = path
        .replace('%', "%25")
        .replace('?', "%3F")
        .replace('#', "%23");
    Ok(DatabaseUrl::Sqlite(format!("sqlite://{encoded}?mode=rwc")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        map.entry("HOME".into()).or_insert_with(|| "/home/u".into());
        map
    }

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load_file(
        text: &str,
        pairs: &[(&str, &str)],
    ) -> (Result<ServeConfig, ConfigError>, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, text);
        (ServeConfig::load(Some(&path), &env(pairs)), path)
    }

    fn assert_invalid(
        result: Result<ServeConfig, ConfigError>,
        want_key: &str,
        want_origin: Origin,
    ) {
        match result {
            Err(ConfigError::Invalid { origin, key, .. }) => {
                assert_eq!(key, want_key);
                assert_eq!(origin, want_origin);
            }
            other => panic!("expected Invalid for {want_key}, got {other:?}"),
        }
    }

    fn file_origin(path: &Path) -> Origin {
        Origin::File(path.to_path_buf())
    }

    fn env_origin(name: &str) -> Origin {
        Origin::Env(name.into())
    }

    #[test]
    fn defaults() {
        let c = ServeConfig::load(None, &env(&[])).unwrap();
        assert_eq!(c.file, None);
        assert_eq!(
            c.listen,
            vec![Listen::Tcp("127.0.0.1:7878".parse().unwrap())]
        );
        assert!(!c.allow_public);
        assert_eq!(c.home, PathBuf::from("/home/u/.local/share/burrow"));
        assert_eq!(
            c.database,
            DatabaseUrl::Sqlite("sqlite:///home/u/.local/share/burrow/serve.db?mode=rwc".into())
        );
        assert_eq!(c.backend, BackendKind::Local);
        let pid = std::process::id().to_string();
        assert!(
            c.replica_id.ends_with(&format!("-{pid}")),
            "{}",
            c.replica_id
        );
        assert!(c.replica_id.len() <= 64 && c.replica_id.chars().all(replica_char));
        assert_eq!(
            c.database_pool,
            PoolConfig {
                max_connections: 10,
                acquire_timeout: Duration::from_secs(5)
            }
        );
        assert!(c.auth.required);
        assert_eq!(
            c.gateway,
            GatewayConfig {
                startup_timeout: Duration::from_secs(60),
                retry_after: Duration::from_secs(1),
                lease_ttl: Duration::from_secs(30),
                heartbeat_interval: Duration::from_secs(10),
            }
        );
        assert_eq!(c.reaper.idle_timeout, Some(Duration::from_secs(900)));
        assert!(c.reaper.enabled());
        assert_eq!(c.reaper.sweep_interval, Duration::from_secs(30));
        assert_eq!(c.log.format, LogFormat::Text);
        // The default database URL parses.
        let default_db = c.database.as_str().to_owned();
        assert!(parse_database(&Raw::Env(&default_db)).is_ok());
    }

    #[test]
    fn default_home_follows_the_library() {
        let c = ServeConfig::load(None, &env(&[("XDG_DATA_HOME", "/xdg")])).unwrap();
        assert_eq!(c.home, PathBuf::from("/xdg/burrow"));
        let c = ServeConfig::load(
            None,
            &env(&[("BURROW_HOME", "/bh"), ("XDG_DATA_HOME", "/xdg")]),
        )
        .unwrap();
        assert_eq!(c.home, PathBuf::from("/bh"));
        assert_eq!(c.database.as_str(), "sqlite:///bh/serve.db?mode=rwc");
        // An empty BURROW_HOME is ignored, as the library does.
        let c = ServeConfig::load(None, &env(&[("BURROW_HOME", "")])).unwrap();
        assert_eq!(c.home, PathBuf::from("/home/u/.local/share/burrow"));
        // A relative BURROW_HOME is taken from the current directory.
        let c = ServeConfig::load(None, &env(&[("BURROW_HOME", "rel")])).unwrap();
        assert_eq!(c.home, std::env::current_dir().unwrap().join("rel"));
        // No home at all is an error, not a guess.
        let r = ServeConfig::load(None, &BTreeMap::new());
        assert_invalid(r, "home", Origin::Default);
    }

    #[test]
    fn default_database_escapes_the_path() {
        let db = default_database(Path::new("/a?b#c%d")).unwrap();
        assert_eq!(db.as_str(), "sqlite:///a%3Fb%23c%25d/serve.db?mode=rwc");
        assert!(parse_database(&Raw::Env(db.as_str())).is_ok());
    }

    const FULL: &str = r#"
        listen = ["0.0.0.0:8080", "unix:/run/burrow/serve.sock", "[::1]:9000"]
        allow_public = true
        database = "postgres://burrow:secret@db.internal:5432/burrow"
        home = "/var/lib/burrow"
        backend = "local"
        replica_id = "replica-a"

        [database_pool]
        max_connections = 50
        acquire_timeout = "2s"

        [auth]
        required = false

        [gateway]
        startup_timeout = 120
        retry_after = "2s"
        lease_ttl = "1m"
        heartbeat_interval = "15s"

        [reaper]
        idle_timeout = "1h30m"
        sweep_interval = "250ms"

        [log]
        format = "json"
    "#;

    #[test]
    fn file_parsing() {
        let (c, path) = load_file(FULL, &[]);
        let c = c.unwrap();
        assert_eq!(c.file, Some(path));
        assert_eq!(
            c.listen,
            vec![
                Listen::Tcp("0.0.0.0:8080".parse().unwrap()),
                Listen::Unix("/run/burrow/serve.sock".into()),
                Listen::Tcp("[::1]:9000".parse().unwrap()),
            ]
        );
        assert!(c.allow_public);
        assert_eq!(
            c.database,
            DatabaseUrl::Postgres("postgres://burrow:secret@db.internal:5432/burrow".into())
        );
        assert_eq!(c.home, PathBuf::from("/var/lib/burrow"));
        assert_eq!(c.replica_id, "replica-a");
        assert_eq!(c.database_pool.max_connections, 50);
        assert_eq!(c.database_pool.acquire_timeout, Duration::from_secs(2));
        assert!(!c.auth.required);
        assert_eq!(c.gateway.startup_timeout, Duration::from_secs(120));
        assert_eq!(c.gateway.retry_after, Duration::from_secs(2));
        assert_eq!(c.gateway.lease_ttl, Duration::from_secs(60));
        assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(15));
        assert_eq!(c.reaper.idle_timeout, Some(Duration::from_secs(5400)));
        assert_eq!(c.reaper.sweep_interval, Duration::from_millis(250));
        assert_eq!(c.log.format, LogFormat::Json);
        assert!(!c.requires_token(&c.listen[0]));

        let text = c.describe();
        assert!(text.contains("0.0.0.0:8080"), "{text}");
        assert!(text.contains("unix:/run/burrow/serve.sock"), "{text}");
        assert!(text.contains("replica-a"), "{text}");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("1h30m"), "{text}");
        // The config's Debug does not leak the password either.
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn empty_file_gives_defaults() {
        let (c, path) = load_file("", &[]);
        let mut c = c.unwrap();
        assert_eq!(c.file.take(), Some(path));
        let mut d = ServeConfig::load(None, &env(&[])).unwrap();
        d.replica_id.clone_from(&c.replica_id);
        assert_eq!(c, d);
    }

    #[test]
    fn env_overrides_file() {
        let (c, _) = load_file(
            FULL,
            &[
                ("BURROW_SERVE_LISTEN", "127.0.0.1:1, unix:/tmp/s.sock"),
                ("BURROW_SERVE_ALLOW_PUBLIC", "0"),
                ("BURROW_SERVE_DATABASE", "sqlite::memory:"),
                ("BURROW_HOME", "/env/home"),
                ("BURROW_SERVE_BACKEND", "local"),
                ("BURROW_SERVE_REPLICA_ID", "r.2_x"),
                ("BURROW_SERVE_MAX_CONNECTIONS", "7"),
                ("BURROW_SERVE_ACQUIRE_TIMEOUT", "3"),
                ("BURROW_SERVE_AUTH_REQUIRED", "true"),
                ("BURROW_SERVE_STARTUP_TIMEOUT", "5m"),
                ("BURROW_SERVE_RETRY_AFTER", "3s"),
                ("BURROW_SERVE_LEASE_TTL", "10s"),
                ("BURROW_SERVE_HEARTBEAT_INTERVAL", "2s"),
                ("BURROW_SERVE_IDLE_TIMEOUT", "0"),
                ("BURROW_SERVE_SWEEP_INTERVAL", "1s"),
                ("BURROW_SERVE_LOG_FORMAT", "text"),
            ],
        );
        let c = c.unwrap();
        assert_eq!(
            c.listen,
            vec![
                Listen::Tcp("127.0.0.1:1".parse().unwrap()),
                Listen::Unix("/tmp/s.sock".into())
            ]
        );
        assert!(!c.allow_public);
        assert_eq!(c.database, DatabaseUrl::Sqlite("sqlite::memory:".into()));
        assert_eq!(c.home, PathBuf::from("/env/home"));
        assert_eq!(c.replica_id, "r.2_x");
        assert_eq!(c.database_pool.max_connections, 7);
        assert_eq!(c.database_pool.acquire_timeout, Duration::from_secs(3));
        assert!(c.auth.required);
        assert!(c.requires_token(&c.listen[0]));
        assert!(!c.requires_token(&c.listen[1]));
        assert_eq!(c.gateway.startup_timeout, Duration::from_secs(300));
        assert_eq!(c.gateway.retry_after, Duration::from_secs(3));
        assert_eq!(c.gateway.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.gateway.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(c.reaper.idle_timeout, None);
        assert!(!c.reaper.enabled());
        assert_eq!(c.reaper.sweep_interval, Duration::from_secs(1));
        assert_eq!(c.log.format, LogFormat::Text);
        assert!(c.describe().contains("disabled"));
    }

    #[test]
    fn config_file_from_env_and_explicit_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "replica_id = \"from-env-file\"");
        let e = env(&[("BURROW_SERVE_CONFIG", path.to_str().unwrap())]);
        let c = ServeConfig::load(None, &e).unwrap();
        assert_eq!(c.replica_id, "from-env-file");
        assert_eq!(c.file, Some(path.clone()));

        let other = dir.path().join("other.toml");
        std::fs::write(&other, "replica_id = \"explicit\"").unwrap();
        let c = ServeConfig::load(Some(&other), &e).unwrap();
        assert_eq!(c.replica_id, "explicit");

        let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_CONFIG", "")]));
        assert!(matches!(r, Err(ConfigError::Invalid { .. })), "{r:?}");
    }

    #[test]
    fn unknown_keys() {
        let (r, path) = load_file("[reaper]\nidle_timout = \"5m\"\n", &[]);
        match r {
            Err(ConfigError::UnknownKey {
                path: p,
                key,
                suggestion,
            }) => {
                assert_eq!(p, path);
                assert_eq!(key, "reaper.idle_timout");
                assert_eq!(suggestion.as_deref(), Some("reaper.idle_timeout"));
            }
            other => panic!("{other:?}"),
        }
        let (r, _) = load_file("lisen = [\"127.0.0.1:1\"]\n", &[]);
        assert!(
            matches!(&r, Err(ConfigError::UnknownKey { key, suggestion, .. })
                if key == "lisen" && suggestion.as_deref() == Some("listen")),
            "{r:?}"
        );
        // A known key in the wrong table.
        let (r, _) = load_file("[gateway]\nidle_timeout = 5\n", &[]);
        assert!(
            matches!(&r, Err(ConfigError::UnknownKey { key, suggestion, .. })
                if key == "gateway.idle_timeout"
                    && suggestion.as_deref() == Some("reaper.idle_timeout")),
            "{r:?}"
        );
        // A table's key at the top level, and an unknown table.
        let (r, _) = load_file("lease_ttl = 5\n", &[]);
        assert!(matches!(&r, Err(ConfigError::UnknownKey { key, .. }) if key == "lease_ttl"));
        let (r, _) = load_file("[metrics]\nport = 1\n", &[]);
        assert!(matches!(&r, Err(ConfigError::UnknownKey { key, .. }) if key == "metrics"));
        // A table written as a value.
        let (r, path) = load_file("reaper = 5\n", &[]);
        assert_invalid(r, "reaper", file_origin(&path));
    }

    #[test]
    fn unknown_env() {
        let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_IDLE_TIMOUT", "5m")]));
        match r {
            Err(ConfigError::UnknownEnv { name, suggestion }) => {
                assert_eq!(
                    name,
                    "BURROW_SERVE_IDLE_TIMOUT".replace("TIMEOUT", "TIMOUT")
                );
                assert_eq!(suggestion.as_deref(), Some("BURROW_SERVE_IDLE_TIMEOUT"));
            }
            other => panic!("{other:?}"),
        }
        // Other variables, including other BURROW_ ones, are not ours to judge.
        assert!(ServeConfig::load(None, &env(&[("BURROW_LOG", "x"), ("PATH", "/bin")])).is_ok());
    }

    #[test]
    fn read_and_parse_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let r = ServeConfig::load(Some(&missing), &env(&[]));
        assert!(
            matches!(&r, Err(ConfigError::Read { path, .. }) if *path == missing),
            "{r:?}"
        );

        let (r, path) = load_file("listen = [\n", &[]);
        match r {
            Err(ConfigError::Parse { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(!reason.contains('\n'), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_backend() {
        let (r, path) = load_file("backend = \"kubernetes\"\n", &[]);
        match r {
            Err(ConfigError::UnknownBackend { origin, value }) => {
                assert_eq!(origin, file_origin(&path));
                assert_eq!(value, "kubernetes");
            }
            other => panic!("{other:?}"),
        }
        let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_BACKEND", "remote")]));
        assert!(
            matches!(&r, Err(ConfigError::UnknownBackend { origin, value })
                if *origin == env_origin("BURROW_SERVE_BACKEND") && value == "remote"),
            "{r:?}"
        );
        let (r, path) = load_file("backend = 1\n", &[]);
        assert_invalid(r, "backend", file_origin(&path));
    }

    #[test]
    fn listen_validation() {
        // Public addresses need allow_public, from either source.
        let (r, path) = load_file("listen = [\"0.0.0.0:80\"]\n", &[]);
        assert_invalid(r, "listen", file_origin(&path));
        let e = env(&[("BURROW_SERVE_LISTEN", "10.0.0.1:80")]);
        assert_invalid(
            ServeConfig::load(None, &e),
            "listen",
            env_origin("BURROW_SERVE_LISTEN"),
        );
        let (r, _) = load_file(
            "listen = [\"0.0.0.0:80\"]\n",
            &[("BURROW_SERVE_ALLOW_PUBLIC", "true")],
        );
        assert!(r.is_ok(), "{r:?}");
        // The environment can take allow_public back.
        let (r, path) = load_file(
            "allow_public = true\nlisten = [\"0.0.0.0:80\"]\n",
            &[("BURROW_SERVE_ALLOW_PUBLIC", "false")],
        );
        assert_invalid(r, "listen", file_origin(&path));
        // IPv4-mapped loopback is loopback.
        let e = env(&[("BURROW_SERVE_LISTEN", "[::ffff:127.0.0.1]:80")]);
        assert!(ServeConfig::load(None, &e).is_ok());

        for bad in [
            "",
            "localhost:7878",
            "127.0.0.1",
            "unix:relative.sock",
            "127.0.0.1:1,127.0.0.1:1",
            "127.0.0.1:1,,127.0.0.1:2",
        ] {
            let e = env(&[("BURROW_SERVE_LISTEN", bad)]);
            assert_invalid(
                ServeConfig::load(None, &e),
                "listen",
                env_origin("BURROW_SERVE_LISTEN"),
            );
        }
        let long = format!("unix:/{}", "x".repeat(200));
        let e = env(&[("BURROW_SERVE_LISTEN", long.as_str())]);
        assert!(matches!(
            ServeConfig::load(None, &e),
            Err(ConfigError::Invalid { .. })
        ));
        for bad in ["listen = []", "listen = \"127.0.0.1:1\"", "listen = [1]"] {
            let (r, path) = load_file(bad, &[]);
            assert_invalid(r, "listen", file_origin(&path));
        }
    }

    #[test]
    fn database_validation() {
        for good in [
            "sqlite:serve.db",
            "sqlite:///tmp/x.db?mode=rwc",
            "sqlite::memory:",
            "postgres://u:p@h/db",
            "postgresql://u@h:5433/db?sslmode=require",
        ] {
            let e = env(&[("BURROW_SERVE_DATABASE", good)]);
            let c = ServeConfig::load(None, &e).unwrap();
            assert_eq!(c.database.as_str(), good);
            assert_eq!(c.database.is_postgres(), good.starts_with("postgres"));
        }
        for bad in [
            "mysql://u:hunter2@h/db",
            "/var/lib/burrow/serve.db",
            "",
            "sqlite:///x.db?mode=bogus",
            "postgres://u@h:notaport/db",
        ] {
            let e = env(&[("BURROW_SERVE_DATABASE", bad)]);
            let r = ServeConfig::load(None, &e);
            if let Err(err) = &r {
                assert!(!err.to_string().contains("hunter2"), "{err}");
            }
            assert_invalid(r, "database", env_origin("BURROW_SERVE_DATABASE"));
        }
    }

    #[test]
    fn value_validation() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "BURROW_SERVE_MAX_CONNECTIONS",
                "0",
                "database_pool.max_connections",
            ),
            (
                "BURROW_SERVE_MAX_CONNECTIONS",
                "1001",
                "database_pool.max_connections",
            ),
            (
                "BURROW_SERVE_MAX_CONNECTIONS",
                "ten",
                "database_pool.max_connections",
            ),
            (
                "BURROW_SERVE_ACQUIRE_TIMEOUT",
                "0",
                "database_pool.acquire_timeout",
            ),
            ("BURROW_SERVE_AUTH_REQUIRED", "yes", "auth.required"),
            ("BURROW_SERVE_ALLOW_PUBLIC", "", "allow_public"),
            (
                "BURROW_SERVE_STARTUP_TIMEOUT",
                "0s",
                "gateway.startup_timeout",
            ),
            ("BURROW_SERVE_RETRY_AFTER", "1500ms", "gateway.retry_after"),
            ("BURROW_SERVE_RETRY_AFTER", "0", "gateway.retry_after"),
            ("BURROW_SERVE_LEASE_TTL", "999ms", "gateway.lease_ttl"),
            (
                "BURROW_SERVE_HEARTBEAT_INTERVAL",
                "30s",
                "gateway.heartbeat_interval",
            ),
            (
                "BURROW_SERVE_HEARTBEAT_INTERVAL",
                "0",
                "gateway.heartbeat_interval",
            ),
            ("BURROW_SERVE_IDLE_TIMEOUT", "soon", "reaper.idle_timeout"),
            ("BURROW_SERVE_SWEEP_INTERVAL", "0", "reaper.sweep_interval"),
            ("BURROW_SERVE_LOG_FORMAT", "xml", "log.format"),
            ("BURROW_SERVE_REPLICA_ID", "", "replica_id"),
            ("BURROW_SERVE_REPLICA_ID", "has space", "replica_id"),
            ("BURROW_SERVE_REPLICA_ID", "é", "replica_id"),
        ];
        for (name, value, key) in cases {
            let r = ServeConfig::load(None, &env(&[(name, value)]));
            assert_invalid(r, key, env_origin(name));
        }
        let long = "r".repeat(65);
        let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_REPLICA_ID", long.as_str())]));
        assert_invalid(r, "replica_id", env_origin("BURROW_SERVE_REPLICA_ID"));
        let ok = "r".repeat(64);
        assert!(ServeConfig::load(None, &env(&[("BURROW_SERVE_REPLICA_ID", ok.as_str())])).is_ok());

        // Wrong TOML types name the file and key.
        for (text, key) in [
            ("allow_public = \"true\"", "allow_public"),
            (
                "[database_pool]\nmax_connections = \"10\"",
                "database_pool.max_connections",
            ),
            ("[reaper]\nidle_timeout = -5", "reaper.idle_timeout"),
            ("[reaper]\nidle_timeout = 1.5", "reaper.idle_timeout"),
            ("home = \"relative/home\"", "home"),
            ("replica_id = 7", "replica_id"),
        ] {
            let (r, path) = load_file(text, &[]);
            assert_invalid(r, key, file_origin(&path));
        }
    }

    #[test]
    fn heartbeat_must_be_shorter_than_lease_ttl() {
        // The default heartbeat follows the lease ttl.
        let c = ServeConfig::load(None, &env(&[("BURROW_SERVE_LEASE_TTL", "1s")])).unwrap();
        assert_eq!(
            c.gateway.heartbeat_interval,
            Duration::from_millis(333) + Duration::from_nanos(333_333)
        );
        // The environment lowering the ttl below the file's heartbeat is
        // reported on the heartbeat, where it came from.
        let (r, path) = load_file(
            "[gateway]\nheartbeat_interval = \"20s\"\n",
            &[("BURROW_SERVE_LEASE_TTL", "20s")],
        );
        assert_invalid(r, "gateway.heartbeat_interval", file_origin(&path));
    }

    #[test]
    fn bad_file_value_is_an_error_even_when_env_overrides_it() {
        let (r, path) = load_file(
            "[gateway]\nlease_ttl = \"forever\"\n",
            &[("BURROW_SERVE_LEASE_TTL", "30s")],
        );
        assert_invalid(r, "gateway.lease_ttl", file_origin(&path));
        let (r, path) = load_file("home = \"rel\"\n", &[("BURROW_HOME", "/abs")]);
        assert_invalid(r, "home", file_origin(&path));
    }

    #[test]
    fn messages_name_the_key_and_the_source() {
        let (r, path) = load_file("[gateway]\nlease_ttl = \"soon\"\n", &[]);
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("gateway.lease_ttl"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        let r = ServeConfig::load(None, &env(&[("BURROW_SERVE_LEASE_TTL", "soon")]));
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("BURROW_SERVE_LEASE_TTL"), "{msg}");
        let (r, path) = load_file("[reaper]\nidle_timout = 1\n", &[]);
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("reaper.idle_timout"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
    }

    #[test]
    fn durations() {
        let ok: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("30", Duration::from_secs(30)),
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("10m", Duration::from_secs(600)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m30s500ms", Duration::from_millis(90_500)),
            (" 5s ", Duration::from_secs(5)),
            ("8760h", Duration::from_secs(365 * 24 * 3600)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(*want), "{text}");
        }
        for bad in [
            "",
            "s",
            "1.5s",
            "-1s",
            "5 s",
            "5sec",
            "1d",
            "10x",
            "1h30",
            "8761h",
            "99999999999999999999",
            "18446744073709551615h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
        for d in [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_secs(5400),
            Duration::from_millis(90_500),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        // TOML integers are seconds; negative ones are rejected.
        let v = toml::Value::Integer(90);
        assert_eq!(
            parse_duration_raw(&Raw::Toml(&v)),
            Ok(Duration::from_secs(90))
        );
        let v = toml::Value::Integer(-1);
        assert!(parse_duration_raw(&Raw::Toml(&v)).is_err());
    }

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
