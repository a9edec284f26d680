//! `burrow version`.

use serde_json::json;

use super::Ctx;

pub(crate) fn version(ctx: Ctx) -> anyhow::Result<u8> {
    let version = env!("CARGO_PKG_VERSION");
    let protocol = burrow_protocol::PROTOCOL_VERSION;
    ctx.print(
        &json!({"version": version, "protocol_version": protocol}),
        format_args!("burrow {version} (protocol {protocol})"),
    )?;
    Ok(0)
}
