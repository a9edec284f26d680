#![allow(clippy::unwrap_used)]
//! VM boot templates, end to end with real QEMU (TCG here): sandboxes of
//! one template are distinct guests with the right time, concurrent
//! creators build one template, every input that a guest depends on gets
//! its own template (and a prune drops the stale ones), a first start gets
//! a copy of its template's disk and later starts the template that mounts
//! it, and a template that cannot be restored falls back to the other, then
//! to a cold boot that says why.
//!
//! How each start went is read from the driver's record
//! (`runtime/start.json`, [`StartRecord`]).

use burrow_cli_testkit as common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use burrow::internal::driver::vm::{
    locate_kernel, locate_qemu, start_record, StartKind, StartRecord, TEMPLATES_DIR, TEMPLATES_ENV,
};
use burrow::{Backend, Sandbox};
use common::{agent_bin, busybox_rootfs, TestHome};

fn runtime_dir(home: &TestHome, sb: &Sandbox) -> PathBuf {
    home.path()
        .join("sandboxes")
        .join(sb.id().as_str())
        .join("runtime")
}

fn record_of(home: &TestHome, sb: &Sandbox) -> StartRecord {
    start_record(&runtime_dir(home, sb)).expect("the driver recorded the start")
}

/// The key of the template `sb` was restored from (asserting it was).
fn restored_key(home: &TestHome, sb: &Sandbox) -> String {
    let rec = record_of(home, sb);
    assert_eq!(rec.from, StartKind::Template, "{rec:?}");
    assert_eq!(rec.reason, None);
    rec.template.unwrap()
}

