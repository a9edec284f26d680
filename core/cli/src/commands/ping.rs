//! `burrow ping` (a health check that never counts as activity) and
//! `burrow touch` (the explicit keepalive for the idle timeout).

use clap::Args;
use serde_json::json;

use super::common::resolve;
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct PingArgs {
    /// Sandbox name or id (it must be running; ping never starts it).
    sandbox: String,
    /// Also count as activity (keeps an idle timeout from reclaiming it).
    #[arg(long)]
    touch: bool,
}

pub(crate) async fn ping(ctx: Ctx, args: PingArgs) -> anyhow::Result<u8> {
    let sandbox = resolve(&ctx.backend().await?, &args.sandbox)
        .await?
        .connect()
        .await?;
    let latency = sandbox.ping().await?.latency;
    if args.touch {
        sandbox.touch().await?;
    }
    let ms = latency.as_secs_f64() * 1000.0;
    ctx.print(
        &json!({
            "sandbox_id": sandbox.id(),
            "name": sandbox.name(),
            "latency_ms": ms,
            "touched": args.touch,
        }),
        format_args!(
            "{}: {ms:.3} ms{}",
            sandbox.name(),
            if args.touch { " (touched)" } else { "" }
        ),
    )?;
    Ok(0)
}

pub(crate) async fn touch(ctx: Ctx, args: super::lifecycle::Target) -> anyhow::Result<u8> {
    let handle = resolve(&ctx.backend().await?, &args.sandbox).await?;
    handle.touch().await?;
    ctx.print(
        &json!({"sandbox_id": handle.id(), "name": handle.name(), "touched": true}),
        format_args!("{} ({}) touched", handle.name(), handle.id()),
    )?;
    Ok(0)
}
