//! `burrow snapshot create|ls|inspect|rm`: a sandbox's state saved by name,
//! usable as an image (`--image snapshot:NAME`).

use burrow::{SnapshotInfo, SnapshotOptions};
use clap::Subcommand;

use super::common::{ago, human_bytes, print_table, resolve};
use super::Ctx;

#[derive(Debug, Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Save a sandbox's files (its writable layer over its image) under a
    /// name. A running sandbox is frozen for the copy and goes on; a
    /// stopped one stays stopped. Create sandboxes from it with the image
    /// `snapshot:NAME`.
    Create {
        /// Sandbox name or id.
        sandbox: String,
        /// The snapshot's name (letters, digits, '_', '-', '.').
        name: String,
    },
    /// List snapshots.
    Ls,
    /// Show a snapshot as JSON.
    Inspect {
        /// Snapshot name.
        name: String,
    },
    /// Remove snapshots (refused while sandboxes created from one exist;
    /// its content goes at the next `image prune`).
    Rm {
        /// Snapshot names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

fn line(s: &SnapshotInfo) -> String {
    format!(
        "snapshot {} of {} ({}): {}, {}",
        s.name,
        s.source_name,
        s.source_id,
        s.kind.as_str(),
        human_bytes(s.size)
    )
}

pub(crate) async fn snapshot(ctx: Ctx, cmd: SnapshotCommand) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    match cmd {
        SnapshotCommand::Create { sandbox, name } => {
            let h = resolve(&backend, &sandbox).await?;
            ctx.progress(format_args!(
                "taking snapshot {name} of sandbox {}...",
                h.name()
            ));
            let snap = h.snapshot_with(&name, &SnapshotOptions::default()).await?;
            ctx.print(&snap, line(&snap))?;
        }
        SnapshotCommand::Ls => {
            let all = backend.list_snapshots().await?;
            if ctx.json {
                ctx.print_json(&all)?;
            } else {
                let now = burrow_server::store::now_ms();
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(|s| {
                        vec![
                            s.name.clone(),
                            s.kind.as_str().to_owned(),
                            human_bytes(s.size),
                            s.source_name.clone(),
                            s.base_image.clone(),
                            ago(now - s.created_at_ms),
                        ]
                    })
                    .collect();
                print_table(
                    &["NAME", "KIND", "SIZE", "FROM", "BASE IMAGE", "CREATED"],
                    &rows,
                );
            }
        }
        SnapshotCommand::Inspect { name } => {
            let snap = backend.get_snapshot(&name).await?;
            ctx.print_json(&snap)?;
        }
        SnapshotCommand::Rm { names } => {
            for n in &names {
                backend.remove_snapshot(n).await?;
            }
            ctx.print(
                &serde_json::json!({ "removed": names }),
                format_args!("removed {}", names.join(", ")),
            )?;
        }
    }
    Ok(0)
}
