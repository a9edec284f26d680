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
//! | `reuse_port`                      | `BURROW_SERVE_REUSE_PORT`          | `false`                      |
//! | `database`                        | `BURROW_SERVE_DATABASE`            | `sqlite://<home>/serve.db?mode=rwc` |
//! | `home`                            | `BURROW_HOME`                      | as [`burrow::LocalBackend::default_home`] |
//! | `backend`                         | `BURROW_SERVE_BACKEND`             | `"local"`                    |
//! | `replica_id`                      | `BURROW_SERVE_REPLICA_ID`          | `<hostname>-<pid>`           |
//! | `database_pool.max_connections`   | `BURROW_SERVE_MAX_CONNECTIONS`     | `10`                         |
//! | `database_pool.acquire_timeout`   | `BURROW_SERVE_ACQUIRE_TIMEOUT`     | `5s`                         |
//! | `auth.required`                   | `BURROW_SERVE_AUTH_REQUIRED`       | `true`                       |
//! | `auth.requests_per_minute`        | `BURROW_SERVE_REQUESTS_PER_MINUTE` | `0` (no limit; per token and replica) |
//! | `audit.retention`                 | `BURROW_SERVE_AUDIT_RETENTION`     | `30d` (`0` keeps entries)    |
//! | `events.retention`                | `BURROW_SERVE_EVENTS_RETENTION`    | `7d` (`0` keeps events)      |
//! | `webhooks.timeout`                | `BURROW_SERVE_WEBHOOK_TIMEOUT`     | `10s` (at most `5m`)         |
//! | `webhooks.backoff`                | `BURROW_SERVE_WEBHOOK_BACKOFF`     | `1s` (doubled per attempt, at most `10m`) |
//! | `webhooks.max_attempts`           | `BURROW_SERVE_WEBHOOK_MAX_ATTEMPTS`| `8` (1..=50)                 |
//! | `tls.cert`                        | `BURROW_SERVE_TLS_CERT`            | none (plain HTTP)            |
//! | `tls.key`                         | `BURROW_SERVE_TLS_KEY`             | none (plain HTTP)            |
//! | `gateway.startup_timeout`         | `BURROW_SERVE_STARTUP_TIMEOUT`     | `60s`                        |
//! | `gateway.retry_after`             | `BURROW_SERVE_RETRY_AFTER`         | `1s`                         |
//! | `gateway.mcp_session_ttl`         | `BURROW_SERVE_MCP_SESSION_TTL`     | `24h` (at least `1m`)        |
//! | `gateway.lease_ttl`               | `BURROW_SERVE_LEASE_TTL`           | `30s`                        |
//! | `gateway.heartbeat_interval`      | `BURROW_SERVE_HEARTBEAT_INTERVAL`  | `lease_ttl / 3`              |
//! | `gateway.listen`                  | `BURROW_SERVE_GATEWAY_LISTEN` (commas) | none: no gateway origin (browsers cannot open sandbox pages) |
//! | `gateway.domain`                  | `BURROW_SERVE_GATEWAY_DOMAIN`      | `localhost:<port of the first gateway listener>` |
//! | `reaper.idle_timeout`             | `BURROW_SERVE_IDLE_TIMEOUT`        | `15m` (`0` disables reclaim) |
//! | `reaper.sweep_interval`           | `BURROW_SERVE_SWEEP_INTERVAL`      | `30s`                        |
//! | `log.format`                      | `BURROW_SERVE_LOG_FORMAT`          | `"text"` (or `"json"`)       |
//! | `outbound.allow`                  | `BURROW_SERVE_OUTBOUND_ALLOW` (commas) | `[]`: the guard refuses every denied address |
//! | `kubernetes.kubeconfig`           | `BURROW_KUBECONFIG`                | in-cluster, `$KUBECONFIG`, `~/.kube/config` |
//! | `kubernetes.context`              | `BURROW_KUBE_CONTEXT`              | the current context          |
//! | `kubernetes.namespace`            | `BURROW_KUBE_NAMESPACE`            | `"default"`                  |
//! | `kubernetes.runtime_class`        | `BURROW_KUBE_RUNTIME_CLASS`        | the cluster's default        |
//! | `kubernetes.gvisor_runtime_class` | `BURROW_KUBE_GVISOR_RUNTIME_CLASS` | `"gvisor"`                   |
//! | `kubernetes.image_pull_policy`    | `BURROW_KUBE_IMAGE_PULL_POLICY`    | `"IfNotPresent"`             |
//! | `kubernetes.agent_image`          | `BURROW_KUBE_AGENT_IMAGE`          | `"burrow.dev/agent:<version>"` |
//!
//! The file itself is the `file` argument of [`ServeConfig::load`], else
//! `BURROW_SERVE_CONFIG`; without either only the environment and the
//! defaults apply. A few settings are also flags of `burrow serve`
//! ([`Flags`]: `--tls-cert`, `--tls-key`), which override the environment.
//!
//! `tls.cert` and `tls.key` go together: one without the other is
//! [`ConfigError::Missing`] naming the one that is missing. Their files are
//! read when the server starts (and whenever they change), not while the
//! configuration loads.
//!
//! Durations are read by [`burrow::parse_duration`], as the CLI's flags
//! are: `500ms`, `1.5s`, `30s`, `10m`, `1h30m`, `2d`, or a bare number of
//! seconds (`90`, `1.5`); a TOML string or integer (seconds), a string in the
//! environment; at most 365 days. Booleans in the environment are `true`,
//! `false`, `1` or `0`.
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

