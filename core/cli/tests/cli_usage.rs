#![allow(clippy::unwrap_used)]
//! CLI smoke tests that need no container runtime: help, exit codes and
//! `--json` error codes of the user commands.

use std::process::{Command, Output};

use serde_json::Value;

/// A fresh, short burrow home (unix socket paths must fit under it).
fn home() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bw")
        .tempdir_in("/tmp")
        .expect("temp home")
}

fn burrow(home: &tempfile::TempDir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_burrow"))
        .arg("--home")
        .arg(home.path())
        .args(args)
        .env_remove("BURROW_HOME")
        .output()
        .expect("running burrow")
}

fn json_error_code(out: &Output) -> String {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    v["error"]["code"].as_str().expect("error.code").to_owned()
}

#[test]
fn help_succeeds_and_documents_exit_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_burrow"))
        .arg("--help")
        .output()
        .expect("running burrow");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Exit codes"), "{text}");
}

#[test]
fn invalid_name_exits_6() {
    let h = home();
    let name = "a".repeat(129);
    let out = burrow(&h, &["create", &name, "--image", "/nonexistent"]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = burrow(&h, &["--json", "create", &name, "--image", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(json_error_code(&out), "invalid_name");
}

#[test]
fn inspect_missing_exits_3() {
    let h = home();
    let out = burrow(&h, &["inspect", "nope"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = burrow(&h, &["inspect", "nope", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_error_code(&out), "not_found");
}

#[test]
fn ls_json_on_an_empty_home_is_an_empty_array() {
    let h = home();
    let out = burrow(&h, &["ls", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn usage_errors_exit_2() {
    let h = home();
    let out = burrow(&h, &["--json", "run", "x", "--image", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error_code(&out), "usage");
    let out = burrow(&h, &["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn modify_missing_exits_3() {
    let h = home();
    let out = burrow(&h, &["modify", "nope", "--cpus", "1"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = burrow(&h, &["--json", "modify", "nope", "--idle-timeout", "5m"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_error_code(&out), "not_found");
}

#[test]
fn invalid_durations_are_usage_errors() {
    let h = home();
    for args in [
        &["--json", "modify", "nope", "--idle-timeout", "5x"][..],
        &["--json", "modify", "nope", "--max-duration", "-1s"][..],
        &["--json", "modify", "nope", "--max-duration", "1h 30m"][..],
        &[
            "--json",
            "create",
            "x",
            "--image",
            "/nonexistent",
            "--startup-timeout",
            "soon",
        ][..],
        &[
            "--json",
            "run",
            "-d",
            "x",
            "--image",
            "/nonexistent",
            "--idle-timeout",
            "1y",
        ][..],
        &["--json", "metrics", "nope", "--watch", "--interval", "fast"][..],
    ] {
        let out = burrow(&h, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(json_error_code(&out), "usage", "{args:?}");
    }
    // The forms the server's configuration accepts pass too (the sandbox is
    // then not found).
    for dur in ["1.5s", "1h30m", "2d", "90"] {
        let out = burrow(&h, &["--json", "modify", "nope", "--idle-timeout", dur]);
        assert_eq!(out.status.code(), Some(3), "{dur}");
        assert_eq!(json_error_code(&out), "not_found", "{dur}");
    }
    // Nothing was created along the way.
    let out = burrow(&h, &["ls", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

#[test]
fn policy_commands_on_a_missing_sandbox_exit_3() {
    let h = home();
    for args in [
        &["--json", "ping", "nope"][..],
        &["--json", "ping", "--touch", "nope"][..],
        &["--json", "touch", "nope"][..],
        &["--json", "pause", "nope"][..],
        &["--json", "resume", "nope"][..],
        &["--json", "metrics", "nope"][..],
        &["--json", "logs", "nope"][..],
    ] {
        let out = burrow(&h, args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert_eq!(json_error_code(&out), "not_found", "{args:?}");
    }
}

#[test]
fn modify_without_changes_is_a_usage_error() {
    let h = home();
    let out = burrow(&h, &["--json", "modify", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error_code(&out), "usage");
    // Setting and removing the same field at once is refused by clap.
    let out = burrow(
        &h,
        &["--json", "modify", "nope", "--cpus", "1", "--no-cpus"],
    );
    assert_eq!(out.status.code(), Some(2));
}
