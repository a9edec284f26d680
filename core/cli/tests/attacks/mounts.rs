//! Issue 56, item 4: a named volume mounted at `/.burrow` shadowed the
//! guest agent (the container driver bind-mounts it at `/.burrow/agent`),
//! so the runtime ran the tenant's file as PID 1, which never installed the
//! seccomp filter; `/proc/sys` was accepted as a target too. Every spelling
//! of a target at or under `/.burrow`, `/proc`, `/sys` or `/dev` is now
//! refused with `invalid_config` before anything is recorded, through the
//! library and the CLI alike, and an ordinary mount still runs under the
//! filter. A target whose path the guest later turns into a symlink
//! to `/.burrow` (`/mnt -> /d`, `/d/data -> /.burrow`) lands there at the
//! next start, but the agent is mounted after every other mount, so it is
//! still the real agent that runs as PID 1.

use std::process::Output;

use burrow::{Backend, ErrorCode, ListFilter, SandboxHandle};
use burrow_cli_testkit::{busybox_rootfs, is_vm, sh_ok, TestHome};

/// Targets the review mounted over, and other spellings of them.
const REFUSED: [&str; 10] = [
    "/.burrow",
    "/.burrow/agent",
    "//.burrow",
    "/proc/sys",
    "/sys/x",
    "/dev/shm",
    "/./proc",
    "/proc/.",
    "/.burrow/",
    "/",
];

/// No sandbox of any name exists in `home`.
async fn assert_nothing_recorded(home: &TestHome, what: &str) {
    let all = home.backend.list(&ListFilter::default()).await.unwrap();
    assert!(all.is_empty(), "{what}: a record was left: {all:?}");
}

pub(crate) fn json_code(out: &Output) -> String {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_refuses_mounts_over_the_agent_and_the_kernels_files() {
    let home = TestHome::new().await;
    for (i, target) in REFUSED.iter().enumerate() {
        let name = format!("m{i}");
        let err = home
            .builder(&name)
            .volume("evil", *target)
            .create()
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidConfig, "{target:?}: {err}");
        match &err {
            burrow::Error::InvalidConfig { field, .. } => {
                assert_eq!(field, "mounts[0].target", "{target:?}")
            }
            other => panic!("{target:?}: {other:?}"),
        }
        // A host directory at the same place is refused the same way.
        let host = tempfile::tempdir().unwrap();
        let err = home
            .builder(&name)
            .mount(host.path(), *target, true)
            .define()
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidConfig, "{target:?}: {err}");
        let err = SandboxHandle::get_in(home.dyn_backend(), &name)
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::NotFound, "{target:?}");
        assert_nothing_recorded(&home, target).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_refuses_mounts_over_the_agent_and_the_kernels_files() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    for (i, target) in REFUSED.iter().enumerate() {
        let volume = format!("evil:{target}");
        let create = home
            .cli()
            .args(["--json", "create", "--name", &format!("c{i}"), "-v"])
            .arg(&volume)
            .arg(&image)
            .output()
            .unwrap();
        assert!(!create.status.success(), "create {target:?} succeeded");
        assert_eq!(json_code(&create), "invalid_config", "create {target:?}");
        let run = home
            .cli()
            .args(["--json", "run", "--name", &format!("r{i}"), "--keep", "-v"])
            .arg(&volume)
            .arg(&image)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert!(!run.status.success(), "run {target:?} succeeded");
        assert_eq!(json_code(&run), "invalid_config", "run {target:?}");
        assert_nothing_recorded(&home, target).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_mount_works_and_pid_1_stays_filtered() {
    let home = TestHome::new().await;
    let sb = home
        .builder("legit")
        .volume("data", "/data")
        .create()
        .await
        .unwrap();
    sh_ok(&sb, "echo kept > /data/f").await;
    assert_eq!(sb.fs().read("/data/f").await.unwrap(), b"kept\n");
    // The agent is PID 1 and the real one: it installed the filter.
    let status = sh_ok(&sb, "cat /proc/1/status").await;
    let seccomp = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no Seccomp line: {status}"));
    if is_vm() {
        // A microVM's guest kernel is its boundary: no filter there.
        assert_eq!(seccomp, "0", "{status}");
    } else {
        assert_eq!(seccomp, "2", "{status}");
    }
    if !is_vm() {
        assert_eq!(sh_ok(&sb, "ls /.burrow").await.trim(), "agent");
    }
    sb.destroy().await.unwrap();

    // The same through the CLI.
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let out = home
        .cli()
        .args(["--json", "run", "--name", "legit-cli", "-v", "data:/data"])
        .arg(&image)
        .args(["--", "cat", "/data/f"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shape that validation cannot see: an ordinary target, made by the
/// guest to lead to `/.burrow` before the next start, with a fake agent in
/// the volume. The real agent still runs as PID 1 (under its filter, in a
/// container; a microVM's agent lives in its initramfs, out of reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_the_guest_redirects_to_the_agent_does_not_replace_it() {
    let home = TestHome::new().await;
    let sb = home
        .builder("redirect")
        .volume("vol1", "/mnt/data")
        .create()
        .await
        .unwrap();
    sh_ok(
        &sb,
        "printf '#!/bin/sh\\necho fake > /fake-ran\\nexec sleep 1000000\\n' > /mnt/data/agent; \
         chmod 755 /mnt/data/agent; mkdir /d; ln -s /.burrow /d/data; mv /mnt /mnt.old; ln -s /d /mnt",
    )
    .await;
    let handle = sb.handle();
    sb.stop().await.unwrap();
    // With the fake as PID 1 the start never got an agent's answer.
    let sb = handle.connect_or_start().await.unwrap();
    let status = sh_ok(
        &sb,
        "cat /proc/1/status; test -e /fake-ran && echo FAKE-RAN || echo no-fake",
    )
    .await;
    assert!(status.contains("no-fake"), "the fake agent ran: {status}");
    let seccomp = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no Seccomp line: {status}"));
    let want = if is_vm() { "0" } else { "2" };
    assert_eq!(seccomp, want, "PID 1 is not the filtered agent: {status}");
    sb.destroy().await.unwrap();
}

/// The agent proves itself at hello by what the kernel says its process
/// runs (the bound file's device and inode), not by what it says: a first
/// process running any other file fails the start (`start_failed`) instead
/// of becoming a running sandbox. The `BURROW_TEST_AGENT_MISMATCH` hook
/// makes the supervisor expect another file, as when a guest's file ran
/// in the agent's place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_process_that_is_not_the_agent_fails_the_start() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    let run = |hook: bool, name: &str| {
        let mut cmd = home.cli();
        if hook {
            cmd.env("BURROW_TEST_AGENT_MISMATCH", "1");
        }
        cmd.args(["--json", "run", "--name", name])
            .arg(&image)
            .args(["--", "true"])
            .output()
            .unwrap()
    };
    let out = run(true, "impostor");
    if is_vm() {
        // A microVM's agent is in its initramfs: nothing to check there.
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        assert!(
            !out.status.success(),
            "a run with an impostor agent succeeded"
        );
        assert_eq!(json_code(&out), "start_failed");
    }
    // The check passes the real agent.
    let out = run(false, "genuine");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
