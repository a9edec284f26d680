#![allow(clippy::unwrap_used)]
//! The CLI's text for an error says each thing once: an error either puts
//! its cause in its own message or returns it as its `source()`, never both
//! (thiserror#308), and the CLI prints the chain with
//! `burrow::error::report`. These pin the whole line for a guest error, a
//! startup error of `burrow serve` and a store error (once each of them
//! printed its cause twice). The one place where message text is the
//! subject of a test; everywhere else tests check codes.

use burrow_cli_testkit as common;

use common::{busybox_rootfs, TestHome};

/// `burrow ARGS...` with `BURROW_HOME` set to `home` (no `BURROW_URL`).
fn burrow_in(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::burrow_bin())
        .args(args)
        .env("BURROW_HOME", home)
        .env_remove("BURROW_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// stderr of a failed `burrow` command, after checking its exit code.
fn failure(out: std::process::Output, code: i32) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_error_says_its_cause_once() {
    let home = TestHome::new().await;
    let out = home
        .cli()
        .args(["run"])
        .arg(busybox_rootfs())
        .args(["--", "nosuchprog"])
        .output()
        .unwrap();
    // Exit code 1: a guest error (see `burrow --help`, Exit codes). The
    // progress notes come first; the error is the last line.
    let stderr = failure(out, 1);
    assert_eq!(
        stderr.lines().last().unwrap(),
        "burrow: guest error (not_found) in exec: starting nosuchprog: \
         No such file or directory (os error 2)"
    );
}

#[test]
fn a_startup_error_of_serve_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let home = file.join("home");
    let stderr = failure(burrow_in(&home, &["serve"]), 1);
    assert_eq!(
        stderr.lines().last().unwrap(),
        format!(
            "burrow: burrow serve cannot start: creating the burrow home ({}): \
             Not a directory (os error 20)",
            home.display()
        )
    );
}

#[test]
fn a_store_error_says_its_cause_once() {
    let home = tempfile::Builder::new()
        .prefix("bw")
        .tempdir_in("/tmp")
        .unwrap();
    let db = home.path().join("state.db");
    std::fs::write(&db, vec![b'x'; 4096]).unwrap();
    let stderr = failure(burrow_in(home.path(), &["ls"]), 1);
    assert_eq!(
        stderr,
        format!(
            "burrow: state database error: opening {}: \
             error returned from database: (code: 26) file is not a database\n",
            db.display()
        )
    );
}