/// The complete templates of `home` (not locks, failures or builds).
fn templates(home: &Path) -> BTreeSet<String> {
    let dir = home.join("images").join(TEMPLATES_DIR);
    std::fs::read_dir(&dir)
        .map(|l| {
            l.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.contains('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything else in the templates directory but lock files.
fn template_leftovers(home: &Path) -> Vec<String> {
    let dir = home.join("images").join(TEMPLATES_DIR);
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains('.') && !n.ends_with(".lock"))
        .collect()
}

async fn sh(sb: &Sandbox, script: &str) -> String {
    let out = sb.exec(["sh", "-c", script]).await.unwrap();
    assert_eq!(out.status.code, Some(0), "{script}: {}", out.stderr_str());
    out.stdout_str().trim().to_owned()
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// What makes a guest one of a kind, read inside it.
#[derive(Debug)]
struct Uniqueness {
    uuid: String,
    random: String,
    machine_id: String,
    hostname: String,
    clock: i64,
}

async fn uniqueness(sb: &Sandbox) -> Uniqueness {
    let out = sh(
        sb,
        "cat /proc/sys/kernel/random/uuid; \
         head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; \
         cat /etc/machine-id; hostname; date +%s",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    Uniqueness {
        uuid: lines[0].into(),
        random: lines[1].into(),
        machine_id: lines[2].into(),
        hostname: lines[3].into(),
        clock: lines[4].parse().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_of_one_template_are_unique_and_on_time() {
    let home = TestHome::new().await;
    let a = home.builder("uniq-a").driver("vm").create().await.unwrap();
    let b = home.builder("uniq-b").driver("vm").create().await.unwrap();
    let key = restored_key(&home, &a);
    assert_eq!(restored_key(&home, &b), key, "one template for both");
    assert_eq!(templates(home.path()), BTreeSet::from([key.clone()]));

    let (ua, ub) = (uniqueness(&a).await, uniqueness(&b).await);
    assert_ne!(ua.uuid, ub.uuid);
    assert_ne!(ua.random, ub.random);
    assert_eq!(ua.random.len(), 64);
    assert_ne!(ua.machine_id, ub.machine_id);
    for u in [&ua, &ub] {
        assert_eq!(u.machine_id.len(), 32, "{u:?}");
        assert!(u.machine_id.bytes().all(|c| c.is_ascii_hexdigit()), "{u:?}");
        // The snapshot is older than that; the guest's clock is the host's.
        assert!((u.clock - now_secs()).abs() <= 5, "{u:?} vs {}", now_secs());
    }
    assert_eq!(
        (ua.hostname.as_str(), ub.hostname.as_str()),
        ("uniq-a", "uniq-b")
    );

    // The first start's disk is a copy of the template's, and is the
    // sandbox's own: what is written there stays, and is not the other's.
    sh(&a, "echo kept > /root-note && sync").await;
    assert_eq!(
        sh(&b, "cat /root-note 2>/dev/null || echo absent").await,
        "absent"
    );

    // A restart restores the template of later starts, which mounts the
    // sandbox's disk: the guest is new (its random state too), the
    // sandbox's identity and files are the same.
    a.restart().await.unwrap();
    let later = restored_key(&home, &a);
    assert_ne!(later, key, "later starts have their own template");
    assert_eq!(templates(home.path()), BTreeSet::from([key, later]));
    assert_eq!(sh(&a, "cat /root-note").await, "kept");
    let again = uniqueness(&a).await;
    assert_ne!(again.uuid, ua.uuid);
    assert_ne!(again.random, ua.random);
    assert_eq!(again.machine_id, ua.machine_id);
    assert_eq!(again.hostname, "uniq-a");
    a.destroy().await.unwrap();
    b.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creators_build_one_template() {
    let home = TestHome::new().await;
    // Four supervisor processes launch at once, none finding a template.
    let creates = (0..4).map(|i| home.builder(&format!("conc-{i}")).driver("vm").create());
    let sandboxes: Vec<Sandbox> = futures::future::join_all(creates)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let keys: BTreeSet<String> = sandboxes.iter().map(|s| restored_key(&home, s)).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(templates(home.path()), keys);
    assert_eq!(template_leftovers(home.path()), Vec::<String>::new());
    for (i, sb) in sandboxes.iter().enumerate() {
        assert_eq!(sh(sb, "hostname").await, format!("conc-{i}"));
    }
    for sb in sandboxes {
        sb.destroy().await.unwrap();
    }
}

/// `burrow up` of a vm sandbox with `env` set for it (and its supervisor);
/// returns the template key its start restored.
fn up_with(home: &TestHome, name: &str, env: &[(&str, &Path)]) -> String {
    let mut cmd = home.cli();
    cmd.args(["--json", "up", name, "--driver", "vm", "--image"])
        .arg(busybox_rootfs());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: String = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .into();
    let rec = start_record(&home.path().join("sandboxes").join(&id).join("runtime")).unwrap();
    assert_eq!(rec.from, StartKind::Template, "{rec:?}");
    rec.template.unwrap()
}

fn copy_to(dir: &Path, file: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(file, &to).unwrap();
    to
}

/// Moves a file's modification time back an hour: "the same file, rebuilt".
fn touch_back(file: &Path) {
    let then = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(file)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_gets_its_own_template_and_prune_drops_stale_ones() {
    let home = TestHome::new().await;
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut add = |what: &str, key: String| {
        assert!(
            keys.iter().all(|(_, k)| *k != key),
            "{what} restored the template of {keys:?}"
        );
        keys.push((what.into(), key));
    };

    // Through the library: the sandbox's own configuration.
    let base = home.builder("in-base").driver("vm").create().await.unwrap();
    add("base", restored_key(&home, &base));
    base.destroy().await.unwrap();
    let shared = tempfile::tempdir().unwrap();
    let other_image = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(busybox_rootfs())
        .arg(other_image.path().join("rootfs"))
        .status()
        .unwrap();
    assert!(copied.success());
    let variants: Vec<(&str, burrow::SandboxBuilder)> = vec![
        ("memory", home.builder("in-mem").memory_mb(256)),
        ("cpus", home.builder("in-cpus").cpus(2.0)),
        ("network", home.builder("in-net").network(true)),
        (
            "share",
            home.builder("in-share")
                .mount(shared.path(), "/shared", false),
        ),
        (
            "image",
            Sandbox::builder("in-image")
                .image(other_image.path().join("rootfs").to_string_lossy())
                .backend(home.dyn_backend()),
        ),
    ];
    for (what, builder) in variants {
        let sb = builder.driver("vm").create().await.unwrap();
        add(what, restored_key(&home, &sb));
        if what == "share" {
            // The share of a restored guest is mounted as on a cold boot.
            sh(&sb, "echo from-guest > /shared/out").await;
            assert_eq!(
                std::fs::read_to_string(shared.path().join("out")).unwrap(),
                "from-guest\n"
            );
        }
        if what == "memory" {
            let kib: u64 = sh(
                &sb,
                "grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2",
            )
            .await
            .parse()
            .unwrap();
            assert!(kib <= 256 * 1024, "{kib} KiB");
        }
        sb.destroy().await.unwrap();
    }

    // Through the CLI, whose supervisors get these files.
    let files = tempfile::tempdir().unwrap();
    let kernel = copy_to(files.path(), &locate_kernel().unwrap(), "vmlinux");
    add(
        "kernel",
        up_with(&home, "in-kernel", &[("BURROW_VM_KERNEL", &kernel)]),
    );
    touch_back(&kernel);
    add(
        "rebuilt kernel",
        up_with(&home, "in-kernel2", &[("BURROW_VM_KERNEL", &kernel)]),
    );
    let agent = copy_to(files.path(), &agent_bin(), "burrow-agent");
    add(
        "agent",
        up_with(&home, "in-agent", &[("BURROW_AGENT_BIN", &agent)]),
    );
    // A link: QEMU finds its firmware next to where it really is.
    let qemu = files.path().join("qemu-system-x86_64");
    std::os::unix::fs::symlink(locate_qemu().unwrap(), &qemu).unwrap();
    add("qemu", up_with(&home, "in-qemu", &[("BURROW_QEMU", &qemu)]));
    assert_eq!(templates(home.path()).len(), keys.len());

    // A prune drops the template of the kernel file as it was before the
    // touch, and keeps every other (their files are as they were).
    for name in ["in-kernel", "in-kernel2", "in-agent", "in-qemu"] {
        let out = home.cli().args(["rm", "-f", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
    }
    let out = home
        .cli()
        .args(["--json", "image", "prune"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["templates_removed"], 1, "{report}");
    let stale = &keys.iter().find(|(w, _)| w == "kernel").unwrap().1;
    let left = templates(home.path());
    assert!(!left.contains(stale));
    assert_eq!(left.len(), keys.len() - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warming_ahead_builds_the_template_the_first_start_restores() {
    let home = TestHome::new().await;
    let warm = |extra: &[&str]| {
        let out = home
            .cli()
            .args(["--json", "image", "warm"])
            .arg(busybox_rootfs())
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = warm(&["--memory", "192"]);
    assert_eq!(first["built"], true);
    let again = warm(&["--memory", "192"]);
    assert_eq!(again["built"], false);
    assert_eq!(again["template"], first["template"]);
    assert_eq!(again["restart_template"], first["restart_template"]);
    assert_ne!(first["template"], first["restart_template"]);
    let sb = home
        .builder("warmed")
        .driver("vm")
        .memory_mb(192)
        .create()
        .await
        .unwrap();
    assert_eq!(
        restored_key(&home, &sb),
        first["template"].as_str().unwrap()
    );
    // Both were built ahead: the first start's and the later starts'.
    sb.restart().await.unwrap();
    assert_eq!(
        restored_key(&home, &sb),
        first["restart_template"].as_str().unwrap()
    );
    assert_eq!(templates(home.path()).len(), 2);
    sb.destroy().await.unwrap();

    // A bad image is a typed error and builds nothing.
    let out = home
        .cli()
        .args(["--json", "image", "warm", "/no/such/image"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "invalid_image");
    assert_eq!(templates(home.path()).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_takes_the_disk_and_template_of_a_pulled_image() {
    use burrow::internal::image::oci::{write_layout, LayerSpec};
    let reg = common::registry::TestRegistry::start();
    let home = TestHome::new().await;
    std::fs::write(
        home.path().join("registries.json"),
        format!(r#"{{"insecure": ["{}"]}}"#, reg.host()),
    )
    .unwrap();
    let layout = home.path().join("layout");
    write_layout(
        &layout,
        &[LayerSpec::dir(busybox_rootfs())],
        &burrow::image::ImageConfig::default(),
        Some("plain"),
    )
    .unwrap();
    reg.push(&layout, "plain", "burrow-test/busybox:plain");
    let reference = reg.reference("burrow-test/busybox:plain");
    let json = |args: &[&str]| {
        let out = home.cli().arg("--json").args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    // Warming pulls the image and builds its disk and template.
    let warmed = json(&["image", "warm", &reference]);
    assert_eq!(warmed["built"], true);
    let disks = || {
        std::fs::read_dir(home.path().join("images/ext4"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ext4"))
            .count()
    };
    assert_eq!(disks(), 1);
    assert_eq!(templates(home.path()).len(), 2);
    // In use by nothing once forgotten: the prune takes all of it.
    json(&["image", "rm", &reference]);
    let report = json(&["image", "prune"]);
    assert_eq!(report["rootfs_removed"], 1, "{report}");
    assert_eq!(report["templates_removed"], 2, "{report}");
    assert_eq!(disks(), 0);
    assert!(templates(home.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_template_falls_back_to_a_cold_boot() {
    let home = TestHome::new().await;
    let first = home.builder("fb-1").driver("vm").create().await.unwrap();
    let key = restored_key(&home, &first);
    first.destroy().await.unwrap();

    let state = |key: &str| {
        home.path()
            .join("images")
            .join(TEMPLATES_DIR)
            .join(key)
            .join("state")
    };
    // A damaged template of first starts: that restore fails, and the
    // start restores the template of later starts (built now) instead.
    common::truncate_half(&state(&key));
    let sb = home.builder("fb-2").driver("vm").create().await.unwrap();
    let later = restored_key(&home, &sb);
    assert_ne!(later, key);
    assert_eq!(sh(&sb, "hostname").await, "fb-2");
    // No QEMU of the failed restore is left: only this guest's.
    assert_eq!(
        common::vms_of(home.path()),
        vec![common::guest_pid(home.path(), sb.id()) as u32]
    );
    sb.destroy().await.unwrap();

    // Both damaged: the start boots cold and works.
    common::truncate_half(&state(&later));
    let sb = home.builder("fb-3").driver("vm").create().await.unwrap();
    let rec = record_of(&home, &sb);
    assert_eq!(rec.from, StartKind::Cold, "{rec:?}");
    assert_eq!(rec.template.as_deref(), Some(later.as_str()));
    assert!(rec.reason.is_some());
    assert_eq!(sh(&sb, "hostname").await, "fb-3");
    let u = uniqueness(&sb).await;
    assert!((u.clock - now_secs()).abs() <= 5, "{u:?}");
    assert_eq!(
        common::vms_of(home.path()),
        vec![common::guest_pid(home.path(), sb.id()) as u32]
    );
    sb.destroy().await.unwrap();

    // Templates turned off: a cold boot, saying so.
    let out = home
        .cli()
        .args(["--json", "up", "fb-4", "--driver", "vm", "--image"])
        .arg(busybox_rootfs())
        .env(TEMPLATES_ENV, "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let info = home.backend.get("fb-4").await.unwrap();
    assert_eq!(info.status, burrow::Status::Running);
    let rec = start_record(
        &home
            .path()
            .join("sandboxes")
            .join(info.id.as_str())
            .join("runtime"),
    )
    .unwrap();
    assert_eq!((rec.from, rec.template), (StartKind::Cold, None));
    assert!(rec.reason.is_some());
}
