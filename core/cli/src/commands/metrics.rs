//! `burrow metrics`: CPU, memory, io and process counts of a running
//! sandbox, once or (`--watch`) every interval until Ctrl-C.

use std::time::Duration;

use burrow::backend::Metrics;
use clap::Args;
use serde_json::json;

use super::common::{human_bytes, resolve};
use super::output::say;
use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    /// Sandbox name or id (it must be running).
    sandbox: String,
    /// Keep printing a new sample every interval until interrupted.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Time between samples with --watch (500ms, 2s, ... or seconds).
    #[arg(long, value_name = "DUR", value_parser = burrow::parse_duration, default_value = "2", requires = "watch")]
    interval: Duration,
}

const HEADER: [&str; 6] = ["CPU", "MEMORY", "IO READ", "IO WRITE", "PIDS", "DISK"];

pub(crate) async fn metrics(ctx: Ctx, args: MetricsArgs) -> anyhow::Result<u8> {
    let handle = resolve(&ctx.backend().await?, &args.sandbox).await?;
    if !args.watch {
        let m = handle.metrics().await?;
        print_sample(ctx, handle.id(), handle.name(), &m, true);
        return Ok(0);
    }
    if args.interval.is_zero() {
        return Err(super::Usage("--interval must be greater than zero".into()).into());
    }
    let sandbox = handle.connect().await?;
    let mut samples = sandbox.metrics_stream(args.interval);
    let mut first = true;
    loop {
        tokio::select! {
            sample = samples.recv() => match sample {
                Some(Ok(m)) => {
                    print_sample(ctx, sandbox.id(), sandbox.name(), &m, first);
                    first = false;
                }
                // The sandbox stopped (or could not be measured).
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(0),
            },
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

/// One sample: a JSON object on one line, or a table row (with the header
/// before the first).
fn print_sample(ctx: Ctx, id: &burrow::SandboxId, name: &str, m: &Metrics, header: bool) {
    if ctx.json {
        let mut v = json!({"sandbox_id": id, "name": name});
        if let (Some(obj), Ok(serde_json::Value::Object(fields))) =
            (v.as_object_mut(), serde_json::to_value(m))
        {
            obj.extend(fields);
        }
        say(v);
        return;
    }
    let row = row(m);
    let widths = [12, 24, 12, 12, 6, 24];
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" ")
            .trim_end()
            .to_owned()
    };
    if header {
        say(line(&HEADER.map(String::from)));
    }
    say(line(&row));
}

/// `used / limit` (`-` for a limit not known).
fn used_of(used: Option<u64>, limit: Option<u64>) -> Option<String> {
    let limit = limit.map_or_else(|| "-".into(), human_bytes);
    used.map(|used| format!("{} / {limit}", human_bytes(used)))
}

fn row(m: &Metrics) -> [String; 6] {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let cpu = m.cpu_usage_ns.map(|ns| format!("{:.2} s", ns as f64 / 1e9));
    [
        or_dash(cpu),
        or_dash(used_of(m.memory_bytes, m.memory_limit_bytes)),
        or_dash(m.io_read_bytes.map(human_bytes)),
        or_dash(m.io_write_bytes.map(human_bytes)),
        or_dash(m.pids.map(|p| p.to_string())),
        or_dash(used_of(m.disk_bytes, m.disk_limit_bytes)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_what_the_host_measured() {
        let m = Metrics {
            cpu_usage_ns: Some(1_500_000_000),
            memory_bytes: Some(12 * 1024 * 1024),
            memory_limit_bytes: Some(256 * 1024 * 1024),
            io_read_bytes: None,
            io_write_bytes: Some(0),
            pids: Some(3),
            network: None,
            disk_bytes: Some(1024 * 1024),
            disk_limit_bytes: Some(64 * 1024 * 1024),
        };
        assert_eq!(
            row(&m),
            [
                "1.50 s",
                "12.0 MiB / 256.0 MiB",
                "-",
                "0 B",
                "3",
                "1.0 MiB / 64.0 MiB"
            ]
            .map(String::from)
        );
    }
}
