#![allow(clippy::unwrap_used)]
//! The lifecycle document's Rust samples (`../shared/seeds/001_...txt`,
//! "Lifecycle"), each exactly as written, in the document's order, against
//! real sandboxes of the default backend (the local one of `$BURROW_HOME`),
//! with the checks of what the text says happens between them. The image
//! `python` is the busybox demo rootfs imported under that name.
//!
//! The samples are separate snippets of one page, so the glue between them
//! (a `destroy` of the previous `worker`, a start where a sample needs a
//! running sandbox) is the test's, never an edit of a sample.

use burrow_cli_testkit as common;

use std::time::Duration;

use burrow::{ErrorCode, Sandbox, Status};
use common::{busybox_rootfs, init_env};

type R = Result<(), Box<dyn std::error::Error>>;

/// Removes whatever `worker` is now (glue between samples).
async fn gone(name: &str) {
    if let Ok(h) = Sandbox::get(name).await {
        h.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rust_sample_of_the_lifecycle_document_runs_as_written() -> R {
    init_env();
    let home = tempfile::Builder::new().prefix("bd").tempdir_in("/tmp")?;
    std::fs::create_dir_all(home.path().join("images/named"))?;
    std::os::unix::fs::symlink(busybox_rootfs(), home.path().join("images/named/python"))?;
    // SAFETY (edition 2021 API): set before the first call of this test
    // binary's only test reads it.
    std::env::set_var("BURROW_HOME", home.path());
    std::env::remove_var("BURROW_URL");
    let _cleanup = Cleanup(home.path().to_owned());

    // ---- Create a sandbox
    {
        // Local attached handle: sandbox stops when your process exits
        let sb = Sandbox::builder("worker").image("python").create().await?;

        let info = sb.info().await?;
        assert_eq!((info.status, info.detached), (Status::Running, false));
    }
    gone("worker").await;
    let (detached_id, detached_memory) = {
        // Detached: sandbox survives after your process exits
        let sb = Sandbox::builder("worker")
            .image("python")
            .detached(true)
            .create()
            .await?;

        let info = sb.info().await?;
        assert_eq!((info.status, info.detached), (Status::Running, true));
        // It names no memory: the host's default, where it can hold one.
        (sb.id().clone(), info.config.memory_mb)
    };

    // ---- Converge on a named sandbox: the running detached `worker`
    // is connected to, its own configuration winning over `.memory(1024)`.
    {
        let sb = Sandbox::builder("worker")
            .image("python")
            .memory(1024)
            .connect_or_create()
            .await?;

        assert_eq!(sb.id(), &detached_id);
        assert_eq!(sb.info().await?.config.memory_mb, detached_memory);
        assert_ne!(detached_memory, Some(1024));
    }
    {
        let handle = Sandbox::get("worker").await?;
        let sb = handle.connect_or_start().await?;

        assert_eq!(sb.id(), &detached_id);
    }
    // When the name is missing, the same sample creates, with the memory.
    gone("worker").await;
    {
        let sb = Sandbox::builder("worker")
            .image("python")
            .memory(1024)
            .connect_or_create()
            .await?;

        assert_eq!(sb.info().await?.config.memory_mb, Some(1024));
    }

    // ---- Stop and restart
    let sb = Sandbox::get("worker").await?.connect().await?;
    let id = sb.id().clone();
    {
        sb.stop().await?;

        assert_eq!(
            Sandbox::get("worker").await?.status_snapshot(),
            Status::Stopped
        );
        let sb = Sandbox::start("worker").await?;

        assert_eq!(sb.id(), &id, "the same sandbox, started again");
        assert_eq!(sb.status().await?, Status::Running);
    }
    let sb = Sandbox::get("worker").await?.connect().await?;

    // ---- Configuration
    {
        let plan = sb.modify().cpus(4).memory(4096).apply().await?;

        let fields: Vec<&str> = plan.changes.iter().map(|c| c.field.as_str()).collect();
        assert!(
            fields.contains(&"cpus") && fields.contains(&"memory_mb"),
            "{fields:?}"
        );
        assert_eq!(plan.info.config.cpus, Some(4.0));
        assert_eq!(plan.info.config.memory_mb, Some(4096));
    }

    // ---- Ping and touch
    {
        let ping = sb.ping().await?;
        println!("agent reachable in {:?}", ping.latency);

        sb.touch().await?;

        assert!(ping.latency > Duration::ZERO);
    }

    // ---- Kill immediately
    {
        sb.kill().await?;

        assert!(!sb.status().await?.has_runtime());
    }
    let sb = Sandbox::start("worker").await?;

    // ---- Detach (the document writes it without `?`: the Result is
    // unused, which this workspace's lints deny)
    #[allow(unused_must_use)]
    {
        sb.detach().await;
    }
    assert!(sb.info().await?.detached);

    // ---- Request drain, then wait until stopped
    {
        sb.request_drain().await?;
    }
    {
        let result = sb.wait_until_stopped().await?;

        assert_eq!(result.status, Status::Stopped);
    }

    // ---- Destroy
    let sb = Sandbox::start("worker").await?;
    {
        sb.destroy().await?;
    }
    let e = Sandbox::get("worker").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);

    // ---- Remove (a stopped sandbox): "Snapshots created from the
    // sandbox" are kept.
    let sb = Sandbox::builder("worker").image("python").create().await?;
    sb.exec(["sh", "-c", "echo before-remove > /kept"]).await?;
    sb.stop().await?;
    Sandbox::get("worker")
        .await?
        .snapshot("worker-files")
        .await?;
    {
        Sandbox::remove("worker").await?;
    }
    let e = Sandbox::get("worker").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    let kept = Sandbox::builder("from-snapshot")
        .image("snapshot:worker-files")
        .create()
        .await?;
    let out = kept.exec(["cat", "/kept"]).await?;
    assert_eq!(out.stdout_str(), "before-remove\n");
    kept.destroy().await?;
    burrow::default_backend()
        .await?
        .remove_snapshot("worker-files")
        .await?;

    // ---- List and inspect: one running, one stopped.
    Sandbox::builder("worker").image("python").create().await?;
    Sandbox::builder("idle")
        .image("python")
        .create()
        .await?
        .stop()
        .await?;
    {
        for handle in Sandbox::list().await?.sandboxes {
            println!("{}: {:?}", handle.name(), handle.status_snapshot());
        }
    }
    let listed: Vec<(String, Status)> = Sandbox::list()
        .await?
        .sandboxes
        .iter()
        .map(|h| (h.name().to_owned(), h.status_snapshot()))
        .collect();
    assert!(
        listed.contains(&("worker".into(), Status::Running)),
        "{listed:?}"
    );
    assert!(
        listed.contains(&("idle".into(), Status::Stopped)),
        "{listed:?}"
    );
    gone("worker").await;

    // ---- Sandbox process policies: plain numbers are seconds.
    {
        let sb = Sandbox::builder("worker")
            .image("python")
            .max_duration(3600)
            .idle_timeout(300)
            .create()
            .await?;

        let config = sb.info().await?.config;
        assert_eq!(config.max_duration, Some(Duration::from_secs(3600)));
        assert_eq!(config.idle_timeout, Some(Duration::from_secs(300)));
    }
    // A negative number of seconds is a typed error, and nothing is made.
    gone("worker").await;
    let e = Sandbox::builder("worker")
        .image("python")
        .idle_timeout(-5)
        .create()
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert_eq!(
        Sandbox::get("worker").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    Ok(())
}

/// Stops every supervisor of the home when the test ends, pass or fail.
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        common::kill_supervisors_of(&self.0);
        if std::thread::panicking() {
            common::dump_logs(&self.0);
        }
    }
}
