//! Layering and validation: every value given for a setting (file, then
//! environment) is parsed, the one with the highest precedence wins, and the
//! settings that depend on each other are checked together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{invalid, ConfigError, Origin};
use super::sections::{
    AuditConfig, AuthConfig, BackendKind, EventsConfig, GatewayConfig, GatewayDomain, Listen,
    LogConfig, LogFormat, PoolConfig, ReaperConfig, TlsConfig, WebhooksConfig,
};
use super::settings::{
    Setting, ACQUIRE_TIMEOUT, ALLOW_PUBLIC, AUDIT_RETENTION, AUTH_REQUIRED, BACKEND, DATABASE,
    EVENTS_RETENTION, GATEWAY_DOMAIN, GATEWAY_LISTEN, HEARTBEAT_INTERVAL, HOME, IDLE_TIMEOUT,
    KUBECONFIG, KUBE_AGENT_IMAGE, KUBE_CONTEXT, KUBE_GVISOR_RUNTIME_CLASS, KUBE_IMAGE_PULL_POLICY,
    KUBE_NAMESPACE, KUBE_RUNTIME_CLASS, LEASE_TTL, LISTEN, LOG_FORMAT, MAX_CONNECTIONS,
    MCP_SESSION_TTL, REPLICA_ID, REQUESTS_PER_MINUTE, RETRY_AFTER, REUSE_PORT, STARTUP_TIMEOUT,
    SWEEP_INTERVAL, TLS_CERT, TLS_KEY, WEBHOOK_BACKOFF, WEBHOOK_MAX_ATTEMPTS, WEBHOOK_TIMEOUT,
};
use super::values::{
    absolute, as_str, default_database, default_home, default_replica_id, format_duration,
    parse_bool, parse_database, parse_duration_raw, parse_file_home, parse_int, parse_listen,
    parse_replica_id, positive_duration,
};
use super::{Flags, ServeConfig};

