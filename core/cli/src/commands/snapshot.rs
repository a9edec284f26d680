//! `burrow snapshot create|ls|inspect|rm`: a sandbox's state saved by name,
//! usable as an image (`--image snapshot:NAME`).

use burrow::{SnapshotInfo, SnapshotOptions};
use clap::Subcommand;

use super::common::{ago, human_bytes, print_table, resolve};
use super::Ctx;

#[derive(Debug, Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Save a sandbox's files (its writable layer over its image) under a
    /// name, or with --full a running vm sandbox whole (memory and
    /// processes too). A running sandbox is frozen for the copy and goes
    /// on; a stopped one stays stopped. Create sandboxes from it with the
    /// image `snapshot:NAME`.
    Create {
        /// Sandbox name or id.
        sandbox: String,
        /// The snapshot's name (letters, digits, '_', '-', '.').
        name: String,
        /// Memory and processes too (a running vm sandbox).
        #[arg(long)]
        full: bool,
    },
    /// List snapshots.
    Ls,
    /// Show a snapshot as JSON.
    Inspect {
        /// Snapshot name.
        name: String,
    },
    /// Push a filesystem snapshot to a registry as an ordinary OCI image:
    /// `create --image REF` then works on any backend (Kubernetes too).
    Push {
        /// Snapshot name.
        name: String,
        /// Registry reference with a tag (`registry.example.com:5000/team/app:v1`).
        reference: String,
        /// Registry user (with --password or BURROW_REGISTRY_PASSWORD).
        #[arg(long)]
        username: Option<String>,
        /// Registry password.
        #[arg(long, env = "BURROW_REGISTRY_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Plain HTTP for this push (a registry you trust on a private network).
        #[arg(long)]
        insecure: bool,
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
        SnapshotCommand::Create {
            sandbox,
            name,
            full,
        } => {
            let h = resolve(&backend, &sandbox).await?;
            ctx.progress(format_args!(
                "taking {}snapshot {name} of sandbox {}...",
                if full { "full " } else { "" },
                h.name()
            ));
            let opts = if full {
                SnapshotOptions::full()
            } else {
                SnapshotOptions::filesystem()
            };
            let snap = h.snapshot_with(&name, &opts).await?;
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
        SnapshotCommand::Push {
            name,
            reference,
            username,
            password,
            insecure,
        } => {
            if ctx.is_remote()? {
                return Err(burrow::Error::unsupported(
                    "pushing a server's snapshot from a client (run `burrow snapshot push` on the server's host)",
                )
                .into());
            }
            let credentials = match (username, password) {
                (Some(user), Some(pass)) => Some((user, pass)),
                (Some(_), None) => {
                    return Err(super::Usage(
                        "--username needs --password or BURROW_REGISTRY_PASSWORD".into(),
                    )
                    .into())
                }
                _ => None,
            };
            let opts = burrow::image::PullOptions {
                credentials,
                insecure,
                ..Default::default()
            };
            ctx.progress(format_args!("pushing snapshot {name} to {reference}..."));
            let report = ctx
                .local_backend()
                .await?
                .push_snapshot(&name, &reference, &opts)
                .await?;
            ctx.print(
                &serde_json::json!({
                    "reference": report.reference,
                    "digest": report.digest,
                    "blobs_pushed": report.blobs_pushed,
                    "blobs_present": report.blobs_present,
                    "bytes_pushed": report.bytes_pushed,
                }),
                format_args!(
                    "pushed {name} to {}@{} ({} blobs, {}; {} already there)",
                    report.reference,
                    report.digest,
                    report.blobs_pushed,
                    human_bytes(report.bytes_pushed),
                    report.blobs_present
                ),
            )?;
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
