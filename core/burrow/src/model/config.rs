//! Sandbox configuration: what the user asked for, validated at the edge.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use burrow_net::{
    Network, Policy as NetworkPolicy, Rule as NetworkRule, RuleError as NetworkRuleError,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

listed_enum! {
    /// How the sandbox is isolated.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[non_exhaustive]
    pub enum DriverKind {
        /// Namespace container under an OCI runtime binary.
        #[default]
        Container = "container",
        /// Its own QEMU microVM with burrow's guest kernel.
        Vm = "vm",
    }
}

/// What idle reclaim does with a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IdleAction {
    /// Stop it: the next start boots it again (its disk is kept, its
    /// processes and memory are not).
    #[default]
    Stop,
    /// Save the whole running guest (memory, processes, device state) and
    /// restore it at the next start. The vm driver does this; where a
    /// sandbox cannot be saved (another driver, a host directory shared
    /// into a VM, a VM that was not started from a boot template) idle
    /// reclaim stops it instead. The run ends `Stopped` with exit reason
    /// [`ExitReason::Hibernated`](super::ExitReason::Hibernated).
    Hibernate,
}

impl IdleAction {
    /// The name used in configuration (`stop`, `hibernate`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdleAction::Stop => "stop",
            IdleAction::Hibernate => "hibernate",
        }
    }

    /// Parses [`IdleAction::as_str`] output.
    pub fn parse(s: &str) -> Option<IdleAction> {
        [IdleAction::Stop, IdleAction::Hibernate]
            .into_iter()
            .find(|a| a.as_str() == s)
    }

    fn is_stop(&self) -> bool {
        *self == IdleAction::Stop
    }
}

impl DriverKind {
    /// The smallest memory a VM can boot the agent in, in MiB.
    pub const VM_MIN_MEMORY_MB: u64 = 64;
    /// The most vCPUs a VM can have (CONFIG_NR_CPUS of burrow's guest
    /// kernel, `vm/kernel/burrow.config`).
    pub const VM_MAX_CPUS: u32 = 8;
}

impl AsRef<str> for DriverKind {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for DriverKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DriverKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "container" => Ok(DriverKind::Container),
            "vm" => Ok(DriverKind::Vm),
            other => Err(Error::InvalidConfig {
                field: "driver".into(),
                reason: format!("unknown driver {other:?} (expected container or vm)"),
            }),
        }
    }
}

/// OCI runtime binary used by the container driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OciRuntime {
    /// runc (the default).
    #[default]
    Runc,
    /// crun.
    Crun,
    /// gVisor's runsc.
    Runsc,
}

impl OciRuntime {
    /// The binary name.
    pub fn binary(self) -> &'static str {
        match self {
            OciRuntime::Runc => "runc",
            OciRuntime::Crun => "crun",
            OciRuntime::Runsc => "runsc",
        }
    }
}

impl std::str::FromStr for OciRuntime {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "runc" => Ok(OciRuntime::Runc),
            "crun" => Ok(OciRuntime::Crun),
            "runsc" => Ok(OciRuntime::Runsc),
            other => Err(Error::InvalidConfig {
                field: "runtime".into(),
                reason: format!("unknown OCI runtime {other:?} (expected runc, crun or runsc)"),
            }),
        }
    }
}

/// Where a mount's content comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MountSource {
    /// A host directory (absolute path). Never deleted by burrow.
    Host(PathBuf),
    /// A named volume under the burrow home, created on first use and kept
    /// when sandboxes are removed.
    Volume(String),
}

/// A directory made visible inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Mount {
    /// Content source.
    pub source: MountSource,
    /// Absolute path inside the sandbox.
    pub target: String,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
}

impl Mount {
    /// `source` at `target` inside the sandbox, writable.
    pub fn new(source: MountSource, target: impl Into<String>) -> Self {
        Mount {
            source,
            target: target.into(),
            read_only: false,
        }
    }

