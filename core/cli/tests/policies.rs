#![allow(clippy::unwrap_used)]
//! Lifecycle policies against real sandboxes: drain, idle reclaim, touch,
//! demand start across processes, start failures, max duration, pause and
//! resume, modify.

use burrow_cli_testkit as common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use burrow::image::ImageConfig;
use burrow::internal::fault::{Fault, FAULT_ENV};
use burrow::internal::image::oci::{write_layout, LayerSpec};
use burrow::{
    Applies, Backend, ErrorCode, ExecOptions, ExitReason, Modify, Sandbox, SandboxHandle, Status,
};
use common::{busybox_rootfs, TestHome};

fn reason(info: &burrow::SandboxInfo) -> Option<ExitReason> {
    info.last_run.as_ref().and_then(|r| r.exit_reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_in_flight_work_and_refuses_new_work() {
    let home = TestHome::new().await;
    let sb = home.builder("drain").create().await.unwrap();
    let long = sb
        .spawn(ExecOptions::new(["sh", "-c", "sleep 3; echo finished"]))
        .await
        .unwrap();
    long.close_stdin().await.unwrap();
    let t = Instant::now();
    let info = sb.request_drain().await.unwrap();
    assert_eq!(info.status, Status::Draining);

    let err = sb.exec(["true"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert_eq!(err.status(), Some(Status::Draining));
    let err = sb.fs().read("/etc/motd").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    let err = sb.handle().connect_or_start().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);

    let out = long.wait().await.unwrap();
    assert_eq!(
        out.stdout_str(),
        "finished\n",
        "in-flight output is delivered in full"
    );
    assert_eq!(out.status.code, Some(0));
    let end = sb.wait_until_stopped().await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "the drain waited for the command"
    );
    assert_eq!(end.status, Status::Stopped);
    assert_eq!(reason(&end), Some(ExitReason::Drain));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_does_not_keep_it_alive_touch_does_and_commands_are_never_cut() {
    let home = TestHome::new().await;
    let idle = Duration::from_secs(2);

    // Pinged, and reclaimed anyway (the supervisor's unit tests ping
    // through the whole timeout under a paused clock).
    let pinged = home
        .builder("pinged")
        .idle_timeout(idle)
        .create()
        .await
        .unwrap();
    pinged.ping().await.unwrap();
    let info = tokio::time::timeout(
        Duration::from_secs(60),
        pinged.handle().wait_for_status(&[Status::Stopped]),
    )
    .await
    .expect("reclaimed within a minute")
    .unwrap();
    assert_eq!(reason(&info), Some(ExitReason::IdleTimeout));
    // A ping never wakes a reclaimed sandbox.
    assert_eq!(
        pinged.ping().await.unwrap_err().code(),
        ErrorCode::InvalidState
    );
    assert_eq!(pinged.status().await.unwrap(), Status::Stopped);

    // Touches for 3x the idle timeout: kept alive.
    let touched = home
        .builder("touched")
        .idle_timeout(idle)
        .create()
        .await
        .unwrap();
    let generation = touched.generation();
    let t = Instant::now();
    while t.elapsed() < idle * 3 {
        touched.touch().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let info = touched.info().await.unwrap();
    assert_eq!(info.status, Status::Running, "touch is activity");
    assert_eq!(info.generation, generation);

    // A silent command longer than the idle timeout is never interrupted.
    let out = touched
        .exec(["sh", "-c", "sleep 5; echo survived"])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "survived\n");
    assert_eq!(touched.info().await.unwrap().generation, generation);
    touched.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_idle_timeout_disables_the_reaper_and_says_so_once() {
    let home = TestHome::new().await;
    let sb = home
        .builder("zero")
        .idle_timeout(Duration::ZERO)
        .create()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sb.status().await.unwrap(), Status::Running);
    let log = std::fs::read_to_string(
        home.path()
            .join("sandboxes")
            .join(sb.id().as_str())
            .join("logs/supervisor.log"),
    )
    .unwrap();
    assert_eq!(
        log.matches("idle reaper disabled by explicit zero timeout")
            .count(),
        1
    );
    sb.destroy().await.unwrap();
}

/// Child process body of `demand_start_converges_across_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process body, run by demand_start_converges_across_processes"]
async fn demand_child() {
    let home = std::env::var("DEMAND_CHILD_HOME")
        .expect("run only as a child of demand_start_converges_across_processes");
    let name = std::env::var("DEMAND_CHILD_NAME").unwrap();
    common::init_env();
    let backend = std::sync::Arc::new(burrow::LocalBackend::open_at(&home).await.unwrap());
    let handle = SandboxHandle::get_in(backend, &name).await.unwrap();
    let sb = handle.sandbox().await.unwrap();
    let calls = (0..4).map(|i| {
        let sb = sb.clone();
        async move { sb.exec(["sh", "-c", &format!("echo call-{i}")]).await }
    });
    for (i, r) in futures_join_all(calls).await.into_iter().enumerate() {
        let out = r.expect("demand-started exec");
        assert_eq!(out.stdout_str(), format!("call-{i}\n"));
    }
    println!("CHILD_OK");
}

async fn futures_join_all<F>(fs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_start_converges_across_processes() {
    let home = TestHome::new().await;
    let sb = home
        .builder("demand")
        .idle_timeout(Duration::from_secs(1))
        .detached(true)
        .create()
        .await
        .unwrap();
    let first = sb.info().await.unwrap();
    let reclaimed = tokio::time::timeout(
        Duration::from_secs(20),
        sb.handle().wait_for_status(&[Status::Stopped]),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reason(&reclaimed), Some(ExitReason::IdleTimeout));

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "demand_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("DEMAND_CHILD_HOME", home.path())
                .env("DEMAND_CHILD_NAME", "demand")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("CHILD_OK"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = sb.info().await.unwrap();
    assert_eq!(after.id, first.id, "same id");
    assert_eq!(after.config, first.config, "same configuration");
    assert_eq!(
        after.generation,
        first.generation + 1,
        "exactly one new runtime generation for 16 calls"
    );
    assert_eq!(after.status, Status::Running);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_start_is_recorded_cleaned_up_and_retried_cleanly() {
    let home = TestHome::new().await;
    // An image whose configured user does not exist: its entry cannot run.
    let layout = home.path().join("bad-image");
    let rootfs = busybox_rootfs();
    let config = ImageConfig {
        user: Some("ghost".into()),
        ..Default::default()
    };
    write_layout(&layout, &[LayerSpec::dir(&rootfs)], &config, Some("v1")).unwrap();
    let image = format!("oci:{}:v1", layout.display());
    let handle = Sandbox::builder("failing")
        .image(&image)
        .backend(home.dyn_backend())
        .define()
        .await
        .unwrap();
    for attempt in 0..2 {
        let err = handle.start().await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::StartFailed, "attempt {attempt}");
        let info = handle.info().await.unwrap();
        assert_eq!(info.status, Status::Crashed);
        assert_eq!(reason(&info), Some(ExitReason::StartFailed));
        assert!(
            info.last_run.unwrap().detail.is_some(),
            "the reason is recorded"
        );
        let ok = common::eventually(Duration::from_secs(10), || {
            common::supervisors_of(&home.path().to_string_lossy()).is_empty()
        })
        .await;
        assert!(ok, "nothing left running");
    }
    handle.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_timeout_exceeded_is_crashed_and_cleaned_up() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let out = home
        .cli()
        .args([
            "--json",
            "up",
            "slow",
            "--image",
            &image,
            "--startup-timeout",
            // Long enough for the retry below to start within it on a
            // loaded machine (a container's retry first removes the stale
            // container, about a second under a CPU hog), and for a VM under
            // TCG to boot.
            if common::is_vm() { "8s" } else { "5s" },
        ])
        .env(FAULT_ENV, Fault::SupervisorAfterLaunch.as_str())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "start_failed");
    let info = home.backend.get("slow").await.unwrap();
    assert_eq!(info.status, Status::Crashed);
    assert_eq!(reason(&info), Some(ExitReason::StartFailed));
    let ok = common::eventually(Duration::from_secs(10), || {
        common::supervisors_of(&home.path().to_string_lossy()).is_empty()
    })
    .await;
    assert!(ok, "the stuck supervisor was killed");
    // The next call retries cleanly (without the fault).
    let sb = SandboxHandle::get_in(home.dyn_backend(), "slow")
        .await
        .unwrap()
        .connect_or_start()
        .await
        .unwrap();
    assert_eq!(sb.exec(["echo", "ok"]).await.unwrap().stdout_str(), "ok\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_duration_stops_the_run() {
    let home = TestHome::new().await;
    let sb = home
        .builder("bounded")
        .max_duration(Duration::from_secs(2))
        .create()
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(15), sb.wait_until_stopped())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end.status, Status::Stopped);
    assert_eq!(reason(&end), Some(ExitReason::MaxDuration));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume() {
    let home = TestHome::new().await;
    let sb = home.builder("pausing").create().await.unwrap();
    if common::is_rootless() && !common::is_vm() && !common::enforceable().memory {
        // No delegated cgroup to freeze in: a typed refusal, and the
        // sandbox runs on untouched.
        let err = sb.pause().await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Unsupported);
        assert_eq!(sb.status().await.unwrap(), Status::Running);
        assert_eq!(sb.exec(["echo", "on"]).await.unwrap().stdout_str(), "on\n");
        sb.destroy().await.unwrap();
        return;
    }
    let info = sb.pause().await.unwrap();
    assert_eq!(info.status, Status::Paused);
    let err = sb.exec(["true"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert_eq!(err.status(), Some(Status::Paused));
    assert_eq!(
        sb.handle().connect_or_start().await.unwrap_err().code(),
        ErrorCode::InvalidState
    );
    let info = sb.resume().await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(
        sb.exec(["echo", "back"]).await.unwrap().stdout_str(),
        "back\n"
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_lands_where_the_plan_says() {
    let home = TestHome::new().await;
    if !common::enforceable().memory {
        limits_are_refused_unless_best_effort(&home).await;
        return;
    }
    let sb = home.builder("mod").memory_mb(256).create().await.unwrap();
    let changes = {
        let mut m = Modify::default();
        m.cpus = Some(Some(0.5));
        m.memory_mb = Some(Some(128));
        m.env_set = [("FOO".to_string(), "bar".to_string())].into();
        m.labels_set = [("tier".to_string(), "gold".to_string())].into();
        m.idle_timeout = Some(Some(Duration::from_secs(3600)));
        m.max_duration = Some(Some(Duration::from_secs(7200)));
        m
    };
    let plan = sb.modify_with(&changes).await.unwrap();
    let applies = |f: &str| {
        plan.changes
            .iter()
            .find(|c| c.field == f)
            .map(|c| c.applies)
    };
    // A VM's vCPUs and memory are fixed while its QEMU runs.
    let resources = if common::is_vm() {
        Applies::NextStart
    } else {
        Applies::Live
    };
    assert_eq!(applies("cpus"), Some(resources));
    assert_eq!(applies("memory_mb"), Some(resources));
    assert_eq!(applies("env"), Some(Applies::FutureExecs));
    assert_eq!(applies("labels"), Some(Applies::Immediately));
    assert_eq!(applies("idle_timeout"), Some(Applies::Live));
    assert_eq!(applies("max_duration"), Some(Applies::Live));
    // Live (container): the memory cgroup limit changed; a VM keeps its
    // memory until the next start.
    let m = sb.metrics().await.unwrap();
    let live_limit = if common::is_vm() { 256 } else { 128 };
    assert_eq!(m.memory_limit_bytes, Some(live_limit * 1024 * 1024));
    // Future execs see the new environment.
    assert_eq!(
        sb.exec(["sh", "-c", "echo $FOO"])
            .await
            .unwrap()
            .stdout_str(),
        "bar\n"
    );
    // Labels at once.
    let filter = burrow::ListFilter::default().label("tier", "gold");
    assert_eq!(home.backend.list(&filter).await.unwrap().len(), 1);
    assert_eq!(plan.info.config.cpus, Some(0.5));

    // On a stopped sandbox everything but labels waits for the next start.
    sb.stop().await.unwrap();
    let later = {
        let mut m = Modify::default();
        m.env_set = [("LATER".to_string(), "yes".to_string())].into();
        m.memory_mb = Some(Some(96));
        m
    };
    let plan = sb.modify_with(&later).await.unwrap();
    assert!(
        plan.changes.iter().all(|c| c.applies == Applies::NextStart),
        "{plan:?}"
    );
    let sb = sb.handle().start().await.unwrap();
    assert_eq!(
        sb.exec(["sh", "-c", "echo $LATER"])
            .await
            .unwrap()
            .stdout_str(),
        "yes\n"
    );
    assert_eq!(
        sb.metrics().await.unwrap().memory_limit_bytes,
        Some(96 * 1024 * 1024)
    );
    if common::is_vm() {
        // The guest kernel sees the new memory size (minus what it keeps).
        let out = sb
            .exec(["grep", "MemTotal", "/proc/meminfo"])
            .await
            .unwrap();
        let kib: u64 = out
            .stdout_str()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!((60 * 1024..=96 * 1024).contains(&kib), "{kib} KiB");
    }

    // Bad values are refused and change nothing.
    let err = sb
        .modify_with(&{
            let mut m = Modify::default();
            m.cpus = Some(Some(-1.0));
            m
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    assert_eq!(sb.info().await.unwrap().config.cpus, Some(0.5));
    sb.destroy().await.unwrap();
}

/// Where limits cannot be enforced (an unprivileged user without a
/// delegated cgroup): a limit asked for is a typed refusal that changes
/// nothing, at create and at modify, unless the caller says best effort.
async fn limits_are_refused_unless_best_effort(home: &TestHome) {
    let err = home
        .builder("limited")
        .memory_mb(256)
        .create()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let gone = home.backend.get("limited").await.unwrap_err();
    assert_eq!(gone.code(), ErrorCode::NotFound);
    let sb = home.builder("plain").create().await.unwrap();
    let mut m = Modify::default();
    m.memory_mb = Some(Some(128));
    let err = sb.modify_with(&m).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    assert_eq!(sb.info().await.unwrap().config.memory_mb, None);
    sb.destroy().await.unwrap();
    // Best effort: it runs, without the limit.
    let sb = home
        .builder("best-effort")
        .memory_mb(256)
        .pids_limit(64)
        .best_effort_limits(true)
        .create()
        .await
        .unwrap();
    assert_eq!(
        sb.exec(["echo", "ran"]).await.unwrap().stdout_str(),
        "ran\n"
    );
    assert_eq!(sb.metrics().await.unwrap().memory_limit_bytes, None);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_snapshot_and_stream() {
    let home = TestHome::new().await;
    let limited = common::enforceable().memory;
    let mut builder = home.builder("metered");
    if limited {
        builder = builder.memory_mb(64);
    }
    let sb = builder.create().await.unwrap();
    sb.exec([
        "sh",
        "-c",
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
    ])
    .await
    .unwrap();
    let m = sb.metrics().await.unwrap();
    assert!(m.cpu_usage_ns.unwrap() > 0);
    assert!(m.memory_bytes.unwrap() > 0);
    let limit = limited.then_some(64 * 1024 * 1024);
    assert_eq!(m.memory_limit_bytes, limit);
    if common::is_vm() {
        // The host cannot count a VM's processes.
        assert_eq!(m.pids, None);
    } else {
        assert!(m.pids.unwrap() >= 1);
    }
    let mut stream = sb.metrics_stream(Duration::from_millis(200));
    for _ in 0..2 {
        assert!(stream.recv().await.unwrap().is_ok());
    }
    sb.stop().await.unwrap();
    let err = sb.metrics().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_start_can_be_switched_off_per_sandbox() {
    let home = TestHome::new().await;
    let mut config = burrow::SandboxConfig::new(busybox_rootfs().to_string_lossy().into_owned());
    config.idle_timeout = Some(Duration::from_secs(1));
    config.demand_start = Some(false);
    let sb = Sandbox::builder("no-demand")
        .config(config)
        .backend(home.dyn_backend())
        .create()
        .await
        .unwrap();
    let reclaimed = tokio::time::timeout(
        Duration::from_secs(20),
        sb.handle().wait_for_status(&[Status::Stopped]),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reason(&reclaimed), Some(ExitReason::IdleTimeout));
    let err = sb.exec(["true"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, Status::Stopped);
    assert_eq!(info.generation, reclaimed.generation, "no start happened");
}

/// A container sandbox that names no limits gets the host's defaults
/// (recorded, and held: its cgroup says so), where the host can enforce
/// them; one that asks for none gets none; a microVM keeps its own memory
/// and vCPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_names_no_limits_gets_the_defaults() {
    let home = TestHome::new().await;
    let can = common::enforceable();
    let built_in = burrow::DefaultLimits::BUILT_IN;
    let sb = home.builder("defaulted").create().await.unwrap();
    let config = sb.info().await.unwrap().config;
    let metrics = sb.metrics().await.unwrap();
    if common::is_vm() {
        // Not the host's defaults: the guest's own memory and vCPUs.
        assert_eq!((config.memory_mb, config.cpus), (None, None));
        assert_eq!(
            metrics.memory_limit_bytes,
            Some(burrow::internal::driver::vm::DEFAULT_MEMORY_MB << 20)
        );
    } else {
        assert_eq!(config.memory_mb, built_in.memory_mb.filter(|_| can.memory));
        assert_eq!(config.cpus, built_in.cpus.filter(|_| can.cpus));
        assert_eq!(config.pids_limit, built_in.pids_limit.filter(|_| can.pids));
        assert_eq!(
            metrics.memory_limit_bytes,
            built_in.memory_mb.map(|m| m << 20).filter(|_| can.memory)
        );
    }
    // The disk's default, wherever the driver sizes its writable layer.
    assert_eq!(config.disk_mb, built_in.disk_mb.filter(|_| can.disk));
    assert_eq!(
        metrics.disk_limit_bytes,
        built_in.disk_mb.map(|m| m << 20).filter(|_| can.disk)
    );
    sb.destroy().await.unwrap();

    // Without defaults: nothing recorded, nothing held.
    let sb = home
        .builder("unlimited")
        .default_limits(false)
        .create()
        .await
        .unwrap();
    let config = sb.info().await.unwrap().config;
    assert_eq!(
        (
            config.memory_mb,
            config.cpus,
            config.pids_limit,
            config.disk_mb
        ),
        (None, None, None, None)
    );
    if !common::is_vm() {
        assert_eq!(sb.metrics().await.unwrap().memory_limit_bytes, None);
    }
    sb.destroy().await.unwrap();

    // A limit removed gets its default back.
    if can.memory && !common::is_vm() {
        let sb = home
            .builder("removed")
            .memory_mb(256)
            .create()
            .await
            .unwrap();
        let mut m = Modify::default();
        m.memory_mb = Some(None);
        sb.modify_with(&m).await.unwrap();
        assert_eq!(
            sb.info().await.unwrap().config.memory_mb,
            built_in.memory_mb
        );
        sb.destroy().await.unwrap();
    }
}

/// A disk limit the driver cannot hold here is refused naming it and
/// changes nothing, unless asked for as best effort (then it is kept in
/// the configuration, and not held); where the driver holds it, the
/// metrics show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_limit_is_held_or_refused_naming_it() {
    let home = TestHome::new().await;
    let asked = home.builder("disk").disk_mb(64).create().await;
    if common::enforceable().disk {
        let sb = asked.unwrap();
        common::fill_past_disk_limit(&sb, 64).await;
        // Kept across runs, and read on the host while stopped.
        sb.exec(["sh", "-c", "echo kept > /kept"]).await.unwrap();
        sb.stop().await.unwrap();
        let handle = sb.handle();
        let snap = handle.snapshot("disk-snap").await.unwrap();
        let from_snap = home
            .builder("from-snap")
            .image(format!("snapshot:{}", snap.name))
            .create()
            .await
            .unwrap();
        assert_eq!(
            from_snap.exec(["cat", "/kept"]).await.unwrap().stdout_str(),
            "kept\n"
        );
        from_snap.destroy().await.unwrap();
        let mut sb = handle.start().await.unwrap();
        // Quick restarts: each start finds the device the run before let
        // go (autoclear detaches it a moment after the last unmount).
        for _ in 0..10 {
            sb.stop().await.unwrap();
            sb = handle.start().await.unwrap();
            assert_eq!(
                sb.exec(["cat", "/kept"]).await.unwrap().stdout_str(),
                "kept\n"
            );
        }
        // A copy has a disk of the same size, with the parent's files.
        let copies = sb
            .fork(&burrow::ForkOptions::named(["disk-copy"]))
            .await
            .unwrap();
        assert_eq!(
            sb.exec(["cat", "/kept"]).await.unwrap().stdout_str(),
            "kept\n"
        );
        assert_eq!(sb.metrics().await.unwrap().disk_limit_bytes, Some(64 << 20));
        let copy = &copies[0];
        assert_eq!(
            copy.exec(["cat", "/kept"]).await.unwrap().stdout_str(),
            "kept\n"
        );
        assert_eq!(
            copy.metrics().await.unwrap().disk_limit_bytes,
            Some(64 << 20)
        );
        copy.destroy().await.unwrap();
        sb.destroy().await.unwrap();
        return;
    }
    match asked.unwrap_err() {
        burrow::Error::InvalidConfig { field, .. } => assert_eq!(field, "disk_mb"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        home.backend.get("disk").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let sb = home
        .builder("disk")
        .disk_mb(64)
        .best_effort_limits(true)
        .create()
        .await
        .unwrap();
    assert_eq!(sb.info().await.unwrap().config.disk_mb, Some(64));
    assert_eq!(sb.metrics().await.unwrap().disk_limit_bytes, None);
    sb.destroy().await.unwrap();
}
