//! The inputs of calls, as serde types: every language hands them over as
//! JSON (an object of its own, serialized), and every check of their
//! values is the core's.
//!
//! Durations are seconds (`1.5`) or the core's duration text (`"1h30m"`,
//! `"250ms"`; see `burrow::parse_duration`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use burrow::{
    DriverKind, ExecOptions, IdleAction, ListFilter, LogOptions, LogSource, Modify, Mount,
    MountSource, OciRuntime, PoolSpec, SandboxConfig, Status, StopOptions,
};
use serde::{Deserialize, Deserializer};

use crate::failure::Failure;

/// A duration: seconds (a non-negative finite number) or duration text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(s) => Duration::try_from_secs_f64(s).map(Seconds).map_err(|_| {
                serde::de::Error::custom(format!(
                    "a duration must be a non-negative number of seconds, not {s}"
                ))
            }),
            Raw::Text(t) => burrow::parse_duration(&t)
                .map(Seconds)
                .map_err(serde::de::Error::custom),
        }
    }
}

fn opt_duration(s: Option<Seconds>) -> Option<Duration> {
    s.map(|s| s.0)
}

/// Present-or-absent for `modify`: an absent key is `None` (unchanged), a
/// present `null` is `Some(None)` (cleared), a value is `Some(Some(v))`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// How a build call treats an existing sandbox of the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildMode {
    /// Create and start; an existing name is `already_exists`.
    #[default]
    Create,
    /// Destroy any sandbox of the name, then create and start.
    Replace,
    /// Converge: connect to (starting if needed) or create.
    ConnectOrCreate,
    /// Persist without starting (returns a handle).
    Define,
}

/// A volume or host directory mounted into the sandbox.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeInput {
    /// A volume name (no `/`) or an absolute host path.
    pub source: String,
    /// Where in the sandbox.
    pub target: String,
    /// Mounted read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// A secret: its variable's name, its value, the hosts it is for, and
/// optionally the headers it goes in.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretInput {
    /// The guest's environment variable (holding a placeholder).
    pub name: String,
    /// The value.
    pub value: String,
    /// The hosts whose HTTP(S) requests get it.
    pub hosts: Vec<String>,
    /// The request headers whose values get it (absent or empty:
    /// `Authorization` and `Proxy-Authorization`; the core checks them).
    #[serde(default)]
    pub headers: Vec<String>,
}

impl std::fmt::Debug for SecretInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretInput")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// A sandbox to create, replace, converge on or define.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildInput {
    /// The sandbox name.
    pub name: String,
    /// What to do with an existing sandbox of the name.
    #[serde(default)]
    pub mode: BuildMode,
    /// Image reference (see the README's Images).
    #[serde(default)]
    pub image: Option<String>,
    /// `container` or `vm` (absent: the backend's default).
    #[serde(default)]
    pub driver: Option<String>,
    /// OCI runtime of the container driver (`runc`, `crun`, `runsc`).
    #[serde(default)]
    pub runtime: Option<String>,
    /// CPU limit.
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Memory limit in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Process limit.
    #[serde(default)]
    pub pids_limit: Option<u64>,
    /// Disk limit in MiB of the writable layer (32 to 16 TiB).
    #[serde(default)]
    pub disk_mb: Option<u64>,
    /// Environment of every exec.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Default working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Volumes and host directories.
    #[serde(default)]
    pub volumes: Vec<VolumeInput>,
    /// Network access: `false`/`"none"`, `true`/`"all"`, or a policy
    /// `{"allow": [RULE...], "deny": [RULE...]}`.
    #[serde(default)]
    pub network: Option<serde_json::Value>,
    /// Published ports (`[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]`).
    #[serde(default)]
    pub ports: Vec<String>,
    /// Secrets: values the guest never holds (see `burrow::Secret`).
    #[serde(default)]
    pub secrets: Vec<SecretInput>,
    /// Idle timeout (reclaim after no activity).
    #[serde(default)]
    pub idle_timeout: Option<Seconds>,
    /// What idle reclaim does (`stop`, `hibernate`; absent: stop).
    #[serde(default)]
    pub idle_action: Option<IdleAction>,
    /// Maximum duration of a run.
    #[serde(default)]
    pub max_duration: Option<Seconds>,
    /// Bound of a start.
    #[serde(default)]
    pub startup_timeout: Option<Seconds>,
    /// Demand start (absent: the default for its idle timeout).
    #[serde(default)]
    pub demand_start: Option<bool>,
    /// Survives the process that created it.
    #[serde(default)]
    pub detached: bool,
    /// The main process (an empty list: the image's Entrypoint then Cmd);
    /// absent: none.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Keep the programs' output in the logs (absent: yes).
    #[serde(default)]
    pub capture_output: Option<bool>,
    /// Run even where a limit cannot be enforced (absent: no).
    #[serde(default)]
    pub best_effort_limits: bool,
    /// Whether the limits left out get the backend's defaults (absent or
    /// `null`: yes; `false`: they stay unlimited).
    #[serde(default)]
    pub default_limits: Option<bool>,
    /// Syscalls the seccomp filter allows beyond burrow's profile, by their
    /// x86-64 names (`io_uring_setup`; the core checks them); absent or
    /// `null`: none.
    #[serde(default)]
    pub seccomp_allow: Option<Vec<String>>,
}

