//! OCI runtime configuration (`config.json`) for one runtime generation.
//!
//! The container gets its own user (mapped), pid, mount, network, uts, ipc
//! and cgroup namespaces, Docker's default capabilities and seccomp profile,
//! no new privileges, Docker's masked and read-only paths, rlimits that never
//! exceed our own hard limits, and the guest agent bind-mounted read-only at
//! [`AGENT_PATH`] as the container's process.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::engine::driver::ResolvedMount;
use crate::engine::image::ImageConfig;
use crate::error::{Error, Result};
use crate::model::SandboxConfig;

use super::cgroups::Controllers;
use super::rootfs::MAP_SIZE;
use super::seccomp;

/// Where the agent binary appears inside the container.
pub(super) const AGENT_PATH: &str = "/.burrow/agent";

/// Docker's default capability set.
pub(super) const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Processes in the sandbox unless configured otherwise.
pub(super) const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// CFS period used to express a CPU count as a quota.
const CPU_PERIOD_US: u64 = 100_000;

/// Cgroup limits that this host can enforce.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Resources {
    pub memory_bytes: Option<i64>,
    /// Also cap memory+swap at the memory limit (no swapping).
    pub no_swap: bool,
    pub cpu_quota_us: Option<i64>,
    pub pids: Option<i64>,
}

impl Resources {
    /// The limits of `config` that `controllers` can enforce, and a note for
    /// each one that cannot.
    pub(super) fn plan(
        config: &SandboxConfig,
        controllers: &Controllers,
    ) -> (Resources, Vec<String>) {
        let mut r = Resources::default();
        let mut notes = Vec::new();
        if let Some(mb) = config.memory_mb {
            if controllers.memory {
                r.memory_bytes = Some((mb as i64).saturating_mul(1 << 20));
                r.no_swap = controllers.swap;
            } else {
                notes.push(format!("memory limit ({mb} MiB) not enforced: this host has no memory cgroup controller"));
            }
        }
        if let Some(cpus) = config.cpus {
            if controllers.cpu {
                r.cpu_quota_us = Some(((cpus * CPU_PERIOD_US as f64).round() as i64).max(1000));
            } else {
                notes.push(format!(
                    "CPU limit ({cpus} CPUs) not enforced: this host has no cpu cgroup controller"
                ));
            }
        }
        // A record from before the defaults were recorded still gets one.
        let pids = match config.default_limits {
            true => Some(config.pids_limit.unwrap_or(DEFAULT_PIDS_LIMIT)),
            false => config.pids_limit,
        };
        match pids {
            Some(pids) if controllers.pids => r.pids = Some(pids.min(i64::MAX as u64) as i64),
            Some(pids) => notes.push(format!(
                "process limit ({pids}) not enforced: this host has no pids cgroup controller"
            )),
            None => {}
        }
        (r, notes)
    }

    fn to_json(&self) -> Value {
        let mut v = json!({ "devices": [{ "allow": false, "access": "rwm" }] });
        if let Some(m) = self.memory_bytes {
            v["memory"] = if self.no_swap {
                json!({ "limit": m, "swap": m })
            } else {
                json!({ "limit": m })
            };
        }
        if let Some(q) = self.cpu_quota_us {
            v["cpu"] = json!({ "quota": q, "period": CPU_PERIOD_US });
        }
        if let Some(p) = self.pids {
            v["pids"] = json!({ "limit": p });
        }
        v
    }
}

/// A read-only file made visible in the container (hosts, resolv.conf).
#[derive(Debug, Clone)]
pub(super) struct FileMount {
    pub source: PathBuf,
    pub target: &'static str,
}

/// Everything the config is made from.
#[derive(Debug)]
pub(super) struct SpecInput<'a> {
    pub rootfs: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub uid: u32,
    pub gid: u32,
    pub hostname: String,
    /// The host id of the container's root in a user namespace of its own
    /// (None: rootless, the supervisor's namespace is shared).
    pub id_base: Option<u32>,
    pub agent_bin: &'a Path,
    pub mounts: &'a [ResolvedMount],
    pub files: Vec<FileMount>,
    pub nofile: u64,
    pub resources: Resources,
    pub cgroups_path: String,
    /// The runtime, which installs the seccomp filter (see `seccomp`).
    pub runtime: crate::model::OciRuntime,
    /// Syscalls the sandbox adds to the filter (`seccomp_allow`).
    pub seccomp_allow: &'a [String],
}