    /// Mount read-only (or not).
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

/// Persisted configuration of a sandbox. Applied only on create; existing
/// configuration always wins on reuse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Image reference: a rootfs directory, an OCI layout directory
    /// (`oci:PATH[:TAG]` or a directory holding `oci-layout`), or a name
    /// imported under the burrow home.
    pub image: String,
    /// Isolation driver. `None` asks for the default of the backend that
    /// creates the sandbox (for the local backend, `LocalConfig`'s
    /// `default_driver`, `$BURROW_DRIVER` on its host); the backend records
    /// its choice, so every configuration a backend returns names one (the
    /// engine reads a configuration without one as the built-in default,
    /// container, the only driver older records could leave out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverKind>,
    /// OCI runtime of the container driver. `None` asks for the default of
    /// the backend that creates the sandbox (for the local backend,
    /// `LocalConfig`'s `default_runtime`, `$BURROW_RUNTIME` on its host);
    /// the backend records its choice, as for the driver (the engine reads
    /// a configuration without one as the built-in default, runc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<OciRuntime>,
    /// CPU limit in cores (fractions allowed).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "finite_cpus::serialize"
    )]
    pub cpus: Option<f64>,
    /// Memory limit in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Maximum number of processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<u64>,
    /// Disk limit in MiB of the sandbox's writable layer (what it changes
    /// of its root filesystem): a guest that writes past it gets `ENOSPC`,
    /// and the host keeps the rest of its space. Set at create. A microVM
    /// without it has a disk of 8 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Run even where a limit asked for above cannot be enforced (an
    /// unprivileged user without a delegated cgroup, a VM's process count):
    /// each such limit is then left out with a note. Off by default: such a
    /// sandbox is refused with [`Error::InvalidConfig`](crate::Error::InvalidConfig)
    /// naming the limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub best_effort_limits: bool,
    /// Give the limits this configuration leaves out (`memory_mb`, `cpus`,
    /// `pids_limit`, `disk_mb`) the defaults of the backend that creates the sandbox,
    /// recorded at create (for the local backend, `LocalConfig`'s
    /// `default_limits`, where its host can enforce them; a limit removed
    /// later gets its default back). On by default; off, what is left out
    /// stays unlimited. `burrow serve` refuses off to every tenant but the
    /// default one.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub default_limits: bool,
    /// Syscalls the sandbox's seccomp filter allows beyond burrow's
    /// profile, by their x86-64 names (`io_uring_setup`): the container
    /// driver's runtime installs the filter before the first instruction
    /// of the sandbox's first process, and denies what the profile leaves
    /// out (see docs/security.md). Empty by default. A microVM has no such
    /// filter (its guest kernel is the boundary): there it changes
    /// nothing. `burrow serve` refuses it to every tenant but the default
    /// one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seccomp_allow: Vec<String>,
    /// Environment of every process in the sandbox (on top of the image's).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Default working directory (absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Labels for listing and filtering.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Volumes and host directories.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Outbound network access: none (the default), all (anything
    /// public), or a policy of allow and deny rules, enforced by the
    /// sandbox's own network stack (see docs/networking.md).
    #[serde(default)]
    pub network: Network,
    /// The egress ceiling (`burrow serve` sets it on every tenant's
    /// sandbox but the default tenant's, whatever the request said): the
    /// host's own, loopback, private, link-local and other non-public
    /// addresses are refused whatever `network` names, and the pulls of
    /// the image reach them only where it allows (see docs/networking.md).
    /// `None`: `network` alone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ceiling: Option<burrow_net::Ceiling>,
    /// Secrets: each guest variable holds a placeholder, which the
    /// network stack replaces with the value in HTTP requests to the
    /// secret's hosts only (see [`Secret`](super::Secret)). Given at
    /// create; the values are never read back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<super::secrets::Secret>,
    /// Host ports whose connections or datagrams reach ports of the
    /// sandbox's loopback, while it runs (`8080:80`, `0.0.0.0:5353:53/udp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<super::ports::PortMapping>,
    /// Reclaim the sandbox after this long without activity (0 disables).
    #[serde(
        default,
        with = "opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<Duration>,
    /// What idle reclaim does: stop (the default) or hibernate.
    #[serde(default, skip_serializing_if = "IdleAction::is_stop")]
    pub idle_action: IdleAction,
    /// Stop each run after this long.
    #[serde(
        default,
        with = "opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duration: Option<Duration>,
    /// Start the sandbox again on the next exec/shell/fs call after it was
    /// reclaimed for idleness. `None`: on when an idle timeout is set. A
    /// backend whose host turns that default off (the local backend with
    /// `$BURROW_DEMAND_START=0`, see `LocalConfig`) records `Some(false)`
    /// at create, so the configuration it returns says what happens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demand_start: Option<bool>,
    /// Bound on one start (runtime creation to agent handshake).
    #[serde(default = "default_startup_timeout", with = "duration_ms")]
    pub startup_timeout: Duration,
    /// Keep the output of the programs that run in the sandbox (execs,
    /// shells) in its logs (sources `stdout` and `stderr`, with the time of
    /// each line, within the logs' size bound). On by default.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub capture_output: bool,
    /// The sandbox's main process, started with every run once the sandbox
    /// is Running; when it ends, the run ends (a graceful stop, reason
    /// `completed`). An empty list runs the image's Entrypoint then Cmd.
    /// `None` (the default): no main process; the sandbox runs until it is
    /// stopped, reclaimed or reaches its maximum duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Where a sandbox with secrets finds its CA's certificate (also added to
