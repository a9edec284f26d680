#![allow(clippy::unwrap_used)]
//! The lifecycle document's CLI lines (`../shared/seeds/001_...txt`,
//! "Lifecycle"; `msb` is `burrow`), each exactly as written, in the
//! document's order, against real sandboxes in a fresh `BURROW_HOME`, with
//! the checks of what the text says happens between them. The image
//! `python` is the busybox demo rootfs imported under that name
//! (`images/named/python`). `core/cli/tests/lifecycle_doc.rs` is the Rust
//! API's counterpart.
//!
//! The image `python` is an OCI layout of the busybox rootfs whose Cmd is a
//! long `sleep` (standing in for python's own), so `burrow run -d python
//! --name worker` has a main process to run.
//!
//! The lines are separate snippets of one page, so the glue between them (a
//! start where a line needs a running sandbox, the `api` sandbox that
//! `modify api` addresses) is the test's, never an edit of a line. Checks
//! are on exit codes and `--json` fields, never on message text.

use burrow_cli_testkit as common;

use std::process::Output;

use common::{busybox_rootfs, TestHome};
use serde_json::Value;

/// `burrow --json ARGS...` in `home`: the exit code and the JSON on stdout.
fn burrow(home: &TestHome, line: &str) -> (i32, Value) {
    let args: Vec<&str> = line.split_whitespace().collect();
    burrow_args(home, &args)
}

fn burrow_args(home: &TestHome, args: &[&str]) -> (i32, Value) {
    let out = home.cli().arg("--json").args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), json_of(args, &out))
}

