#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Calls that land at a lifecycle boundary: while a run is ending (idle
//! reclaim, stop, restart, kill, max duration, a crash of the guest) and
//! while a sandbox is removed. Every call either succeeds or gets the typed
//! error of the status the sandbox lands in, never an `io` or `protocol`
//! error from the engine's own sockets.
//!
//! The window is held open deterministically by the supervisor's
//! `supervisor.ending` fault point (after it stopped accepting connections,
//! before it records the end), so the calls land in it every time; the last
//! test races calls against reclaims without it, many rounds, from several
//! processes.

use burrow_cli_testkit as common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use burrow::internal::fault::Fault;
use burrow::{ErrorCode, ExecOptions, ExitReason, Modify, Sandbox, SandboxHandle, Status};
use burrow_test_support::fault::FaultWindow;
use common::{busybox_rootfs, TestHome};

/// A supervisor's end-of-run window, held open by its fault point.
struct Window {
    fault: FaultWindow,
}

impl Window {
    /// After the socket is gone, before the end is recorded.
    fn new(home: &TestHome) -> Window {
        Window::at(home, Fault::SupervisorEnding)
    }

    fn at(home: &TestHome, point: Fault) -> Window {
        Window {
            fault: FaultWindow::new(home.path(), point.as_str()),
        }
    }

    /// `burrow up NAME --image busybox ARGS...` whose supervisor holds the
    /// end of its run until released; returns the sandbox's handle.
    async fn up(&self, home: &TestHome, name: &str, args: &[&str]) -> SandboxHandle {
        let image = busybox_rootfs().to_string_lossy().into_owned();
        let out = self
            .fault
            .arm(home.cli().args(["up", name, "--image", &image]).args(args))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "burrow up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SandboxHandle::get_in(home.dyn_backend(), name)
            .await
            .unwrap()
    }

    /// Waits until the supervisor is in the window.
    async fn opened(&self) {
        let ok = self.fault.wait_open(Duration::from_secs(60)).await;
        assert!(ok, "the supervisor never reached the end of its run");
    }

    fn release(&self) {
        self.fault.release();
    }
}

/// What a call came to: success, or an error code (with the status of an
/// `invalid_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Err(ErrorCode, Option<Status>),
}

fn outcome<T>(r: &burrow::Result<T>) -> Outcome {
    match r {
        Ok(_) => Outcome::Ok,
        Err(burrow::Error::InvalidState { status, .. }) => {
            Outcome::Err(ErrorCode::InvalidState, Some(*status))
        }
        Err(burrow::Error::Guest { failure, .. })
            if failure.code() == burrow::GuestErrorCode::ConnectionRefused =>
        {
            // A tunnel to a port nothing listens on: the call reached a live
            // agent, which is the tunnel's success here.
            Outcome::Ok
        }
        Err(e) => Outcome::Err(e.code(), None),
    }
}

/// The kinds of call, by how they may end at a boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// exec, spawn, shell, fs, tunnel: wake a reclaimed sandbox.
    Work,
    /// ping, touch, metrics, pause: act on a live run, never wake one.
    Live,
    /// modify: fine in every status.
    Any,
}

type Call = (
    &'static str,
    Kind,
    tokio::task::JoinHandle<(Outcome, String)>,
);

fn spawn_call<T, F>(name: &'static str, kind: Kind, f: F) -> Call
where
    F: std::future::Future<Output = burrow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    (
        name,
        kind,
        tokio::spawn(async move {
            let r = f.await;
            let text = match &r {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            };
            (outcome(&r), text)
        }),
    )
}