impl BuildInput {
    /// The core configuration; the driver and runtime are applied by the
    /// builder (the core parses them).
    pub(crate) fn config(&self) -> Result<SandboxConfig, Failure> {
        let mut config = SandboxConfig::new(self.image.clone().unwrap_or_default());
        config.cpus = self.cpus;
        config.memory_mb = self.memory_mb;
        config.pids_limit = self.pids_limit;
        config.disk_mb = self.disk_mb;
        config.env = self.env.clone();
        config.workdir = self.workdir.clone();
        config.labels = self.labels.clone();
        config.mounts = self
            .volumes
            .iter()
            .map(|v| {
                // A volume name never contains '/'; anything else is a host
                // path (the core checks it is absolute and exists).
                let source = if v.source.contains('/') {
                    MountSource::Host(PathBuf::from(&v.source))
                } else {
                    MountSource::Volume(v.source.clone())
                };
                Mount::new(source, v.target.clone()).read_only(v.read_only)
            })
            .collect();
        config.network = network(self.network.as_ref())?.unwrap_or_default();
        config.ports = self
            .ports
            .iter()
            .map(|p| {
                p.parse::<burrow::PortMapping>()
                    .map_err(burrow::Error::from)
            })
            .collect::<Result<_, _>>()?;
        config.secrets = self
            .secrets
            .iter()
            .map(|s| {
                burrow::Secret::new(s.name.clone(), s.value.clone(), s.hosts.clone())
                    .in_headers(s.headers.clone())
            })
            .collect();
        config.idle_timeout = opt_duration(self.idle_timeout);
        config.idle_action = self.idle_action.unwrap_or_default();
        config.max_duration = opt_duration(self.max_duration);
        if let Some(t) = self.startup_timeout {
            config.startup_timeout = t.0;
        }
        config.demand_start = self.demand_start;
        config.command = self.command.clone();
        if let Some(c) = self.capture_output {
            config.capture_output = c;
        }
        config.best_effort_limits = self.best_effort_limits;
        config.default_limits = self.default_limits.unwrap_or(true);
        config.seccomp_allow = self.seccomp_allow.clone().unwrap_or_default();
        Ok(config)
    }
}

/// A warm pool to define: a build's fields (`name` is the pool's; no
/// `mode` nor `detached`: warm sandboxes belong to no process) and its
/// `size`.
#[derive(Debug, Clone)]
pub struct PoolInput {
    /// How many warm sandboxes it keeps.
    pub size: u32,
    /// Its name and its sandboxes' options.
    pub build: BuildInput,
}

impl<'de> Deserialize<'de> for PoolInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut fields = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        if let Some(key) = ["mode", "detached"]
            .into_iter()
            .find(|k| fields.contains_key(*k))
        {
            return Err(D::Error::custom(format!(
                "unknown field `{key}` (a pool keeps its sandboxes detached, for creates to claim)"
            )));
        }
        let size = fields
            .remove("size")
            .ok_or_else(|| D::Error::missing_field("size"))?;
        Ok(PoolInput {
            size: u32::deserialize(size).map_err(D::Error::custom)?,
            build: BuildInput::deserialize(serde_json::Value::Object(fields))
                .map_err(D::Error::custom)?,
        })
    }
}

impl PoolInput {
    /// The core definition, the driver and runtime parsed as a builder
    /// parses them (an unknown one is `invalid_config`).
    pub(crate) fn spec(&self) -> Result<PoolSpec, Failure> {
        let mut config = self.build.config()?;
        if let Some(d) = &self.build.driver {
            config.driver = Some(d.parse::<DriverKind>()?);
        }
        if let Some(r) = &self.build.runtime {
            config.runtime = Some(r.parse::<OciRuntime>()?);
        }
        Ok(PoolSpec::new(self.build.name.clone(), config, self.size))
    }
}

/// A `network` given as JSON (`null`: none given); a policy whose rule
/// does not parse is an invalid configuration, as in the core's API.
fn network(v: Option<&serde_json::Value>) -> Result<Option<burrow::Network>, Failure> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            burrow::Error::InvalidConfig {
                field: "network".into(),
                reason: e.to_string(),
            }
            .into()
        }),
    }
}

