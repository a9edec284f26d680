//! `burrow fork`: copies of a running sandbox, each started (detached: the
//! command exits right away).

use burrow::ForkOptions;

use super::common::resolve;
use super::Ctx;

#[derive(Debug, clap::Args)]
pub(crate) struct ForkArgs {
    /// Sandbox name or id (running).
    sandbox: String,
    /// How many copies (default 1, or one per --name).
    #[arg(long, short = 'n')]
    count: Option<u32>,
    /// A copy's name (repeat for several; default NAME-fork-N).
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
}

pub(crate) async fn fork(ctx: Ctx, args: ForkArgs) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let h = resolve(&backend, &args.sandbox).await?;
    let mut opts = if args.names.is_empty() {
        ForkOptions::count(args.count.unwrap_or(1))
    } else {
        ForkOptions::named(args.names)
    };
    if let Some(count) = args.count {
        opts.count = count;
    }
    let opts = opts.detached(true);
    ctx.progress(format_args!(
        "forking sandbox {} into {} cop{}...",
        h.name(),
        opts.copies(),
        if opts.copies() == 1 { "y" } else { "ies" }
    ));
    let copies = h.fork(&opts).await?;
    let mut infos = Vec::new();
    for c in &copies {
        infos.push(c.info().await?);
    }
    let text = infos
        .iter()
        .map(|i| format!("{} {} {}", i.name, i.id, i.status))
        .collect::<Vec<_>>()
        .join("\n");
    ctx.print(&infos, text)?;
    Ok(0)
}
