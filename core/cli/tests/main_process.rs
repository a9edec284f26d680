#![allow(clippy::unwrap_used)]
//! A sandbox's main process (`SandboxConfig::command`, `burrow run -d`)
//! against real sandboxes: it starts with the run, its output is in the
//! logs, the run ends when it does (reason `completed`), the image's
//! Entrypoint/Cmd when no command is given, and a typed start failure when
//! the image has none.

use burrow_cli_testkit as common;

use std::time::Duration;

use burrow::image::ImageConfig;
use burrow::internal::image::oci::{write_layout, LayerSpec};
use burrow::{ExitReason, LogOptions, LogSource, SandboxHandle, Status};
use common::{busybox_rootfs, TestHome};
use serde_json::Value;

fn run_d(home: &TestHome, args: &[&str]) -> (Option<i32>, Value) {
    let out = home
        .cli()
        .args(["--json", "run", "-d"])
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v)
}

async fn stdout_of(h: &SandboxHandle) -> Vec<String> {
    let opts = LogOptions::default().sources([LogSource::Stdout]);
    let lines = h.logs(&opts).await.unwrap().collect().await.unwrap();
    lines.into_iter().map(|l| l.text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_ends_with_its_main_process_and_its_output_is_in_the_logs() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let (code, v) = run_d(
        &home,
        &[
            "--name",
            "job",
            &image,
            "--",
            "sh",
            "-c",
            "echo started; sleep 1; echo done",
        ],
    );
    assert_eq!(code, Some(0), "{v}");
    let h = burrow::SandboxHandle::get_in(home.dyn_backend(), "job")
        .await
        .unwrap();
    let info = h.info().await.unwrap();
    assert!(info.detached);
    assert_eq!(info.config.command.as_deref().map(<[String]>::len), Some(3));
    let ended = tokio::time::timeout(
        Duration::from_secs(60),
        h.wait_for_status(&[Status::Stopped, Status::Crashed]),
    )
    .await
    .expect("the run ends with its main process")
    .unwrap();
    assert_eq!(ended.status, Status::Stopped);
    assert_eq!(
        ended.last_run.as_ref().and_then(|r| r.exit_reason),
        Some(ExitReason::Completed)
    );
    assert_eq!(stdout_of(&h).await, ["started", "done"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_command_the_image_entrypoint_and_cmd_run() {
    let home = TestHome::new().await;
    let layout = home.path().join("server-image");
    let config = ImageConfig {
        entrypoint: vec!["sh".into(), "-c".into()],
        cmd: vec!["echo from-image; sleep 60".into()],
        ..Default::default()
    };
    write_layout(
        &layout,
        &[LayerSpec::dir(busybox_rootfs())],
        &config,
        Some("v1"),
    )
    .unwrap();
    let image = format!("oci:{}:v1", layout.display());
    let (code, v) = run_d(&home, &["--name", "server", &image]);
    assert_eq!(code, Some(0), "{v}");
    let h = burrow::SandboxHandle::get_in(home.dyn_backend(), "server")
        .await
        .unwrap();
    let mut lines = Vec::new();
    for _ in 0..200 {
        lines = stdout_of(&h).await;
        if !lines.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lines, ["from-image"]);
    assert_eq!(h.info().await.unwrap().status, Status::Running);
    h.destroy().await.unwrap();

    // An image with nothing to run: a start failure, recorded.
    let rootfs = busybox_rootfs().to_string_lossy().into_owned();
    let (code, v) = run_d(&home, &["--name", "nothing", &rootfs]);
    assert_ne!(code, Some(0), "{v}");
    assert_eq!(v["error"]["code"], "start_failed", "{v}");
    let h = burrow::SandboxHandle::get_in(home.dyn_backend(), "nothing")
        .await
        .unwrap();
    let info = h.info().await.unwrap();
    assert_eq!(info.status, Status::Crashed);
}
