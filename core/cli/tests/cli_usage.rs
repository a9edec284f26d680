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
    let out = burrow(&h, &["create", "--name", &name, "/nonexistent"]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = burrow(&h, &["--json", "create", "/nonexistent", "--name", &name]);
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
    for args in [
        // The old form, name first: refused, never read as IMAGE + name.
        &[
            "--json",
            "run",
            "x",
            "--image",
            "/nonexistent",
            "--",
            "true",
        ][..],
        &["--json", "create", "x", "--image", "/nonexistent"][..],
        // No image.
        &["--json", "run", "--", "true"][..],
        &["--json", "create", "--name", "x"][..],
        // No command: running the image's own entrypoint is not there yet.
        &["--json", "run", "/nonexistent"][..],
        &["--json", "run", "--name", "x", "/nonexistent"][..],
        // The command comes after `--`.
        &["--json", "run", "/nonexistent", "echo", "hi"][..],
        // `run -d` takes neither --keep nor --rm (it keeps running).
        &["--json", "run", "-d", "--keep", "/nonexistent"][..],
        // --keep and --rm say opposite things.
        &[
            "--json",
            "run",
            "--keep",
            "--rm",
            "/nonexistent",
            "--",
            "true",
        ][..],
    ] {
        let out = burrow(&h, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(json_error_code(&out), "usage", "{args:?}");
    }
    let out = burrow(&h, &["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
    // Nothing was created along the way.
    let out = burrow(&h, &["ls", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}

/// `run [--name N] IMAGE -- CMD` and `create IMAGE --name N` read IMAGE
/// first: with a missing image the library's own check answers (exit 6),
/// whether the image comes as IMAGE or as --image.
#[test]
fn the_image_comes_first() {
    let h = home();
    for args in [
        &["--json", "run", "/nonexistent", "--", "echo", "hi"][..],
        &["--json", "run", "--name", "x", "/nonexistent", "--", "echo"][..],
        &["--json", "run", "/nonexistent", "--name", "x", "--", "echo"][..],
        &[
            "--json",
            "run",
            "--image",
            "/nonexistent",
            "--",
            "echo",
            "hi",
        ][..],
        &["--json", "run", "--rm", "/nonexistent", "--", "echo", "hi"][..],
        &["--json", "create", "/nonexistent", "--name", "worker"][..],
        &["--json", "create", "--name", "worker", "/nonexistent"][..],
        &["--json", "create", "/nonexistent"][..],
        &[
            "--json",
            "create",
            "--image",
            "/nonexistent",
            "--name",
            "worker",
        ][..],
    ] {
        let out = burrow(&h, args);
        assert_eq!(out.status.code(), Some(6), "{args:?}");
        assert_eq!(json_error_code(&out), "invalid_image", "{args:?}");
    }
}

#[test]
fn ps_takes_a_sandbox() {
    let h = home();
    let out = burrow(&h, &["--json", "ps"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    for args in [
        &["--json", "ps", "worker"][..],
        &["--json", "ls", "worker"][..],
    ] {
        let out = burrow(&h, args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert_eq!(json_error_code(&out), "not_found", "{args:?}");
    }
    // A sandbox and a filter at once: refused.
    let out = burrow(&h, &["--json", "ps", "worker", "--status", "running"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_error_code(&out), "usage");
}

/// `--memory` takes sizes with units everywhere (`512M`, `4G`; a bare
/// number is MiB); a bad size is a usage error before anything happens.
#[test]
fn memory_sizes_take_units() {
    let h = home();
    for size in ["4G", "512M", "512m", "1024", "1.5G", "2GiB"] {
        let out = burrow(
            &h,
            &["--json", "modify", "api", "--cpus", "4", "--memory", size],
        );
        assert_eq!(out.status.code(), Some(3), "{size}");
        assert_eq!(json_error_code(&out), "not_found", "{size}");
        let out = burrow(&h, &["--json", "create", "/nonexistent", "--memory", size]);
        assert_eq!(out.status.code(), Some(6), "{size}");
        assert_eq!(json_error_code(&out), "invalid_image", "{size}");
    }
    for size in ["4X", "0", "-1", "1.2.3G", "0.1G", "4 G", "", "lots"] {
        for args in [
            &["--json", "modify", "api", "--memory", size][..],
            &["--json", "create", "/nonexistent", "--memory", size][..],
            &[
                "--json",
                "run",
                "/nonexistent",
                "--memory",
                size,
                "--",
                "true",
            ][..],
            &[
                "--json",
                "up",
                "x",
                "--image",
                "/nonexistent",
                "--memory",
                size,
            ][..],
            &["--json", "image", "warm", "/nonexistent", "--memory", size][..],
        ] {
            let out = burrow(&h, args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert_eq!(json_error_code(&out), "usage", "{args:?}");
        }
    }
    let out = burrow(&h, &["ls", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
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
            "/nonexistent",
            "--name",
            "x",
            "--startup-timeout",
            "soon",
        ][..],
        &[
            "--json",
            "run",
            "--name",
            "x",
            "/nonexistent",
            "--idle-timeout",
            "1y",
            "--",
            "true",
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
