//! The pod of a run, and what its state says.
//!
//! One pod per generation (`<id>-g<generation>`), owned by the record (so
//! removing the record collects it). The user's image runs unchanged: an
//! init container of the agent image copies the static agent into an
//! emptyDir mounted at `/.burrow`, and the main container's command is
//! `/.burrow/agent --init` (an init that only reaps and stops; sessions are
//! exec'd, see `guest`).

use std::collections::BTreeMap;

use burrow::{OciRuntime, SandboxConfig, SandboxId};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, Pod, PodSpec, ResourceRequirements,
    SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::names;
use crate::record::{GENERATION_LABEL, ID_LABEL, MANAGED_LABEL};
use crate::settings::KubeSettings;

/// Where the agent lives in the main container.
pub const AGENT_DIR: &str = "/.burrow";
/// The agent binary in the main container.
pub const AGENT_PATH: &str = "/.burrow/agent";
/// The file whose `flock` says whether any session has requests in flight
/// (made by the agent's install beside itself).
pub const CALLS_LOCK: &str = "/.burrow/calls.lock";
/// The main container's name.
pub const MAIN: &str = "sandbox";

/// The record that owns a run's pod.
#[derive(Debug, Clone)]
pub struct Owner<'a> {
    /// The record object's name.
    pub name: String,
    /// Its uid.
    pub uid: &'a str,
}

