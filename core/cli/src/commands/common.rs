//! Small helpers shared by commands: finding a sandbox by name or id,
//! parsing `K=V` flags, exit codes of guest processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use burrow::{Backend, Error, ExitStatus, SandboxHandle, SandboxId, SandboxInfo};

/// The sandbox `target` names: an id when it parses as one, else a name.
pub(crate) async fn resolve(
    backend: &Arc<dyn Backend>,
    target: &str,
) -> burrow::Result<SandboxHandle> {
    let backend = backend.clone();
    match target.parse::<SandboxId>() {
        Ok(id) => SandboxHandle::get_by_id_in(backend, &id).await,
        Err(_) => SandboxHandle::get_in(backend, target).await,
    }
}

/// Parses repeated `K=V` flags into a map.
pub(crate) fn parse_pairs(
    flag: &str,
    values: &[String],
) -> burrow::Result<BTreeMap<String, String>> {
    values
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(Error::InvalidArgument {
                argument: flag.into(),
                reason: format!("{kv:?} is not KEY=VALUE"),
            }),
        })
        .collect()
}

/// A duration given in (possibly fractional) seconds.
pub(crate) fn seconds(flag: &str, secs: f64) -> burrow::Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| Error::InvalidArgument {
        argument: flag.into(),
        reason: format!("{secs} is not a number of seconds"),
    })
}

/// A duration flag: `500ms`, `30s`, `5m`, `1h`, or plain (possibly
/// fractional) seconds; `0` is an explicit zero. Used as a clap value
/// parser, so a bad value is a usage error (exit 2).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    let value = number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{text:?} is not a duration (e.g. 500ms, 30s, 5m, 1h, 10)"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{text:?} is too long"))
}

/// `512 B`, `1.5 KiB`, `12.3 MiB`, `2.0 GiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Prints rows as left-aligned columns under `header`.
pub(crate) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        super::output::say(cells.join("   ").trim_end());
    }
}

/// The shell-style exit code of a guest process: its code, 128+signal, or
/// 124 when its timeout killed it.
pub(crate) fn exit_code_of(status: &ExitStatus) -> u8 {
    if status.timed_out {
        124
    } else if let Some(sig) = status.signal {
        (128 + sig).clamp(0, 255) as u8
    } else {
        status.code.map(|c| (c & 0xff) as u8).unwrap_or(1)
    }
}

/// `name (id) status`, the human line of lifecycle commands.
pub(crate) fn describe(info: &SandboxInfo) -> String {
    format!("{} ({}) {}", info.name, info.id, info.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        let ok = |s: &str| parse_duration(s).ok();
        assert_eq!(ok("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(ok("30s"), Some(Duration::from_secs(30)));
        assert_eq!(ok("5m"), Some(Duration::from_secs(300)));
        assert_eq!(ok("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(ok("10"), Some(Duration::from_secs(10)));
        assert_eq!(ok("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(ok("0"), Some(Duration::ZERO));
        for bad in ["", "s", "5x", "-1", "1e3", "ms5", "1.2.3s", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_print_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(256 * 1024 * 1024), "256.0 MiB");
    }
}
