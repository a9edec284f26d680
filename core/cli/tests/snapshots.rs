#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Filesystem snapshots of real sandboxes: what a sandbox changed (files
//! written, deleted, directories replaced) is in the snapshot's image and
//! in every sandbox created from `snapshot:NAME`; a running sandbox is
//! frozen for the copy (a writer's fsync'd lines are there whole) and goes
//! on; names are checked; a snapshot in use is kept; a kill at any step
//! leaves nothing that later calls trip on; creates and removals of a
//! snapshot racing from many processes always agree.

use burrow_cli_testkit as common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use burrow::internal::fault::Fault;
use burrow::{Backend, ErrorCode, Sandbox, SnapshotKind, Status};
use burrow_test_support::fault::FaultWindow;
use common::TestHome;

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

async fn run(sb: &Sandbox, script: &str) -> String {
    common::sh_ok(sb, script).await
}

fn from(home: &TestHome, name: &str, snapshot: &str) -> burrow::SandboxBuilder {
    home.builder(name).image(format!("snapshot:{snapshot}"))
}

fn cli(home: &TestHome, args: &[&str]) -> Output {
    home.cli().arg("--json").args(args).output().unwrap()
}

fn code_of(out: &Output) -> String {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["error"]["code"].as_str().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_running_sandbox_changed_is_in_sandboxes_made_from_its_snapshot() {
    let home = TestHome::new().await;
    let a = home.builder("snap-a").create().await.unwrap();
    run(
        &a,
        "mkdir -p /work/keep /work/replaced && echo one > /work/keep/file \
         && echo old > /work/replaced/old && ln -s keep/file /work/link \
         && echo root-owned > /work/owned && chown 1000:1000 /work/owned",
    )
    .await;
    let s1 = a.snapshot("first").await.unwrap();
    assert_eq!(s1.name, "first");
    assert_eq!(s1.kind, SnapshotKind::Filesystem);
    assert_eq!(s1.image, "snapshot:first");
    assert_eq!(s1.source_id, *a.id());
    assert!(s1.digest.starts_with("sha256:"), "{}", s1.digest);
    assert!(s1.size > 0);
    // The source goes on, unfrozen.
    assert_eq!(a.status().await.unwrap(), Status::Running);
    assert_eq!(run(&a, "cat /work/keep/file").await, "one\n");

    // A sandbox of the snapshot has the files, links and owners; it
    // changes them: a file deleted, a directory replaced whole.
    let b = from(&home, "snap-b", "first").create().await.unwrap();
    assert_eq!(
        run(&b, "cat /work/link; stat -c %u:%g /work/owned").await,
        "one\n1000:1000\n"
    );
    run(
        &b,
        "rm /work/keep/file && rm -rf /work/replaced && mkdir /work/replaced \
         && echo new > /work/replaced/new && rm /bin/true",
    )
    .await;
    b.snapshot("second").await.unwrap();

    // Deletions carry over as deletions, a replaced directory hides the
    // old content, layers stack on layers.
    let c = from(&home, "snap-c", "second").create().await.unwrap();
    assert_eq!(
        run(
            &c,
            "ls /work/keep; ls /work/replaced; test -e /bin/true && echo has-true; cat /work/owned"
        )
        .await,
        "new\nroot-owned\n"
    );
    let listed: Vec<String> = home
        .backend
        .list_snapshots()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, ["first", "second"]);
    assert_eq!(
        home.backend
            .get_snapshot("second")
            .await
            .unwrap()
            .base_image,
        "snapshot:first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_during_writes_has_every_synced_line_whole() {
    let home = TestHome::new().await;
    let a = home.builder("writer").create().await.unwrap();
    // A writer that appends numbered lines, syncing each.
    a.exec(sh(
        "(i=0; while true; do echo \"line-$i-end\" >> /log; sync; i=$((i+1)); done) >/dev/null 2>&1 &",
    ))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.snapshot("during").await.unwrap();
    let after = run(&a, "wc -l < /log").await;
    let b = from(&home, "reader", "during").create().await.unwrap();
    let log = run(&b, "cat /log").await;
    let lines: Vec<&str> = log.lines().collect();
    assert!(!lines.is_empty(), "the log was written before the snapshot");
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, format!("line-{i}-end"), "line {i} of the snapshot");
    }
    assert!(log.ends_with('\n'), "no cut line: {log:?}");
    // The source went on writing after the copy.
    let later: usize = run(&a, "sleep 0.3; wc -l < /log")
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(later > after.trim().parse::<usize>().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sandbox_is_snapshotted_as_it_is_and_stays_stopped() {
    let home = TestHome::new().await;
    let a = home.builder("stopped").create().await.unwrap();
    run(&a, "echo kept > /kept && rm /bin/false").await;
    let handle = a.handle();
    a.stop().await.unwrap();
    let snap = handle.snapshot("cold").await.unwrap();
    assert_eq!(handle.status().await.unwrap(), Status::Stopped);
    assert_eq!(snap.source_name, "stopped");

    // A never-started sandbox's snapshot is its image.
    let fresh = home.builder("fresh").define().await.unwrap();
    fresh.snapshot("pristine").await.unwrap();
    assert_eq!(fresh.status().await.unwrap(), Status::Created);

    let b = from(&home, "cold-copy", "cold").create().await.unwrap();
    assert_eq!(
        run(&b, "cat /kept; test -e /bin/false || echo no-false").await,
        "kept\nno-false\n"
    );
    let c = from(&home, "pristine-copy", "pristine")
        .create()
        .await
        .unwrap();
    assert_eq!(
        run(&c, "test -e /bin/false && echo has-false").await,
        "has-false\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_taken_names_are_refused_and_write_nothing() {
    let home = TestHome::new().await;
    let a = home.builder("names").define().await.unwrap();
    let blobs = || {
        std::fs::read_dir(home.path().join("images/blobs/sha256"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = blobs();
    for bad in ["", ".x", "a/b/c", "a:b", "snap shot", &"x".repeat(129)] {
        let e = a.snapshot(bad).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad:?}: {e}");
    }
    assert_eq!(blobs(), before, "a refused name stored nothing");
    assert!(home.backend.list_snapshots().await.unwrap().is_empty());

    a.snapshot("taken").await.unwrap();
    let e = a.snapshot("taken").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::AlreadyExists, "{e}");
    assert!(matches!(e, burrow::Error::SnapshotExists { .. }), "{e:?}");

    let e = home.backend.get_snapshot("missing").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    let e = home.backend.remove_snapshot("missing").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    // An image naming a missing snapshot is refused at create.
    let e = from(&home, "orphan", "missing").define().await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    let e = home
        .builder("bad-ref")
        .image("snapshot:a/b/c")
        .define()
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidImage, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_in_use_is_kept_and_outlives_its_source() {
    let home = TestHome::new().await;
    let a = home.builder("source").create().await.unwrap();
    run(&a, "echo from-source > /mark").await;
    a.snapshot("base").await.unwrap();
    a.destroy().await.unwrap();

    // Kept when the source is removed.
    let b = from(&home, "user-1", "base").define().await.unwrap();
    from(&home, "user-2", "base").define().await.unwrap();
    let e = home.backend.remove_snapshot("base").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::SnapshotInUse, "{e}");
    match &e {
        burrow::Error::SnapshotInUse { name, sandboxes } => {
            assert_eq!(name, "base");
            assert_eq!(sandboxes, &["user-1", "user-2"]);
        }
        other => panic!("{other:?}"),
    }
    // The CLI says the same, with its exit code.
    let out = cli(&home, &["snapshot", "rm", "base"]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(code_of(&out), "snapshot_in_use");

    // A prune keeps what snapshots use.
    let pruned = cli(&home, &["image", "prune"]);
    assert!(
        pruned.status.success(),
        "{}",
        String::from_utf8_lossy(&pruned.stderr)
    );
    let live = b.start().await.unwrap();
    assert_eq!(run(&live, "cat /mark").await, "from-source\n");
    live.destroy().await.unwrap();
    burrow::SandboxHandle::get_in(home.dyn_backend(), "user-2")
        .await
        .unwrap()
        .remove()
        .await
        .unwrap();
    home.backend.remove_snapshot("base").await.unwrap();
    let out = cli(&home, &["snapshot", "ls"]);
    assert!(out.status.success());
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        serde_json::json!([])
    );
}

/// `burrow snapshot create SANDBOX NAME`, held at `point`, killed there.
async fn killed_at(home: &TestHome, point: Fault, sandbox: &str, name: &str) {
    let w = FaultWindow::new(home.path(), point.as_str());
    let mut child = w
        .arm(&mut home.cli())
        .args(["snapshot", "create", sandbox, name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        w.wait_open(Duration::from_secs(60)).await,
        "never reached {}",
        point.as_str()
    );
    // The process at the point (the CLI, or the helper writing a rootless
    // layer), and the CLI.
    let held = w.pid().unwrap();
    let _ = Command::new("kill")
        .args(["-9", &held.to_string()])
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_any_step_of_a_snapshot_leaves_nothing_half_made() {
    let home = TestHome::new().await;
    let a = home.builder("killed").create().await.unwrap();
    // Enough content that the layer is written in several pieces.
    run(&a, "dd if=/dev/urandom of=/big bs=64k count=8 2>/dev/null").await;
    let handle = a.handle();
    a.stop().await.unwrap();
    for (round, point) in [Fault::SnapshotMidLayer, Fault::SnapshotBeforeRecord]
        .into_iter()
        .enumerate()
    {
        killed_at(&home, point, "killed", "after-kill").await;
        // The killed process's view of a layer disk went with it: the
        // host holds no mount of the home.
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let home_path = home.path().to_string_lossy().into_owned();
        assert!(
            !mounts.lines().any(|l| l.contains(&home_path)),
            "round {round}: {mounts}"
        );
        let e = home.backend.get_snapshot("after-kill").await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound, "round {round}");
        assert!(
            home.backend.list_snapshots().await.unwrap().is_empty(),
            "round {round}"
        );
        // The sandbox is as it was, and the same name works now.
        assert_eq!(handle.status().await.unwrap(), Status::Stopped);
        let snap = handle.snapshot("after-kill").await.unwrap();
        assert_eq!(snap.name, "after-kill");
        // The killed copy's scratch file is gone with the next snapshot.
        let scratch: Vec<_> = std::fs::read_dir(home.path().join("snapshots/tmp"))
            .unwrap()
            .collect();
        assert!(scratch.is_empty(), "round {round}: {scratch:?}");
        home.backend.remove_snapshot("after-kill").await.unwrap();
    }
    let live = handle.start().await.unwrap();
    assert_eq!(run(&live, "wc -c < /big").await.trim(), "524288");
}

/// A sandbox `name` started by the CLI, whose supervisor holds every
/// snapshot with the guest frozen (fault `snapshot.frozen`) until the
/// window is released.
async fn up_held_in_snapshots(home: &TestHome, name: &str) -> (FaultWindow, burrow::SandboxHandle) {
    let w = FaultWindow::new(home.path(), Fault::SnapshotFrozen.as_str());
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let out = w
        .arm(&mut home.cli())
        .args(["up", name, "--image", &image])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handle = burrow::SandboxHandle::get_in(home.dyn_backend(), name)
        .await
        .unwrap();
    (w, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_snapshot_holds_the_guest_frozen_and_lets_it_go() {
    let home = TestHome::new().await;
    // The supervisor (started by the CLI) holds with the guest frozen.
    let (w, handle) = up_held_in_snapshots(&home, "frozen").await;
    let sb = handle.sandbox().await.unwrap();
    sb.exec(sh(
        "(i=0; while true; do i=$((i+1)); echo $i > /tick; sleep 0.05; done) >/dev/null 2>&1 &",
    ))
    .await
    .unwrap();
    let h2 = handle.clone();
    let taking = tokio::spawn(async move { h2.snapshot("held").await });
    assert!(w.wait_open(Duration::from_secs(60)).await);
    // Frozen where the host can freeze (pause), else copied as it runs.
    let freezes = home.backend.capabilities().await.unwrap().pause;
    let tick = common::upper_dir(home.path(), sb.id()).join("tick");
    assert!(tick.exists(), "the ticker's file in the writable layer");
    let first = std::fs::read(&tick).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let during = std::fs::read(&tick).unwrap();
    if freezes {
        assert_eq!(during, first, "the guest ran while frozen");
    } else {
        assert_ne!(during, first, "a guest that cannot be frozen runs on");
    }
    w.release();
    taking.await.unwrap().unwrap();
    // Thawed: it ticks again.
    let thawed = common::eventually(Duration::from_secs(10), || {
        std::fs::read(&tick).is_ok_and(|now| now != first)
    })
    .await;
    assert!(thawed, "the guest did not go on after the snapshot");
}

/// A snapshot queued behind a stop (the supervisor holds an earlier
/// snapshot's window open meanwhile) is cut off when the run ends: it is
/// then taken from the stopped sandbox, never answered as made without its
/// layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_cut_off_by_a_stop_is_taken_from_the_stopped_sandbox() {
    let home = TestHome::new().await;
    let (w, handle) = up_held_in_snapshots(&home, "cut").await;
    run(&handle.sandbox().await.unwrap(), "echo before-stop > /kept").await;
    let h = handle.clone();
    let first = tokio::spawn(async move { h.snapshot("first").await });
    assert!(w.wait_open(Duration::from_secs(60)).await);
    // Queued in the held supervisor: the stop, then the second snapshot.
    let h = handle.clone();
    let stop = tokio::spawn(async move { h.stop().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let h = handle.clone();
    let second = tokio::spawn(async move { h.snapshot("second").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.release();
    first.await.unwrap().unwrap();
    stop.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(handle.status().await.unwrap(), Status::Stopped);
    let copy = from(&home, "cut-copy", &second.name)
        .create()
        .await
        .unwrap();
    assert_eq!(run(&copy, "cat /kept").await, "before-stop\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_and_removals_of_a_snapshot_racing_across_processes_agree() {
    let home = TestHome::new().await;
    let a = home.builder("race-src").define().await.unwrap();
    let image = "snapshot:raced";
    for round in 0..8 {
        a.snapshot("raced").await.unwrap();
        let name = format!("race-{round}");
        let create = home
            .cli()
            .args(["--json", "create", "--name", &name, image])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let remove = home
            .cli()
            .args(["--json", "snapshot", "rm", "raced"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let created = create.wait_with_output().unwrap();
        let removed = remove.wait_with_output().unwrap();
        match (created.status.success(), removed.status.success()) {
            // The create came first: the removal saw its user.
            (true, false) => {
                assert_eq!(code_of(&removed), "snapshot_in_use", "round {round}");
                home.backend.get_snapshot("raced").await.unwrap();
                burrow::SandboxHandle::get_in(home.dyn_backend(), &name)
                    .await
                    .unwrap()
                    .remove()
                    .await
                    .unwrap();
                home.backend.remove_snapshot("raced").await.unwrap();
            }
            // The removal came first: the create found no snapshot.
            (false, true) => {
                assert_eq!(code_of(&created), "not_found", "round {round}");
                let e = home.backend.get(&name).await.unwrap_err();
                assert_eq!(e.code(), ErrorCode::NotFound, "round {round}");
            }
            other => panic!(
                "round {round}: {other:?}: {} / {}",
                String::from_utf8_lossy(&created.stdout),
                String::from_utf8_lossy(&removed.stdout)
            ),
        }
    }
}

/// Whether `ref` is in `registry`, asked with skopeo (another client than
/// burrow's).
fn skopeo_digest(reference: &str) -> String {
    let out = Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--format", "{{.Digest}}"])
        .arg(format!("docker://{reference}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_snapshot_is_an_ordinary_image_another_home_runs() {
    let registry = common::registry::TestRegistry::start();
    let target = registry.reference("burrow-test/snapshot:v1");
    let laptop = TestHome::new().await;
    let a = laptop.builder("laptop").create().await.unwrap();
    run(&a, "echo written-on-the-laptop > /carried && rm /bin/false").await;
    let snap = a.snapshot("carry").await.unwrap();

    // Bad input first: nothing is pushed.
    let out = cli(
        &laptop,
        &["snapshot", "push", "missing", &target, "--insecure"],
    );
    assert_eq!(code_of(&out), "not_found");
    let pinned = format!("{target}@sha256:{}", "0".repeat(64));
    let out = cli(
        &laptop,
        &["snapshot", "push", "carry", &pinned, "--insecure"],
    );
    assert_eq!(code_of(&out), "invalid_image");

    let out = cli(
        &laptop,
        &["snapshot", "push", "carry", &target, "--insecure"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pushed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pushed["digest"], snap.digest.as_str());
    assert!(pushed["blobs_pushed"].as_u64().unwrap() >= 3, "{pushed}");
    // The registry serves it under the tag, with the snapshot's digest.
    assert_eq!(skopeo_digest(&target), snap.digest);
    // Pushed again: every blob is there already.
    let again: serde_json::Value = serde_json::from_slice(
        &cli(
            &laptop,
            &["snapshot", "push", "carry", &target, "--insecure"],
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(again["blobs_pushed"], 0, "{again}");

    // Another home (another host) pulls it as any image.
    let cluster = TestHome::new().await;
    std::fs::write(
        cluster.path().join("registries.json"),
        format!(r#"{{"insecure": ["{}"]}}"#, registry.host()),
    )
    .unwrap();
    let b = cluster
        .builder("moved")
        .image(target.clone())
        .create()
        .await
        .unwrap();
    assert_eq!(
        run(&b, "cat /carried; test -e /bin/false || echo no-false").await,
        "written-on-the-laptop\nno-false\n"
    );
}