/// The pod of run `generation` of sandbox `id`.
pub fn pod(
    id: &SandboxId,
    generation: u64,
    config: &SandboxConfig,
    settings: &KubeSettings,
    owner: &Owner<'_>,
) -> Pod {
    let labels: BTreeMap<String, String> = [
        (ID_LABEL.to_string(), names::id_label(id)),
        (GENERATION_LABEL.to_string(), generation.to_string()),
        (MANAGED_LABEL.to_string(), "burrow".to_string()),
    ]
    .into();
    let env = config
        .env
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..EnvVar::default()
        })
        .collect::<Vec<_>>();
    let mut limits = BTreeMap::new();
    if let Some(cpus) = config.cpus {
        limits.insert(
            "cpu".to_string(),
            Quantity(format!("{}m", (cpus * 1000.0).ceil() as u64)),
        );
    }
    if let Some(mb) = config.memory_mb {
        limits.insert("memory".to_string(), Quantity(format!("{mb}Mi")));
    }
    // The nearest a cluster has to a disk limit (best effort, see
    // check_limits): the kubelet evicts a pod past it.
    if let Some(mb) = config.disk_mb {
        limits.insert("ephemeral-storage".to_string(), Quantity(format!("{mb}Mi")));
    }
    let agent_volume = VolumeMount {
        name: "burrow-agent".into(),
        mount_path: AGENT_DIR.into(),
        ..VolumeMount::default()
    };
    let main = Container {
        name: MAIN.into(),
        image: Some(config.image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![AGENT_PATH.into(), "--init".into()]),
        args: Some(Vec::new()),
        env: Some(env),
        working_dir: config.workdir.clone(),
        volume_mounts: Some(vec![VolumeMount {
            read_only: Some(true),
            ..agent_volume.clone()
        }]),
        resources: (!limits.is_empty()).then(|| ResourceRequirements {
            limits: Some(limits.clone()),
            requests: Some(limits),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["NET_RAW".into()]),
                ..Capabilities::default()
            }),
            // The container runtime's default filter from the first
            // instruction (a kubelet's own default is unconfined).
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let install = Container {
        name: "burrow-agent".into(),
        image: Some(settings.agent_image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        command: Some(vec![
            settings.agent_image_path.clone(),
            "--install".into(),
            AGENT_DIR.into(),
        ]),
        volume_mounts: Some(vec![agent_volume]),
        ..Container::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(names::pod_name(id, generation)),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{}/{}", crate::record::GROUP, crate::record::VERSION),
                kind: crate::record::KIND.into(),
                name: owner.name.clone(),
                uid: owner.uid.to_string(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![install]),
            containers: vec![main],
            restart_policy: Some("Never".into()),
            runtime_class_name: runtime_class(config, settings),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(30),
            volumes: Some(vec![Volume {
                name: "burrow-agent".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Checks that the cluster can hold the sandbox to its limits: a pod's
/// CPU and memory are its containers' resources, but its process count is
/// the node's (the kubelet's `podPidsLimit`), so `pids_limit` is refused
/// naming it unless the caller asked for best-effort limits; a pod past
/// its `ephemeral-storage` is evicted, not told `ENOSPC`, so `disk_mb` is
/// refused the same way (with best-effort limits it becomes that limit).
pub fn check_limits(config: &SandboxConfig) -> burrow::Result<()> {
    if config.pids_limit.is_some() && !config.best_effort_limits {
        return Err(burrow::Error::InvalidConfig {
            field: "pids_limit".into(),
            reason: "a pod's process count is its node's (the kubelet's podPidsLimit), not the sandbox's; ask for best-effort limits to run without it".into(),
        });
    }
    if config.disk_mb.is_some() && !config.best_effort_limits {
        return Err(burrow::Error::InvalidConfig {
            field: "disk_mb".into(),
            reason: "a pod past its ephemeral storage is evicted by its node, not told ENOSPC; ask for best-effort limits to have that instead".into(),
        });
    }
    if !config.seccomp_allow.is_empty() {
        return Err(burrow::Error::InvalidConfig {
            field: "seccomp_allow".into(),
            reason: "a pod's seccomp profile is its node's (RuntimeDefault), not the sandbox's"
                .into(),
        });
    }
    if !config.ports.is_empty() {
        return Err(burrow::Error::InvalidConfig {
            field: "ports".into(),
            reason: "a pod's ports are published by the cluster (a Service), not by this backend"
                .into(),
        });
    }
    if !config.secrets.is_empty() {
        return Err(burrow::Error::InvalidConfig {
            field: "secrets".into(),
            reason: "a pod's traffic does not go through a burrow network stack, which is what puts a secret's value into its requests".into(),
        });
    }
    if matches!(config.network, burrow::Network::Policy(_)) {
        return Err(burrow::Error::InvalidConfig {
            field: "network".into(),
            reason: "a pod's network is its cluster's: this backend does not enforce a network policy (allow and deny rules)".into(),
        });
    }
    if config.egress_ceiling.is_some() && config.network.is_enabled() {
        // Fail closed: a tenant's pod would reach its node and the
        // cluster's private addresses.
        return Err(burrow::Error::InvalidConfig {
            field: "network".into(),
            reason: "a pod's network is its cluster's: this backend cannot hold a tenant's sandbox below the egress ceiling (no host or private addresses); give it no network".into(),
        });
    }
    Ok(())
}

/// Checks that `image` is an image reference a cluster can pull
/// (`[registry[:port]/]path[:tag][@algorithm:hex]`, the path lowercase):
/// a host path or a typo is refused at create, not at every start.
pub fn validate_image(image: &str) -> burrow::Result<()> {
    let bad = |why: &str| burrow::Error::InvalidImage {
        image: image.to_owned(),
        reason: format!("not an image reference a cluster can pull: {why}"),
    };
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let ok = d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b))
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ok {
            return Err(bad("the digest is not algorithm:hex"));
        }
    }
    // A tag follows the last ':' after the last '/'.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let ok = !t.is_empty()
            && t.len() <= 128
            && !t.starts_with(['.', '-'])
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok {
            return Err(bad("the tag is not [A-Za-z0-9_][A-Za-z0-9_.-]*"));
        }
    }
    if name.is_empty() || name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Err(bad("empty path component"));
    }
    let mut parts = name.split('/').peekable();
    let first = parts.next().unwrap_or_default();
    let registry = parts.peek().is_some()
        && (first.contains('.') || first.contains(':') || first == "localhost");
    let path: Vec<&str> = if registry {
        let (host, port) = match first.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (first, None),
        };
        let ok = host.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[')
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b))
            && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !ok {
            return Err(bad("the registry is not host[:port]"));
        }
        parts.collect()
    } else {
        std::iter::once(first).chain(parts).collect()
    };
    for component in path {
        let ok = !component.is_empty()
            && component
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && component.starts_with(|c: char| c.is_ascii_alphanumeric())
            && component.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(bad(&format!(
                "path component {component:?} is not lowercase [a-z0-9._-]"
            )));
        }
    }
    Ok(())
}