/// the image's trust store at each start).
pub const SANDBOX_CA_FILE: &str = "/etc/ssl/certs/burrow-sandbox-ca.pem";

/// Longest duration a configuration (or a stop's grace) accepts: 2^53 - 1
/// milliseconds, about 285,000 years. Anything longer would not survive a
/// JSON number in JavaScript, nor an `Instant` addition everywhere.
pub const MAX_DURATION: Duration = Duration::from_millis((1 << 53) - 1);

/// The most syscalls a sandbox may add to its seccomp filter.
pub const MAX_SECCOMP_ALLOW: usize = 64;

/// Smallest disk limit in MiB (a filesystem's own bookkeeping and a
/// little room besides).
pub const MIN_DISK_MB: u64 = 32;

/// Largest disk limit in MiB: 16 TiB.
pub const MAX_DISK_MB: u64 = 1 << 24;

/// Largest process limit: the kernel's own ceiling on PIDs (`PID_MAX_LIMIT`).
pub const MAX_PIDS_LIMIT: u64 = 1 << 22;

fn default_startup_timeout() -> Duration {
    Duration::from_secs(60)
}

impl SandboxConfig {
    /// A default configuration for `image`.
    pub fn new(image: impl Into<String>) -> Self {
        SandboxConfig {
            image: image.into(),
            driver: None,
            runtime: None,
            cpus: None,
            memory_mb: None,
            pids_limit: None,
            disk_mb: None,
            env: BTreeMap::new(),
            workdir: None,
            labels: BTreeMap::new(),
            mounts: Vec::new(),
            network: Network::None,
            egress_ceiling: None,
            ports: Vec::new(),
            secrets: Vec::new(),
            idle_timeout: None,
            idle_action: IdleAction::Stop,
            max_duration: None,
            demand_start: None,
            startup_timeout: default_startup_timeout(),
            capture_output: true,
            command: None,
            best_effort_limits: false,
            default_limits: true,
            seccomp_allow: Vec::new(),
        }
    }

