//! Small helpers shared by commands: finding a sandbox by name or id,
//! parsing `K=V` flags and memory sizes, generated sandbox names, exit codes
//! of guest processes.

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

/// A size in MiB as the flags take it (see [`burrow::parse_mib`]), as a
/// clap value parser: a bad size is a usage error.
pub(crate) fn parse_mib(text: &str) -> Result<u64, String> {
    burrow::parse_mib(text).map_err(|e| e.to_string())
}

/// A readable sandbox name for commands given none, docker style:
/// `adjective-animal-NNNN` (`brisk-badger-4821`). Always a valid name; the
/// caller tries another one when it is taken.
pub(crate) fn generated_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ADJECTIVES: &str = "agile amber bold brave bright brisk calm clever cosy daring deep \
        eager fuzzy gentle happy humble jolly keen lively lucky mellow nimble patient quiet rapid \
        shy snug steady swift tidy vivid wise";
    const ANIMALS: &str = "aardvark armadillo badger beaver chipmunk coney coyote dingo echidna \
        ferret fox gerbil gopher hamster hare hedgehog jerboa lemming marmot meerkat mole \
        mongoose otter pangolin puffin rabbit squirrel tortoise vole weasel wombat woodchuck";
    // RandomState is seeded randomly per process (and per call after the
    // first); the time and pid keep two processes apart regardless.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    let r = h.finish();
    let pick = |words: &'static str, n: u64| {
        let words: Vec<&str> = words.split_whitespace().collect();
        words[(n % words.len() as u64) as usize]
    };
    let adjective = pick(ADJECTIVES, r);
    let animal = pick(ANIMALS, r >> 8);
    let number = 1000 + (r >> 16) % 9000;
    format!("{adjective}-{animal}-{number}")
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

/// `42 seconds ago`, `3 minutes ago`, ...
pub(crate) fn ago(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (n, unit) = match s {
        0..=59 => (s, "second"),
        60..=3599 => (s / 60, "minute"),
        3600..=86_399 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    if s < 1 {
        "just now".into()
    } else {
        format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_valid_and_vary() {
        let names: std::collections::HashSet<String> = (0..64).map(|_| generated_name()).collect();
        assert!(names.len() > 32, "{names:?}");
        for n in &names {
            assert!(burrow::model::validate_name(n).is_ok(), "{n}");
            let parts: Vec<&str> = n.split('-').collect();
            assert_eq!(parts.len(), 3, "{n}");
            assert_eq!(parts[2].len(), 4, "{n}");
        }
    }

    #[test]
    fn sizes_print_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(256 * 1024 * 1024), "256.0 MiB");
    }
}