/// The OCI config document.
pub(super) fn config(input: &SpecInput<'_>) -> Value {
    let caps: Vec<&str> = CAPABILITIES.to_vec();
    // As Docker does: a non-root process starts without effective or
    // permitted capabilities (it can still gain bounded ones by exec).
    let active: Vec<&str> = if input.uid == 0 {
        caps.clone()
    } else {
        Vec::new()
    };
    // devpts's tty group must be mapped: only with more ids than root.
    let pts_gid = match input.id_base {
        Some(_) => "gid=5",
        None if super::rootless::mapped_ids() > 5 => "gid=5",
        None => "mode=0620",
    };
    let mut mounts = vec![
        json!({ "destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"] }),
        json!({ "destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] }),
        json!({ "destination": "/dev/pts", "type": "devpts", "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", pts_gid] }),
        json!({ "destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] }),
        json!({ "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"] }),
        json!({ "destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"] }),
    ];
    if input.id_base.is_some() {
        // Rootless there is no cgroup of the container's own to show.
        mounts.push(json!({ "destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"] }));
    }
    for f in &input.files {
        mounts.push(json!({ "destination": f.target, "type": "bind", "source": f.source, "options": ["bind", "ro", "nosuid", "nodev", "noexec"] }));
    }
    for m in input.mounts {
        let mut options = vec!["rbind", "nosuid", "nodev"];
        if m.read_only {
            // Recursively read-only, submounts included.
            options.extend(["ro", "rro"]);
        }
        mounts.push(json!({ "destination": m.target, "type": "bind", "source": m.host_path, "options": options }));
    }
    // The agent last: the runtime resolves each destination through the
    // symlinks of the root filesystem, which the guest wrote, so a mount
    // made after it could land over it wherever a target's path leads
    // (`/mnt -> /d`, `/d/data -> /.burrow`). Nothing is mounted after it,
    // and no guest process runs between the mounts and the agent's exec.
    mounts.push(json!({ "destination": AGENT_PATH, "type": "bind", "source": input.agent_bin, "options": ["bind", "ro", "nosuid", "nodev"] }));
    let mut doc = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": input.uid, "gid": input.gid },
            "args": input.args,
            "env": input.env,
            "cwd": input.cwd,
            "capabilities": { "bounding": caps, "effective": active, "permitted": active },
            "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": input.nofile, "soft": input.nofile }],
            "noNewPrivileges": true,
        },
        "root": { "path": input.rootfs, "readonly": false },
        "hostname": input.hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": [
                { "type": "pid" }, { "type": "network" }, { "type": "ipc" }, { "type": "uts" },
                { "type": "mount" },
            ],
            "resources": input.resources.to_json(),
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    });
    if let Some(base) = input.id_base {
        // Rootless there is no path: runc then tolerates a cgroup it may
        // not create (the limits it would hold were refused before).
        doc["linux"]["cgroupsPath"] = json!(input.cgroups_path);
        let mapping = json!([{ "containerID": 0, "hostID": base, "size": MAP_SIZE }]);
        doc["linux"]["uidMappings"] = mapping.clone();
        doc["linux"]["gidMappings"] = mapping;
        if let Some(namespaces) = doc["linux"]["namespaces"].as_array_mut() {
            namespaces.extend([json!({ "type": "user" }), json!({ "type": "cgroup" })]);
        }
    }
    set_seccomp(&mut doc, input.runtime, input.seccomp_allow);
    doc
}

/// Puts the seccomp filter in an OCI config for `runtime`, with the
/// syscalls `allow` names added: the runtime filters the first process
/// from its first instruction; crun takes the precompiled program (the
/// `linux.seccomp` section stays for a crun without the annotation), which
/// saves libseccomp's build.
pub fn set_seccomp(doc: &mut Value, runtime: crate::model::OciRuntime, allow: &[String]) {
    doc["linux"]["seccomp"] = seccomp::profile(runtime, allow);
    if runtime == crate::model::OciRuntime::Crun && !seccomp::compat32() {
        let program = super::bpf::program(allow);
        doc["annotations"][CRUN_SECCOMP_BPF] = json!(super::bpf::annotation(&program));
    }
}

/// crun's annotation for a raw seccomp program (base64), used instead of
/// the `linux.seccomp` section.
const CRUN_SECCOMP_BPF: &str = "run.oci.seccomp_bpf_data";