    /// The environment of the guest's processes: `env`, each secret's
    /// variable holding its placeholder, and where a sandbox with secrets
    /// keeps its CA's certificate for Node.js (`NODE_EXTRA_CA_CERTS`,
    /// unless `env` sets it).
    pub fn guest_env(&self) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        for s in &self.secrets {
            if let Some(p) = &s.placeholder {
                env.insert(s.name.clone(), p.clone());
            }
        }
        if !self.secrets.is_empty() {
            env.entry("NODE_EXTRA_CA_CERTS".into())
                .or_insert_with(|| SANDBOX_CA_FILE.into());
        }
        env
    }

    /// Whether an exec/shell/fs call starts this sandbox again after an idle
    /// reclaim: `demand_start` if set, else whether an idle timeout is set.
    pub fn demand_start_enabled(&self) -> bool {
        let reclaims = self.idle_timeout.is_some_and(|t| !t.is_zero());
        self.demand_start.unwrap_or(reclaims)
    }

    /// The OCI runtime the container driver runs this sandbox with: the
    /// recorded one, else the built-in default (runc).
    pub fn oci_runtime(&self) -> OciRuntime {
        self.runtime.unwrap_or_default()
    }

    /// Fills what the configuration leaves to the backend: the driver
    /// (`default_driver`), the OCI runtime (`default_runtime`), and demand
    /// start when the backend's default is off (`Some(false)`, so a later
    /// idle timeout does not turn it on). What the configuration says
    /// itself always wins.
    pub fn resolve_defaults(
        &mut self,
        default_driver: DriverKind,
        default_runtime: OciRuntime,
        demand_start_default: bool,
    ) {
        self.driver.get_or_insert(default_driver);
        self.runtime.get_or_insert(default_runtime);
        if !demand_start_default {
            self.demand_start.get_or_insert(false);
        }
    }

    /// Validates every field; returns the first problem as
    /// [`Error::InvalidConfig`].
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, reason: String| {
            Err(Error::InvalidConfig {
                field: field.into(),
                reason,
            })
        };
        if self.image.trim().is_empty() {
            return bad("image", "no image given".into());
        }
        if self.image.len() > 4096 || self.image.contains('\0') {
            return bad(
                "image",
                "the image reference is too long or contains NUL".into(),
            );
        }
        if let Err(reason) = super::ports::validate(&self.ports) {
            return bad("ports", reason);
        }
        super::secrets::validate(&self.secrets, &self.env)?;
        if !self.secrets.is_empty() && !self.network.is_enabled() {
            return bad(
                "secrets",
                "a sandbox without a network has nowhere to send a secret; give it a network (all, or a policy)".into(),
            );
        }
        if let Some(c) = self.cpus {
            if !c.is_finite() || c <= 0.0 || c > 1024.0 {
                return bad("cpus", format!("{c} is not a CPU count between 0 and 1024"));
            }
        }
        if let Some(argv) = &self.command {
            if argv.first().is_some_and(|a| a.is_empty()) {
                return bad("command", "the program name is empty".into());
            }
            if argv.len() > 4096 || argv.iter().any(|a| a.contains('\0') || a.len() > 65536) {
                return bad(
                    "command",
                    "more than 4096 arguments, one over 64 KiB, or a NUL byte".into(),
                );
            }
        }
        if let Some(m) = self.memory_mb {
            if !(16..=1 << 22).contains(&m) {
                return bad("memory_mb", format!("{m} MiB is outside 16 MiB..4 TiB"));
            }
        }
        if let Network::Policy(p) = &self.network {
            if let Err(e) = p.validate() {
                return bad("network", e.to_string());
            }
        }
        if self
            .egress_ceiling
            .as_ref()
            .is_some_and(|c| c.pull_allow.len() > burrow_net::policy::MAX_RULES)
        {
            return bad(
                "egress_ceiling.pull_allow",
                format!("more than {} rules", burrow_net::policy::MAX_RULES),
            );
        }
        if self.network.is_enabled()
            && self.driver == Some(DriverKind::Container)
            && self.runtime == Some(OciRuntime::Runsc)
        {
            return bad(
                "network",
                "the container driver has no network under runsc yet \
                 (gVisor reads the network namespace before the stack can attach to it); \
                 use runc or crun, or the vm driver"
                    .into(),
            );
        }
        if self.driver == Some(DriverKind::Vm) {
            if let Some(m) = self.memory_mb {
                if m < DriverKind::VM_MIN_MEMORY_MB {
                    return bad(
                        "memory_mb",
                        format!(
                            "{m} MiB is too little for a VM (at least {} MiB)",
                            DriverKind::VM_MIN_MEMORY_MB
                        ),
                    );
                }
            }
            if let Some(c) = self.cpus {
                let max = DriverKind::VM_MAX_CPUS;
                if c > f64::from(max) {
                    return bad(
                        "cpus",
                        format!("{c} vCPUs is more than burrow's guest kernel supports ({max})"),
                    );
                }
            }
        }
        if let Some(d) = self.disk_mb {
            if !(MIN_DISK_MB..=MAX_DISK_MB).contains(&d) {
                return bad(
                    "disk_mb",
                    format!("{d} MiB is outside {MIN_DISK_MB} MiB..16 TiB"),
                );
            }
        }
        if let Some(p) = self.pids_limit {
            if !(8..=MAX_PIDS_LIMIT).contains(&p) {
                return bad("pids_limit", format!("{p} is outside 8..={MAX_PIDS_LIMIT}"));
            }
        }
        if self.seccomp_allow.len() > MAX_SECCOMP_ALLOW {
            return bad(
                "seccomp_allow",
                format!("more than {MAX_SECCOMP_ALLOW} syscalls"),
            );
        }
        for (i, name) in self.seccomp_allow.iter().enumerate() {
            let well_formed = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !well_formed {
                return bad(
                    &format!("seccomp_allow[{i}]"),
                    format!("{name:?} is not a syscall name ([a-z0-9_], at most 64 bytes)"),
                );
            }
            if self.seccomp_allow[..i].contains(name) {
                return bad(
                    &format!("seccomp_allow[{i}]"),
                    format!("{name} is named twice"),
                );
            }
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return bad(
                    "env",
                    format!("{k:?} is not a valid environment variable name"),
                );
            }
        }
        if let Some(w) = &self.workdir {
            paths::check_workdir("workdir", w)?;
        }
        // What a reader of a listing would not see as it is (labels select
        // sandboxes, and a look-alike could pass for another's).
        let unseen = |c: char| c.is_control() || super::name::is_hidden_char(c);
        for (k, v) in &self.labels {
            if k.is_empty() || k.len() > 128 || k.chars().any(|c| unseen(c) || c == '=' || c == ',')
            {
                return bad("labels", format!("{k:?} is not a valid label key (1..=128 bytes, no '=', ',', control, invisible or reordering characters)"));
            }
            if v.len() > 1024 || v.chars().any(unseen) {
                return bad(
                    "labels",
                    format!("the value of label {k:?} is too long or has control, invisible or reordering characters"),
                );
            }
        }
        let mut targets = std::collections::HashSet::new();
        for (i, m) in self.mounts.iter().enumerate() {
            let field = |part: &str| format!("mounts[{i}].{part}");
            // Canonical from here on: the drivers mount this very string.
            paths::check_mount_target(&field("target"), &m.target)?;
            if !targets.insert(m.target.as_str()) {
                return bad(&field("target"), format!("two mounts target {}", m.target));
            }
            match &m.source {
                MountSource::Host(p) => {
                    if !p.is_absolute() {
                        return bad(
                            &field("source.host"),
                            format!("host path {} is not absolute", p.display()),
                        );
                    }
                    if !p.is_dir() {
                        return bad(
                            &field("source.host"),
                            format!("host path {} is not an existing directory", p.display()),
                        );
                    }
                }
                MountSource::Volume(v) => {
                    let scoped = v
                        .strip_prefix(SCOPED_VOLUME_PREFIX)
                        .and_then(|rest| rest.split_once('.'))
                        .is_some_and(|(scope, name)| {
                            super::validate_scope(scope).is_ok() && is_volume_name(name)
                        });
                    if !is_volume_name(v) && !scoped {
                        return Err(volume_name_error(&field("source.volume"), v));
                    }
                }
            }
        }
        for (field, d) in [
            ("idle_timeout", self.idle_timeout),
            ("max_duration", self.max_duration),
            ("startup_timeout", Some(self.startup_timeout)),
        ] {
            if d.is_some_and(|d| d > MAX_DURATION) {
                return bad(field, format!("more than {} ms", MAX_DURATION.as_millis()));
            }
        }
        // Durations are stored and sent in whole milliseconds: a nonzero
        // one below a millisecond would come back as zero (no timeout, or
        // an invalid one).
        if self.startup_timeout < MILLISECOND {
            return bad(
                "startup_timeout",
                format!(
                    "{:?} is less than 1 ms; it must be greater than zero",
                    self.startup_timeout
                ),
            );
        }
        if let Some(d) = self.max_duration {
            if d < MILLISECOND {
                return bad(
                    "max_duration",
                    format!(
                        "{d:?} is less than 1 ms; it must be greater than zero (leave it unset for no limit)"
                    ),
                );
            }
        }
        if let Some(d) = self.idle_timeout {
            if !d.is_zero() && d < MILLISECOND {
                return bad(
                    "idle_timeout",
                    format!("{d:?} is less than 1 ms (0 disables idle reclaim)"),
                );
            }
        }
        Ok(())
    }
}

