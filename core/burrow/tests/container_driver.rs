//! The container driver against a real OCI runtime (runc and crun) with a
//! busybox rootfs. Needs root and the runtimes: without them each test
//! fails, unless `BURROW_TEST_ALLOW_MISSING=1` (then it says it skipped).
//!
//! The guest agent is replaced through the driver's `BURROW_AGENT_ARGS` test
//! hook by busybox shell scripts, so these tests check the driver at the
//! byte-stream level: the agent's stdin/stdout are the channel.
#![allow(clippy::unwrap_used)]

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burrow::image::{ImageConfig, PreparedImage};
use burrow::internal::driver::container::ContainerDriver;
use burrow::internal::driver::{Driver, LaunchSpec, Launched, ResolvedMount};
use burrow::model::{OciRuntime, SandboxConfig, SandboxId};
use burrow::ErrorCode;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Environment variables are process-wide: one scenario at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "sleep", "id", "ls", "mkdir", "touch", "ps", "hostname", "ip", "nslookup",
    "rm", "test",
];

/// Whether this machine has what a test needs (root, `tool`, busybox).
/// When it does not, the test fails, unless `BURROW_TEST_ALLOW_MISSING=1`
/// says that a missing tool is expected here: then it is skipped, saying
/// so (never a silent pass). CI installs every tool (scripts/install-deps.sh).
fn usable(tool: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let found = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain([PathBuf::from("/usr/sbin")])
                .any(|d| d.join(tool).is_file())
        })
        .unwrap_or(false);
    if root && found && Path::new("/bin/busybox").is_file() {
        return true;
    }
    let why = format!("needs root, {tool} and busybox-static");
    assert!(
        std::env::var("BURROW_TEST_ALLOW_MISSING").as_deref() == Ok("1"),
        "{why} (set BURROW_TEST_ALLOW_MISSING=1 to skip where they are missing)"
    );
    eprintln!("SKIPPED (BURROW_TEST_ALLOW_MISSING=1): {why}");
    false
}

/// A temporary burrow-like layout with a busybox image.
struct Fixture {
    dir: tempfile::TempDir,
    rootfs: PathBuf,
    id: SandboxId,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("burrow-ct-")
            .tempdir()
            .unwrap();
        let rootfs = dir.path().join("image");
        for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for a in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(a)).unwrap();
        }
        std::fs::write(
            rootfs.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(rootfs.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
        std::fs::copy("/bin/busybox", dir.path().join("agent")).unwrap();
        Fixture {
            dir,
            rootfs,
            id: SandboxId::new(),
        }
    }

    fn sandbox_dir(&self) -> PathBuf {
        sandbox_dir_at(self.dir.path(), &self.id)
    }

    fn spec(&self, generation: u64, config: SandboxConfig) -> LaunchSpec {
        spec_at(self.dir.path(), &self.id, generation, config)
    }

    /// The runtime's container id of a generation (also the mount name).
    fn container(&self, generation: u64) -> String {
        format!(
            "burrow-{}-{generation}",
            self.id.as_str().trim_start_matches("sb_")
        )
    }
}

fn sandbox_dir_at(root: &Path, id: &SandboxId) -> PathBuf {
    root.join("sandboxes").join(id.as_str())
}

/// The launch spec of sandbox `id` in a fixture directory `root`.
fn spec_at(root: &Path, id: &SandboxId, generation: u64, config: SandboxConfig) -> LaunchSpec {
    let sandbox_dir = sandbox_dir_at(root, id);
    std::fs::create_dir_all(&sandbox_dir).unwrap();
    let rootfs = root.join("image");
    LaunchSpec {
        sandbox_id: id.clone(),
        name: "Test Box_1".into(),
        generation,
        config,
        image: PreparedImage {
            reference: rootfs.display().to_string(),
            rootfs,
            config: ImageConfig::default(),
            digest: None,
        },
        runtime_dir: sandbox_dir.join("runtime"),
        agent_log: sandbox_dir.join("guest.log"),
        sandbox_dir,
        images_dir: root.join("images"),
        agent_bin: root.join("agent"),
        mounts: Vec::new(),
        inherit_fds: Vec::new(),
        secrets: None,
    }
}

fn config(runtime: OciRuntime) -> SandboxConfig {
    let mut c = SandboxConfig::new("busybox");
    c.runtime = Some(runtime);
    c
}

/// Launches with the process replaced by `sh -c script`.
async fn launch(spec: &LaunchSpec, script: &str) -> burrow::Result<Launched> {
    std::env::set_var(
        "BURROW_AGENT_ARGS",
        serde_json::to_string(&["/bin/sh", "-c", script]).unwrap(),
    );
    let r = ContainerDriver::new(spec.config.oci_runtime())
        .launch(spec)
        .await;
    std::env::remove_var("BURROW_AGENT_ARGS");
    r
}