/// The RuntimeClass of a sandbox's pods: gVisor's for `runsc`, else the
/// backend's default (none: the cluster's default runtime).
pub fn runtime_class(config: &SandboxConfig, settings: &KubeSettings) -> Option<String> {
    match config.runtime {
        Some(OciRuntime::Runsc) => Some(settings.gvisor_runtime_class.clone()),
        _ => settings.runtime_class.clone(),
    }
}

/// What a run's pod says about the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not there (never created, or deleted and gone).
    Gone,
    /// Scheduled or pulling or initialising: not yet running.
    Pending,
    /// The main container runs.
    Running,
    /// Being deleted.
    Terminating,
    /// Ended or can never run: why.
    Failed(String),
}

/// Interprets a pod (`None`: not found).
pub fn state(pod: Option<&Pod>) -> PodState {
    let Some(pod) = pod else {
        return PodState::Gone;
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let Some(status) = pod.status.as_ref() else {
        return PodState::Pending;
    };
    // A container that cannot start says so in its waiting reason, long
    // before the pod's phase changes.
    for cs in status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
    {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            if let Some(reason) = w.reason.as_deref() {
                if matches!(
                    reason,
                    "ErrImagePull"
                        | "ImagePullBackOff"
                        | "ErrImageNeverPull"
                        | "InvalidImageName"
                        | "CreateContainerConfigError"
                        | "CreateContainerError"
                        | "RunContainerError"
                ) {
                    return PodState::Failed(format!(
                        "container {}: {reason}{}",
                        cs.name,
                        w.message
                            .as_deref()
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    ));
                }
            }
        }
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            let init = status
                .init_container_statuses
                .iter()
                .flatten()
                .any(|i| i.name == cs.name);
            if !(init && t.exit_code == 0) {
                return PodState::Failed(format!(
                    "container {} ended: {} (exit code {}){}",
                    cs.name,
                    t.reason.as_deref().unwrap_or("terminated"),
                    t.exit_code,
                    t.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    match status.phase.as_deref() {
        Some("Running") => {
            let main_running =
                status.container_statuses.iter().flatten().any(|c| {
                    c.name == MAIN && c.state.as_ref().is_some_and(|s| s.running.is_some())
                });
            if main_running {
                PodState::Running
            } else {
                PodState::Pending
            }
        }
        Some("Failed") | Some("Succeeded") => PodState::Failed(format!(
            "pod {}{}",
            status.reason.as_deref().unwrap_or("ended"),
            status
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )),
        _ => PodState::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_sandbox_with_a_network_is_refused() {
        let mut c = SandboxConfig::new("busybox");
        c.egress_ceiling = Some(serde_json::from_str("{}").unwrap());
        check_limits(&c).unwrap();
        c.network = burrow::Network::All;
        let e = check_limits(&c).unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig);
        c.egress_ceiling = None;
        check_limits(&c).unwrap();
    }

    #[test]
    fn a_wider_seccomp_filter_is_refused() {
        let mut c = SandboxConfig::new("busybox");
        c.seccomp_allow = vec!["io_uring_setup".into()];
        let e = check_limits(&c).unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidConfig);
    }

    #[test]
    fn a_disk_limit_is_the_pods_ephemeral_storage_only_at_best_effort() {
        let mut c = SandboxConfig::new("busybox");
        c.disk_mb = Some(64);
        match check_limits(&c).unwrap_err() {
            burrow::Error::InvalidConfig { field, .. } => assert_eq!(field, "disk_mb"),
            other => panic!("unexpected {other:?}"),
        }
        c.best_effort_limits = true;
        check_limits(&c).unwrap();
        let owner = Owner {
            name: "n-x".into(),
            uid: "u",
        };
        let pod = pod(&SandboxId::new(), 1, &c, &settings(), &owner);
        let spec = pod.spec.unwrap();
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap();
        assert_eq!(limits["ephemeral-storage"], Quantity("64Mi".into()));
    }
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, PodStatus,
    };

    fn settings() -> KubeSettings {
        KubeSettings::default()
    }

    fn with_status(status: PodStatus) -> Pod {
        Pod {
            status: Some(status),
            ..Pod::default()
        }
    }

    fn container(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn the_pod_carries_the_agent_and_the_config() {
        let id = SandboxId::new();
        let mut config = SandboxConfig::new("busybox:1");
        config.env.insert("A".into(), "b".into());
        config.cpus = Some(0.5);
        config.memory_mb = Some(64);
        config.runtime = Some(OciRuntime::Runsc);
        let owner = Owner {
            name: "n-x".into(),
            uid: "u",
        };
        let pod = pod(&id, 3, &config, &settings(), &owner);
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some(names::pod_name(&id, 3).as_str())
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
        let main = &spec.containers[0];
        assert_eq!(main.command.as_ref().unwrap()[0], AGENT_PATH);
        let limits = main.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["cpu"].0, "500m");
        assert_eq!(limits["memory"].0, "64Mi");
        assert_eq!(main.env.as_ref().unwrap()[0].name, "A");
        let security = main.security_context.as_ref().unwrap();
        assert_eq!(
            security.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        assert_eq!(security.allow_privilege_escalation, Some(false));
        let init = &spec.init_containers.unwrap()[0];
        assert!(init
            .command
            .as_ref()
            .unwrap()
            .contains(&"--install".to_string()));
        assert_eq!(pod.metadata.owner_references.unwrap()[0].uid, "u");
    }

    #[test]
    fn image_references() {
        for ok in [
            "busybox",
            "busybox:1.36",
            "library/busybox",
            "docker.io/library/busybox:latest",
            "localhost:5000/a/b-c_d.e:v1",
            "burrow.test/busybox:1",
            "ghcr.io/x/y@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(validate_image(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/definitely/not/a/dir",
            "./rootfs",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "a//b",
            "busybox@sha256:xyz",
            "oci:/tmp/layout",
            "has space",
        ] {
            let err = validate_image(bad).expect_err(bad);
            assert_eq!(err.code(), burrow::ErrorCode::InvalidImage, "{bad}");
        }
    }

    #[test]
    fn pod_states() {
        assert_eq!(state(None), PodState::Gone);
        assert_eq!(state(Some(&Pod::default())), PodState::Pending);
        let running = with_status(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![container(
                MAIN,
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                },
            )]),
            ..PodStatus::default()
        });
        assert_eq!(state(Some(&running)), PodState::Running);
        let never = with_status(PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![container(
                MAIN,
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ErrImageNeverPull".into()),
                        message: None,
                    }),
                    ..ContainerState::default()
                },
            )]),
            ..PodStatus::default()
        });
        assert!(matches!(state(Some(&never)), PodState::Failed(_)));
        let init_done = with_status(PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![container(
                "burrow-agent",
                ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                },
            )]),
            ..PodStatus::default()
        });
        assert_eq!(state(Some(&init_done)), PodState::Pending);
        let evicted = with_status(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            ..PodStatus::default()
        });
        assert!(matches!(state(Some(&evicted)), PodState::Failed(m) if m.contains("Evicted")));
    }
}