/// The process argv: the agent (with the seccomp program, its second
/// layer, where the agent filters too: see [`agent_filters`]), unless the
/// `BURROW_AGENT_ARGS` test hook (a JSON array of strings) replaces it.
pub(super) fn agent_args(
    runtime: crate::model::OciRuntime,
    seccomp_allow: &[String],
) -> Result<Vec<String>> {
    match std::env::var("BURROW_AGENT_ARGS") {
        Ok(raw) => {
            let args: Vec<String> =
                serde_json::from_str(&raw).map_err(|e| Error::InvalidConfig {
                    field: "BURROW_AGENT_ARGS".into(),
                    reason: format!("not a JSON array of strings: {e}"),
                })?;
            if args.is_empty() {
                return Err(Error::InvalidConfig {
                    field: "BURROW_AGENT_ARGS".into(),
                    reason: "empty argv".into(),
                });
            }
            tracing::warn!(
                ?args,
                "BURROW_AGENT_ARGS replaces the guest agent (test hook)"
            );
            Ok(args)
        }
        Err(_) if !agent_filters(runtime) => Ok(vec![AGENT_PATH.to_owned()]),
        Err(_) => Ok(vec![
            AGENT_PATH.to_owned(),
            "--seccomp".to_owned(),
            super::bpf::agent_argument(&super::bpf::program(seccomp_allow)),
        ]),
    }
}

/// Whether the agent installs the filter again, as a second layer under
/// the runtime's: with runc and crun, unless `BURROW_SECCOMP_COMPAT32=1`
/// (the precompiled program admits the native ABI only). Not with runsc:
/// gVisor's kernel applies the profile, and the agent runs on it.
fn agent_filters(runtime: crate::model::OciRuntime) -> bool {
    runtime != crate::model::OciRuntime::Runsc && !seccomp::compat32()
}

/// A valid hostname from a sandbox name: `[a-z0-9-]`, at most 63 bytes.
pub(crate) fn hostname(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let mut h = mapped.trim_matches('-').to_owned();
    h.truncate(63);
    let h = h.trim_end_matches('-');
    if h.is_empty() {
        "sandbox".to_owned()
    } else {
        h.to_owned()
    }
}

/// Image environment overlaid with the sandbox's, plus `PATH` and `HOSTNAME`
/// defaults.
pub(crate) fn environment(
    image: &ImageConfig,
    config: &SandboxConfig,
    hostname: &str,
) -> Vec<String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| match vars.iter_mut().find(|(key, _)| key == k) {
        Some(entry) => entry.1 = v.to_owned(),
        None => vars.push((k.to_owned(), v.to_owned())),
    };
    for entry in &image.env {
        if let Some((k, v)) = entry.split_once('=') {
            if !k.is_empty() && !entry.contains('\0') {
                set(k, v);
            }
        }
    }
    for (k, v) in &config.guest_env() {
        set(k, v);
    }
    if !vars.iter().any(|(k, _)| k == "PATH") {
        vars.insert(0, ("PATH".into(), DEFAULT_PATH.into()));
    }
    if !config.env.contains_key("HOSTNAME") {
        let hn = hostname.to_owned();
        match vars.iter_mut().find(|(k, _)| k == "HOSTNAME") {
            Some(e) => e.1 = hn,
            None => vars.push(("HOSTNAME".into(), hn)),
        }
    }
    vars.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The working directory: the sandbox's, else the image's, else `/`.
pub(crate) fn working_dir(
    config: &SandboxConfig,
    image: &ImageConfig,
    reference: &str,
) -> Result<String> {
    if let Some(w) = &config.workdir {
        return check_cwd(w).ok_or_else(|| Error::InvalidConfig {
            field: "workdir".into(),
            reason: format!("{w:?} cannot be a working directory"),
        });
    }
    match image
        .workdir
        .as_deref()
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        Some(w) => {
            let abs = if w.starts_with('/') {
                w.to_owned()
            } else {
                format!("/{w}")
            };
            check_cwd(&abs).ok_or_else(|| Error::InvalidImage {
                image: reference.to_owned(),
                reason: format!("working directory {w:?} cannot be used"),
            })
        }
        None => Ok("/".into()),
    }
}

/// Absolute, no `..`, no NUL, and nowhere under `/proc`: a cwd such as
/// `/proc/self/fd/N` lets a container reach runtime file descriptors
/// (CVE-2024-21626; runc 1.1.5 is affected).
fn check_cwd(w: &str) -> Option<String> {
    let ok = w.starts_with('/')
        && w.len() <= 4096
        && !w.contains('\0')
        && !w.split('/').any(|c| c == "..");
    let normalized: Vec<&str> = w
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    (ok && normalized.first() != Some(&"proc")).then(|| format!("/{}", normalized.join("/")))
}