/// One call of every operation that reaches a supervisor, through a live
/// handle that holds a connection to the ending run (`cached`), a fresh
/// handle, and the CLI in another process.
/// With `pause`, a pause (then resume) too: only where nothing runs after the
/// boundary, since a pause of a new run would refuse the other calls.
fn every_call(
    home: &TestHome,
    name: &str,
    cached: &Sandbox,
    fresh: &Sandbox,
    pause: bool,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let sb = cached.clone();
    calls.push(spawn_call(
        "exec (cached connection)",
        Kind::Work,
        async move {
            let out = sb.exec(["echo", "cached"]).await?;
            assert_eq!(out.stdout_str(), "cached\n");
            Ok(())
        },
    ));
    let sb = fresh.clone();
    calls.push(spawn_call("exec (fresh handle)", Kind::Work, async move {
        let out = sb
            .exec_with(ExecOptions::new(["cat"]).stdin(b"replayed".to_vec()))
            .await?;
        assert_eq!(out.stdout_str(), "replayed");
        Ok(())
    }));
    let sb = cached.clone();
    calls.push(spawn_call("spawn", Kind::Work, async move {
        let p = sb.spawn(ExecOptions::new(["cat"])).await?;
        p.write_stdin(b"streamed").await?;
        p.close_stdin().await?;
        let out = p.wait().await?;
        assert_eq!(out.stdout_str(), "streamed");
        Ok(())
    }));
    let sb = fresh.clone();
    calls.push(spawn_call("shell", Kind::Work, async move {
        let p = sb
            .shell(
                Some(vec!["sh".into(), "-c".into(), "exit 3".into()]),
                24,
                80,
            )
            .await?;
        let out = p.wait().await?;
        assert_eq!(out.status.code, Some(3));
        Ok(())
    }));
    let sb = cached.clone();
    calls.push(spawn_call("fs write", Kind::Work, async move {
        sb.fs().write("/tmp/boundary", b"written").await
    }));
    let sb = fresh.clone();
    calls.push(spawn_call("fs read", Kind::Work, async move {
        sb.fs().read("/etc/passwd").await.map(|_| ())
    }));
    let sb = cached.clone();
    calls.push(spawn_call("fs list", Kind::Work, async move {
        sb.fs().list("/").await.map(|_| ())
    }));
    let sb = fresh.clone();
    calls.push(spawn_call("tunnel", Kind::Work, async move {
        sb.tunnel(9).await.map(|_| ())
    }));
    let sb = cached.clone();
    calls.push(spawn_call(
        "ping",
        Kind::Live,
        async move { sb.ping().await },
    ));
    let sb = fresh.clone();
    calls.push(spawn_call(
        "touch",
        Kind::Live,
        async move { sb.touch().await },
    ));
    let sb = cached.clone();
    calls.push(spawn_call("metrics", Kind::Live, async move {
        sb.metrics().await
    }));
    let sb = fresh.clone();
    if pause {
        calls.push(spawn_call("pause", Kind::Live, async move {
            let r = sb.pause().await;
            if r.is_ok() {
                sb.resume().await?;
            }
            r
        }));
    }
    let sb = cached.clone();
    calls.push(spawn_call("modify", Kind::Any, async move {
        let mut m = Modify::default();
        m.labels_set.insert("touched".into(), "yes".into());
        sb.modify_with(&m).await
    }));
    let mut cli = home.cli();
    cli.args(["exec", name, "--", "echo", "from-cli"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    calls.push((
        "burrow exec (CLI process)",
        Kind::Work,
        tokio::task::spawn_blocking(move || {
            let out = cli.output().unwrap();
            let text = String::from_utf8_lossy(&out.stderr).into_owned();
            let o = match out.status.code() {
                Some(0) => {
                    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-cli\n");
                    Outcome::Ok
                }
                // The CLI's exit code of invalid_state (the status is in
                // the message; the in-process calls check it).
                Some(3) => Outcome::Err(ErrorCode::NotFound, None),
                Some(5) => Outcome::Err(ErrorCode::InvalidState, None),
                Some(7) => Outcome::Err(ErrorCode::Timeout, None),
                _ => Outcome::Err(ErrorCode::Io, None),
            };
            (o, text)
        }),
    ));
    calls
}

/// Gives the calls time to reach the window, and checks they are waiting in
/// it (not failed): nothing can answer them while the window is held.
async fn all_waiting(calls: &[Call]) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (name, kind, h) in calls {
        if *kind != Kind::Any {
            assert!(
                !h.is_finished(),
                "{name} finished while the run's end was held open: it did not wait for it"
            );
        }
    }
}

async fn results(calls: Vec<Call>) -> Vec<(&'static str, Kind, Outcome, String)> {
    let mut out = Vec::new();
    for (name, kind, h) in calls {
        let (o, text) = tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .unwrap_or_else(|_| panic!("{name} never finished"))
            .unwrap_or_else(|e| panic!("{name} panicked: {e}"));
        out.push((name, kind, o, text));
    }
    out
}

/// An `invalid_state` with this status (the CLI's exit code carries none).
fn invalid(o: Outcome, status: Status) -> bool {
    matches!(o, Outcome::Err(ErrorCode::InvalidState, s) if s.is_none_or(|s| s == status))
}

/// Sets up a running sandbox whose end will be held, with a live handle
/// holding a connection to the run (`cached`) and one that does not.
async fn held(
    home: &TestHome,
    w: &Window,
    name: &str,
    args: &[&str],
) -> (SandboxHandle, Sandbox, Sandbox) {
    let handle = w.up(home, name, args).await;
    let cached = handle.sandbox().await.unwrap();
    cached.exec(["true"]).await.unwrap();
    let fresh = handle.sandbox().await.unwrap();
    (handle, cached, fresh)
}

/// While held, the record still shows the run, and its socket is gone.
async fn assert_in_window(home: &TestHome, handle: &SandboxHandle, generation: u64) {
    let info = handle.info().await.unwrap();
    assert_eq!(info.generation, generation);
    assert!(info.status.has_runtime(), "{:?}", info.status);
    let socket_dir = home.path().join("run");
    let sockets = std::fs::read_dir(&socket_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(sockets, 0, "the supervisor socket is gone in the window");
}

/// Lands every call in a held idle reclaim with demand start, through
/// `handle` (local or remote), and checks they all end on one new run.
async fn reclaim_window_wakes_it(home: &TestHome, w: &Window, handle: SandboxHandle) {
    let cached = handle.sandbox().await.unwrap();
    cached.exec(["true"]).await.unwrap();
    let fresh = handle.sandbox().await.unwrap();
    let gen0 = handle.info().await.unwrap().generation;
    w.opened().await;
    assert_in_window(home, &handle, gen0).await;
    let calls = every_call(home, handle.name(), &cached, &fresh, false);
    all_waiting(&calls).await;
    w.release();
    for (name, kind, o, text) in results(calls).await {
        match kind {
            Kind::Work | Kind::Any => assert_eq!(o, Outcome::Ok, "{name}: {text}"),
            // Never wakes it; lands on the new run (woken by the others) or
            // on the reclaimed one.
            Kind::Live => assert!(
                o == Outcome::Ok || invalid(o, Status::Stopped),
                "{name}: {o:?} {text}"
            ),
        }
    }
    let info = handle.info().await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.generation, gen0 + 1, "one demand start for every call");
    assert_eq!(
        info.config.labels.get("touched").map(String::as_str),
        Some("yes")
    );
    handle.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_during_an_idle_reclaim_wait_and_wake_the_sandbox() {
    let home = TestHome::new().await;
    let w = Window::new(&home);
    let handle = w.up(&home, "reclaim", &["--idle-timeout", "1s"]).await;
    reclaim_window_wakes_it(&home, &w, handle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_cut_off_by_the_end_of_the_run_waits_and_wakes() {
    // The supervisor stopped accepting but still listens: a new connection
    // waits in the backlog and is reset when the listener closes, in the
    // middle of its hello.
    let home = TestHome::new().await;
    let w = Window::at(&home, Fault::SupervisorStoppedAccepting);
    let handle = w.up(&home, "cut", &["--idle-timeout", "1s"]).await;
    let gen0 = handle.info().await.unwrap().generation;
    w.opened().await;
    let fresh = handle.sandbox().await.unwrap();
    let exec = tokio::spawn(async move { fresh.exec(["echo", "after"]).await });
    let sb = handle.sandbox().await.unwrap();
    let write = tokio::spawn(async move { sb.fs().write("/tmp/cut", b"x").await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !exec.is_finished() && !write.is_finished(),
        "they wait in the backlog"
    );
    w.release();
    let out = tokio::time::timeout(Duration::from_secs(60), exec)
        .await
        .expect("the exec finished")
        .unwrap()
        .unwrap();
    assert_eq!(out.stdout_str(), "after\n");
    tokio::time::timeout(Duration::from_secs(60), write)
        .await
        .expect("the write finished")
        .unwrap()
        .unwrap();
    let info = handle.info().await.unwrap();
    assert_eq!((info.status, info.generation), (Status::Running, gen0 + 1));
    handle.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_calls_during_an_idle_reclaim_wait_and_wake_the_sandbox() {
    // The same window, reached through `burrow serve` (on a unix socket of
    // this home) and the remote backend.
    let home = TestHome::new().await;
    let sock = home.path().join("serve.sock");
    let sqlite = format!("sqlite://{}/serve.db", home.path().display());
    let server = common::serve::ServeEnv::new(home.path(), &sqlite)
        .set("LISTEN", &format!("unix:{}", sock.display()))
        .set("IDLE_TIMEOUT", "0")
        .start("a");
    let remote: std::sync::Arc<dyn burrow::Backend> = std::sync::Arc::new(
        burrow::RemoteBackend::connect(&format!("unix:{}", sock.display()), None).unwrap(),
    );
    let w = Window::new(&home);
    let local = w.up(&home, "remote", &["--idle-timeout", "1s"]).await;
    let handle = SandboxHandle::get_by_id_in(remote, local.id())
        .await
        .unwrap();
    reclaim_window_wakes_it(&home, &w, handle).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_demand_start_calls_during_a_reclaim_get_invalid_state_stopped() {
    let home = TestHome::new().await;
    let w = Window::new(&home);
    let (handle, cached, fresh) = held(
        &home,
        &w,
        "nodemand",
        &["--idle-timeout", "1s", "--no-demand-start"],
    )
    .await;
    let gen0 = handle.info().await.unwrap().generation;
    w.opened().await;
    assert_in_window(&home, &handle, gen0).await;
    let calls = every_call(&home, "nodemand", &cached, &fresh, true);
    all_waiting(&calls).await;
    w.release();
    for (name, kind, o, text) in results(calls).await {
        match kind {
            Kind::Any => assert_eq!(o, Outcome::Ok, "{name}: {text}"),
            _ => assert!(invalid(o, Status::Stopped), "{name}: {o:?} {text}"),
        }
    }
    let info = handle.info().await.unwrap();
    assert_eq!(info.status, Status::Stopped);
    assert_eq!(info.generation, gen0, "nothing started it again");
    handle.destroy().await.unwrap();
}

/// A listing that read a crashed sandbox's row, and reconciles it after a
/// removal took it, leaves it out instead of failing (found by the soak:
/// `list` failed with `not_found`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_racing_a_removal_leaves_the_removed_sandbox_out() {
    let home = TestHome::new().await;
    let sb = home.builder("doomed").create().await.unwrap();
    let keep = home.builder("kept").create().await.unwrap();
    // Its supervisor dies: its row says running with a dead owner, which
    // a listing reconciles (records as crashed, reads again).
    let sup = sb
        .info()
        .await
        .unwrap()
        .last_run
        .unwrap()
        .supervisor_pid
        .unwrap();
    // SAFETY: kill(2) on the supervisor the store recorded for this run.
    assert_eq!(unsafe { libc::kill(sup as i32, libc::SIGKILL) }, 0);
    assert!(common::eventually(Duration::from_secs(10), || common::has_exited(sup)).await);

    let w = FaultWindow::new(home.path(), Fault::ListBeforeReconcile.as_str());
    let lister = w
        .arm(home.cli().args(["--json", "ls"]))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(w.wait_open(Duration::from_secs(30)).await);
    // In the window: the row is read; the removal takes it.
    sb.destroy().await.unwrap();
    w.release();
    let out = tokio::task::spawn_blocking(move || lister.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kept"]);
    keep.destroy().await.unwrap();
}

/// Holds the end of a run that `end` brings about, lands every call in it,
/// releases it, and checks each outcome with `expect`.
async fn race_an_ending<E, F>(
    name: &str,
    args: &[&str],
    pause: bool,
    end: E,
    expect: impl Fn(&'static str, Kind, Outcome) -> bool,
) -> (SandboxHandle, u64)
where
    E: FnOnce(SandboxHandle, PathBuf) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let home = TestHome::new().await;
    let w = Window::new(&home);
    let (handle, cached, fresh) = held(&home, &w, name, args).await;
    let gen0 = handle.info().await.unwrap().generation;
    let ending = tokio::spawn(end(handle.clone(), home.path().to_path_buf()));
    w.opened().await;
    assert_in_window(&home, &handle, gen0).await;
    let calls = every_call(&home, name, &cached, &fresh, pause);
    all_waiting(&calls).await;
    w.release();
    tokio::time::timeout(Duration::from_secs(120), ending)
        .await
        .expect("the ending operation finished")
        .unwrap();
    for (call, kind, o, text) in results(calls).await {
        assert!(expect(call, kind, o), "{name}: {call}: {o:?} {text}");
    }
    // Keep the home (and its supervisors) until the checks are done.
    let h = handle.clone();
    let info = h.info().await.unwrap();
    let _ = h.destroy().await;
    drop(home);
    (handle, info.generation - gen0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_stop_get_invalid_state_stopped() {
    race_an_ending(
        "stopping",
        &[],
        true,
        |h, _| async move {
            let info = h.stop().await.unwrap();
            assert_eq!(info.status, Status::Stopped);
            assert_eq!(
                info.last_run.and_then(|r| r.exit_reason),
                Some(ExitReason::Stopped)
            );
        },
        |_, kind, o| kind == Kind::Any && o == Outcome::Ok || invalid(o, Status::Stopped),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_kill_get_invalid_state_stopped() {
    race_an_ending(
        "killing",
        &[],
        true,
        |h, _| async move {
            let info = h.kill().await.unwrap();
            assert_eq!(info.status, Status::Stopped);
        },
        |_, kind, o| kind == Kind::Any && o == Outcome::Ok || invalid(o, Status::Stopped),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_restart_follow_it_or_see_it_stopped() {
    let (_, generations) = race_an_ending(
        "restarting",
        &[],
        false,
        |h, _| async move {
            let sb = h.restart().await.unwrap();
            assert_eq!(sb.status().await.unwrap(), Status::Running);
        },
        // Unrun calls go to the new run; one that looks in the moment
        // between the stop and the new start sees it stopped.
        |_, _, o| o == Outcome::Ok || invalid(o, Status::Stopped),
    )
    .await;
    assert_eq!(
        generations, 1,
        "the restart made one new run, the calls none"
    );
}

/// A call that only looks once a restart's new run is starting (it waited
/// behind another call for the connection, say) follows the restart when
/// its `Sandbox` is bound to the run that ended; one on a `Sandbox` taken
/// while the new run starts gets `invalid_state` (`starting`). The new run
/// is held Starting by its supervisor's `supervisor.before_launch` point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_finds_a_restart_starting_follows_it() {
    let home = TestHome::new().await;
    let w = Window::at(&home, Fault::SupervisorBeforeLaunch);
    let sb = home.builder("following").create().await.unwrap();
    let gen0 = sb.generation();
    assert_eq!(sb.exec(["true"]).await.unwrap().status.code, Some(0));
    let restart = w
        .fault
        .arm(home.cli().args(["restart", "following"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    w.opened().await;
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, Status::Starting);
    assert!(info.generation > gen0, "the new run is the starting one");

    // Taken while the run starts: no older run to follow.
    let taken = sb.handle().sandbox().await.unwrap();
    match taken.exec(["true"]).await {
        Err(burrow::Error::InvalidState { status, .. }) => assert_eq!(status, Status::Starting),
        other => panic!("an exec on a Sandbox of the starting run: {other:?}"),
    }

    // Bound to the run that ended: waits for the new one and runs there.
    let follower = sb.clone();
    let call = tokio::spawn(async move { follower.exec(["true"]).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!call.is_finished(), "the call did not wait for the start");
    w.release();
    let out = call.await.unwrap().expect("the call followed the restart");
    assert_eq!(out.status.code, Some(0));
    assert_eq!(sb.generation(), info.generation);
    let restarted = tokio::task::spawn_blocking(move || restart.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        restarted.status.success(),
        "burrow restart: {}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    sb.destroy().await.unwrap();
}

/// `spawn` returns only once the run has the request, so a drain right
/// after it (on another connection) waits for the process instead of ending
/// the run under a request it has not read yet. The run's relay holds the
/// request it read at its `relay.before_request` point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_after_spawn_returns_waits_for_the_process() {
    let home = TestHome::new().await;
    let w = Window::at(&home, Fault::RelayBeforeRequest);
    let sb = w.up(&home, "spawned", &[]).await.sandbox().await.unwrap();
    let spawner = sb.clone();
    let spawn = tokio::spawn(async move {
        spawner
            .spawn(ExecOptions::new(["sh", "-c", "sleep 1; echo done"]))
            .await
    });
    w.opened().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !spawn.is_finished(),
        "spawn returned before the run read its request"
    );
    w.release();
    let process = spawn.await.unwrap().unwrap();
    process.close_stdin().await.unwrap();
    let info = sb.request_drain().await.unwrap();
    assert_eq!(info.status, Status::Draining);
    let out = process.wait().await.unwrap();
    assert_eq!(
        out.stdout_str(),
        "done\n",
        "the drain let the process finish"
    );
    assert_eq!(out.status.code, Some(0));
    let end = sb.wait_until_stopped().await.unwrap();
    assert_eq!(
        end.last_run.and_then(|r| r.exit_reason),
        Some(ExitReason::Drain)
    );
    sb.destroy().await.unwrap();
}

/// The same window raced without a hold, many rounds in four sandboxes at
/// once (their supervisors compete for the CPU): a drain sent the moment
/// `spawn` returns always finds the process in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drains_racing_spawns_always_wait_for_the_process() {
    let home = TestHome::new().await;
    let mut racers = Vec::new();
    for i in 0..4 {
        let handle = home
            .builder(&format!("drained-{i}"))
            .create()
            .await
            .unwrap()
            .handle();
        racers.push(tokio::spawn(async move {
            for round in 0..50 {
                let sb = handle.connect_or_start().await.unwrap();
                let process = sb.spawn(ExecOptions::new(["echo", "done"])).await.unwrap();
                sb.request_drain().await.unwrap();
                process.close_stdin().await.unwrap();
                let out = process.wait().await;
                assert!(
                    matches!(&out, Ok(o) if o.stdout_str() == "done\n" && o.status.code == Some(0)),
                    "{} round {round}: the drain cut the process spawned before it: {out:?}",
                    handle.name()
                );
                let end = sb.wait_until_stopped().await.unwrap();
                assert_eq!(
                    end.last_run.and_then(|r| r.exit_reason),
                    Some(ExitReason::Drain),
                    "{} round {round}",
                    handle.name()
                );
            }
            handle.destroy().await.unwrap();
        }));
    }
    for racer in racers {
        racer.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_the_max_duration_get_invalid_state_stopped() {
    race_an_ending(
        "maxdur",
        &["--max-duration", "3s"],
        true,
        |h, _| async move {
            let info = h.wait_for_status(&[Status::Stopped]).await.unwrap();
            assert_eq!(
                info.last_run.and_then(|r| r.exit_reason),
                Some(ExitReason::MaxDuration)
            );
        },
        |_, kind, o| kind == Kind::Any && o == Outcome::Ok || invalid(o, Status::Stopped),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_guest_crash_get_invalid_state_crashed() {
    race_an_ending(
        "crashing",
        &[],
        true,
        |h, home| async move {
            let pid = common::guest_pid(&home, h.id());
            // SAFETY: kill(2) on the guest's host pid, read from its runtime dir.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let info = h
                .wait_for_status(&[Status::Crashed, Status::Stopped])
                .await
                .unwrap();
            assert_eq!(info.status, Status::Crashed);
        },
        |_, kind, o| kind == Kind::Any && o == Outcome::Ok || invalid(o, Status::Crashed),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_remove_get_invalid_state_or_not_found() {
    let home = TestHome::new().await;
    for round in 0..5 {
        let name = format!("removing-{round}");
        let sb = home.builder(&name).create().await.unwrap();
        let fresh = sb.handle().sandbox().await.unwrap();
        sb.stop().await.unwrap();
        let handle = sb.handle();
        let remover = tokio::spawn(async move { handle.remove().await });
        let calls = every_call(&home, &name, &sb, &fresh, true);
        let removed = remover.await.unwrap();
        assert!(
            removed.is_ok() || matches!(removed, Err(burrow::Error::InvalidState { .. })),
            "{removed:?}"
        );
        for (call, kind, o, text) in results(calls).await {
            assert!(
                invalid(o, Status::Stopped)
                    || matches!(o, Outcome::Err(ErrorCode::NotFound, _))
                    || o == Outcome::Ok && (kind == Kind::Any || removed.is_err()),
                "{call}: {o:?} {text}"
            );
        }
        let _ = sb.handle().destroy().await;
    }
}

/// Rounds of the cross-process race: every process calls early in a round
/// (keeping the sandbox busy), then once more at a random moment from
/// shortly before to well after the idle reclaim that follows, so calls land
/// before, inside and after the reclaim's end of run.
const RACE_PERIOD_MS: u64 = 900;
const RACE_IDLE_MS: u64 = 300;
const RACE_ROUNDS: u64 = 15;

/// The moments (ms after the epoch) of one process's calls.
fn race_schedule(seed: u64) -> Vec<u64> {
    let mut rng = seed;
    let mut next = |lo: u64, hi: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (rng >> 33) % (hi - lo)
    };
    let mut at = Vec::new();
    for k in 0..RACE_ROUNDS {
        at.push(k * RACE_PERIOD_MS + next(0, 150));
        at.push(k * RACE_PERIOD_MS + next(400, 800));
    }
    at
}

async fn sleep_until_epoch(epoch_ms: u64, offset_ms: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = epoch_ms + offset_ms;
    if at > now {
        tokio::time::sleep(Duration::from_millis(at - now)).await;
    }
}

/// Child process body of `calls_racing_reclaims_across_processes_all_succeed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process body, run by calls_racing_reclaims_across_processes_all_succeed"]
async fn reclaim_race_child() {
    let home = std::env::var("RACE_CHILD_HOME")
        .expect("run only as a child of calls_racing_reclaims_across_processes_all_succeed");
    let name = std::env::var("RACE_CHILD_NAME").unwrap();
    let epoch: u64 = std::env::var("RACE_CHILD_EPOCH").unwrap().parse().unwrap();
    let seed: u64 = std::env::var("RACE_CHILD_SEED").unwrap().parse().unwrap();
    common::init_env();
    let backend = std::sync::Arc::new(burrow::LocalBackend::open_at(&home).await.unwrap());
    let handle = SandboxHandle::get_in(backend, &name).await.unwrap();
    // One long-lived handle (its connection meets every reclaim) and a
    // fresh one per call.
    let kept = handle.sandbox().await.unwrap();
    let mut failures = Vec::new();
    for (i, at) in race_schedule(seed).into_iter().enumerate() {
        sleep_until_epoch(epoch, at).await;
        let sb = if i % 2 == 0 {
            kept.clone()
        } else {
            handle.sandbox().await.unwrap()
        };
        let r = if i % 3 == 0 {
            sb.fs().write("/tmp/race", format!("{i}")).await.map(|_| ())
        } else {
            sb.exec(["echo", &format!("call-{i}")]).await.map(|out| {
                assert_eq!(out.stdout_str(), format!("call-{i}\n"));
            })
        };
        if let Err(e) = r {
            failures.push(format!("call {i}: {} ({e})", e.code()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    println!("CHILD_OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_reclaims_across_processes_all_succeed() {
    let home = TestHome::new().await;
    let sb = home
        .builder("racing")
        .idle_timeout(Duration::from_millis(RACE_IDLE_MS))
        .detached(true)
        .create()
        .await
        .unwrap();
    let gen0 = sb.info().await.unwrap().generation;
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 1500;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3u64)
        .map(|seed| {
            std::process::Command::new(&exe)
                .args([
                    "reclaim_race_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("RACE_CHILD_HOME", home.path())
                .env("RACE_CHILD_NAME", "racing")
                .env("RACE_CHILD_EPOCH", epoch.to_string())
                .env("RACE_CHILD_SEED", (seed * 7919 + 17).to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // The CLI, as the report that found the window used it: a process per
    // call, at the late moments of a fourth schedule.
    let mut cli_failures = Vec::new();
    for (i, at) in race_schedule(4242)
        .into_iter()
        .enumerate()
        .skip(1)
        .step_by(2)
    {
        sleep_until_epoch(epoch, at).await;
        let out = home
            .cli()
            .args(["exec", "racing", "--", "echo", "x"])
            .output()
            .unwrap();
        if !out.status.success() || out.stdout != b"x\n" {
            cli_failures.push(format!(
                "cli call {i}: {:?} {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("CHILD_OK"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(cli_failures.is_empty(), "{cli_failures:#?}");
    let info = sb.info().await.unwrap();
    assert!(
        info.generation >= gen0 + 5,
        "the calls should have met several reclaims (generation {} from {gen0})",
        info.generation
    );
    sb.handle().destroy().await.unwrap();
}
