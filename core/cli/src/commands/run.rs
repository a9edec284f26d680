//! `burrow run [--name N] IMAGE -- CMD...`: create and start a sandbox, run
//! one command in it with its output streamed, and remove the sandbox
//! afterwards (`--keep` leaves it stopped instead). Exits with the
//! command's code.
//!
//! `burrow run -d [--name N] IMAGE [-- CMD...]`: a detached sandbox whose
//! main process is CMD (without one, the image's Entrypoint then Cmd),
//! left running in the background; its output is in `burrow logs`, and the
//! sandbox stops when the main process ends. Prints the sandbox's id.
//!
//! Not yet: `run IMAGE` in the foreground without a command (the image's
//! own Entrypoint/Cmd, followed to its end); `run -d IMAGE` does run it.

use std::sync::Arc;

use burrow::{Backend, ExecOptions, SandboxHandle};
use clap::Args;

use super::create::{NameImage, SandboxOpts};
use super::exec::stream;
use super::output::warn;
use super::{Ctx, Usage};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    target: NameImage,
    #[command(flatten)]
    opts: SandboxOpts,
    /// Run the command (or the image's Entrypoint/Cmd) as the sandbox's
    /// main process in the background, in a detached sandbox that stops
    /// when the main process ends; prints the sandbox's id.
    #[arg(short = 'd', long, conflicts_with_all = ["keep", "rm", "interactive"])]
    detach: bool,
    /// Keep the sandbox (stopped) after the command instead of removing it.
    #[arg(long, conflicts_with = "rm")]
    keep: bool,
    /// Remove the sandbox after the command (the default).
    #[arg(long)]
    rm: bool,
    /// Forward this command's stdin to the process.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// The command to run, after `--`; the sandbox is stopped and removed
    /// when it ends.
    #[arg(last = true, value_name = "CMD")]
    cmd: Vec<String>,
}

pub(crate) async fn run(ctx: Ctx, args: RunArgs) -> anyhow::Result<u8> {
    let image = args.target.image("run")?;
    if args.detach {
        let mut config = args.opts.to_config(image)?;
        config.command = Some(args.cmd);
        let backend: Arc<dyn Backend> = ctx.backend().await?;
        let handle = args.target.define(ctx, config, true, backend).await?;
        ctx.progress(format_args!("starting sandbox {}...", handle.name()));
        let sandbox = handle.start().await?;
        let info = sandbox.info().await?;
        ctx.print(&info, &info.id)?;
        return Ok(0);
    }
    if args.cmd.is_empty() {
        return Err(Usage(format!(
            "give the command after `--`: burrow run [--name NAME] {image} -- CMD... \
             (`burrow run -d {image}` runs the image's own Entrypoint/Cmd in the \
             background; in the foreground that is not there yet)"
        ))
        .into());
    }
    let config = args.opts.to_config(image)?;
    let backend: Arc<dyn Backend> = ctx.backend().await?;
    // Define, then start: a failed start still leaves a handle to clean up.
    // Attached: the sandbox stops with this command whatever happens.
    let handle = args.target.define(ctx, config, false, backend).await?;
    ctx.progress(format_args!("starting sandbox {}...", handle.name()));
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
