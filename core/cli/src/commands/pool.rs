//! `burrow pool create|ls|inspect|scale|rm`: warm pools, of the local
//! backend or of a server (`--remote`). A create (or `run`, `up`) whose configuration is a pool's
//! claims one of its running sandboxes instead of starting one.

use burrow::{PoolInfo, PoolSpec};
use clap::Subcommand;

use super::common::{ago, print_table};
use super::create::SandboxOpts;
use super::Ctx;

#[derive(Debug, Subcommand)]
pub(crate) enum PoolCommand {
    /// Define a pool and start its sandboxes (returns once they run). A
    /// create of the same image and options claims one of them; its own
    /// labels, environment and timeouts apply at the claim.
    Create {
        /// The pool's name.
        name: String,
        /// Image of its sandboxes.
        image: String,
        /// How many sandboxes to keep started and unclaimed.
        #[arg(long, default_value_t = 1)]
        size: u32,
        #[command(flatten)]
        opts: Box<SandboxOpts>,
    },
    /// List pools: size, warm and starting sandboxes, claims, misses.
    Ls,
    /// Show a pool as JSON.
    Inspect {
        /// Pool name.
        name: String,
    },
    /// Set how many sandboxes a pool keeps (starts or removes sandboxes
    /// to match; returns once it does).
    Scale {
        /// Pool name.
        name: String,
        /// The new size (0 empties it).
        size: u32,
    },
    /// Remove pools and their unclaimed sandboxes (claimed ones stay).
    Rm {
        /// Pool names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

fn line(p: &PoolInfo) -> String {
    format!(
        "pool {}: {} of {} warm ({} starting), {} claims, {} misses",
        p.name, p.warm, p.size, p.starting, p.claims, p.misses
    )
}

pub(crate) async fn pool(ctx: Ctx, cmd: PoolCommand) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    match cmd {
        PoolCommand::Create {
            name,
            image,
            size,
            opts,
        } => {
            let config = opts.to_config(&image)?;
            ctx.progress(format_args!("starting {size} sandboxes of pool {name}..."));
            let info = backend
                .create_pool(PoolSpec::new(name, config, size))
                .await?;
            ctx.print(&info, line(&info))?;
        }
        PoolCommand::Ls => {
            let all = backend.list_pools().await?;
            if ctx.json {
                ctx.print_json(&all)?;
            } else {
                let now = burrow_server::store::now_ms();
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(|p| {
                        vec![
                            p.name.clone(),
                            p.config.image.clone(),
                            p.size.to_string(),
                            p.warm.to_string(),
                            p.starting.to_string(),
                            p.claims.to_string(),
                            p.misses.to_string(),
                            p.last_refill_ms
                                .map_or_else(|| "-".into(), |ms| format!("{ms} ms")),
                            ago(now - p.created_at_ms),
                        ]
                    })
                    .collect();
                print_table(
                    &[
                        "NAME", "IMAGE", "SIZE", "WARM", "STARTING", "CLAIMS", "MISSES", "REFILL",
                        "CREATED",
                    ],
                    &rows,
                );
            }
        }
        PoolCommand::Inspect { name } => {
            let info = backend.get_pool(&name).await?;
            ctx.print_json(&info)?;
        }
        PoolCommand::Scale { name, size } => {
            ctx.progress(format_args!("scaling pool {name} to {size}..."));
            let info = backend.scale_pool(&name, size).await?;
            ctx.print(&info, line(&info))?;
        }
        PoolCommand::Rm { names } => {
            for n in &names {
                backend.remove_pool(n).await?;
                ctx.print(
                    &serde_json::json!({ "removed": n }),
                    format_args!("removed pool {n}"),
                )?;
            }
        }
    }
    Ok(0)
}
