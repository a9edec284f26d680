#![allow(clippy::unwrap_used)]
//! End-to-end lifecycle tests in one process: real supervisors, real runc
//! containers, real SQLite.

use burrow_cli_testkit as common;

use std::time::Duration;

use burrow::{ErrorCode, ExecOptions, Sandbox, SandboxHandle, Status};
use common::TestHome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_exec_fs_stop_restart_remove() {
    let home = TestHome::new().await;
    let sb = home
        .builder("basic")
        .env("GREETING", "hello")
        .create()
        .await
        .expect("create");
    assert_eq!(sb.status().await.unwrap(), Status::Running);

    let out = sb
        .exec(["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "hello\n");
    assert_eq!(out.stderr_str(), "oops\n");
    assert_eq!(out.status.code, Some(3));

    let out = sb
        .exec_with(ExecOptions::new(["cat"]).stdin(b"piped".to_vec()))
        .await
        .unwrap();
    assert_eq!(out.stdout, b"piped");

    let id = sb.exec(["id", "-u"]).await.unwrap();
    assert_eq!(
        id.stdout_str().trim(),
        "0",
        "the agent runs as root inside its user namespace"
    );

    sb.fs().mkdir("/data/sub", true).await.unwrap();
    sb.fs().write("/data/sub/f.txt", b"content").await.unwrap();
    assert_eq!(sb.fs().read("/data/sub/f.txt").await.unwrap(), b"content");
    assert!(sb.fs().exists("/data/sub/f.txt").await.unwrap());
    let names: Vec<String> = sb
        .fs()
        .list("/data/sub")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["f.txt".to_string()]);
    let err = sb.fs().read("/nope").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Guest);
    let err = sb.fs().read("relative").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);

    // Restart continuity: same id, same config, the writable layer survives.
    let gen1 = sb.generation();
    let info = sb.restart().await.unwrap();
    assert_eq!(&info.id, sb.id());
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.generation, gen1 + 1);
    assert_eq!(
        info.config.env.get("GREETING").map(String::as_str),
        Some("hello")
    );
    assert_eq!(sb.fs().read("/data/sub/f.txt").await.unwrap(), b"content");

    let stopped = sb.stop().await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(
        stopped.last_run.clone().unwrap().exit_reason,
        Some(burrow::ExitReason::Stopped)
    );

    // Every run is kept, newest first, each with its start's phases; the
    // newest is the record's last run.
    let runs = home.backend.runs("basic", sb.id(), 10).await.unwrap();
    let gens: Vec<u64> = runs.iter().map(|r| r.generation).collect();
    assert_eq!(gens, vec![gen1 + 1, gen1]);
    assert_eq!(Some(&runs[0]), stopped.last_run.as_ref());
    assert_eq!(runs[1].exit_reason, Some(burrow::ExitReason::Stopped));
    assert!(runs.iter().all(|r| r.timings.is_some()), "{runs:?}");
    let newest = home.backend.runs("basic", sb.id(), 1).await.unwrap();
    assert_eq!(newest, runs[..1]);

    let err = sb.exec(["true"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);

    let handle = sb.handle();
    handle.remove().await.unwrap();
    let err = Sandbox::get_by_id(sb.id()).await;
    assert!(err.is_err());
    let err = home.backend.get("basic").await;
    assert_eq!(err.unwrap_err().code(), ErrorCode::NotFound);
    let err = home.backend.runs("basic", sb.id(), 1).await.unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::NotFound,
        "runs go with their sandbox"
    );
    assert!(
        !home
            .path()
            .join("sandboxes")
            .join(sb.id().as_str())
            .exists(),
        "remove deletes the sandbox's own state"
    );
}

