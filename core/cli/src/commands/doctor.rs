//! `burrow doctor`: which drivers work on this host, and why not; where the
//! guest agent comes from; how to get the vm driver's guest kernel.

mod kernel;

use burrow::internal::agent;
use burrow::internal::driver::{container, vm};
use burrow::{DriverKind, LocalConfig, OciRuntime};
use serde_json::json;

use super::output::say;
use super::Ctx;

pub(crate) async fn doctor(ctx: Ctx) -> anyhow::Result<u8> {
    let default = LocalConfig::from_env().map(|c| c.default_driver);
    let agent = agent::locate_agent();
    let container = container::check_support(OciRuntime::Runc).await;
    if !ctx.json {
        say("checking the vm driver (the first run boots a probe guest under KVM)...");
    }
    let vm = vm::check_support().await;
    let kernel = kernel::KernelHelp::probe();
    // Every driver runs the same agent: without it nothing starts.
    let default_ok = agent.is_ok()
        && match &default {
            Ok(DriverKind::Container) => container.is_ok(),
            Ok(DriverKind::Vm) => vm.is_ok(),
            Ok(_) | Err(_) => false,
        };
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
            "agent": agent,
            "drivers": {
                "container": entry(container.as_ref().map(|c| json!(c))),
                "vm": entry(vm.as_ref().map(|v| json!(v))),
            },
            "vm_kernel": kernel,
        });
        say(serde_json::to_string_pretty(&report)?);
    } else {
        match &container {
            Ok(c) => say(format!(
                "container  ok           {} ({})",
                c.version,
                c.binary.display()
            )),
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
    Ok(if default_ok { 0 } else { 7 })
}