struct Channel {
    lines: tokio::io::Lines<BufReader<Box<dyn tokio::io::AsyncRead + Send + Unpin>>>,
    writer: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    /// The guest's log, read to EOF as the supervisor does (an unread pipe
    /// would stall the guest once full).
    log: Option<tokio::task::JoinHandle<Vec<u8>>>,
}

impl Channel {
    fn new(
        l: Launched,
    ) -> (
        Channel,
        Box<dyn burrow::internal::driver::GuestProcess>,
        Vec<String>,
    ) {
        let log = l.log.map(|mut r| {
            tokio::spawn(async move {
                let mut all = Vec::new();
                let _ = r.read_to_end(&mut all).await;
                all
            })
        });
        (
            Channel {
                lines: BufReader::new(l.reader).lines(),
                writer: l.writer,
                log,
            },
            l.guest,
            l.notes,
        )
    }
    /// The whole guest log (once the guest has exited).
    async fn log(&mut self) -> String {
        let task = self.log.take().expect("the driver hands out the guest log");
        let all = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the guest log ends when the guest exits")
            .unwrap();
        String::from_utf8_lossy(&all).into_owned()
    }
    async fn line(&mut self) -> Option<String> {
        tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("guest output timed out")
            .unwrap()
    }
    async fn send(&mut self, text: &str) {
        self.writer.write_all(text.as_bytes()).await.unwrap();
        self.writer.flush().await.unwrap();
    }
}

fn mounted(path_part: &str) -> bool {
    // thread-self: the child supervisor test unshares from a non-main thread.
    std::fs::read_to_string("/proc/thread-self/mountinfo")
        .unwrap()
        .contains(path_part)
}

