//! `burrow doctor`: which drivers work on this host, and why not; where the
//! guest agent comes from; how to get the vm driver's guest kernel. With
//! `--kubernetes`: whether the Kubernetes backend's cluster runs sandboxes
//! under each runtime class it would use.

mod kernel;

use std::path::PathBuf;
use std::time::Duration;

use burrow::internal::agent;
use burrow::internal::driver::{container, vm};
use burrow::{DriverKind, LocalConfig};
use serde_json::json;

use super::output::say;
use super::Ctx;

#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Check the cluster of the Kubernetes backend instead of this host's
    /// drivers: the credentials, the namespace, and a probe sandbox under
    /// the default and the gVisor runtime classes (settings from the
    /// environment, BURROW_KUBECONFIG and BURROW_KUBE_*, over the
    /// [kubernetes] table of --config).
    #[arg(long)]
    kubernetes: bool,
    /// The serve configuration whose [kubernetes] table to check (default:
    /// $BURROW_SERVE_CONFIG); implies --kubernetes.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Bound on each probe sandbox's start.
    #[arg(long, value_name = "DUR", default_value = "2m", value_parser = burrow::parse_duration)]
    probe_timeout: Duration,
}

/// Exit status of a doctor that found the backend unusable.
const UNUSABLE: u8 = 7;

pub(crate) async fn doctor(ctx: Ctx, args: DoctorArgs) -> anyhow::Result<u8> {
    if args.kubernetes || args.config.is_some() {
        return kubernetes(ctx, args).await;
    }
    let defaults = LocalConfig::from_env();
    let default = defaults.as_ref().map(|c| c.default_driver);
    let runtime = defaults
        .as_ref()
        .map(|c| c.default_runtime)
        .unwrap_or_default();
    let agent = agent::locate_agent();
    let container = container::check_support(runtime).await;
    if !ctx.json {
        say("checking the vm driver (the first run boots a probe guest under KVM)...");
    }
    let vm = vm::check_support().await;
    let kernel = kernel::KernelHelp::probe();
    // Every driver runs the same agent: without it nothing starts. The
    // default driver is usable if its check (among those above) passed.
    let usable = [
        (DriverKind::Container, container.is_ok()),
        (DriverKind::Vm, vm.is_ok()),
    ];
    let default_ok = agent.is_ok()
        && usable
            .iter()
            .any(|(kind, ok)| *ok && default.as_ref().is_ok_and(|d| d == kind));
    if ctx.json {
        let entry = |r: Result<serde_json::Value, &burrow::Error>| match r {
            Ok(v) => json!({"ok": true, "details": v}),
            Err(e) => json!({"ok": false, "code": e.code(), "reason": e.to_string()}),
        };
        let agent = match &agent {
            Ok(a) => json!({"ok": true, "path": a.path, "source": a.source}),
            Err(e) => json!({"ok": false, "code": e.code(), "reason": e.to_string()}),
        };
        let report = json!({
            "default_driver": default.as_ref().map(|d| d.as_str()).map_err(|e| e.to_string()),
            "default_runtime": runtime.binary(),
            "agent": agent,
            "drivers": {
                "container": entry(container.as_ref().map(|c| json!(c))),
                "vm": entry(vm.as_ref().map(|v| json!(v))),
            },
            "vm_kernel": kernel,
            "confinement": {
                "container": confinement(DriverKind::Container, runtime)
                    .into_iter()
                    .collect::<serde_json::Map<_, _>>(),
                "vm": confinement(DriverKind::Vm, runtime)
                    .into_iter()
                    .collect::<serde_json::Map<_, _>>(),
            },
            "default_limits": defaults.as_ref().ok().map(|d| limits_json(&d.default_limits)),
        });
        say(serde_json::to_string_pretty(&report)?);
    } else {
        match &container {
            Ok(c) => {
                say(format!(
                    "container  ok           {} ({}), {}",
                    c.version,
                    c.binary.display(),
                    c.mode
                ));
                if let Some(line) = rootless_hint(c) {
                    say(format!("           {line}"));
                }
            }
            Err(e) => say(format!("container  unavailable  {e}")),
        }
        match &vm {
            Ok(v) => {
                say(format!(
                    "vm         ok           {} ({}), kernel {}",
                    v.qemu_version,
                    v.qemu.display(),
                    v.kernel.display()
                ));
                say(format!(
                    "           acceleration {}: {}",
                    v.accel.accel.as_str(),
                    v.accel.reason
                ));
            }
            Err(e) => say(format!("vm         unavailable  {e}")),
        }
        if kernel.found.is_none() {
            say(format!("           guest kernel: {}", kernel.hint));
        }
        for kind in [DriverKind::Container, DriverKind::Vm] {
            say(format!("confinement of the {kind} driver here:"));
            for (what, how) in confinement(kind, runtime) {
                say(format!(
                    "           {what}: {}",
                    how.as_str().unwrap_or_default()
                ));
            }
        }
        if let Ok(d) = &defaults {
            say(format!(
                "default limits of a container sandbox: {}",
                limits_text(&d.default_limits)
            ));
        }
        match &agent {
            Ok(a) => say(format!(
                "agent      ok           {} ({})",
                a.source.as_str(),
                a.path.display()
            )),
            Err(e) => say(format!("agent      missing      {e}")),
        }
        match &default {
            Ok(d) => say(format!(
                "default driver: {d}{}",
                if default_ok { "" } else { " (NOT usable here)" }
            )),
            Err(e) => say(format!("default driver: {e}")),
        }
    }
    Ok(if default_ok { 0 } else { UNUSABLE })
}

