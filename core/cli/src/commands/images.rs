//! `burrow pull`, `burrow images` and `burrow image rm|prune|ls`: the image
//! store shared by every sandbox of a burrow home.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use burrow::image::{PullEvent, PullOptions, PullPolicy};
use burrow::Backend;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use super::common::{human_bytes, print_table};
use super::Ctx;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Policy {
    /// Use the local copy if there is one (default).
    IfMissing,
    /// Ask the registry again (stored layers are reused).
    Always,
    /// Only the local store.
    Never,
}

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    /// Image reference (`python`, `registry:5000/org/tool:1.2`, `name@sha256:...`).
    reference: String,
    /// When to ask the registry.
    #[arg(long, value_enum, default_value = "always")]
    policy: Policy,
    /// Registry user (with --password or BURROW_REGISTRY_PASSWORD).
    #[arg(long)]
    username: Option<String>,
    /// Registry password.
    #[arg(long, env = "BURROW_REGISTRY_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Plain HTTP for this pull (a registry you trust on a private network).
    #[arg(long)]
    insecure: bool,
    /// No progress output.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImageCommand {
    /// List pulled images.
    Ls,
    /// Forget a pulled reference (its content goes at the next prune).
    Rm {
        /// References to remove.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Delete blobs and unpacked trees no reference or sandbox uses, with
    /// the VM disks and boot templates made of them.
    Prune,
    /// Build the VM boot template a vm sandbox of this image (and memory,
    /// CPUs, network) starts from, so that its first start restores a
    /// booted guest instead of booting (later starts do anyway).
    Warm {
        /// Image: a registry reference, a rootfs directory or an OCI layout.
        image: String,
        /// Memory of the sandboxes: MiB (512, the default), or with a unit
        /// (512M, 1G).
        #[arg(long, value_name = "SIZE", value_parser = super::common::parse_mib)]
        memory: Option<u64>,
        /// vCPUs of the sandboxes (fractions round up; default 1).
        #[arg(long, value_name = "N")]
        cpus: Option<f64>,
        /// For sandboxes with networking.
        #[arg(long)]
        network: bool,
    },
}

/// Per layer: bytes done, total, what is happening.
type LayerState = (u64, u64, &'static str);
/// Layers in manifest order, and their state.
type Layers = (Vec<String>, HashMap<String, LayerState>);

/// Progress per layer on stderr: one line per layer, redrawn in place on a
/// terminal, one line per finished layer otherwise.
struct Progress {
    tty: bool,
    layers: Mutex<Layers>,
}

impl Progress {
    fn event(&self, ev: PullEvent) {
        let mut guard = self.layers.lock().unwrap_or_else(|p| p.into_inner());
        let (order, state) = &mut *guard;
        let mut line = None;
        match ev {
            PullEvent::Resolved {
                reference,
                digest,
                layers,
            } => {
                eprintln!("{reference}: {digest}");
                for (d, size) in layers {
                    state.insert(d.clone(), (0, size, "waiting"));
                    order.push(d);
                }
                if self.tty {
                    for d in order.iter() {
                        eprintln!("{}", render(d, state[d]));
                    }
                }
                return;
            }
            PullEvent::LayerCached { digest } => {
                if let Some(s) = state.get_mut(&digest) {
                    *s = (s.1, s.1, "already present");
                    line = Some(digest);
                }
            }
            PullEvent::LayerProgress {
                digest,
                done,
                total,
            } => {
                if let Some(s) = state.get_mut(&digest) {
                    *s = (done, total, "downloading");
                    line = self.tty.then_some(digest);
                }
            }
            PullEvent::LayerDone { digest } => {
                if let Some(s) = state.get_mut(&digest) {
                    *s = (s.1, s.1, "done");
                    line = Some(digest);
                }
            }
            PullEvent::Unpacking => eprintln!("unpacking..."),
            PullEvent::Done { .. } => {}
        }
        let Some(digest) = line else { return };
        let text = render(&digest, state[&digest]);
        if self.tty {
            // Move up to the layer's line, redraw it, come back down.
            let up = order.len() - order.iter().position(|d| *d == digest).unwrap_or(0);
            eprint!("\x1b[{up}A\r\x1b[2K{text}\x1b[{up}B\r");
            let _ = std::io::stderr().flush();
        } else if state[&digest].2 != "downloading" {
            eprintln!("{text}");
        }
    }
}

fn render(digest: &str, (done, total, what): LayerState) -> String {
    let short = digest.strip_prefix("sha256:").unwrap_or(digest);
    let short = &short[..short.len().min(12)];
    format!(
        "{short}: {what:<15} {:>10} / {}",
        human_bytes(done),
        human_bytes(total)
    )
}

pub(crate) async fn pull(ctx: Ctx, args: PullArgs) -> anyhow::Result<u8> {
    let backend = ctx.local_backend().await?;
    let mut opts = PullOptions {
        policy: match args.policy {
            Policy::IfMissing => PullPolicy::IfMissing,
            Policy::Always => PullPolicy::Always,
            Policy::Never => PullPolicy::Never,
        },
        insecure: args.insecure,
        ..Default::default()
    };
    if let Some(user) = args.username {
        let Some(pass) = args.password else {
            return Err(super::Usage(
                "--username needs --password or BURROW_REGISTRY_PASSWORD".into(),
            )
            .into());
        };
        opts.credentials = Some((user, pass));
    }
    if !ctx.json && !args.quiet {
        let progress = Arc::new(Progress {
            tty: std::io::stderr().is_terminal(),
            layers: Mutex::default(),
        });
        opts.progress = Some(Arc::new(move |ev| progress.event(ev)));
    }
    let prepared = backend.pull_image(&args.reference, &opts).await?;
    let digest = prepared.digest.clone().unwrap_or_default();
    ctx.print(
        &json!({ "reference": prepared.reference, "digest": digest, "rootfs": prepared.rootfs }),
        format_args!("{}: {digest}", prepared.reference),
    )?;
    Ok(0)
}

pub(crate) async fn images(ctx: Ctx) -> anyhow::Result<u8> {
    let backend = ctx.local_backend().await?;
    let list = backend.list_images()?;
    if ctx.json {
        let rows: Vec<_> = list
            .iter()
            .map(|i| json!({ "reference": i.reference, "digest": i.digest, "size": i.size, "pulled_at_ms": i.pulled_at_ms }))
            .collect();
        ctx.print_json(&rows)?;
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|i| {
                let d = i.digest.strip_prefix("sha256:").unwrap_or(&i.digest);
                vec![
                    i.reference.clone(),
                    d[..d.len().min(12)].to_string(),
                    human_bytes(i.size),
                ]
            })
            .collect();
        print_table(&["REFERENCE", "DIGEST", "SIZE"], &rows);
    }
    Ok(0)
}

