#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Forks of running container sandboxes (root, and rootless through
//! `cargo xtask e2e container --rootless`): each copy is a new sandbox of
//! the parent's configuration whose writable layer is the parent's as it
//! was at the fork (files written, deleted, directories replaced, links,
//! owners), started afresh (processes are not copied); copies and parent
//! diverge from there; a fork that fails leaves no copy.

use burrow_cli_testkit as common;

use std::collections::HashSet;

use burrow::{Backend, ErrorCode, ForkOptions, Sandbox, Status};
use common::TestHome;

async fn run(sb: &Sandbox, script: &str) -> String {
    common::sh_ok(sb, script).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_start_from_the_parents_files() {
    let home = TestHome::new().await;
    let parent = home.builder("parent").create().await.unwrap();
    run(
        &parent,
        "mkdir -p /work/keep /work/replaced && echo one > /work/keep/file \
         && echo old > /work/replaced/old && ln -s keep/file /work/link \
         && ln /work/keep/file /work/hard && echo owned > /work/owned \
         && chown 1000:1000 /work/owned && rm /bin/true",
    )
    .await;
    // Replaced whole: the image's directory is hidden (opaque).
    run(
        &parent,
        "rm -rf /var && mkdir /var && echo mine > /var/only",
    )
    .await;

    let copies = parent.fork(&ForkOptions::count(2)).await.unwrap();
    assert_eq!(
        copies.iter().map(|c| c.name()).collect::<Vec<_>>(),
        ["parent-fork-1", "parent-fork-2"]
    );
    let mut ids = HashSet::from([parent.id().clone()]);
    for copy in &copies {
        let info = copy.info().await.unwrap();
        assert_eq!(info.status, Status::Running);
        assert_eq!(info.config, parent.info().await.unwrap().config);
        assert!(ids.insert(info.id.clone()));
        assert_eq!(
            run(
                copy,
                "cat /work/link /work/hard; stat -c %u:%g /work/owned; \
                 test -e /bin/true || echo no-true; ls /var; \
                 [ /work/keep/file -ef /work/hard ] && echo linked"
            )
            .await,
            "one\none\n1000:1000\nno-true\nonly\nlinked\n",
            "{}",
            copy.name()
        );
    }
    // Each its own from here.
    run(&copies[0], "echo two > /work/keep/file").await;
    assert_eq!(run(&parent, "cat /work/keep/file").await, "one\n");
    assert_eq!(run(&copies[1], "cat /work/keep/file").await, "one\n");
    // A copy survives a restart with its layer.
    copies[0].restart().await.unwrap();
    assert_eq!(run(&copies[0], "cat /work/keep/file").await, "two\n");

    for sb in copies.iter().chain([&parent]) {
        sb.destroy().await.unwrap();
    }
    assert!(home
        .backend
        .list(&Default::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fork_leaves_no_copy() {
    let home = TestHome::new().await;
    let parent = home.builder("p").create().await.unwrap();
    let _taken = home.builder("taken").create().await.unwrap();
    let err = parent
        .fork(&ForkOptions::named(["free", "taken"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    assert!(home.backend.get("free").await.is_err());
    assert_eq!(
        home.backend.list(&Default::default()).await.unwrap().len(),
        2
    );
    let leftovers = std::fs::read_dir(home.path().join("snapshots").join("tmp"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0, "the parent's layer was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_forks_and_a_kill_mid_fork_leaves_only_whole_copies() {
    use burrow::internal::fault::Fault;
    use burrow_test_support::fault::FaultWindow;
    use std::process::Stdio;
    use std::time::Duration;

    let home = TestHome::new().await;
    let parent = home.builder("cli-parent").create().await.unwrap();
    run(&parent, "echo kept > /kept").await;
    let out = home
        .cli()
        .args(["--json", "fork", "cli-parent", "--name", "x", "--name", "y"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copies: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = copies
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x", "y"]);
    assert!(copies
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"] == "running"));
    let out = home
        .cli()
        .args(["--json", "fork", "cli-parent", "--count", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "invalid_argument");

    // Killed with the first copy recorded: that copy is whole (it starts
    // with the parent's files), the parent goes on, and the next fork
    // works (and sweeps the killed one's scratch file).
    let w = FaultWindow::new(home.path(), Fault::ForkAfterCopy.as_str());
    let mut child = w
        .arm(&mut home.cli())
        .args(["fork", "cli-parent", "--name", "k1", "--name", "k2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        w.wait_open(Duration::from_secs(60)).await,
        "never reached the fault"
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(home.backend.get("k2").await.is_err(), "no second copy");
    let k1 = burrow::SandboxHandle::get_in(home.dyn_backend(), "k1")
        .await
        .unwrap();
    assert_eq!(k1.status().await.unwrap(), Status::Created);
    let k1 = k1.start().await.unwrap();
    assert_eq!(run(&k1, "cat /kept").await, "kept\n");
    assert_eq!(run(&parent, "cat /kept").await, "kept\n");
    let again = parent.fork(&ForkOptions::named(["k2"])).await.unwrap();
    assert_eq!(run(&again[0], "cat /kept").await, "kept\n");
    let scratch: Vec<_> = std::fs::read_dir(home.path().join("snapshots/tmp"))
        .unwrap()
        .collect();
    assert!(scratch.is_empty(), "{scratch:?}");
}

/// Forks racing across processes, round after round: three `burrow fork`
/// processes ask for the same copy's name while a fourth stops the
/// parent. Each fork either makes its whole copy (running, with the
/// parent's file) or fails with a typed error (the name is taken, the
/// parent is not running), exactly one copy of each name exists, and no
/// round leaves a sandbox or a scratch file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_racing_across_processes_make_whole_copies_or_typed_errors() {
    const ROUNDS: usize = 6;
    let home = TestHome::new().await;
    let parent = home.builder("race-parent").create().await.unwrap();
    run(&parent, "echo raced > /raced").await;
    let handle = parent.handle();
    let mut made = 0;
    for round in 0..ROUNDS {
        let name = format!("race-{round}");
        let forks: Vec<_> = (0..3)
            .map(|_| {
                home.cli()
                    .args(["--json", "fork", "race-parent", "--name", &name])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Every other round the parent is stopped meanwhile.
        let stopper = (round % 2 == 1).then(|| {
            home.cli()
                .args(["stop", "race-parent"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        });
        let mut won = 0;
        for child in forks {
            let out = child.wait_with_output().unwrap();
            let body: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
            if out.status.success() {
                won += 1;
                assert_eq!(body[0]["name"], name.as_str());
            } else {
                let code = body["error"]["code"].as_str().unwrap().to_owned();
                assert!(
                    ["already_exists", "invalid_state"].contains(&code.as_str()),
                    "round {round}: {body}"
                );
            }
        }
        if let Some(mut stopper) = stopper {
            assert!(stopper.wait().unwrap().success());
        }
        assert!(won <= 1, "round {round}: {won} forks made {name}");
        match home.backend.get(&name).await {
            Ok(info) => {
                assert_eq!(won, 1, "round {round}: {name} exists, made by none");
                let copy = burrow::SandboxHandle::get_in(home.dyn_backend(), &info.name)
                    .await
                    .unwrap();
                assert_eq!(copy.status().await.unwrap(), Status::Running);
                let copy = copy.connect_or_start().await.unwrap();
                assert_eq!(run(&copy, "cat /raced").await, "raced\n");
                made += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::NotFound);
                assert_eq!(won, 0, "round {round}: a fork said it made {name}");
            }
        }
        let parent = handle.connect_or_start().await.unwrap();
        assert_eq!(run(&parent, "cat /raced").await, "raced\n");
    }
    // Rounds without a stop always make their copy.
    assert!(made >= ROUNDS / 2, "{made} copies in {ROUNDS} rounds");
    let listed = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), made + 1, "{listed:?}");
    let scratch: Vec<_> = std::fs::read_dir(home.path().join("snapshots/tmp"))
        .unwrap()
        .collect();
    assert!(scratch.is_empty(), "{scratch:?}");
}

/// Every backend opened (in any process) sweeps the directories of removed
/// sandboxes, and the copy a fork is making has a directory before it has a
/// record. Both windows held open by fault points: a sweep in the moment
/// before the copy's removal lock is taken deletes the directory, and the
/// fork makes it again; a sweep that read "no record" just before the fork
/// recorded the copy and let its lock go reads again and leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_in_another_process_never_takes_a_copy_being_made() {
    use burrow::internal::fault::Fault;
    use burrow_test_support::fault::FaultWindow;
    use std::process::Stdio;
    use std::time::Duration;

    const OPEN: Duration = Duration::from_secs(60);
    let home = TestHome::new().await;
    let parent = home.builder("swept-parent").create().await.unwrap();
    run(&parent, "echo swept > /swept").await;
    let dirs = || {
        std::fs::read_dir(home.path().join("sandboxes"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("sb_")
            })
            .count()
    };
    let fork = |w: &FaultWindow, name: &str| {
        w.arm(&mut home.cli())
            .args(["--json", "fork", "swept-parent", "--name", name])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let made = |child: std::process::Child| {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    };

    // 1. The copy's directory made, its lock not taken yet: `burrow ls`
    //    opens a backend, whose sweep deletes that directory.
    let making = FaultWindow::new(home.path(), Fault::MakeDirBeforeLock.as_str());
    let child = fork(&making, "c1");
    assert!(making.wait_open(OPEN).await, "never reached the fault");
    assert_eq!(dirs(), 2);
    assert!(home.cli().arg("ls").output().unwrap().status.success());
    assert_eq!(dirs(), 1, "the sweep took the directory being made");
    making.release();
    made(child);
    whole(&home, "c1").await;

    // 2. A sweep holds having read no record for the copy being made; the
    //    fork then takes its lock, makes the copy, records it, lets go.
    let making = FaultWindow::new(home.path(), Fault::MakeDirBeforeLock.as_str());
    let child = fork(&making, "c2");
    assert!(making.wait_open(OPEN).await, "never reached the fault");
    let sweeping = FaultWindow::new(home.path(), Fault::SweepBeforeLock.as_str());
    let sweeper = sweeping
        .arm(&mut home.cli())
        .arg("ls")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(sweeping.wait_open(OPEN).await, "the sweep never held");
    making.release();
    made(child);
    sweeping.release();
    let mut sweeper = sweeper;
    assert!(sweeper.wait().unwrap().success());
    assert_eq!(dirs(), 3, "a sweep took a recorded copy's directory");
    whole(&home, "c2").await;
}

/// The copy `name` of `swept-parent`, running with the parent's file.
async fn whole(home: &TestHome, name: &str) {
    let copy = burrow::SandboxHandle::get_in(home.dyn_backend(), name)
        .await
        .unwrap();
    assert_eq!(copy.status().await.unwrap(), Status::Running);
    let copy = copy.connect_or_start().await.unwrap();
    assert_eq!(run(&copy, "cat /swept").await, "swept\n");
}