async fn echo_identity_and_kill(runtime: OciRuntime) {
    let fx = Fixture::new();
    // A lock the runtime process must keep holding while it lives.
    let lock_path = fx.dir.path().join("runtime.lock");
    let lock = std::fs::File::create(&lock_path).unwrap();
    // SAFETY: flock on an open descriptor.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    let mut spec = fx.spec(1, config(runtime));
    spec.inherit_fds = vec![lock.as_raw_fd()];
    let t = Instant::now();
    let launched = launch(
        &spec,
        "echo ready; id -u; hostname; echo to-log >&2; exec cat",
    )
    .await
    .unwrap();
    let (mut ch, mut guest, notes) = Channel::new(launched);
    assert_eq!(ch.line().await.as_deref(), Some("ready"));
    let lower = if fx.dir.path().join("images/shifted").exists() {
        "shifted copy"
    } else {
        "idmapped view"
    };
    eprintln!(
        "{runtime:?}: launch -> first line {:?} (lower layer: {lower})",
        t.elapsed()
    );
    drop(lock);
    let try_lock = || {
        let f = std::fs::File::open(&lock_path).unwrap();
        // SAFETY: flock on an open descriptor.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    };
    assert!(
        !try_lock(),
        "the runtime process must hold the inherited lock"
    );
    assert_eq!(ch.line().await.as_deref(), Some("0"));
    assert_eq!(ch.line().await.as_deref(), Some("test-box-1"));
    ch.send("ping over the channel\n").await;
    assert_eq!(ch.line().await.as_deref(), Some("ping over the channel"));
    assert!(
        notes.iter().all(|n| !n.contains("process limit")),
        "{notes:?}"
    );

    guest.pause().await.unwrap();
    ch.send("while paused\n").await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), ch.lines.next_line())
            .await
            .is_err(),
        "a paused guest must not answer"
    );
    guest.resume().await.unwrap();
    assert_eq!(ch.line().await.as_deref(), Some("while paused"));

    let mountpoint = fx.container(1);
    assert!(mounted(&mountpoint), "the rootfs is mounted while running");
    // The driver recognises a complete runtime state by this file.
    let marker = if runtime == OciRuntime::Crun {
        "status"
    } else {
        "state.json"
    };
    assert!(spec
        .runtime_dir
        .join("state")
        .join(&mountpoint)
        .join(marker)
        .exists());
    guest.kill().await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), guest.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.code != Some(0) || exit.signal.is_some(), "{exit:?}");
    guest.cleanup().await.unwrap();
    guest.cleanup().await.unwrap();
    assert!(!mounted(&mountpoint), "cleanup must unmount the rootfs");
    assert!(!spec.runtime_dir.join("bundle").exists());
    assert!(try_lock(), "the lock is released with the runtime process");
    let log = ch.log().await;
    assert!(
        log.contains("to-log"),
        "guest stderr is the driver's log stream: {log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc_channel_identity_pause_kill_cleanup() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    echo_identity_and_kill(OciRuntime::Runc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crun_channel_identity_pause_kill_cleanup() {
    if !usable("crun") {
        return;
    }
    let _serial = SERIAL.lock().await;
    echo_identity_and_kill(OciRuntime::Crun).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writable_layer_persists_across_generations() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let fx = Fixture::new();
    let spec = fx.spec(1, config(OciRuntime::Runc));
    // Generation 1 runs on a shifted copy of the image, generation 2 on an
    // idmapped view (where the host can): the layer works with both.
    std::env::set_var("BURROW_ID_SHIFT", "copy");
    let launched = launch(
        &spec,
        "echo kept > /root/note && mkdir -p /var/x && rm /bin/ls && echo done",
    )
    .await;
    std::env::remove_var("BURROW_ID_SHIFT");
    assert!(fx
        .dir
        .path()
        .join("images/shifted")
        .read_dir()
        .unwrap()
        .next()
        .is_some());
    let (mut ch, mut guest, _) = Channel::new(launched.unwrap());
    assert_eq!(ch.line().await.as_deref(), Some("done"));
    let exit = guest.wait().await.unwrap();
    assert_eq!(exit.code, Some(0));
    guest.cleanup().await.unwrap();

    // Generation 2, with a stale state directory from a "crashed" generation
    // to clear first.
    std::fs::create_dir_all(spec.runtime_dir.join("state/burrow-stale-0")).unwrap();
    let spec2 = fx.spec(2, config(OciRuntime::Runc));
    let (mut ch, mut guest, _) = Channel::new(
        launch(
            &spec2,
            "cat /root/note; test -e /bin/ls && echo ls-back || echo ls-gone; \
             stat -c %u /root/note; stat -c %u:%g /bin/busybox; touch /bin/new && echo root-writes",
        )
        .await
        .unwrap(),
    );
    assert_eq!(ch.line().await.as_deref(), Some("kept"));
    assert_eq!(ch.line().await.as_deref(), Some("ls-gone"));
    assert_eq!(ch.line().await.as_deref(), Some("0"));
    assert_eq!(
        ch.line().await.as_deref(),
        Some("0:0"),
        "image files are root's inside"
    );
    assert_eq!(ch.line().await.as_deref(), Some("root-writes"));
    guest.wait().await.unwrap();
    guest.cleanup().await.unwrap();
    assert!(
        !fx.rootfs.join("root/note").exists(),
        "the image is never written"
    );
    assert!(
        fx.rootfs.join("bin/ls").exists(),
        "the image is never written"
    );
    assert!(fx.sandbox_dir().join("upper/root/note").exists());
    assert!(!spec2.runtime_dir.join("state/burrow-stale-0").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc_mounts_limits_user_and_network_off() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    mounts_limits_user_and_network_off(OciRuntime::Runc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crun_mounts_limits_user_and_network_off() {
    if !usable("crun") {
        return;
    }
    let _serial = SERIAL.lock().await;
    mounts_limits_user_and_network_off(OciRuntime::Crun).await;
}

async fn mounts_limits_user_and_network_off(runtime: OciRuntime) {
    let fx = Fixture::new();
    let host = fx.dir.path().join("shared");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("f"), "from-host\n").unwrap();
    let mut c = config(runtime);
    c.memory_mb = Some(64);
    c.pids_limit = Some(64);
    let mut spec = fx.spec(1, c);
    spec.mounts = vec![ResolvedMount {
        host_path: host.clone(),
        target: "/data".into(),
        read_only: true,
        volume: false,
    }];
    spec.image.config.user = Some("nobody".into());
    let script = "cat /data/f; (echo x > /data/new) 2>/dev/null && echo writable || echo read-only; \
                  id -u; cat /sys/fs/cgroup/memory/memory.limit_in_bytes; cat /sys/fs/cgroup/pids/pids.max; \
                  ip -o link | grep -c -v ' lo:'; echo end";
    let (mut ch, mut guest, notes) = Channel::new(launch(&spec, script).await.unwrap());
    assert_eq!(ch.line().await.as_deref(), Some("from-host"));
    assert_eq!(ch.line().await.as_deref(), Some("read-only"));
    assert_eq!(ch.line().await.as_deref(), Some("65534"));
    let memory = ch.line().await.unwrap();
    if notes.iter().any(|n| n.starts_with("memory limit")) {
        eprintln!("memory limit not enforced here: {notes:?}");
    } else {
        assert_eq!(memory, (64u64 << 20).to_string());
    }
    assert_eq!(ch.line().await.as_deref(), Some("64"));
    assert_eq!(
        ch.line().await.as_deref(),
        Some("0"),
        "only loopback without network"
    );
    assert_eq!(ch.line().await.as_deref(), Some("end"));
    guest.wait().await.unwrap();
    guest.cleanup().await.unwrap();
    assert!(!host.join("new").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_gets_a_default_route() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let fx = Fixture::new();
    let mut c = config(OciRuntime::Runc);
    c.network = burrow::Network::All;
    let spec = fx.spec(1, c);
    // The network is attached after the container starts and before launch
    // returns: like the real agent, the script waits for the host first.
    // (Outbound traffic is not checked here: tests talk to nothing beyond
    // 127.0.0.1 and namespaces they make themselves.)
    let script = "read _; ip route | grep -c ^default; exec cat";
    let (mut ch, mut guest, _) = Channel::new(launch(&spec, script).await.unwrap());
    ch.send("go\n").await;
    assert_eq!(ch.line().await.as_deref(), Some("1"));
    guest.kill().await.unwrap();
    guest.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_have_codes() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let fx = Fixture::new();
    std::env::set_var("BURROW_RUNC", "/nonexistent/runc");
    let err = launch(&fx.spec(1, config(OciRuntime::Runc)), "true")
        .await
        .unwrap_err();
    std::env::remove_var("BURROW_RUNC");
    assert_eq!(err.code(), ErrorCode::RuntimeUnavailable);

    let mut spec = fx.spec(2, config(OciRuntime::Runc));
    spec.image.config.user = Some("ghost".into());
    let err = launch(&spec, "true").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage);
    assert!(!mounted(&fx.container(2)), "a failed launch unmounts");

    // The runtime itself fails: the process does not exist in the rootfs.
    let spec = fx.spec(3, config(OciRuntime::Runc));
    std::env::set_var("BURROW_AGENT_ARGS", r#"["/no/such/binary"]"#);
    let err = ContainerDriver::new(OciRuntime::Runc)
        .launch(&spec)
        .await
        .unwrap_err();
    std::env::remove_var("BURROW_AGENT_ARGS");
    assert_eq!(err.code(), ErrorCode::RuntimeUnavailable);
    assert!(!mounted(&fx.container(3)), "a failed launch unmounts");
}

/// The supervisor's role, run in a child process by
/// `supervisor_death_leaves_nothing_behind` (a no-op otherwise): private
/// mount namespace, launch, report, then wait to be killed.
#[test]
fn child_supervisor_role() {
    let Ok(arg) = std::env::var("BURROW_CT_CHILD") else {
        return;
    };
    let (root, id): (PathBuf, String) = serde_json::from_str(&arg).unwrap();
    let id: SandboxId = id.parse().unwrap();
    burrow::internal::driver::container::prepare_supervisor_process().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let spec = spec_at(&root, &id, 1, config(OciRuntime::Runc));
        let (mut ch, guest, _) = Channel::new(
            ContainerDriver::new(OciRuntime::Runc)
                .launch(&spec)
                .await
                .unwrap(),
        );
        assert_eq!(ch.line().await.as_deref(), Some("up"));
        let mountpoint = std::fs::read_link(spec.runtime_dir.join("rootfs")).unwrap();
        assert!(mounted(&mountpoint.display().to_string()));
        println!("CHILD-READY {}", mountpoint.display());
        std::mem::forget((ch, guest));
        std::future::pending::<()>().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_death_leaves_nothing_behind() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let fx = Fixture::new();
    let arg = serde_json::to_string(&(fx.dir.path(), fx.id.as_str())).unwrap();
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_supervisor_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BURROW_CT_CHILD", arg)
        .env(
            "BURROW_AGENT_ARGS",
            r#"["/bin/sh","-c","echo up; exec cat"]"#,
        )
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mountpoint = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = out.next_line().await.unwrap() {
            // The harness prints "test <name> ... " on the same line.
            if let Some((_, m)) = line.split_once("CHILD-READY ") {
                return m.trim().to_owned();
            }
        }
        panic!("the child supervisor ended without launching");
    })
    .await
    .unwrap();
    assert!(
        !mounted(&mountpoint),
        "the rootfs mount must stay in the supervisor's namespace"
    );
    let spec = fx.spec(2, config(OciRuntime::Runc));
    let pid: i32 = std::fs::read_to_string(spec.runtime_dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    // The supervisor dies: the runtime process dies with it, the guest sees
    // EOF on its channel and exits.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let gone = async {
        while Path::new(&format!("/proc/{pid}")).exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .expect("the guest outlived its supervisor");

    // The next generation clears the stale runtime state and starts.
    let (mut ch, mut guest, _) = Channel::new(launch(&spec, "echo again").await.unwrap());
    assert_eq!(ch.line().await.as_deref(), Some("again"));
    guest.wait().await.unwrap();
    guest.cleanup().await.unwrap();
    assert!(!spec
        .runtime_dir
        .join("state")
        .join(fx.container(1))
        .exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_launches_leave_nothing_behind() {
    if !usable("runc") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let fx = Fixture::new();
    for (generation, after_ms) in [(1u64, 2u64), (2, 10), (3, 25), (4, 45), (5, 70)] {
        let spec = fx.spec(generation, config(OciRuntime::Runc));
        let cancelled =
            tokio::time::timeout(Duration::from_millis(after_ms), launch(&spec, "exec cat")).await;
        if let Ok(Ok(launched)) = cancelled {
            let (_, mut guest, _) = Channel::new(launched);
            guest.kill().await.unwrap();
            guest.cleanup().await.unwrap();
        }
        let id = fx.container(generation);
        assert!(
            !mounted(&id),
            "generation {generation} cancelled after {after_ms} ms left its rootfs mounted"
        );
        let state = spec.runtime_dir.join("state").join(&id);
        assert!(
            !state.exists(),
            "generation {generation} cancelled after {after_ms} ms left runtime state"
        );
    }
    // Whatever a runtime killed mid-creation left (empty cgroups) is swept
    // by the next generation at the latest.
    let spec = fx.spec(9, config(OciRuntime::Runc));
    let (_, mut guest, _) = Channel::new(launch(&spec, "exec cat").await.unwrap());
    guest.kill().await.unwrap();
    guest.cleanup().await.unwrap();
    let prefix = fx.container(0).trim_end_matches('0').to_owned();
    let leftovers: Vec<_> = walk_cgroups()
        .into_iter()
        .filter(|p| p.contains(&prefix))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every `.../burrow/<container>` cgroup directory on the host.
fn walk_cgroups() -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![PathBuf::from("/sys/fs/cgroup")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let p = e.path();
                if p.parent().is_some_and(|d| d.ends_with("burrow")) {
                    found.push(p.display().to_string());
                } else if stack.len() < 10_000 {
                    stack.push(p);
                }
            }
        }
    }
    found
}

use burrow_test_support::probe;

/// The i386 `getpid` probe (`int 0x80`), as an executable in `dir`; checked
/// to work on the host, where no filter applies.
fn i386_abi_probe(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("i386abi");
    std::fs::write(
        &bin,
        probe::syscall_probe(dir, "i386abi-src", 20, [0, 0, 0], None, true),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = std::process::Command::new(&bin).status().unwrap();
    assert!(
        host.success(),
        "the probe works outside a sandbox: {host:?}"
    );
    bin
}

async fn run_i386_probe(runtime: OciRuntime, compat32: bool) -> String {
    let fx = Fixture::new();
    let tools = fx.dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    i386_abi_probe(&tools);
    let mut spec = fx.spec(1, config(runtime));
    spec.mounts = vec![ResolvedMount {
        host_path: tools,
        target: "/t".into(),
        read_only: true,
        volume: false,
    }];
    if compat32 {
        std::env::set_var("BURROW_SECCOMP_COMPAT32", "1");
    }
    let launched = launch(&spec, "/t/i386abi; echo code=$?").await;
    std::env::remove_var("BURROW_SECCOMP_COMPAT32");
    let (mut ch, mut guest, _) = Channel::new(launched.unwrap());
    let line = ch.line().await.unwrap();
    guest.wait().await.unwrap();
    guest.cleanup().await.unwrap();
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_32_bit_syscall_abi_is_refused_unless_allowed() {
    for runtime in [OciRuntime::Runc, OciRuntime::Crun] {
        assert!(
            usable(runtime.binary()),
            "root, {} and busybox-static are installed by scripts/install-deps.sh",
            runtime.binary()
        );
        let _serial = SERIAL.lock().await;
        let refused = run_i386_probe(runtime, false).await;
        assert_ne!(
            refused, "code=0",
            "{runtime:?}: the i386 ABI must be refused"
        );
        let allowed = run_i386_probe(runtime, true).await;
        assert_eq!(
            allowed, "code=0",
            "{runtime:?}: BURROW_SECCOMP_COMPAT32=1 allows the i386 ABI"
        );
    }
}
