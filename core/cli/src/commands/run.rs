//! `burrow run`: create and start a sandbox, then either leave it running
//! detached (`-d`) or run one command in it and remove it afterwards.

use std::sync::Arc;

use burrow::{Backend, ExecOptions, Sandbox, SandboxHandle};
use clap::Args;

use super::create::SandboxOpts;
use super::exec::stream;
use super::output::warn;
use super::{Ctx, Usage};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Sandbox name (1..=128 bytes).
    name: String,
    #[command(flatten)]
    opts: SandboxOpts,
    /// Leave the sandbox running detached and print its id.
    #[arg(short = 'd', long, conflicts_with_all = ["cmd", "keep", "interactive"])]
    detach: bool,
    /// Keep the sandbox (stopped) after the command instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Forward this command's stdin to the process.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// The command to run; the sandbox is stopped and removed when it ends.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<String>,
}

pub(crate) async fn run(ctx: Ctx, args: RunArgs) -> anyhow::Result<u8> {
    if !args.detach && args.cmd.is_empty() {
        return Err(Usage(
            "pass -d to leave the sandbox running, or a command to run in it \
             (a sandbox started without -d stops when this command exits)"
                .into(),
        )
        .into());
    }
    let config = args.opts.to_config()?;
    let backend: Arc<dyn Backend> = ctx.backend().await?;
    // Define, then start: a failed start still leaves a handle to clean up.
    let handle = Sandbox::builder(&args.name)
        .config(config)
        .detached(args.detach)
        .backend(backend)
        .define()
        .await?;
    ctx.progress(format_args!("starting sandbox {}...", handle.name()));
    if args.detach {
        let info = handle.start().await?.info().await?;
        ctx.print(&info, &info.id)?;
        return Ok(0);
    }
    let result = async {
        let sandbox = handle.start().await?;
        stream(ctx, &sandbox, ExecOptions::new(args.cmd), args.interactive).await
    }
    .await;
    let verb = if args.keep { "stopping" } else { "removing" };
    ctx.progress(format_args!("{verb} sandbox {}...", handle.name()));
    if let Err(e) = settle(&handle, args.keep).await {
        let (name, id) = (handle.name(), handle.id());
        warn(format_args!(
            "burrow: warning: {verb} sandbox {name} ({id}) failed: {e}"
        ));
    }
    result
}

/// After the command: a graceful stop (so the sandbox is settled when we
/// exit), then remove it unless it is kept.
async fn settle(handle: &SandboxHandle, keep: bool) -> burrow::Result<()> {
    handle.stop().await?;
    if keep {
        return Ok(());
    }
    handle.remove().await
}