/// A command to run (`exec`, `spawn`). Its stdin data, if any, is the
/// call's byte argument.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecInput {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment on top of the sandbox's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// `spawn` only: keep stdin open for `write` (when no data is given).
    #[serde(default)]
    pub keep_stdin: bool,
    /// Kill the process after this long.
    #[serde(default)]
    pub timeout: Option<Seconds>,
    /// `exec` only: keep at most this many bytes of each of stdout and
    /// stderr (the result says `truncated`).
    #[serde(default)]
    pub output_limit: Option<usize>,
}

impl ExecInput {
    /// The core options; `stdin` is the call's data. For a spawn without
    /// data, stdin stays open with `keep_stdin`, else it is empty.
    pub(crate) fn options(&self, stdin: Option<Vec<u8>>, spawn: bool) -> ExecOptions {
        let stdin = match stdin {
            Some(data) => Some(data),
            None if spawn && self.keep_stdin => None,
            None => Some(Vec::new()),
        };
        let mut opts = ExecOptions::new(self.argv.clone());
        opts.env = self.env.clone();
        opts.cwd = self.cwd.clone();
        opts.stdin = stdin;
        opts.timeout = opt_duration(self.timeout);
        opts.output_limit = self.output_limit;
        opts
    }
}

/// The changes of a `modify`: only the keys present change; a present
/// `null` clears a limit or timeout.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModifyInput {
    /// CPU limit.
    #[serde(default, deserialize_with = "present")]
    pub cpus: Option<Option<f64>>,
    /// Memory limit in MiB.
    #[serde(default, deserialize_with = "present")]
    pub memory_mb: Option<Option<u64>>,
    /// Environment entries to set.
    #[serde(default)]
    pub env_set: BTreeMap<String, String>,
    /// Environment names to remove.
    #[serde(default)]
    pub env_unset: Vec<String>,
    /// Labels to set.
    #[serde(default)]
    pub labels_set: BTreeMap<String, String>,
    /// Label names to remove.
    #[serde(default)]
    pub labels_unset: Vec<String>,
    /// Idle timeout.
    #[serde(default, deserialize_with = "present")]
    pub idle_timeout: Option<Option<Seconds>>,
    /// What idle reclaim does.
    #[serde(default)]
    pub idle_action: Option<IdleAction>,
    /// Maximum duration.
    #[serde(default, deserialize_with = "present")]
    pub max_duration: Option<Option<Seconds>>,
    /// The network (`false`, `true` or a policy).
    #[serde(default)]
    pub network: Option<serde_json::Value>,
}

impl ModifyInput {
    pub(crate) fn modify(&self) -> Result<Modify, Failure> {
        let mut m = Modify::default();
        m.cpus = self.cpus;
        m.memory_mb = self.memory_mb;
        m.env_set = self.env_set.clone();
        m.env_unset = self.env_unset.clone();
        m.labels_set = self.labels_set.clone();
        m.labels_unset = self.labels_unset.clone();
        m.idle_timeout = self.idle_timeout.map(opt_duration);
        m.idle_action = self.idle_action;
        m.max_duration = self.max_duration.map(opt_duration);
        m.network = network(self.network.as_ref())?;
        Ok(m)
    }
}

/// Which log lines (`logs`, `follow_logs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogInput {
    /// Only the last lines.
    #[serde(default)]
    pub tail: Option<usize>,
    /// One source (`stdout`, `stderr`, `guest`, `supervisor`); absent: all.
    #[serde(default)]
    pub source: Option<String>,
    /// Only lines written at or after this time (milliseconds since the
    /// Unix epoch).
    #[serde(default)]
    pub since_ms: Option<u64>,
}

impl LogInput {
    /// The core options; an unknown source is the core's
    /// `invalid_argument`.
    pub(crate) fn options(&self, follow: bool) -> burrow::Result<LogOptions> {
        let mut opts = LogOptions::default();
        opts.follow = follow;
        opts.tail = self.tail;
        opts.since = self
            .since_ms
            .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms));
        if let Some(s) = &self.source {
            opts.sources = vec![s.parse::<LogSource>()?];
        }
        Ok(opts)
    }
}

/// A list filter.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListInput {
    /// Any of these statuses (empty: all).
    #[serde(default)]
    pub statuses: Vec<String>,
    /// All of these labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Statuses by name; an unknown one is the core's `invalid_argument`.
pub(crate) fn statuses(names: &[String]) -> burrow::Result<Vec<Status>> {
    names.iter().map(|s| s.parse()).collect()
}

impl ListInput {
    pub(crate) fn filter(&self) -> burrow::Result<ListFilter> {
        let mut filter = ListFilter::default().statuses(statuses(&self.statuses)?);
        filter.labels = self.labels.clone();
        Ok(filter)
    }
}

