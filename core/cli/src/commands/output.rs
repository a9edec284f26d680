//! How results and errors reach the user: human text or `--json`, and the
//! exit codes derived from the library's error codes (never from messages).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use burrow::{Backend, BackendSelection, ErrorCode, LocalBackend};
use serde::Serialize;
use serde_json::json;

/// Shown at the end of `burrow --help`.
pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  generic failure
  2  usage error (unknown flag, missing argument, ...)
  3  not found (not_found)
  4  already exists (already_exists)
  5  invalid state (invalid_state, starting, sandbox_replaced)
  6  invalid input (invalid_name, invalid_config, invalid_image, invalid_argument)
  7  start failed, runtime unavailable or timeout (start_failed, runtime_unavailable, timeout)
  8  refused by the burrow server (unauthorized: missing or unknown BURROW_TOKEN;
     forbidden, quota_exceeded, rate_limited)
  `exec`, `shell` and `run CMD` exit with the command's own code: its exit
  status, 128+N when signal N ended it, 124 when --timeout killed it.

With --json, results are JSON on stdout, and so are errors:
  {\"error\": {\"code\": \"not_found\", \"message\": \"...\", \"sandbox_id\": null, \"name\": \"web\"}}";

/// The exit code of a library error.
pub(crate) fn exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::NotFound => 3,
        ErrorCode::AlreadyExists => 4,
        ErrorCode::InvalidState
        | ErrorCode::Starting
        | ErrorCode::SandboxReplaced
        | ErrorCode::PortUnavailable
        | ErrorCode::SnapshotInUse => 5,
        ErrorCode::InvalidName
        | ErrorCode::InvalidConfig
        | ErrorCode::InvalidImage
        | ErrorCode::InvalidArgument => 6,
        ErrorCode::StartFailed | ErrorCode::RuntimeUnavailable | ErrorCode::Timeout => 7,
        ErrorCode::Unauthorized
        | ErrorCode::Forbidden
        | ErrorCode::QuotaExceeded
        | ErrorCode::RateLimited => 8,
        _ => 1,
    }
}

/// A usage error found by a command itself (exit code 2, code `usage`).
#[derive(Debug)]
pub(crate) struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Prints a line on stdout. A closed reader (`| head`) is not our failure,
/// so write errors are dropped rather than panicking like `println!`.
pub(crate) fn say(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Prints a line on stderr, dropping write errors.
pub(crate) fn warn(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// The whole text of a failed command's error: each part of its chain
/// once ([`burrow::error::report`]).
pub(crate) fn text(err: &anyhow::Error) -> String {
    burrow::error::report(err.as_ref())
}

/// The `--json` error object of `err` and its exit code.
pub(crate) fn error_body(err: &anyhow::Error) -> (serde_json::Value, u8) {
    let (code, exit, lib) = if err.downcast_ref::<Usage>().is_some() {
        ("usage", 2, None)
    } else if let Some(e) = err.downcast_ref::<burrow::Error>() {
        (e.code().as_str(), exit_code(e.code()), Some(e))
    } else {
        ("error", 1, None)
    };
    let body = json!({
        "code": code,
        "message": text(err),
        "sandbox_id": lib.and_then(|e| e.sandbox_id()),
        "name": lib.and_then(|e| e.name()),
        "status": lib.and_then(|e| e.status()),
    });
    (body, exit)
}

/// What every command gets: the output mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// `--json` was given.
    pub json: bool,
}

impl Ctx {
    /// The backend of sandbox commands: [`burrow::default_backend`] (the
    /// `burrow serve` at `BURROW_URL` when that is set and not empty, else
    /// the local backend of `BURROW_HOME`, which `--home` sets).
    pub async fn backend(&self) -> anyhow::Result<Arc<dyn Backend>> {
        Ok(burrow::default_backend().await?)
    }

    /// The local backend, whatever `BURROW_URL` says: images and files
    /// under the home are always this host's.
    pub async fn local_backend(&self) -> anyhow::Result<Arc<LocalBackend>> {
        Ok(LocalBackend::shared().await?)
    }

    /// Whether sandbox commands go to a `burrow serve` (`BURROW_URL`).
    pub fn is_remote(&self) -> anyhow::Result<bool> {
        Ok(BackendSelection::from_env()?.is_remote())
    }

    /// A progress note on stderr, for humans only.
    pub fn progress(&self, msg: impl std::fmt::Display) {
        if !self.json {
            warn(msg);
        }
    }

    /// Prints `value` as pretty JSON on stdout.
    pub fn print_json<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        say(serde_json::to_string_pretty(value)?);
        Ok(())
    }

    /// Prints `value` as JSON with `--json`, else the human line `text`.
    pub fn print<T: Serialize + ?Sized>(
        &self,
        value: &T,
        text: impl std::fmt::Display,
    ) -> anyhow::Result<()> {
        if self.json {
            self.print_json(value)
        } else {
            say(text);
            Ok(())
        }
    }

    /// Reports a failed command and returns its exit code.
    pub fn fail(&self, err: anyhow::Error) -> ExitCode {
        let (body, exit) = error_body(&err);
        if self.json {
            say(json!({ "error": body }));
        } else {
            warn(format_args!("burrow: {}", text(&err)));
        }
        ExitCode::from(exit)
    }
}

/// A command line clap rejected (or `--help`/`--version`). With `--json`
/// anywhere before `--`, a real usage error is reported as JSON.
pub(crate) fn usage_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let json = std::env::args()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !json || informational {
        e.exit()
    }
    let text = e.to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    let err = json!({"code": "usage", "message": message, "sandbox_id": null, "name": null, "status": null});
    say(json!({ "error": err }));
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_the_server_exit_8() {
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::QuotaExceeded,
            ErrorCode::RateLimited,
        ] {
            assert_eq!(exit_code(code), 8, "{code}");
        }
    }
}
