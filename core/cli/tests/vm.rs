#![allow(clippy::unwrap_used)]
//! What only the vm driver has: a guest kernel of its own (isolation from
//! the host's filesystem, its own memory and CPUs), QEMU as the runtime
//! process (killed -> Crashed), a wedged QEMU caught by the start deadline,
//! its network card's frames through the sandbox's policy stack, and
//! `burrow doctor`. Every test here asks for the
//! vm driver explicitly, whatever `BURROW_DRIVER` says; the shared suites
//! (lifecycle, policies, processes, logs) cover the rest against either
//! driver.

use burrow_cli_testkit as common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use burrow::internal::fault::{Fault, FAULT_ENV};
use burrow::{Backend, ErrorCode, ExitReason, SandboxHandle, Status};
use common::{busybox_rootfs, eventually, TestHome};

fn image() -> String {
    busybox_rootfs().to_string_lossy().into_owned()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={} stderr={}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_sees_only_its_own_filesystem_memory_and_cpus() {
    let home = TestHome::new().await;
    // Something on the host the guest must not see.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("host-secret");
    std::fs::write(&secret, b"host only").unwrap();

    let sb = home
        .builder("iso")
        .driver("vm")
        .memory_mb(192)
        .cpus(2.0)
        .create()
        .await
        .unwrap();
    let config = sb.info().await.unwrap().config;
    assert_eq!(config.driver, Some(burrow::DriverKind::Vm));
    // No disk asked for: the host's default, recorded at create.
    assert_eq!(config.disk_mb, burrow::DefaultLimits::BUILT_IN.disk_mb);
    let sh = |script: String| {
        let sb = sb.clone();
        async move {
            let out = sb.exec(["sh", "-c", script.as_str()]).await.unwrap();
            assert_eq!(out.status.code, Some(0), "{script}: {}", out.stderr_str());
            out.stdout_str().trim().to_owned()
        }
    };
    // Its own kernel, not the host's.
    let release = sh("uname -r".into()).await;
    assert!(release.ends_with("-burrow"), "{release}");
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(release, host_release.trim());

    // The host's files are not there, whatever the path.
    let probe = format!(
        "test -e {0} && echo visible; test -e {1} && echo visible; test -e {2} && echo visible; true",
        secret.display(),
        home.path().display(),
        common::workspace_root().display(),
    );
    assert_eq!(sh(probe).await, "");
    // The root is the image over the sandbox's own disk, nothing else
    // from the host: every mount is a guest-side filesystem.
    let mounts = sh("cat /proc/mounts".into()).await;
    for line in mounts.lines() {
        let fstype = line.split_whitespace().nth(2).unwrap();
        assert!(
            ["overlay", "proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "ext4", "rootfs"]
                .contains(&fstype),
            "unexpected mount {line}"
        );
        assert!(!line.contains(&*home.path().to_string_lossy()), "{line}");
    }
    // Only the configured memory and CPUs.
    let kib: u64 = sh("grep MemTotal /proc/meminfo".into())
        .await
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (140 * 1024..=192 * 1024).contains(&kib),
        "MemTotal {kib} KiB"
    );
    assert_eq!(sh("nproc".into()).await, "2");
    assert_eq!(sh("grep -c ^processor /proc/cpuinfo".into()).await, "2");
    // Without networking the guest has loopback only, and it is up.
    assert_eq!(sh("ls /sys/class/net".into()).await, "lo");
    sb.destroy().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || common::vms_of(home.path())
            .is_empty())
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_killed_mid_run_is_crashed_and_synced_data_survives() {
    let home = TestHome::new().await;
    let sb = home.builder("killed").driver("vm").create().await.unwrap();
    sb.fs()
        .write("/root/kept.txt", b"written before the crash")
        .await
        .unwrap();
    let out = sb.exec(["sync"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    let gen = sb.generation();

    let qemu = common::guest_pid(home.path(), sb.id());
    assert_eq!(common::vms_of(home.path()), vec![qemu as u32]);
    // SAFETY: kill(2) on the QEMU process the driver recorded for this run.
    assert_eq!(unsafe { libc::kill(qemu, libc::SIGKILL) }, 0);
    let info = tokio::time::timeout(Duration::from_secs(20), sb.wait_until_stopped())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.status, Status::Crashed);
    let run = info.last_run.unwrap();
    assert_eq!(run.exit_reason, Some(ExitReason::Crashed));
    assert!(run.detail.unwrap().contains("signal 9"));
    let err = sb.exec(["true"]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);

    // The next start boots the same sandbox on its own disk.
    let again = sb.handle().connect_or_start().await.unwrap();
    assert_eq!(again.id(), sb.id());
    assert_eq!(again.generation(), gen + 1);
    assert_eq!(
        again.fs().read("/root/kept.txt").await.unwrap(),
        b"written before the crash"
    );
    again.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_vm_is_caught_by_the_start_deadline_and_cleaned_up() {
    let home = TestHome::new().await;
    // The clean retry below restores the image's boot template, warmed
    // here without a deadline, instead of building it inside its 10 s
    // (a template build under TCG on a loaded machine can take longer).
    let warm = home
        .cli()
        .args(["image", "warm", &image()])
        .output()
        .unwrap();
    assert!(
        warm.status.success(),
        "{}",
        String::from_utf8_lossy(&warm.stderr)
    );
    // The fault starts QEMU with its CPUs stopped: the guest never boots and
    // QEMU never exits, like a VM hung by a broken accelerator.
    let out = home
        .cli()
        .args([
            "--json",
            "up",
            "wedged",
            "--driver",
            "vm",
            "--image",
            &image(),
            // Also the bound of the clean retry below, so roomy enough for
            // a TCG boot on a busy machine.
            "--startup-timeout",
            "10s",
        ])
        .env(FAULT_ENV, Fault::VmStartPaused.as_str())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["error"]["code"], "start_failed");
    let info = home.backend.get("wedged").await.unwrap();
    assert_eq!(info.status, Status::Crashed);
    assert_eq!(
        info.last_run.as_ref().and_then(|r| r.exit_reason),
        Some(ExitReason::StartFailed)
    );
    // Nothing of that start is left running.
    let clean = eventually(Duration::from_secs(10), || {
        common::vms_of(home.path()).is_empty()
            && common::supervisors_of(&home.path().to_string_lossy()).is_empty()
    })
    .await;
    assert!(clean, "QEMU or the supervisor outlived the failed start");

    // The next call (without the fault) starts it cleanly.
    let sb = SandboxHandle::get_in(home.dyn_backend(), "wedged")
        .await
        .unwrap()
        .connect_or_start()
        .await
        .unwrap();
    assert_eq!(sb.exec(["echo", "ok"]).await.unwrap().stdout_str(), "ok\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vms_network_goes_through_its_policy_stack() {
    let home = TestHome::new().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut got = String::new();
        conn.read_to_string(&mut got).unwrap();
        got
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = closed.local_addr().unwrap().port();
    drop(closed);
    let policy = burrow::NetworkPolicy::allow([format!("tcp:127.0.0.1:{port}")]).unwrap();
    let sb = home
        .builder("net")
        .driver("vm")
        .network(policy)
        .create()
        .await
        .unwrap();
    let resolv = sb.fs().read("/etc/resolv.conf").await.unwrap();
    assert_eq!(String::from_utf8_lossy(&resolv), "nameserver 10.0.2.3\n");
    // The gateway is the host's loopback, where a rule names 127.0.0.1.
    let send = |port: u16| format!("echo hello-from-the-guest | nc -w 5 10.0.2.2 {port}");
    let out = sb.exec(["sh", "-c", send(port).as_str()]).await.unwrap();
    assert_eq!(out.status.code, Some(0), "{}", out.stderr_str());
    assert_eq!(accept.join().unwrap(), "hello-from-the-guest\n");
    // Another port of the host is named by no rule: refused by the stack.
    let out = sb.exec(["sh", "-c", send(other).as_str()]).await.unwrap();
    assert_ne!(out.status.code, Some(0));
    let net = sb
        .metrics()
        .await
        .unwrap()
        .network
        .expect("network counters");
    assert_eq!(net.connections, 1, "{net:?}");
    assert!(net.refusals >= 1, "{net:?}");
    assert_eq!(
        net.bytes_out,
        "hello-from-the-guest\n".len() as u64,
        "{net:?}"
    );
    // A change of the policy lands in the running VM's stack.
    let plan = sb
        .modify()
        .network(burrow::Network::None)
        .apply()
        .await
        .unwrap();
    let change = plan.changes.iter().find(|c| c.field == "network").unwrap();
    assert_eq!(change.applies, burrow::Applies::Live);
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_driver_and_driver_choice_is_validated() {
    let home = TestHome::new().await;
    let out = home
        .cli()
        .args(["--json", "doctor"])
        .env_remove("BURROW_DRIVER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["drivers"]["container"]["ok"], true);
    assert_eq!(v["drivers"]["vm"]["ok"], true, "{v}");
    let accel = v["drivers"]["vm"]["details"]["accel"]["accel"]
        .as_str()
        .unwrap();
    assert!(accel == "kvm" || accel == "tcg", "{accel}");
    // What confines each driver's guests here, as the drivers say it.
    let container = &v["confinement"]["container"];
    assert!(container["seccomp"]
        .as_str()
        .unwrap()
        .contains("before the first instruction"));
    assert!(container["limits"].is_string(), "{v}");
    assert!(container["disk"].is_string(), "{v}");
    assert!(v["confinement"]["vm"]["disk"].is_string(), "{v}");
    assert_eq!(
        v["default_limits"]["disk_mb"],
        burrow::DefaultLimits::BUILT_IN.disk_mb.unwrap()
    );
    let qemu = v["confinement"]["vm"]["qemu seccomp"].as_str().unwrap();
    assert!(qemu.contains("spawn=deny"), "{qemu}");
    assert_eq!(
        v["default_limits"]["pids_limit"],
        burrow::DefaultLimits::BUILT_IN.pids_limit.unwrap()
    );

    // Without QEMU the vm driver is unavailable, with a typed code; the
    // exit code says whether the default driver works.
    let out = home
        .cli()
        .args(["--json", "doctor"])
        .env_remove("BURROW_DRIVER")
        .env("BURROW_QEMU", "/nonexistent/qemu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["drivers"]["vm"]["ok"], false);
    assert_eq!(v["drivers"]["vm"]["code"], "runtime_unavailable");
    let out = home
        .cli()
        .args(["--json", "doctor"])
        .env("BURROW_DRIVER", "vm")
        .env("BURROW_QEMU", "/nonexistent/qemu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));

    // Unknown drivers are refused, through every door, and create nothing.
    let out = home
        .cli()
        .args(["--json", "create", &image(), "--name", "x"])
        .env("BURROW_DRIVER", "firecracker")
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(json(&out)["error"]["code"], "invalid_config");
    let err = home
        .builder("x")
        .driver("firecracker")
        .define()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    let err = home
        .builder("x")
        .driver("vm")
        .memory_mb(32)
        .define()
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig);
    assert!(home
        .backend
        .list(&Default::default())
        .await
        .unwrap()
        .is_empty());

    // A missing QEMU fails the start with the reason, and leaves it
    // restartable.
    let out = home
        .cli()
        .args([
            "--json",
            "up",
            "noqemu",
            "--driver",
            "vm",
            "--image",
            &image(),
        ])
        .env("BURROW_QEMU", "/nonexistent/qemu")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(json(&out)["error"]["code"], "start_failed");
    let info = home.backend.get("noqemu").await.unwrap();
    assert_eq!(info.status, Status::Crashed);
    assert!(info
        .last_run
        .unwrap()
        .detail
        .unwrap()
        .contains("BURROW_QEMU"));
}

/// QEMU runs under its own seccomp filter (`-sandbox on`, spawning, id
/// changes, obsolete syscalls and resource control denied) from before the
/// guest runs, and a saved state still goes through: the boot template
/// this start restored was saved through a descriptor handed over QMP, as
/// QEMU may no longer run `cat` for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_runs_under_its_own_seccomp_filter() {
    let home = TestHome::new().await;
    let sb = home.builder("jailed").driver("vm").create().await.unwrap();
    let qemu = common::guest_pid(home.path(), sb.id());
    let status = std::fs::read_to_string(format!("/proc/{qemu}/status")).unwrap();
    assert_eq!(common::status_field(&status, "Seccomp:"), "2");
    assert_eq!(common::status_field(&status, "NoNewPrivs:"), "1");
    let cmdline = std::fs::read(format!("/proc/{qemu}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "-sandbox").unwrap();
    for deny in [
        "obsolete=deny",
        "elevateprivileges=deny",
        "spawn=deny",
        "resourcecontrol=deny",
    ] {
        assert!(args[at + 1].split(',').any(|o| o == deny), "{args:?}");
    }
    let out = sb.exec(["echo", "up"]).await.unwrap();
    assert_eq!(out.stdout_str(), "up\n");
    sb.destroy().await.unwrap();
}

/// A guest that writes past `disk_mb` gets `ENOSPC` inside, its disk on
/// the host never grows past the limit, `metrics` shows the use, and the
/// sandbox goes on answering (and starts again with the same disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_past_its_disk_limit_gets_enospc_and_the_host_keeps_its_space() {
    const LIMIT_MB: u64 = 64;
    let home = TestHome::new().await;
    let sb = home
        .builder("disk")
        .driver("vm")
        .disk_mb(LIMIT_MB)
        .create()
        .await
        .unwrap();
    common::fill_past_disk_limit(&sb, LIMIT_MB).await;
    sb.stop().await.unwrap();
    let sb = sb.handle().start().await.unwrap();
    let out = sb.exec(["cat", "/again"]).await.unwrap();
    assert_eq!(out.stdout_str(), "x\n");
    assert_eq!(
        sb.metrics().await.unwrap().disk_limit_bytes,
        Some(LIMIT_MB << 20)
    );
    sb.destroy().await.unwrap();
}

/// A disk limit the driver cannot hold here is refused naming it (unless
/// asked for as best effort); one outside its range is refused by any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_limit_out_of_range_is_refused_naming_it() {
    let home = TestHome::new().await;
    for mb in [16, (1 << 24) + 1] {
        let e = home
            .builder("bad-disk")
            .driver("vm")
            .disk_mb(mb)
            .create()
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidConfig);
        match e {
            burrow::Error::InvalidConfig { field, .. } => assert_eq!(field, "disk_mb"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(home
        .dyn_backend()
        .list(&Default::default())
        .await
        .unwrap()
        .is_empty());
}
