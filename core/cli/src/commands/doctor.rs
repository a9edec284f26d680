//! `burrow doctor`: which drivers work on this host, and why not.

use burrow::internal::driver::{container, vm};
use burrow::{DriverKind, LocalConfig, OciRuntime};
use serde_json::json;

use super::output::say;
use super::Ctx;

pub(crate) async fn doctor(ctx: Ctx) -> anyhow::Result<u8> {
    let default = LocalConfig::from_env().map(|c| c.default_driver);
    let container = container::check_support(OciRuntime::Runc).await;
    if !ctx.json {
        say("checking the vm driver (the first run boots a probe guest under KVM)...");
    }
    let vm = vm::check_support().await;
    let default_ok = match &default {
        Ok(DriverKind::Container) => container.is_ok(),
        Ok(DriverKind::Vm) => vm.is_ok(),
        Err(_) => false,
    };
    if ctx.json {
        let entry = |r: Result<serde_json::Value, &burrow::Error>| match r {
            Ok(v) => json!({"ok": true, "details": v}),
            Err(e) => json!({"ok": false, "code": e.code(), "reason": e.to_string()}),
        };
        let report = json!({
            "default_driver": default.as_ref().map(|d| d.as_str()).map_err(|e| e.to_string()),
            "drivers": {
                "container": entry(container.as_ref().map(|c| json!(c))),
                "vm": entry(vm.as_ref().map(|v| json!(v))),
            }
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