fn json_of(args: &[&str], out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "burrow {args:?}: stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs one line of the document (`burrow` + the line) and expects it to
/// succeed; returns its JSON.
fn line(home: &TestHome, text: &str) -> Value {
    let (code, v) = burrow(home, text);
    assert_eq!(code, 0, "burrow {text}: {v}");
    v
}

/// `burrow ps NAME`: the one sandbox's snapshot.
fn ps(home: &TestHome, name: &str) -> Value {
    let v = line(home, &format!("ps {name}"));
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    list[0].clone()
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// A fresh home whose imported image `python` is an OCI layout of the
/// busybox demo rootfs with a Cmd (a long sleep).
async fn home_with_python() -> TestHome {
    let home = TestHome::new().await;
    let named = home.path().join("images/named");
    std::fs::create_dir_all(&named).unwrap();
    let config = burrow::image::ImageConfig {
        cmd: vec!["sleep".into(), "3600".into()],
        ..Default::default()
    };
    burrow::internal::image::oci::write_layout(
        named.join("python"),
        &[burrow::internal::image::oci::LayerSpec::dir(
            busybox_rootfs(),
        )],
        &config,
        Some("latest"),
    )
    .unwrap();
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_line_of_the_lifecycle_document_runs_as_written() {
    let home = home_with_python().await;

    // ---- Create a sandbox
    // Attached: the sandbox is defined, and no runtime outlives this
    // command (burrow's `create` starts nothing).
    let v = line(&home, "create python --name worker");
    assert_eq!(str_of(&v, "name"), "worker");
    assert_eq!(str_of(&v, "status"), "created");
    assert_eq!(v["detached"], false);
    // Glue: the name is free again for the next line.
    line(&home, "rm worker");

    // Detached: the image's Cmd as the main process, in the background.
    let v = line(&home, "run -d python --name worker");
    let id = str_of(&v, "id").to_owned();
    let v = ps(&home, "worker");
    assert_eq!(
        (str_of(&v, "status"), &v["detached"]),
        ("running", &true.into())
    );

    // ---- Stop and restart
    let v = line(&home, "stop worker");
    assert_eq!(str_of(&v, "status"), "stopped");
    assert_eq!(str_of(&ps(&home, "worker"), "status"), "stopped");

    // Later, resume where you left off: the same sandbox.
    let v = line(&home, "start worker");
    assert_eq!((str_of(&v, "id"), str_of(&v, "status")), (&*id, "running"));

    // Or stop and start in one command: same id, a new runtime.
    let before = ps(&home, "worker")["generation"].as_u64().unwrap();
    let v = line(&home, "restart worker");
    assert_eq!((str_of(&v, "id"), str_of(&v, "status")), (&*id, "running"));
    assert!(v["generation"].as_u64().unwrap() > before, "{v}");
    // "If the sandbox is already stopped or crashed, it starts it directly."
    line(&home, "stop worker");
    let v = line(&home, "restart worker");
    assert_eq!((str_of(&v, "id"), str_of(&v, "status")), (&*id, "running"));

    // ---- Configuration (glue: the `api` sandbox the line changes, running)
    line(&home, "create python --name api");
    line(&home, "start api");
    let plan = line(&home, "modify api --cpus 4 --memory 4G");
    let fields: Vec<&str> = plan["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"cpus") && fields.contains(&"memory_mb"),
        "{plan}"
    );
    let config = &line(&home, "inspect api")["config"];
    assert_eq!(config["cpus"], 4.0, "{config}");
    assert_eq!(config["memory_mb"], 4096, "4G is 4096 MiB: {config}");

    // ---- Ping and touch
    let v = line(&home, "ping worker");
    assert_eq!(
        (str_of(&v, "name"), v["touched"].as_bool()),
        ("worker", Some(false))
    );
    assert!(v["latency_ms"].as_f64().unwrap() > 0.0, "{v}");
    let v = line(&home, "touch worker");
    assert_eq!(v["touched"], true);

    // Health check and then keep alive if reachable
    let v = line(&home, "ping worker --touch");
    assert_eq!(v["touched"], true);
    assert!(v["latency_ms"].as_f64().unwrap() > 0.0, "{v}");

    // ---- Kill immediately: no runtime is left.
    let v = line(&home, "stop --force worker");
    assert_eq!(str_of(&v, "id"), id);
    let status = str_of(&ps(&home, "worker"), "status").to_owned();
    assert!(["stopped", "crashed"].contains(&&*status), "{status}");
    // Ping is a health check only: it never starts the sandbox.
    let (code, v) = burrow(&home, "ping worker");
    assert_eq!((code, str_of(&v["error"], "code")), (5, "invalid_state"));
    assert_eq!(str_of(&ps(&home, "worker"), "status"), status);

    // ---- Remove (a stopped sandbox)
    let v = line(&home, "rm worker");
    assert_eq!(v["removed"][0]["name"], "worker");
    assert_eq!(v["removed"][0]["id"], id.as_str());
    let (code, v) = burrow(&home, "ps worker");
    assert_eq!((code, str_of(&v["error"], "code")), (3, "not_found"));

    // ---- List and inspect (glue: `worker` again, running, and `api`
    // stopped): recreating the name gives a new id.
    let v = line(&home, "create python --name worker");
    let new_id = str_of(&v, "id").to_owned();
    assert_ne!(new_id, id);
    line(&home, "start worker");
    line(&home, "stop api");

    let v = line(&home, "ls");
    let listed: Vec<(&str, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (str_of(s, "name"), str_of(s, "status")))
        .collect();
    assert_eq!(listed, [("api", "stopped"), ("worker", "running")], "{v}");
    let sb = ps(&home, "worker");
    assert_eq!(
        (
            str_of(&sb, "name"),
            str_of(&sb, "id"),
            str_of(&sb, "status")
        ),
        ("worker", &*new_id, "running")
    );

    // Glue: nothing is left running.
    line(&home, "rm --force worker api");
    assert_eq!(line(&home, "ls"), serde_json::json!([]));
}

/// `run [--name N] IMAGE -- CMD`, docker style: the command's output and
/// exit code, a generated name when none is given, and the sandbox removed
/// afterwards unless `--keep`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_the_image_then_the_command() {
    let home = home_with_python().await;

    // The command's own output and exit code; a generated, valid name.
    let script = "echo out; echo err >&2; exit 3";
    let (code, v) = burrow_args(&home, &["run", "python", "--", "sh", "-c", script]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(
        (str_of(&v, "stdout"), str_of(&v, "stderr")),
        ("out\n", "err\n")
    );
    let name = str_of(&v, "name");
    let parts: Vec<&str> = name.split('-').collect();
    assert_eq!(parts.len(), 3, "adjective-animal-NNNN: {name}");
    assert!(
        parts[2].len() == 4 && parts[2].bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    // ... and the sandbox is gone afterwards.
    assert_eq!(line(&home, "ls"), serde_json::json!([]));

    // `--image` names the image too, and what follows `--` is the command
    // (not a sandbox name): two runs, two names.
    let (code, v) = burrow(&home, "run --image python -- echo hi");
    assert_eq!((code, str_of(&v, "stdout")), (0, "hi\n"), "{v}");
    assert_ne!(str_of(&v, "name"), "echo");
    let (_, w) = burrow(&home, "run --rm python -- echo hi");
    assert_ne!(str_of(&v, "name"), str_of(&w, "name"));

    // Without --json the output is the command's, as is.
    let out = home
        .cli()
        .args(["run", "python", "--", "echo", "plain"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain\n");

    // --name and --keep: the sandbox is kept, stopped, with its
    // configuration (a size with a unit).
    let v = line(&home, "run --name once --keep --memory 256M python -- true");
    assert_eq!(str_of(&v, "name"), "once");
    let sb = ps(&home, "once");
    assert_eq!(str_of(&sb, "status"), "stopped");
    assert_eq!(sb["config"]["memory_mb"], 256);
    // The name is taken now: a typed error, and the kept one stays.
    let (code, v) = burrow(&home, "run --name once python -- true");
    assert_eq!((code, str_of(&v["error"], "code")), (4, "already_exists"));
    assert_eq!(str_of(&ps(&home, "once"), "id"), str_of(&sb, "id"));
    line(&home, "rm once");

    // A generated name is given by `create` too.
    let v = line(&home, "create python");
    let name = str_of(&v, "name").to_owned();
    assert_eq!(name.split('-').count(), 3, "{name}");
    assert_eq!(str_of(&ps(&home, &name), "status"), "created");
    line(&home, &format!("rm {name}"));
}
