#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Warm pools of the local backend, with real sandboxes (the default
//! driver's): a create of a pool's configuration claims one of its running
//! sandboxes, which becomes the creator's (name, labels, environment) without
//! a start, and the pool refills behind it; an empty pool falls back to a
//! cold start (a miss); a create alone, or of another configuration, never
//! claims; bad definitions change nothing.

use burrow_cli_testkit as common;

use std::time::Duration;

use burrow::{Backend, ErrorCode, PoolSpec, SandboxConfig, Status};
use common::TestHome;

fn config() -> SandboxConfig {
    let mut c = SandboxConfig::new(common::busybox_rootfs().to_string_lossy().into_owned());
    c.env.insert("POOLED".into(), "yes".into());
    c
}

/// Whether a claimed sandbox takes its new name's hostname here: the
/// container driver changes a running container's, not gVisor's kernel's
/// nor a vm's.
fn hostname_follows_claims() -> bool {
    common::driver() == burrow::DriverKind::Container
        && common::runtime() != burrow::OciRuntime::Runsc
}

async fn warm_count(home: &TestHome, pool: &str) -> u32 {
    home.backend.get_pool(pool).await.unwrap().warm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_claims_a_warm_sandbox_and_the_pool_refills() {
    let home = TestHome::new().await;
    let pool = home
        .backend
        .create_pool(PoolSpec::new("warm", config(), 2))
        .await
        .unwrap();
    assert_eq!((pool.size, pool.warm, pool.claims), (2, 2, 0));
    // Warm sandboxes are nobody's: not listed.
    assert!(home
        .backend
        .list(&Default::default())
        .await
        .unwrap()
        .is_empty());

    let sb = home
        .builder("claimed")
        .env("TASK", "42")
        .label("team", "a")
        .idle_timeout(Duration::from_secs(600))
        .create()
        .await
        .unwrap();
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.name, "claimed");
    assert_eq!(info.config.labels["team"], "a");
    let out = sb.exec(["sh", "-c", "echo $POOLED $TASK"]).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yes 42\n");
    // Its hostname is its new name's, in the kernel and in /etc, where the
    // driver can change it live (docs/lifecycle.md, "Warm pools").
    let out = sb
        .exec([
            "sh",
            "-c",
            "hostname; cat /etc/hostname; grep -c claimed /etc/hosts",
        ])
        .await
        .unwrap();
    let names = String::from_utf8_lossy(&out.stdout).into_owned();
    if hostname_follows_claims() {
        assert_eq!(names, "claimed\nclaimed\n1\n");
    } else {
        assert!(names.starts_with("pool-warm-"), "{names}");
    }
    let listed = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, info.id);
    assert_eq!(home.backend.get_pool("warm").await.unwrap().claims, 1);

    // Refilled in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while warm_count(&home, "warm").await < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool did not refill"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A create alone, and a create of another configuration, claim nothing.
    let defined = home
        .builder("defined")
        .env("POOLED", "yes")
        .define()
        .await
        .unwrap();
    assert_eq!(defined.status().await.unwrap(), Status::Created);
    let other = home
        .builder("other")
        .env("POOLED", "yes")
        .workdir("/tmp")
        .create()
        .await
        .unwrap();
    assert_ne!(other.id(), &info.id);
    let pool = home.backend.get_pool("warm").await.unwrap();
    assert_eq!((pool.claims, pool.misses), (1, 0));

    // Empty: a create starts cold and counts a miss.
    home.backend.scale_pool("warm", 0).await.unwrap();
    assert_eq!(warm_count(&home, "warm").await, 0);
    let cold = home
        .builder("cold")
        .env("POOLED", "yes")
        .create()
        .await
        .unwrap();
    assert_eq!(cold.info().await.unwrap().status, Status::Running);
    let pool = home.backend.get_pool("warm").await.unwrap();
    assert_eq!((pool.claims, pool.misses), (1, 1));

    // Removing the pool removes its warm sandboxes, not the claimed ones.
    home.backend.scale_pool("warm", 1).await.unwrap();
    home.backend.remove_pool("warm").await.unwrap();
    let err = home.backend.get_pool("warm").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    let listed = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 4, "claimed, defined, other, cold");
    let ids: Vec<String> = listed.iter().map(|i| i.id.to_string()).collect();
    for dir in std::fs::read_dir(home.path().join("sandboxes")).unwrap() {
        let dir = dir.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            ids.contains(&dir),
            "a warm sandbox's directory {dir} was left"
        );
    }
    assert_eq!(sb.info().await.unwrap().status, Status::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pool_definitions_change_nothing() {
    let home = TestHome::new().await;
    let mut with_ports = config();
    with_ports.ports = vec!["18080:80".parse().unwrap()];
    let mut with_labels = config();
    with_labels.labels.insert("k".into(), "v".into());
    for (spec, code) in [
        (PoolSpec::new("a/b/c", config(), 1), ErrorCode::InvalidName),
        (
            PoolSpec::new("big", config(), burrow::MAX_POOL_SIZE + 1),
            ErrorCode::InvalidArgument,
        ),
        (
            PoolSpec::new("ports", with_ports, 1),
            ErrorCode::InvalidConfig,
        ),
        (
            PoolSpec::new("labels", with_labels, 1),
            ErrorCode::InvalidConfig,
        ),
        (
            PoolSpec::new("noimage", SandboxConfig::new("/nonexistent/rootfs"), 1),
            ErrorCode::InvalidImage,
        ),
        // A first fill that fails (one start, not 64: an image on a
        // registry that refuses the connection) takes the pool away again.
        (
            PoolSpec::new(
                "unpullable",
                SandboxConfig::new("127.0.0.1:1/none/image:x"),
                64,
            ),
            ErrorCode::StartFailed,
        ),
    ] {
        let err = home.backend.create_pool(spec.clone()).await.unwrap_err();
        assert_eq!(err.code(), code, "{spec:?}: {err}");
    }
    assert!(home.backend.list_pools().await.unwrap().is_empty());
    let left = home.backend.list(&Default::default()).await.unwrap();
    assert!(left.is_empty(), "sandboxes left: {left:?}");
    let sandboxes = home.path().join("sandboxes");
    let dirs = std::fs::read_dir(&sandboxes).map_or(0, |d| d.count());
    assert_eq!(
        dirs,
        0,
        "sandbox directories left in {}",
        sandboxes.display()
    );
    home.backend
        .create_pool(PoolSpec::new("p", config(), 0))
        .await
        .unwrap();
    let err = home
        .backend
        .create_pool(PoolSpec::new("p", config(), 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    let err = home.backend.scale_pool("p", 65).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = home.backend.scale_pool("nope", 1).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!(home.backend.get_pool("p").await.unwrap().size, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_pools_and_up_claims() {
    let home = TestHome::new().await;
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let json = |args: &[&str]| {
        let out = home.cli().arg("--json").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let made = json(&["pool", "create", "cli-pool", &image, "--size", "1"]);
    assert_eq!(made["warm"], 1);
    let up = json(&["up", "from-pool", "--image", &image]);
    assert_eq!(up["status"], "running");
    let listed = json(&["pool", "ls"]);
    assert_eq!(listed[0]["name"], "cli-pool");
    assert_eq!(listed[0]["claims"], 1);
    let scaled = json(&["pool", "scale", "cli-pool", "0"]);
    assert_eq!(
        (scaled["size"].as_u64(), scaled["warm"].as_u64()),
        (Some(0), Some(0))
    );
    json(&["pool", "rm", "cli-pool"]);
    let out = home
        .cli()
        .args(["--json", "pool", "inspect", "cli-pool"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "not_found");
    let sb = burrow::SandboxHandle::get_in(home.dyn_backend(), "from-pool")
        .await
        .unwrap();
    assert_eq!(sb.status().await.unwrap(), Status::Running);
}

/// Sixteen claimers in sixteen processes race for a pool of four: every
/// claimer gets a running sandbox of its own name, no sandbox is handed to
/// two of them, every claim or miss is counted, and no claimed sandbox is
/// still the pool's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_racing_across_processes_hand_out_each_sandbox_once() {
    let home = TestHome::new().await;
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let mut config = SandboxConfig::new(image.clone());
    config.driver = Some(common::driver());
    home.backend
        .create_pool(PoolSpec::new("race", config, 4))
        .await
        .unwrap();
    let claimers: Vec<_> = (0..16)
        .map(|i| {
            home.cli()
                .args(["--json", "up", &format!("racer-{i}"), "--image", &image])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for (i, child) in claimers.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "racer {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["name"], format!("racer-{i}").as_str());
        assert_eq!(info["status"], "running");
        assert!(
            ids.insert(info["id"].as_str().unwrap().to_owned()),
            "{info}"
        );
    }
    let pool = home.backend.get_pool("race").await.unwrap();
    assert_eq!(pool.claims + pool.misses, 16, "{pool:?}");
    assert!(pool.claims >= 1, "{pool:?}");
    let listed = home.backend.list(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 16);
    for info in &listed {
        assert!(ids.contains(info.id.as_str()), "{info:?}");
    }
    // Refills left by the exited claimers are finished by the next one.
    home.backend.refill_pool("race").await.unwrap();
    assert_eq!(home.backend.get_pool("race").await.unwrap().warm, 4);
    assert_eq!(
        home.backend.list(&Default::default()).await.unwrap().len(),
        16
    );
}

/// A claimer killed between its two steps (a warm sandbox reserved for it
/// and told of the claim, its name not yet taken) leaves no sandbox under
/// its name and no sandbox of the pool's that is claimed twice: the next
/// refill removes the reservation, and the name is free for the next
/// create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_killed_mid_claim_leaves_nothing_half_claimed() {
    use burrow::internal::fault::Fault;
    use burrow_test_support::fault::FaultWindow;

    let home = TestHome::new().await;
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let mut config = SandboxConfig::new(image.clone());
    config.driver = Some(common::driver());
    home.backend
        .create_pool(PoolSpec::new("k", config, 1))
        .await
        .unwrap();
    let w = FaultWindow::new(home.path(), Fault::PoolClaimReserved.as_str());
    let mut child = w
        .arm(&mut home.cli())
        .args(["up", "killed", "--image", &image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        w.wait_open(Duration::from_secs(60)).await,
        "never reached the fault"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    let err = burrow::SandboxHandle::get_in(home.dyn_backend(), "killed")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    home.backend.refill_pool("k").await.unwrap();
    let pool = home.backend.get_pool("k").await.unwrap();
    // Not counted: the claim never finished.
    assert_eq!((pool.warm, pool.claims), (1, 0), "{pool:?}");
    let dirs = std::fs::read_dir(home.path().join("sandboxes"))
        .unwrap()
        .count();
    assert_eq!(dirs, 1, "the reserved sandbox was removed");

    let out = home
        .cli()
        .args(["--json", "up", "killed", "--image", &image])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["status"], "running");
    assert_eq!(home.backend.get_pool("k").await.unwrap().claims, 1);
}

/// A claim held mid-way while its pool is scaled to zero keeps its
/// sandbox (a reservation is the claimer's, not the pool's); one held
/// while its pool is removed loses it and starts cold. Either way the
/// claimer gets one running sandbox under its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_racing_a_resize_and_a_removal_converge() {
    use burrow::internal::fault::Fault;
    use burrow_test_support::fault::FaultWindow;

    let home = TestHome::new().await;
    let image = common::busybox_rootfs().to_string_lossy().into_owned();
    let mut config = SandboxConfig::new(image.clone());
    config.driver = Some(common::driver());
    home.backend
        .create_pool(PoolSpec::new("r", config, 1))
        .await
        .unwrap();
    for (name, race) in [("resized", "scale"), ("removed", "remove")] {
        let w = FaultWindow::new(home.path(), Fault::PoolClaimReserved.as_str());
        let child = w
            .arm(&mut home.cli())
            .args(["--json", "up", name, "--image", &image])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            w.wait_open(Duration::from_secs(60)).await,
            "never reached the fault"
        );
        let reserved = home.backend.get_pool("r").await.unwrap().claims;
        if race == "scale" {
            home.backend.scale_pool("r", 0).await.unwrap();
            assert_eq!(warm_count(&home, "r").await, 0);
        } else {
            home.backend.remove_pool("r").await.unwrap();
        }
        w.release();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["name"], name);
        assert_eq!(info["status"], "running");
        // Reserved is not claimed yet: counted once it takes the name (the
        // removal's round comes after the resize's one claim).
        assert_eq!(reserved, if race == "scale" { 0 } else { 1 });
        if race == "scale" {
            assert_eq!(home.backend.get_pool("r").await.unwrap().claims, 1);
            // Scaled back up for the removal's round.
            home.backend.scale_pool("r", 1).await.unwrap();
        }
    }
    let listed = home.backend.list(&Default::default()).await.unwrap();
    let mut names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["removed", "resized"]);
    let dirs = std::fs::read_dir(home.path().join("sandboxes"))
        .unwrap()
        .count();
    assert_eq!(dirs, 2, "no warm sandbox is left of the removed pool");
}

/// A claimed sandbox's max duration counts from the claim, not from the
/// warm start before it: warm for 4 s, claimed with 5 s, it still runs 2 s
/// after the claim (counted from the warm start it would have ended 1 s
/// after), then ends for its max duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_max_duration_counts_from_the_claim() {
    let home = TestHome::new().await;
    home.backend
        .create_pool(PoolSpec::new("aged", config(), 1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let sb = home
        .builder("limited")
        .env("POOLED", "yes")
        .max_duration(Duration::from_secs(5))
        .create()
        .await
        .unwrap();
    assert_eq!(home.backend.get_pool("aged").await.unwrap().claims, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sb.status().await.unwrap(), Status::Running);
    let end = tokio::time::timeout(Duration::from_secs(30), sb.wait_until_stopped())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end.status, Status::Stopped);
    let reason = end.last_run.as_ref().and_then(|r| r.exit_reason);
    assert_eq!(reason, Some(burrow::ExitReason::MaxDuration));
}

/// A pool's idle timeout is its claims', never its warm sandboxes': warm
/// ones idle for longer stay running; a claimed one idle for it is
/// reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_sandboxes_are_never_idle_reclaimed_claimed_ones_are() {
    let home = TestHome::new().await;
    let mut idle = config();
    idle.idle_timeout = Some(Duration::from_secs(1));
    home.backend
        .create_pool(PoolSpec::new("idle", idle, 1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let pool = home.backend.get_pool("idle").await.unwrap();
    assert_eq!(pool.warm, 1, "{pool:?}");
    let sb = home
        .builder("reclaimed")
        .env("POOLED", "yes")
        .idle_timeout(Duration::from_secs(1))
        .create()
        .await
        .unwrap();
    assert_eq!(home.backend.get_pool("idle").await.unwrap().claims, 1);
    let end = tokio::time::timeout(Duration::from_secs(30), sb.wait_until_stopped())
        .await
        .unwrap()
        .unwrap();
    let reason = end.last_run.as_ref().and_then(|r| r.exit_reason);
    assert_eq!(reason, Some(burrow::ExitReason::IdleTimeout));
}

/// A warm sandbox whose supervisor was killed is not handed out: the next
/// create still gets a running sandbox, and the refill replaces the dead
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_sandbox_that_died_is_replaced() {
    let home = TestHome::new().await;
    home.backend
        .create_pool(PoolSpec::new("dies", config(), 1))
        .await
        .unwrap();
    let path = home.path().to_string_lossy().into_owned();
    let before = common::supervisors_of(&path);
    assert_eq!(before.len(), 1);
    // SAFETY: kill(2) on a pid just read from /proc.
    unsafe { libc::kill(before[0] as i32, libc::SIGKILL) };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !common::has_exited(before[0]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor lives on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sb = home
        .builder("after")
        .env("POOLED", "yes")
        .create()
        .await
        .unwrap();
    assert_eq!(sb.info().await.unwrap().status, Status::Running);
    home.backend.refill_pool("dies").await.unwrap();
    assert_eq!(warm_count(&home, "dies").await, 1);
    let now = common::supervisors_of(&path);
    assert_eq!(now.len(), 2, "the created sandbox's and the new warm one's");
    assert!(!now.contains(&before[0]));
    let dirs = std::fs::read_dir(home.path().join("sandboxes"))
        .unwrap()
        .count();
    assert_eq!(dirs, 2, "the dead warm sandbox was removed");
}
