//! `burrow up`: converge on a running sandbox by name. Creates it when
//! missing (with the given configuration), starts it when stopped, and
//! returns the running one otherwise; many concurrent `up`s end up with
//! one sandbox and one start. The sandbox is left running detached.

use std::sync::Arc;

use burrow::{Backend, Sandbox};
use clap::Args;

use super::create::SandboxOpts;
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Sandbox name (1..=128 bytes).
    name: String,
    /// Image: a rootfs directory, an OCI layout (oci:DIR[:TAG]) or an
    /// imported name (used only when the sandbox is created).
    #[arg(long, value_name = "IMG")]
    image: String,
    /// Used only when the sandbox is created; an existing sandbox keeps its
    /// own configuration.
    #[command(flatten)]
    opts: SandboxOpts,
}

pub(crate) async fn up(ctx: Ctx, args: UpArgs) -> anyhow::Result<u8> {
    let config = args.opts.to_config(&args.image)?;
    let backend: Arc<dyn Backend> = ctx.backend().await?;
    ctx.progress(format_args!("bringing up sandbox {}...", args.name));
    let builder = Sandbox::builder(&args.name)
        .config(config)
        .detached(true)
        .backend(backend);
    let sandbox = builder.connect_or_create().await?;
    let mut info = sandbox.info().await?;
    if !info.detached {
        // An existing sandbox defined as attached: keep it running after
        // this command exits.
        info = sandbox.detach().await?;
    }
    ctx.print(&info, &info.id)?;
    Ok(0)
}
