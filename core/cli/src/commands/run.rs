//! `burrow run [--name N] IMAGE -- CMD...`: create and start a sandbox, run
//! one command in it with its output streamed, and remove the sandbox
//! afterwards (`--keep` leaves it stopped instead). Exits with the
//! command's code.
//!
//! Not yet: `run -d` (the command as the sandbox's main process, in the
//! background) and `run IMAGE` without a command (the image's own
//! Entrypoint/Cmd); both wait for the engine's main process. Until then
//! they are usage errors that say so, and `burrow up NAME --image IMG`
//! leaves a sandbox running.

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
    /// Not yet: running the command as the sandbox's main process in the
    /// background. Use `burrow up NAME --image IMG` to leave a sandbox
    /// running.
    #[arg(short = 'd', long)]
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
    if args.detach {
        return Err(Usage(
            "not yet: `run -d` (the command as the sandbox's main process, in the \
             background) waits for the engine's main process; to leave a sandbox \
             running, use `burrow up NAME --image IMAGE`"
                .into(),
        )
        .into());
    }
    let image = args.target.image("run")?;
    if args.cmd.is_empty() {
        return Err(Usage(format!(
            "give the command after `--`: burrow run [--name NAME] {image} -- CMD... \
             (running the image's own entrypoint is not there yet)"
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