/// The resolution of the durations of a configuration.
const MILLISECOND: Duration = Duration::from_millis(1);

/// A duration in whole milliseconds, as stored and sent; beyond
/// `u64::MAX` milliseconds (some 584 million years), that many.
fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl SandboxConfig {
    /// Refuses a CPU count that is not a finite number (NaN, an
    /// infinity), as [`Error::InvalidConfig`]: JSON has no such numbers,
    /// and serde_json would write `null`, which reads back as "no limit".
    pub(crate) fn check_cpus(cpus: Option<f64>) -> Result<()> {
        match cpus {
            Some(c) if !c.is_finite() => Err(Error::InvalidConfig {
                field: "cpus".into(),
                reason: format!("{c} is not a CPU count between 0 and 1024"),
            }),
            _ => Ok(()),
        }
    }
}

/// CPU counts on the wire: a number, never a `null` standing for NaN.
mod finite_cpus {
    use serde::{Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        super::SandboxConfig::check_cpus(*c).map_err(serde::ser::Error::custom)?;
        c.serialize(s)
    }
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::to_ms(*d))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod opt_duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&super::to_ms(*d)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

mod paths;
pub use paths::RESERVED_MOUNT_DIRS;

#[cfg(test)]
mod tests;

/// Named volumes of a tenant of `burrow serve` are `_t.<tenant>.<name>`
/// (`<name>` a volume name of its own, so such a name may be longer than
/// one a caller gives).
pub const SCOPED_VOLUME_PREFIX: &str = "_t.";

/// Whether `v` is a volume name: 1..=64 of `[A-Za-z0-9_.-]`, not starting
/// with `.`.
pub fn is_volume_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !v.starts_with('.')
}

/// The refusal of a bad volume name `v` at `field`.
pub fn volume_name_error(field: &str, v: &str) -> crate::Error {
    crate::Error::InvalidConfig {
        field: field.to_owned(),
        reason: format!(
            "{v:?} is not a volume name ([A-Za-z0-9_.-], 1..=64, not starting with '.')"
        ),
    }
}