pub(crate) async fn image(ctx: Ctx, cmd: ImageCommand) -> anyhow::Result<u8> {
    let backend = ctx.local_backend().await?;
    match cmd {
        ImageCommand::Ls => images(ctx).await,
        ImageCommand::Rm { references } => {
            for r in &references {
                backend.remove_image(r)?;
            }
            ctx.print(
                &json!({ "removed": references }),
                format_args!("removed {}", references.join(", ")),
            )?;
            Ok(0)
        }
        ImageCommand::Warm {
            image,
            memory,
            cpus,
            network,
        } => {
            let mut config = burrow::SandboxConfig::new(image.clone());
            config.memory_mb = memory;
            config.cpus = cpus;
            config.network = network.into();
            ctx.progress(format_args!("warming the VM boot template of {image}..."));
            let started = std::time::Instant::now();
            let warm = backend.warm_vm_template(&config).await?;
            let secs = started.elapsed().as_secs_f64();
            ctx.print(
                &json!({
                    "template": warm.key,
                    "restart_template": warm.restart_key,
                    "built": warm.built,
                    "seconds": secs
                }),
                format_args!(
                    "{} boot templates {} (first start) and {} (later starts) ({secs:.1}s)",
                    if warm.built { "built" } else { "already had" },
                    warm.key,
                    warm.restart_key
                ),
            )?;
            Ok(0)
        }
        ImageCommand::Prune => {
            // Images of existing sandboxes are never pruned.
            let in_use: Vec<String> = backend
                .list(&Default::default())
                .await?
                .into_iter()
                .map(|i| i.config.image)
                .collect();
            let report = backend.prune_images(&in_use).await?;
            ctx.print(
                &json!({ "blobs_removed": report.blobs_removed, "rootfs_removed": report.rootfs_removed, "templates_removed": report.templates_removed, "bytes_freed": report.bytes_freed }),
                format_args!(
                    "removed {} blobs, {} unpacked trees and {} VM boot templates, freed {}",
                    report.blobs_removed,
                    report.rootfs_removed,
                    report.templates_removed,
                    human_bytes(report.bytes_freed)
                ),
            )?;
            Ok(0)
        }
    }
}
