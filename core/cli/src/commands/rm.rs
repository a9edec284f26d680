//! `burrow rm`: remove sandboxes; `--force` kills running ones first.

use clap::Args;
use serde_json::json;

use super::common::resolve;
use super::output::{error_body, say, text, warn};
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct RmArgs {
    /// Sandbox names or ids.
    #[arg(required = true, value_name = "SANDBOX")]
    sandboxes: Vec<String>,
    /// Kill running sandboxes, then remove them.
    #[arg(long, short = 'f')]
    force: bool,
}

/// Goes through every sandbox even when one fails; exits with the code
/// of the first failure. With `--json`, failures are listed in `errors`
/// and the first is also `error`, as for any failed command.
pub(crate) async fn rm(ctx: Ctx, args: RmArgs) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    let mut exit = 0;
    for target in &args.sandboxes {
        let result = async {
            let h = resolve(&backend, target).await?;
            if args.force {
                h.destroy().await?;
            } else {
                h.remove().await?;
            }
            Ok::<_, burrow::Error>(h)
        }
        .await;
        match result {
            Ok(h) => {
                if !ctx.json {
                    say(h.name());
                }
                removed.push(json!({"id": h.id(), "name": h.name()}));
            }
            Err(e) => {
                let e = anyhow::Error::new(e);
                let (body, code) = error_body(&e);
                if !ctx.json {
                    warn(format_args!("burrow: {}", text(&e)));
                }
                exit = if exit == 0 { code } else { exit };
                errors.push(body);
            }
        }
    }
    if ctx.json {
        let mut out = json!({ "removed": removed });
        if let Some(first) = errors.first() {
            out["error"] = first.clone();
            out["errors"] = errors.into();
        }
        ctx.print_json(&out)?;
    }
    Ok(exit)
}