/// What confines `kind`'s guests here (`runtime` for containers), as
/// `(what, how)`.
fn confinement(kind: DriverKind, runtime: burrow::OciRuntime) -> Vec<(String, serde_json::Value)> {
    burrow::internal::driver::for_kind(kind, runtime)
        .confinement()
        .into_iter()
        .map(|(what, how)| (what.to_owned(), json!(how)))
        .collect()
}

fn limits_json(l: &burrow::DefaultLimits) -> serde_json::Value {
    json!({"memory_mb": l.memory_mb, "cpus": l.cpus, "pids_limit": l.pids_limit, "disk_mb": l.disk_mb})
}

fn limits_text(l: &burrow::DefaultLimits) -> String {
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    format!(
        "memory {}, cpus {}, processes {}, disk {} (recorded at create where the host holds them)",
        or_none(l.memory_mb.map(|m| format!("{m} MiB"))),
        or_none(l.cpus.map(|c| c.to_string())),
        or_none(l.pids_limit.map(|p| p.to_string())),
        or_none(l.disk_mb.map(|m| format!("{m} MiB"))),
    )
}

/// What an unprivileged user's containers lack here, and the one command
/// (as root) that gives it.
fn rootless_hint(c: &container::ContainerSupport) -> Option<String> {
    match c.subordinate_ids {
        Some(0) => {
            let user = std::env::var("USER").unwrap_or_else(|_| "$USER".into());
            Some(format!(
                "no subordinate ids: images that run as another user than root cannot start; fix (as root): usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"
            ))
        }
        Some(n) => Some(format!(
            "{n} subordinate ids; limits and pause need a cgroup v2 subtree delegated to this user (systemd's user slice); without one, ask for best-effort limits"
        )),
        None => None,
    }
}

async fn kubernetes(ctx: Ctx, args: DoctorArgs) -> anyhow::Result<u8> {
    let settings =
        super::serve::load_config(args.config.as_deref(), &Default::default())?.kubernetes;
    if !ctx.json {
        say(format!(
            "checking the cluster (namespace {}): a probe sandbox per runtime class...",
            settings.namespace
        ));
    }
    let report = burrow_kube::doctor::check(settings, args.probe_timeout).await;
    let ok = report.as_ref().is_ok_and(|r| r.ok());
    if ctx.json {
        let value = match &report {
            Ok(r) => json!({"ok": ok, "details": r}),
            Err(e) => json!({"ok": false, "code": e.code(), "reason": e.to_string()}),
        };
        say(serde_json::to_string_pretty(
            &json!({ "kubernetes": value }),
        )?);
    } else {
        match &report {
            Err(e) => say(format!("kubernetes unavailable  {e}")),
            Ok(r) => {
                say(format!(
                    "kubernetes {}  API server {} via {}, namespace {}, agent image {} (pull {})",
                    if ok { "ok         " } else { "NOT usable " },
                    r.server_version,
                    r.source,
                    r.namespace,
                    r.agent_image,
                    r.image_pull_policy
                ));
                for c in &r.classes {
                    say(format!("           {}", class_line(c)));
                }
            }
        }
    }
    Ok(if ok { 0 } else { UNUSABLE })
}

fn class_line(c: &burrow_kube::doctor::ClassReport) -> String {
    use burrow_kube::doctor::Outcome;
    let class = match &c.runtime_class {
        Some(name) => format!("runtime class {name:?} ({})", c.role),
        None => "the cluster's default runtime".to_owned(),
    };
    match &c.outcome {
        Outcome::Ran {
            handler,
            kernel,
            start_ms,
        } => format!(
            "{class}{}: a probe ran in {start_ms} ms; {kernel}",
            handler
                .as_deref()
                .map(|h| format!(", handler {h}"))
                .unwrap_or_default()
        ),
        Outcome::Missing if c.required => format!("{class}: MISSING on the cluster"),
        Outcome::Missing => {
            format!("{class}: not on the cluster (sandboxes asking for runsc cannot start)")
        }
        Outcome::Failed { reason, .. } => format!("{class}: the probe FAILED: {reason}"),
    }
}
