//! `burrow cp`: copy between the host and a running sandbox. One side is
//! `SANDBOX:/guest/path`; the destination is a directory and the copied
//! entry keeps its name.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::common::resolve;
use super::{Ctx, Usage};

#[derive(Debug, Args)]
pub(crate) struct CpArgs {
    /// Source: a host path or SANDBOX:/guest/path.
    src: String,
    /// Destination directory: a host path or SANDBOX:/guest/dir.
    dst: String,
}

/// `SANDBOX:/path` -> (sandbox, path). Names never contain '/', so the
/// first ":/" is the separator.
fn guest_side(arg: &str) -> Option<(&str, &str)> {
    let i = arg.find(":/")?;
    let (name, path) = (&arg[..i], &arg[i + 1..]);
    (!name.is_empty() && !name.contains('/')).then_some((name, path))
}

pub(crate) async fn cp(ctx: Ctx, args: CpArgs) -> anyhow::Result<u8> {
    // (sandbox, guest path, host path, copying into the sandbox)
    let (target, guest, host, inward) = match (guest_side(&args.src), guest_side(&args.dst)) {
        (None, Some((name, dir))) => (name, dir, &args.src, true),
        (Some((name, path)), None) => (name, path, &args.dst, false),
        _ => return Err(Usage("exactly one of SRC and DST must be SANDBOX:/path".into()).into()),
    };
    let sandbox = resolve(&ctx.backend().await?, target)
        .await?
        .sandbox()
        .await?;
    let host = PathBuf::from(host);
    if inward {
        sandbox.fs().copy_in(&host, guest).await?;
    } else {
        sandbox.fs().copy_out(guest, &host).await?;
    }
    if ctx.json {
        ctx.print_json(&json!({
            "sandbox_id": sandbox.id(),
            "name": sandbox.name(),
            "direction": if inward { "in" } else { "out" },
            "source": args.src,
            "destination": args.dst,
        }))?;
    }
    Ok(0)
}
