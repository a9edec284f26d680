//! `burrow start|stop|restart|kill|drain|pause|resume|inspect`: lifecycle
//! verbs on one sandbox.

use std::time::Duration;

use burrow::{SandboxHandle, SandboxInfo, StartOptions, StopOptions};
use clap::Args;

use super::common::{describe, resolve};
use super::Ctx;

/// A command that takes one sandbox.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Sandbox name or id.
    pub sandbox: String,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// Sandbox name or id.
    sandbox: String,
    /// Kill immediately instead of stopping gracefully.
    #[arg(long, short = 'f')]
    force: bool,
    /// Seconds between SIGTERM and SIGKILL for guest processes.
    #[arg(long, value_name = "SECS", conflicts_with = "force")]
    grace: Option<u64>,
}

async fn handle(ctx: Ctx, target: &str) -> anyhow::Result<SandboxHandle> {
    Ok(resolve(&ctx.backend().await?, target).await?)
}

fn done(ctx: Ctx, info: &SandboxInfo) -> anyhow::Result<u8> {
    ctx.print(info, describe(info))?;
    Ok(0)
}

/// The CLI exits right away, so a sandbox it starts must be detached.
fn detached() -> StartOptions {
    StartOptions::default().detached(true)
}

pub(crate) async fn start(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let h = handle(ctx, &args.sandbox).await?;
    ctx.progress(format_args!("starting sandbox {}...", h.name()));
    let info = h.start_with(detached()).await?.info().await?;
    done(ctx, &info)
}

pub(crate) async fn stop(ctx: Ctx, args: StopArgs) -> anyhow::Result<u8> {
    let h = handle(ctx, &args.sandbox).await?;
    let info = if args.force {
        ctx.progress(format_args!("killing sandbox {}...", h.name()));
        h.kill().await?
    } else {
        ctx.progress(format_args!("stopping sandbox {}...", h.name()));
        let grace = args
            .grace
            .map(Duration::from_secs)
            .unwrap_or(StopOptions::default().grace);
        h.stop_with(StopOptions::with_grace(grace)).await?
    };
    done(ctx, &info)
}

/// Stop, then a detached start (a plain restart would keep a persisted
/// attached mode, and the sandbox would die with this command).
pub(crate) async fn restart(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let h = handle(ctx, &args.sandbox).await?;
    ctx.progress(format_args!("restarting sandbox {}...", h.name()));
    h.stop().await?;
    let info = h.start_with(detached()).await?.info().await?;
    done(ctx, &info)
}

pub(crate) async fn kill(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let info = handle(ctx, &args.sandbox).await?.kill().await?;
    done(ctx, &info)
}

pub(crate) async fn drain(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let info = handle(ctx, &args.sandbox).await?.request_drain().await?;
    done(ctx, &info)
}

/// Suspends every process of the sandbox (status Paused).
pub(crate) async fn pause(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let info = handle(ctx, &args.sandbox).await?.pause().await?;
    done(ctx, &info)
}

/// Continues a paused sandbox.
pub(crate) async fn resume(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let info = handle(ctx, &args.sandbox).await?.resume().await?;
    done(ctx, &info)
}

/// `burrow inspect`: the full snapshot as pretty JSON, in every mode, with
/// what the configuration implies (`effective`) and where the logs are.
pub(crate) async fn inspect(ctx: Ctx, args: Target) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let info = super::common::resolve(&backend, &args.sandbox)
        .await?
        .info()
        .await?;
    let mut body = serde_json::to_value(&info)?;
    let c = &info.config;
    let idle = c.idle_timeout.filter(|t| !t.is_zero());
    body["effective"] = serde_json::json!({
        "idle_reclaim": idle.is_some(),
        "idle_timeout_ms": idle.map(|t| t.as_millis() as u64),
        "idle_action": c.idle_action.as_str(),
        "max_duration_ms": c.max_duration.map(|t| t.as_millis() as u64),
        "demand_start": c.demand_start_enabled(),
        "startup_timeout_ms": c.startup_timeout.as_millis() as u64,
    });
    // Log files are where the sandbox runs: on this host only without
    // BURROW_URL (`burrow logs` reads them either way).
    if !ctx.is_remote()? {
        let logs = ctx.local_backend().await?.log_dir(&info.id);
        body["logs"] = serde_json::json!({
            "guest": logs.join(burrow::LogSource::Guest.file_name()),
            "supervisor": logs.join(burrow::LogSource::Supervisor.file_name()),
        });
    }
    ctx.print_json(&body)?;
    Ok(0)
}