/// A raw value before it is parsed.
#[derive(Debug)]
pub(super) enum Raw<'a> {
    Toml(&'a toml::Value),
    /// Text: an environment variable's value, or a flag's.
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

/// The file's values, the environment and the flags, in order of
/// precedence.
#[derive(Debug)]
pub(super) struct Layers<'a> {
    pub(super) file: Option<&'a Path>,
    pub(super) values: &'a BTreeMap<String, toml::Value>,
    pub(super) env: &'a BTreeMap<String, String>,
    pub(super) flags: &'a Flags,
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
        if let Some((flag, v)) = self.flags.value(s) {
            out.push(Found {
                origin: Origin::Flag(flag.to_owned()),
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

    pub(super) fn resolve(&self, file: Option<PathBuf>) -> Result<ServeConfig, ConfigError> {
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

        let reuse_port = self.get(REUSE_PORT, parse_bool)?.is_some_and(|v| v.value);
        let (gateway_listen, gateway_domain) = self.gateway_origin(&listen, allow_public_value)?;

        let home = match self.env.get(HOME.env).filter(|h| !h.is_empty()) {
            // The file's value must still be valid.
            Some(h) => {
                self.file_only(HOME, parse_file_home)?;
                absolute(PathBuf::from(h), &Origin::Env(HOME.env.into()), HOME)?
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
                    "kubernetes" => Ok(BackendKind::Kubernetes),
                    other => Err(ConfigError::UnknownBackend {
                        origin: found.origin.clone(),
                        value: other.to_owned(),
                    }),
                }
            })?
            .map_or(BackendKind::Local, |v| v.value);

        let kubernetes = self.kubernetes()?;

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

        let auth = self.get(AUTH_REQUIRED, parse_bool)?;
        if let (Some(off), true) = (auth.as_ref().filter(|v| !v.value), allow_public_value) {
            return Err(invalid(
                &off.origin,
                AUTH_REQUIRED,
                "a server without authentication is for one machine: it cannot be combined \
                 with `allow_public = true`"
                    .into(),
            ));
        }
        let auth_required = auth.is_none_or(|v| v.value);
        let requests_per_minute = self
            .get(REQUESTS_PER_MINUTE, |raw| {
                let n = parse_int(raw)?;
                match u32::try_from(n) {
                    Ok(n) if n <= 1_000_000 => Ok(n),
                    _ => Err(format!(
                        "{n} is out of range; must be 0..=1000000 (0: no limit)"
                    )),
                }
            })?
            .map_or(0, |v| v.value);

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

        let mcp_session_ttl = self
            .get(MCP_SESSION_TTL, |raw| {
                let d = parse_duration_raw(raw)?;
                if d < Duration::from_secs(60) {
                    Err(format!(
                        "{} is too short; must be at least 1m",
                        format_duration(d)
                    ))
                } else {
                    Ok(d)
                }
            })?
            .map_or(Duration::from_secs(24 * 3600), |v| v.value);

        let idle_timeout = match self.get(IDLE_TIMEOUT, parse_duration_raw)? {
            Some(v) if v.value.is_zero() => None,
            Some(v) => Some(v.value),
            None => Some(Duration::from_secs(15 * 60)),
        };
        let retention = match self.get(AUDIT_RETENTION, parse_duration_raw)? {
            Some(v) if v.value.is_zero() => None,
            Some(v) => Some(v.value),
            None => Some(Duration::from_secs(30 * 24 * 3600)),
        };
        let events_retention = match self.get(EVENTS_RETENTION, parse_duration_raw)? {
            Some(v) if v.value.is_zero() => None,
            Some(v) => Some(v.value),
            None => Some(Duration::from_secs(7 * 24 * 3600)),
        };
        let at_most = |limit: Duration| {
            move |raw: &Raw<'_>| {
                let d = positive_duration(raw)?;
                if d > limit {
                    Err(format!(
                        "{} is too long; must be at most {}",
                        format_duration(d),
                        format_duration(limit)
                    ))
                } else {
                    Ok(d)
                }
            }
        };
        let webhooks = WebhooksConfig {
            timeout: self
                .get(WEBHOOK_TIMEOUT, at_most(Duration::from_secs(300)))?
                .map_or(Duration::from_secs(10), |v| v.value),
            backoff: self
                .get(WEBHOOK_BACKOFF, at_most(Duration::from_secs(600)))?
                .map_or(Duration::from_secs(1), |v| v.value),
            max_attempts: self
                .get(WEBHOOK_MAX_ATTEMPTS, |raw| {
                    let n = parse_int(raw)?;
                    match u32::try_from(n) {
                        Ok(n) if (1..=50).contains(&n) => Ok(n),
                        _ => Err(format!("{n} is out of range; must be 1..=50")),
                    }
                })?
                .map_or(8, |v| v.value),
        };
        let tls = self.tls()?;
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

        let outbound = super::outbound::OutboundConfig {
            allow: self
                .get(
                    super::settings::OUTBOUND_ALLOW,
                    super::outbound::parse_allow,
                )?
                .map_or_else(Vec::new, |v| v.value),
        };

        Ok(ServeConfig {
            file,
            listen,
            allow_public: allow_public_value,
            reuse_port,
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
                requests_per_minute: (requests_per_minute > 0).then_some(requests_per_minute),
            },
            gateway: GatewayConfig {
                startup_timeout,
                retry_after,
                lease_ttl,
                heartbeat_interval,
                mcp_session_ttl,
                listen: gateway_listen,
                domain: gateway_domain,
            },
            reaper: ReaperConfig {
                idle_timeout,
                sweep_interval,
            },
            audit: AuditConfig { retention },
            events: EventsConfig {
                retention: events_retention,
            },
            webhooks,
            tls,
            log: LogConfig { format },
            outbound,
            kubernetes,
        })
    }

    /// `gateway.listen` and `gateway.domain`: the gateway's own listeners
    /// (public ones under `allow_public` as the API's, never one of the
    /// API's addresses) and the domain of its origins (by default
    /// `localhost:<port>` of the first TCP listener). A domain without a
    /// listener is an error: nothing would serve it.
    fn gateway_origin(
        &self,
        api: &[Listen],
        allow_public: bool,
    ) -> Result<(Vec<Listen>, Option<GatewayDomain>), ConfigError> {
        let listen = match self.get(GATEWAY_LISTEN, parse_listen)? {
            Some(v) => {
                // Port 0 is a fresh port for each listener: never the same.
                let fixed = |l: &&Listen| !matches!(l, Listen::Tcp(a) if a.port() == 0);
                if let Some(bad) = v.value.iter().filter(fixed).find(|l| api.contains(l)) {
                    return Err(invalid(
                        &v.origin,
                        GATEWAY_LISTEN,
                        format!(
                            "{bad} is also an API listener: the gateway needs an origin of its own"
                        ),
                    ));
                }
                if let (Some(public), false) =
                    (v.value.iter().find(|l| l.is_public()), allow_public)
                {
                    return Err(invalid(
                        &v.origin,
                        GATEWAY_LISTEN,
                        format!(
                            "{public} is not a loopback address; set `allow_public = true` \
                             (or {}=true) to listen on a public address",
                            ALLOW_PUBLIC.env
                        ),
                    ));
                }
                v.value
            }
            None => Vec::new(),
        };
        let domain = self.get(GATEWAY_DOMAIN, |raw| GatewayDomain::parse(as_str(raw)?))?;
        let domain = match (domain, listen.first()) {
            (Some(d), Some(_)) => Some(d.value),
            (Some(d), None) => {
                return Err(invalid(
                    &d.origin,
                    GATEWAY_DOMAIN,
                    format!(
                        "a gateway domain needs a gateway listener ({} or {})",
                        GATEWAY_LISTEN.key, GATEWAY_LISTEN.env
                    ),
                ))
            }
            (None, Some(first)) => Some(GatewayDomain {
                host: "localhost".into(),
                port: match first {
                    Listen::Tcp(a) => Some(a.port()),
                    Listen::Unix(_) => None,
                },
            }),
            (None, None) => None,
        };
        Ok((listen, domain))
    }

    /// `[tls]`: both files or neither (one alone names the other as
    /// missing). The files are read when the server starts, not here.
    fn tls(&self) -> Result<Option<TlsConfig>, ConfigError> {
        let path = |s: Setting| {
            self.layered(s, |found| {
                let text = as_str(&found.raw).map_err(|r| invalid(&found.origin, s, r))?;
                if text.is_empty() {
                    return Err(invalid(
                        &found.origin,
                        s,
                        "the path is empty; leave the setting out to serve plain HTTP".into(),
                    ));
                }
                absolute(PathBuf::from(text), &found.origin, s)
            })
        };
        let cert = path(TLS_CERT)?;
        let key = path(TLS_KEY)?;
        let missing = |set: Setting, origin: Origin, missing: Setting| ConfigError::Missing {
            key: missing.key.to_owned(),
            with: set.key.to_owned(),
            origin,
            reason: format!(
                "set both (the certificate chain and its private key, PEM files; {} and {}) \
                 or neither",
                TLS_CERT.env, TLS_KEY.env
            ),
        };
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(TlsConfig {
                cert: cert.value,
                key: key.value,
            })),
            (None, None) => Ok(None),
            (Some(cert), None) => Err(missing(TLS_CERT, cert.origin, TLS_KEY)),
            (None, Some(key)) => Err(missing(TLS_KEY, key.origin, TLS_CERT)),
        }
    }

    /// The `[kubernetes]` settings (checked whatever the backend: a typo is
    /// an error before it is needed).
    fn kubernetes(&self) -> Result<burrow_kube::KubeSettings, ConfigError> {
        let text = |raw: &Raw<'_>| as_str(raw).map(str::to_owned);
        let mut k = burrow_kube::KubeSettings::default();
        if let Some(v) = self.get(KUBECONFIG, text)? {
            k.kubeconfig = Some(absolute(PathBuf::from(v.value), &v.origin, KUBECONFIG)?);
        }
        k.context = self.get(KUBE_CONTEXT, text)?.map(|v| v.value);
        let mut origins = Vec::new();
        if let Some(v) = self.get(KUBE_NAMESPACE, text)? {
            k.namespace = v.value;
            origins.push((KUBE_NAMESPACE, v.origin));
        }
        if let Some(v) = self.get(KUBE_RUNTIME_CLASS, text)? {
            k.runtime_class = Some(v.value);
            origins.push((KUBE_RUNTIME_CLASS, v.origin));
        }
        if let Some(v) = self.get(KUBE_GVISOR_RUNTIME_CLASS, text)? {
            k.gvisor_runtime_class = v.value;
            origins.push((KUBE_GVISOR_RUNTIME_CLASS, v.origin));
        }
        if let Some(v) = self.get(KUBE_IMAGE_PULL_POLICY, text)? {
            k.image_pull_policy = v.value;
            origins.push((KUBE_IMAGE_PULL_POLICY, v.origin));
        }
        if let Some(v) = self.get(KUBE_AGENT_IMAGE, text)? {
            k.agent_image = v.value;
            origins.push((KUBE_AGENT_IMAGE, v.origin));
        }
        if let Err(burrow::Error::InvalidConfig { field, reason }) = k.validate() {
            let (setting, origin) = origins
                .into_iter()
                .find(|(s, _)| s.key == field)
                .unwrap_or((KUBE_NAMESPACE, Origin::Default));
            return Err(invalid(&origin, setting, reason));
        }
        Ok(k)
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