use burrow::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_is_final_and_existing_config_wins() {
    let home = TestHome::new().await;
    let first = home
        .builder("cfg")
        .env("WHO", "first")
        .cpus(0.5)
        .best_effort_limits(true)
        .create()
        .await
        .unwrap();
    // connect_or_create with other options converges on the existing one.
    let again = home
        .builder("cfg")
        .env("WHO", "second")
        .cpus(1.5)
        .connect_or_create()
        .await
        .unwrap();
    assert_eq!(again.id(), first.id());
    let out = again.exec(["sh", "-c", "echo $WHO"]).await.unwrap();
    assert_eq!(out.stdout_str(), "first\n");
    assert_eq!(again.info().await.unwrap().config.cpus, Some(0.5));

    // strict create on a taken name
    let err = home.builder("cfg").create().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    assert_eq!(err.sandbox_id(), Some(first.id()));

    first.destroy().await.unwrap();
    let recreated = home.builder("cfg").create().await.unwrap();
    assert_ne!(recreated.id(), first.id(), "a recreated name gets a new id");
    recreated.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_receivers_get_sandbox_replaced_and_touch_nothing() {
    let home = TestHome::new().await;
    let old = home.builder("ident").create().await.unwrap();
    let old_handle = old.handle();
    old.stop().await.unwrap();
    old_handle.remove().await.unwrap();
    let new = home.builder("ident").create().await.unwrap();
    let new_gen = new.generation();
    assert_ne!(new.id(), old.id());

    let check = |e: burrow::Error| {
        assert_eq!(e.code(), ErrorCode::SandboxReplaced, "{e}");
        assert_eq!(e.sandbox_id(), Some(old.id()));
    };
    check(old_handle.info().await.unwrap_err());
    check(old_handle.start().await.unwrap_err());
    check(old_handle.connect_or_start().await.unwrap_err());
    check(old_handle.stop().await.unwrap_err());
    check(old_handle.kill().await.unwrap_err());
    check(old_handle.request_drain().await.unwrap_err());
    check(old_handle.restart().await.unwrap_err());
    check(old_handle.destroy().await.unwrap_err());
    check(old_handle.remove().await.unwrap_err());
    check(
        old_handle
            .wait_for_status(&[Status::Stopped])
            .await
            .unwrap_err(),
    );
    check(old.exec(["true"]).await.unwrap_err());
    check(old.fs().read("/etc/motd").await.unwrap_err());
    check(old.stop().await.unwrap_err());
    check(old.kill().await.unwrap_err());
    check(old.restart().await.unwrap_err());
    check(old.destroy().await.unwrap_err());
    check(old.request_drain().await.unwrap_err());

    // The replacement is untouched: same generation, still running.
    let info = new.info().await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.generation, new_gen);
    assert_eq!(new.exec(["true"]).await.unwrap().status.code, Some(0));
    new.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_typed_and_changes_nothing() {
    let home = TestHome::new().await;
    for name in [String::new(), "a".repeat(129), "€".repeat(43)] {
        let err = home.builder(&name).define().await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidName, "{name:?}");
    }
    // 128 bytes of multi-byte UTF-8 is a valid name.
    let long = "😀".repeat(32);
    let h = home.builder(&long).define().await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Created);

    // A relative image path is persisted absolute (later starts may run
    // elsewhere). Test binaries run in the package directory.
    let rel = "../../target/test-images/busybox";
    assert!(std::path::Path::new(rel).is_dir());
    let h2 = Sandbox::builder("relative")
        .image(rel)
        .backend(home.dyn_backend())
        .define()
        .await
        .unwrap();
    let stored = h2.config().await.unwrap().image;
    assert_eq!(
        std::path::PathBuf::from(&stored),
        common::busybox_rootfs().canonicalize().unwrap()
    );
    h2.remove().await.unwrap();

    let err = home.builder("cfg").cpus(0.0).define().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let err = home
        .builder("cfg")
        .workdir("relative")
        .define()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let err = Sandbox::builder("img")
        .image("/definitely/not/a/dir")
        .backend(home.dyn_backend())
        .define()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage);
    let err = home.backend.get("cfg").await.unwrap_err();
    assert_eq!(
        err.code(),
        ErrorCode::NotFound,
        "a rejected create persists nothing"
    );
    let all = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(all.len(), 1);

    let sb = h.start().await.unwrap();
    let err = sb.exec(Vec::<String>::new()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = sb
        .exec_with(ExecOptions::new(["true"]).cwd("rel"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = sb.exec(["/no/such/program"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Guest);
    assert_eq!(sb.status().await.unwrap(), Status::Running);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_and_copy() {
    let home = TestHome::new().await;
    let sb = home.builder("net").create().await.unwrap();
    // busybox nc answers one connection on port 7000 inside the sandbox.
    let server = sb
        .spawn(ExecOptions::new(["sh", "-c", "echo pong | nc -l -p 7000"]))
        .await
        .unwrap();
    server.close_stdin().await.unwrap();
    let mut attempt = 0;
    let reply = loop {
        attempt += 1;
        match sb.tunnel(7000).await {
            Ok(mut t) => {
                use tokio::io::AsyncReadExt;
                let mut buf = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), t.read_to_end(&mut buf)).await;
                if !buf.is_empty() {
                    break buf;
                }
            }
            Err(e) if attempt < 50 => {
                let _ = e;
            }
            Err(e) => panic!("tunnel failed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(attempt < 50, "no answer through the tunnel");
    };
    assert_eq!(reply, b"pong\n");
    let _ = server.wait().await;

    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("tree")).unwrap();
    std::fs::write(src.path().join("tree/a.txt"), b"A").unwrap();
    sb.fs()
        .copy_in(&src.path().join("tree"), "/in")
        .await
        .unwrap();
    assert_eq!(sb.fs().read("/in/tree/a.txt").await.unwrap(), b"A");
    let dst = tempfile::tempdir().unwrap();
    sb.fs().copy_out("/in/tree", dst.path()).await.unwrap();
    assert_eq!(std::fs::read(dst.path().join("tree/a.txt")).unwrap(), b"A");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_status_and_label() {
    let home = TestHome::new().await;
    let a = home.builder("a").label("team", "x").define().await.unwrap();
    let _b = home.builder("b").label("team", "y").define().await.unwrap();
    let filter = burrow::ListFilter::default().label("team", "x");
    let found = home.backend.list(&filter).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(&found[0].id, a.id());
    let filter = burrow::ListFilter::default().statuses([Status::Running]);
    assert!(home.backend.list(&filter).await.unwrap().is_empty());
    let _ = SandboxHandle::get_in(home.dyn_backend(), "a")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_survive_removal_and_host_mounts_can_be_read_only() {
    let home = TestHome::new().await;
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("given.txt"), b"from host").unwrap();
    let sb = home
        .builder("vols")
        .volume("shared-data", "/data")
        .mount(host.path(), "/host", true)
        .create()
        .await
        .unwrap();
    sb.fs().write("/data/kept.txt", b"kept").await.unwrap();
    assert_eq!(sb.fs().read("/host/given.txt").await.unwrap(), b"from host");
    let out = sb
        .exec(["sh", "-c", "echo x > /host/new.txt"])
        .await
        .unwrap();
    assert_ne!(
        out.status.code,
        Some(0),
        "a read-only host mount refuses writes"
    );
    assert!(!host.path().join("new.txt").exists());
    sb.destroy().await.unwrap();

    // Removal deleted the sandbox's own state, not the volume or the host dir.
    assert!(host.path().join("given.txt").exists());
    let next = home
        .builder("vols2")
        .volume("shared-data", "/data")
        .create()
        .await
        .unwrap();
    assert_eq!(next.fs().read("/data/kept.txt").await.unwrap(), b"kept");
    next.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_descriptors_do_not_leak() {
    let home = TestHome::new().await;
    let sb = home.builder("fds").create().await.unwrap();
    let sup = sb
        .info()
        .await
        .unwrap()
        .last_run
        .unwrap()
        .supervisor_pid
        .unwrap();
    let targets = |pid: u32| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let held = targets(sup);
    assert!(
        !held.iter().any(|t| t.ends_with(".name")),
        "the supervisor holds no transition lock: {held:?}"
    );
    assert_eq!(
        held.iter().filter(|t| t.ends_with(".runtime")).count(),
        1,
        "it holds its runtime lock: {held:?}"
    );
    // Children of the supervisor other than the runtime process inherit no lock.
    let children =
        std::fs::read_to_string(format!("/proc/{sup}/task/{sup}/children")).unwrap_or_default();
    for child in children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
    {
        let cmd = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        let is_runtime = String::from_utf8_lossy(&cmd).contains("runc");
        let locks = targets(child)
            .into_iter()
            .filter(|t| t.contains("/locks/"))
            .count();
        assert!(is_runtime || locks == 0, "child {child} holds a lock");
    }
    // Guest processes see only their stdio.
    let out = sb.exec(["ls", "/proc/self/fd"]).await.unwrap();
    let listing = out.stdout_str();
    let fds: Vec<&str> = listing.split_whitespace().collect();
    assert_eq!(
        fds,
        ["0", "1", "2", "3"],
        "ls sees stdio and its own directory handle only"
    );
    sb.destroy().await.unwrap();
}

/// runc and crun each run a sandbox of the container driver, as root and
/// as an unprivileged user (rootless, each in its own mode; crun with the
/// cgroup2 mount of a hybrid host out of its view, covered where an
/// unprivileged user cannot unmount it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc_and_crun_each_run_a_container() {
    let home = TestHome::new().await;
    for runtime in [burrow::OciRuntime::Runc, burrow::OciRuntime::Crun] {
        let sb = home
            .builder(&format!("with-{}", runtime.binary()))
            .driver("container")
            .runtime(runtime)
            .create()
            .await
            .unwrap();
        let out = sb.exec(["echo", "up"]).await.unwrap();
        assert_eq!(out.stdout_str(), "up\n", "{runtime:?}");
        assert_eq!(sb.info().await.unwrap().config.oci_runtime(), runtime);
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_seccomp_filter_is_in_force() {
    // The container driver's filter, installed by the guest agent (a VM is
    // its own boundary and has none): checked syscall by syscall.
    let home = TestHome::new().await;
    let sb = home
        .builder("seccomp")
        .driver("container")
        .create()
        .await
        .unwrap();
    let dir = home.path().join("probes");
    std::fs::create_dir_all(&dir).unwrap();
    let (eperm, enosys) = (-(libc::EPERM as i64), -(libc::ENOSYS as i64));
    let probes: &[(&str, i64, [i64; 3], Option<i64>)] = &[
        ("getpid", libc::SYS_getpid, [0, 0, 0], None),
        // Caps alone would let a user namespace be made; the filter does not.
        (
            "unshare_user",
            libc::SYS_unshare,
            [libc::CLONE_NEWUSER as i64, 0, 0],
            Some(eperm),
        ),
        (
            "personality_query",
            libc::SYS_personality,
            [0xffff_ffff, 0, 0],
            None,
        ),
        (
            "personality_no_aslr",
            libc::SYS_personality,
            [0x0040000, 0, 0],
            Some(eperm),
        ),
        (
            "socket_vsock",
            libc::SYS_socket,
            [libc::AF_VSOCK as i64, libc::SOCK_STREAM as i64, 0],
            Some(eperm),
        ),
        (
            "socket_unix",
            libc::SYS_socket,
            [libc::AF_UNIX as i64, libc::SOCK_STREAM as i64, 0],
            None,
        ),
        // ENOSYS makes libc fall back to clone. gVisor answers every
        // filtered call with EPERM, so under runsc clone3 is its kernel's
        // (which refuses a NULL argument block).
        if common::runtime() == burrow::OciRuntime::Runsc {
            (
                "clone3",
                libc::SYS_clone3,
                [0, 0, 0],
                Some(-(libc::EINVAL as i64)),
            )
        } else {
            ("clone3", libc::SYS_clone3, [0, 0, 0], Some(enosys))
        },
        // Refused either way; gVisor's filter answers EPERM.
        if common::runtime() == burrow::OciRuntime::Runsc {
            ("beyond_the_table", 1000, [0, 0, 0], Some(eperm))
        } else {
            ("beyond_the_table", 1000, [0, 0, 0], Some(enosys))
        },
        ("keyctl", libc::SYS_keyctl, [0, 0, 0], Some(eperm)),
    ];
    for (name, nr, args, want) in probes {
        let bin = common::probe::syscall_probe(&dir, name, *nr, *args, *want, false);
        let path = format!("/tmp/{name}");
        sb.fs()
            .write_with(&path, &bin, Some(0o755), false)
            .await
            .unwrap();
        let out = sb.exec([path.as_str()]).await.unwrap();
        assert_eq!(out.status.code, Some(0), "{name}: {:?}", out.status);
    }
    // The 32-bit ABI: the process is killed with SIGSYS.
    let bin = common::probe::syscall_probe(&dir, "i386_getpid", 20, [0, 0, 0], None, true);
    sb.fs()
        .write_with("/tmp/i386", &bin, Some(0o755), false)
        .await
        .unwrap();
    let out = sb.exec(["/tmp/i386"]).await.unwrap();
    if common::runtime() == burrow::OciRuntime::Runsc {
        // gVisor has no 32-bit ABI: the call fails (the probe exits 1).
        assert_eq!(out.status.code, Some(1), "{:?}", out.status);
    } else {
        assert_eq!(out.status.signal, Some(libc::SIGSYS), "{:?}", out.status);
    }
    // And the agent itself lives under it: its own process says so.
    let out = sb
        .exec(["sh", "-c", "grep Seccomp: /proc/1/status"])
        .await
        .unwrap();
    assert_eq!(
        out.stdout_str().split_whitespace().nth(1),
        Some("2"),
        "{}",
        out.stdout_str()
    );
    sb.destroy().await.unwrap();
}