/// `RLIMIT_NOFILE` for the container: our hard limit, at most 1048576.
pub(super) fn nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    rl.rlim_max.min(1 << 20)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_are_sanitized() {
        assert_eq!(hostname("My Sandbox_1"), "my-sandbox-1");
        assert_eq!(hostname("---"), "sandbox");
        assert_eq!(hostname("ünï"), "n");
        let long = "a".repeat(62) + "-bbb";
        assert_eq!(hostname(&long), "a".repeat(62));
    }

    #[test]
    fn environment_overlays_and_defaults() {
        let image = ImageConfig {
            env: vec!["A=1".into(), "PATH=/x".into(), "bogus".into()],
            ..Default::default()
        };
        let mut config = SandboxConfig::new("img");
        config.env.insert("A".into(), "2".into());
        config.env.insert("B".into(), "3".into());
        assert_eq!(
            environment(&image, &config, "h"),
            vec!["A=2", "PATH=/x", "B=3", "HOSTNAME=h"]
        );
        let env = environment(&ImageConfig::default(), &SandboxConfig::new("img"), "h");
        assert_eq!(env[0], format!("PATH={DEFAULT_PATH}"));
    }

    #[test]
    fn working_dir_rejects_proc() {
        let image = ImageConfig {
            workdir: Some("app".into()),
            ..Default::default()
        };
        let mut config = SandboxConfig::new("img");
        assert_eq!(working_dir(&config, &image, "img").unwrap(), "/app");
        assert_eq!(
            working_dir(&config, &ImageConfig::default(), "img").unwrap(),
            "/"
        );
        let evil = ImageConfig {
            workdir: Some("/proc/self/fd/7".into()),
            ..Default::default()
        };
        assert_eq!(
            working_dir(&config, &evil, "img").unwrap_err().code(),
            crate::ErrorCode::InvalidImage
        );
        config.workdir = Some("//proc/./self".into());
        assert_eq!(
            working_dir(&config, &image, "img").unwrap_err().code(),
            crate::ErrorCode::InvalidConfig
        );
    }

    #[test]
    fn missing_controllers_become_notes() {
        let mut config = SandboxConfig::new("img");
        config.memory_mb = Some(64);
        config.cpus = Some(0.5);
        let all = Controllers {
            memory: true,
            swap: true,
            cpu: true,
            pids: true,
            ..Default::default()
        };
        let (r, notes) = Resources::plan(&config, &all);
        assert!(notes.is_empty());
        assert_eq!(
            r,
            Resources {
                memory_bytes: Some(64 << 20),
                no_swap: true,
                cpu_quota_us: Some(50_000),
                pids: Some(4096)
            }
        );
        let (r, notes) = Resources::plan(&config, &Controllers::default());
        assert_eq!(r, Resources::default());
        assert_eq!(notes.len(), 3);
    }

    #[test]
    fn config_has_the_security_settings() {
        let mounts = [ResolvedMount {
            host_path: "/data".into(),
            target: "/mnt/data".into(),
            read_only: true,
            volume: false,
        }];
        let input = SpecInput {
            rootfs: Path::new("/run/burrow/x"),
            args: vec![AGENT_PATH.into()],
            env: vec!["PATH=/bin".into()],
            cwd: "/".into(),
            uid: 0,
            gid: 0,
            hostname: "h".into(),
            id_base: Some(100000),
            agent_bin: Path::new("/opt/agent"),
            mounts: &mounts,
            files: vec![],
            nofile: 20000,
            resources: Resources::default(),
            cgroups_path: "burrow/x".into(),
            runtime: crate::model::OciRuntime::Runc,
            seccomp_allow: &[],
        };
        let c = config(&input);
        // Every runtime filters from the first instruction; crun from the
        // precompiled program too.
        assert_eq!(c["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(c.get("annotations").is_none());
        let crun = config(&SpecInput {
            runtime: crate::model::OciRuntime::Crun,
            files: vec![],
            ..input
        });
        assert_eq!(crun["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(crun["annotations"][CRUN_SECCOMP_BPF].is_string());
        assert_eq!(c["process"]["noNewPrivileges"], true);
        assert_eq!(c["process"]["terminal"], false);
        assert_eq!(
            c["process"]["capabilities"]["bounding"]
                .as_array()
                .unwrap()
                .len(),
            CAPABILITIES.len()
        );
        assert!(c["process"]["capabilities"].get("ambient").is_none());
        assert_eq!(c["process"]["rlimits"][0]["hard"], 20000);
        assert_eq!(c["linux"]["uidMappings"][0]["hostID"], 100000);
        assert_eq!(c["linux"]["namespaces"].as_array().unwrap().len(), 7);
        let data = c["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/mnt/data")
            .unwrap();
        assert!(data["options"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o == "ro"));
        // Nothing is mounted after the agent (nothing can land over it).
        let last = c["mounts"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["destination"], AGENT_PATH);
        assert_eq!(last["source"], "/opt/agent");
    }
}
