//! The files of sandbox logs (the local engine's): writing them size-bound
//! and rotated (`rotating`), copying the guest's log and the programs'
//! output into them (`capture`, `output`), and reading them, also in
//! follow mode (`read`). The types every backend's log stream carries are
//! [`crate::logs`].

mod capture;
pub(crate) mod output;
mod read;
pub(crate) mod rotating;

use std::path::{Path, PathBuf};

pub(crate) use capture::capture;
pub(crate) use read::{open_local, read_tail, RunEnded};
pub(crate) use rotating::RotatingFile;

use crate::logs::{DEFAULT_MAX_BYTES, MAX_BYTES_ENV};

/// The log directory of a sandbox directory.
pub(crate) fn log_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("logs")
}

/// The size bound of log files: `BURROW_LOG_MAX_BYTES`, else
/// [`DEFAULT_MAX_BYTES`].
pub(crate) fn max_bytes_from_env() -> u64 {
    parse_max_bytes(std::env::var(MAX_BYTES_ENV).ok().as_deref())
}

fn parse_max_bytes(value: Option<&str>) -> u64 {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// The rotated generation of a log file: `<name>.1` beside it.
pub(crate) fn rotated_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

/// Helpers shared by the tests of the submodules.
#[cfg(test)]
mod fixtures {
    use std::path::Path;

    /// The lines of the file at `path` (none when it does not exist).
    pub(super) fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_from_the_environment_must_be_a_positive_number() {
        assert_eq!(parse_max_bytes(Some("12345")), 12345);
        assert_eq!(parse_max_bytes(Some(" 4096 ")), 4096);
        assert_eq!(parse_max_bytes(Some("nonsense")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(Some("0")), DEFAULT_MAX_BYTES);
        assert_eq!(parse_max_bytes(None), DEFAULT_MAX_BYTES);
    }
}