mod error;
mod file;
mod outbound;
mod resolve;
mod sections;
mod settings;
mod values;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use error::{ConfigError, Origin};
pub use outbound::OutboundConfig;
pub use sections::{
    AuditConfig, AuthConfig, BackendKind, DatabaseUrl, EventsConfig, GatewayConfig, GatewayDomain,
    Listen, LogConfig, LogFormat, PoolConfig, ReaperConfig, TlsConfig, WebhooksConfig,
};
pub use values::format_duration;

use file::{check_env_names, read_file};
use resolve::Layers;
use settings::{Setting, TLS_CERT, TLS_KEY};

/// Environment variable naming the configuration file when no file is given.
pub const CONFIG_ENV: &str = "BURROW_SERVE_CONFIG";

/// Prefix of the environment variables `burrow serve` reads; any other
/// variable with this prefix is rejected as a typo.
pub const ENV_PREFIX: &str = "BURROW_SERVE_";

/// Settings given as flags of `burrow serve`: they override the
/// environment and the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--tls-cert FILE`: `tls.cert`.
    pub tls_cert: Option<String>,
    /// `--tls-key FILE`: `tls.key`.
    pub tls_key: Option<String>,
}

impl Flags {
    /// The flag that gives setting `s`, and its value, if it was given.
    fn value(&self, s: Setting) -> Option<(&'static str, &str)> {
        let (flag, value) = if s.key == TLS_CERT.key {
            ("--tls-cert", &self.tls_cert)
        } else if s.key == TLS_KEY.key {
            ("--tls-key", &self.tls_key)
        } else {
            return None;
        };
        value.as_deref().map(|v| (flag, v))
    }
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
    /// Whether TCP listeners share their port with other processes that
    /// also ask for it (`SO_REUSEPORT`: replicas on one host's network, the
    /// kernel spreading connections over them).
    pub reuse_port: bool,
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
    /// `[audit]`.
    pub audit: AuditConfig,
    /// `[events]`.
    pub events: EventsConfig,
    /// `[webhooks]`.
    pub webhooks: WebhooksConfig,
    /// `[tls]`: `None` serves plain HTTP.
    pub tls: Option<TlsConfig>,
    /// `[log]`.
    pub log: LogConfig,
    /// `[outbound]`: the operator's exceptions to the outbound guard.
    pub outbound: OutboundConfig,
    /// `[kubernetes]`: the cluster of the `kubernetes` backend (unused by
    /// the local one).
    pub kubernetes: burrow_kube::KubeSettings,
}

impl ServeConfig {
    /// Loads and validates the configuration: `file` (else the file named by
    /// `BURROW_SERVE_CONFIG` in `env`, else none), overridden by the
    /// variables in `env` (pass `std::env::vars().collect()`).
    pub fn load(file: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Self::load_with_flags(file, env, &Flags::default())
    }

    /// [`ServeConfig::load`], with `flags` over the environment.
    pub fn load_with_flags(
        file: Option<&Path>,
        env: &BTreeMap<String, String>,
        flags: &Flags,
    ) -> Result<Self, ConfigError> {
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
            flags,
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
                if self.reuse_port && matches!(l, Listen::Tcp(_)) {
                    notes.push("port shared (reuse_port)");
                }
                if self.tls.is_some() && matches!(l, Listen::Tcp(_)) {
                    notes.push("TLS");
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
        let tls = match &self.tls {
            Some(t) => format!(
                "certificate {}, key {} (reloaded when they change)",
                t.cert.display(),
                t.key.display()
            ),
            None => "off (plain HTTP)".into(),
        };
        let g = &self.gateway;
        format!(
            "config file: {file}\n\
             listen:      {listen}\n\
             tls:         {tls}\n\
             database:    {} (max {} connections, acquire timeout {})\n\
             home:        {}\n\
             backend:     {}{}\n\
             replica:     {}\n\
             gateway:     startup timeout {}, retry-after {}, lease ttl {}, heartbeat every {}; {}\n\
             reaper:      {reaper}\n\
             log format:  {}",
            self.database.redacted(),
            self.database_pool.max_connections,
            format_duration(self.database_pool.acquire_timeout),
            self.home.display(),
            self.backend,
            match self.backend {
                BackendKind::Kubernetes => format!(
                    " (namespace {}, kubeconfig {})",
                    self.kubernetes.namespace,
                    self.kubernetes
                        .kubeconfig
                        .as_ref()
                        .map_or("from the environment".to_string(), |p| p
                            .display()
                            .to_string())
                ),
                _ => String::new(),
            },
            self.replica_id,
            format_duration(g.startup_timeout),
            format_duration(g.retry_after),
            format_duration(g.lease_ttl),
            format_duration(g.heartbeat_interval),
            match (&g.domain, g.listen.is_empty()) {
                (Some(d), false) => format!(
                    "own origin on {} as {}",
                    g.listen
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    d.authority("{id}")
                ),
                _ => "no origin of its own (gateway.listen): /gw/ answers are inert in browsers"
                    .into(),
            },
            self.log.format,
        )
    }
}
