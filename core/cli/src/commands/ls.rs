//! `burrow ls` (alias `ps`): a table of sandboxes, or their snapshots as
//! JSON; `burrow ps NAME` shows just that one (the same shape: a table of
//! one row, a JSON array of one snapshot).

use std::time::{SystemTime, UNIX_EPOCH};

use burrow::{ListFilter, SandboxInfo, Status};
use clap::Args;

use super::common::{ago, parse_pairs, print_table, resolve};
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Only this sandbox (name or id); exits 3 when there is none.
    #[arg(value_name = "SANDBOX", conflicts_with_all = ["status", "labels"])]
    sandbox: Option<String>,
    /// Every status (the default already lists them all; kept for habit).
    #[arg(long, short = 'a')]
    all: bool,
    /// Only this status (repeatable): created, starting, running, draining,
    /// paused, stopped, crashed.
    #[arg(long, value_name = "S")]
    status: Vec<String>,
    /// Only sandboxes with this label (repeatable).
    #[arg(short = 'l', long = "label", value_name = "K=V")]
    labels: Vec<String>,
}

pub(crate) async fn ls(ctx: Ctx, args: LsArgs) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let mut list = match &args.sandbox {
        Some(target) => vec![resolve(&backend, target).await?.info().await?],
        None => listed(&backend, &args).await?,
    };
    list.sort_by(|a, b| (a.created_at_ms, &a.name).cmp(&(b.created_at_ms, &b.name)));
    if ctx.json {
        ctx.print_json(&list)?;
    } else {
        print_list(&list);
    }
    Ok(0)
}

/// Every sandbox the filters of `args` select.
async fn listed(
    backend: &std::sync::Arc<dyn burrow::Backend>,
    args: &LsArgs,
) -> anyhow::Result<Vec<SandboxInfo>> {
    let mut filter = ListFilter::default().statuses(
        args.status
            .iter()
            .map(|s| s.parse::<Status>())
            .collect::<burrow::Result<Vec<_>>>()?,
    );
    filter.labels = parse_pairs("--label", &args.labels)?;
    Ok(backend.list(&filter).await?)
}

/// The published ports as `HOST->GUEST` (`127.0.0.1:8080->80/tcp`), `-`
/// for none.
fn ports(ports: &[burrow::PortMapping]) -> String {
    if ports.is_empty() {
        return "-".into();
    }
    ports
        .iter()
        .map(|p| {
            format!(
                "{}->{}/{}",
                p.host_addr(),
                p.guest_port,
                p.protocol.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn print_list(list: &[SandboxInfo]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|i| {
            // Why the latest run ended: idle_timeout, max_duration, drain, ...
            let last_exit = i
                .last_run
                .as_ref()
                .and_then(|r| r.exit_reason)
                .map_or("-", |r| r.as_str());
            vec![
                i.name.clone(),
                i.id.to_string(),
                i.status.to_string(),
                i.config.image.clone(),
                i.generation.to_string(),
                ago(now - i.created_at_ms),
                last_exit.to_owned(),
                ports(&i.config.ports),
            ]
        })
        .collect();
    print_table(
        &[
            "NAME",
            "ID",
            "STATUS",
            "IMAGE",
            "GENERATION",
            "CREATED",
            "LAST EXIT",
            "PORTS",
        ],
        &rows,
    );
}