/// Stop options.
pub(crate) fn stop_options(grace: Option<Seconds>) -> StopOptions {
    let mut opts = StopOptions::default();
    if let Some(g) = grace {
        opts.grace = g.0;
    }
    opts
}

#[cfg(test)]
mod tests {
    use crate::ops::ModuleOp;

    fn pool(json: &str) -> Result<burrow::PoolSpec, String> {
        match serde_json::from_str::<ModuleOp>(json).map_err(|e| e.to_string())? {
            ModuleOp::CreatePool(input) => input.spec().map_err(|f| f.code().to_owned()),
            other => Err(format!("not a create_pool: {other:?}")),
        }
    }

    #[test]
    fn a_pool_takes_a_builds_options_and_its_size() {
        let spec = pool(
            r#"{"op": "create_pool", "name": "web", "size": 3, "image": "alpine",
                "env": {"A": "1"}, "driver": "container", "startup_timeout": "5s"}"#,
        )
        .expect("a pool");
        assert_eq!((spec.name.as_str(), spec.size), ("web", 3));
        assert_eq!(spec.config.image, "alpine");
        assert_eq!(spec.config.env["A"], "1");
        assert_eq!(spec.config.driver, Some(burrow::DriverKind::Container));
        assert_eq!(spec.config.startup_timeout.as_secs(), 5);
    }

    #[test]
    fn a_pool_without_a_size_or_with_a_builds_mode_is_refused() {
        for bad in [
            r#"{"op": "create_pool", "name": "web", "image": "alpine"}"#,
            r#"{"op": "create_pool", "name": "web", "size": -1}"#,
            r#"{"op": "create_pool", "name": "web", "size": 1, "detached": true}"#,
            r#"{"op": "create_pool", "name": "web", "size": 1, "mode": "create"}"#,
            r#"{"op": "create_pool", "name": "web", "size": 1, "nope": 1}"#,
        ] {
            assert!(
                serde_json::from_str::<ModuleOp>(bad).is_err(),
                "{bad} was taken"
            );
        }
        assert_eq!(
            pool(r#"{"op": "create_pool", "name": "web", "size": 1, "driver": "warp"}"#),
            Err("invalid_config".to_owned())
        );
    }

    #[test]
    fn a_secrets_headers_reach_the_configuration_unchecked_here() {
        let config = |secret: &str| {
            let input: super::BuildInput =
                serde_json::from_str(&format!(r#"{{"name": "s", "secrets": [{secret}]}}"#))
                    .expect("a build input");
            input.config().expect("a configuration")
        };
        let named = config(
            r#"{"name": "KEY", "value": "v", "hosts": ["a.b"], "headers": ["X-Api-Key", "Host"]}"#,
        );
        // The core refuses `Host` when it validates the configuration.
        assert_eq!(named.secrets[0].headers, ["X-Api-Key", "Host"]);
        assert_eq!(named.secrets[0].hosts, ["a.b"]);
        let plain = config(r#"{"name": "KEY", "value": "v", "hosts": ["a.b"]}"#);
        assert!(plain.secrets[0].headers.is_empty());
        let input: super::BuildInput = serde_json::from_str(
            r#"{"name": "s", "secrets": [{"name": "K", "value": "hidden", "hosts": [], "headers": ["X"]}]}"#,
        )
        .expect("a build input");
        let shown = format!("{:?}", input.secrets);
        assert!(
            shown.contains("\"X\"") && !shown.contains("hidden"),
            "{shown}"
        );
    }

    #[test]
    fn syscalls_default_limits_and_the_disk_reach_the_configuration() {
        let config = |fields: &str| {
            let input: super::BuildInput =
                serde_json::from_str(&format!(r#"{{"name": "s"{fields}}}"#))
                    .expect("a build input");
            input.config().expect("a configuration")
        };
        let plain = config("");
        assert!(plain.default_limits, "on unless asked off");
        assert!(plain.seccomp_allow.is_empty());
        assert_eq!(plain.disk_mb, None);
        let nulls = config(r#", "default_limits": null, "seccomp_allow": null, "disk_mb": null"#);
        assert!(nulls.default_limits && nulls.seccomp_allow.is_empty());
        let asked = config(
            r#", "seccomp_allow": ["io_uring_setup", "NOT A NAME"], "default_limits": false,
                "disk_mb": 16"#,
        );
        // The core refuses the bad name and the small disk when it
        // validates the configuration.
        assert_eq!(asked.seccomp_allow, ["io_uring_setup", "NOT A NAME"]);
        assert!(!asked.default_limits);
        assert_eq!(asked.disk_mb, Some(16));
    }
}
