//! `burrow modify`: change an existing sandbox's configuration without
//! recreating it, and print where each change lands (live, future execs,
//! next start, immediately).

use std::time::Duration;

use burrow::model::{Applies, Modify, ModifyPlan};
use clap::Args;

use super::common::{parse_mib, parse_pairs, print_table, resolve};
use super::{Ctx, Usage};

#[derive(Debug, Args)]
pub(crate) struct ModifyArgs {
    /// Sandbox name or id.
    sandbox: String,
    /// CPU limit in cores (fractions allowed).
    #[arg(long, value_name = "N", conflicts_with = "no_cpus")]
    cpus: Option<f64>,
    /// Remove the CPU limit.
    #[arg(long)]
    no_cpus: bool,
    /// Memory limit: MiB (4096), or with a unit (512M, 4G).
    #[arg(long, value_name = "SIZE", value_parser = parse_mib, conflicts_with = "no_memory")]
    memory: Option<u64>,
    /// Remove the memory limit.
    #[arg(long)]
    no_memory: bool,
    /// Set an environment variable (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Remove an environment variable (repeatable).
    #[arg(long = "unset-env", value_name = "K")]
    unset_env: Vec<String>,
    /// Set a label (repeatable).
    #[arg(short = 'l', long = "label", value_name = "K=V")]
    labels: Vec<String>,
    /// Remove a label (repeatable).
    #[arg(long = "unset-label", value_name = "K")]
    unset_labels: Vec<String>,
    /// Idle timeout (500ms, 30s, 1.5m, 1h30m, 2d or seconds; 0 disables
    /// reclaim).
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration, conflicts_with = "no_idle_timeout")]
    idle_timeout: Option<Duration>,
    /// Remove the idle timeout.
    #[arg(long)]
    no_idle_timeout: bool,
    /// What idle reclaim does: stop or hibernate.
    #[arg(long, value_name = "ACTION", value_parser = clap::builder::PossibleValuesParser::new(["stop", "hibernate"]))]
    idle_action: Option<String>,
    /// Maximum duration of each run.
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration, conflicts_with = "no_max_duration")]
    max_duration: Option<Duration>,
    /// Remove the maximum duration.
    #[arg(long)]
    no_max_duration: bool,
}

impl ModifyArgs {
    /// The requested changes (`None` leaves a field alone, `Some(None)`
    /// removes it).
    fn changes(&self) -> burrow::Result<Modify> {
        fn setting<T: Copy>(value: Option<T>, remove: bool) -> Option<Option<T>> {
            if remove {
                Some(None)
            } else {
                value.map(Some)
            }
        }
        let mut m = Modify::default();
        m.cpus = setting(self.cpus, self.no_cpus);
        m.memory_mb = setting(self.memory, self.no_memory);
        m.env_set = parse_pairs("--env", &self.env)?;
        m.env_unset = self.unset_env.clone();
        m.labels_set = parse_pairs("--label", &self.labels)?;
        m.labels_unset = self.unset_labels.clone();
        m.idle_timeout = setting(self.idle_timeout, self.no_idle_timeout);
        m.idle_action = self
            .idle_action
            .as_deref()
            .and_then(burrow::IdleAction::parse);
        m.max_duration = setting(self.max_duration, self.no_max_duration);
        Ok(m)
    }
}

pub(crate) async fn modify(ctx: Ctx, args: ModifyArgs) -> anyhow::Result<u8> {
    let changes = args.changes()?;
    if changes.is_empty() {
        return Err(
            Usage("nothing to change: give at least one setting (see --help)".into()).into(),
        );
    }
    let handle = resolve(&ctx.backend().await?, &args.sandbox).await?;
    let plan = handle.modify_with(&changes).await?;
    if ctx.json {
        ctx.print_json(&plan)?;
    } else {
        print_plan(&plan);
    }
    Ok(0)
}

/// `live`, `future_execs`, `next_start`, `immediately`.
fn applies_str(a: Applies) -> String {
    serde_json::to_value(a)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{a:?}"))
}

fn print_plan(plan: &ModifyPlan) {
    let rows: Vec<Vec<String>> = plan
        .changes
        .iter()
        .map(|c| {
            vec![
                c.field.clone(),
                applies_str(c.applies),
                c.note.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print_table(&["FIELD", "APPLIES", "NOTE"], &rows);
}
