//! VM driver benchmark: the floor (bare boot of the same kernel under the
//! same QEMU machine to a tiny static init's marker on the serial console),
//! create -> Running of a `vm` sandbox booted cold (`BURROW_VM_TEMPLATES=0`)
//! and restored from its boot template beside it (ratio = median / floor
//! median), 8 creates at once from one template, a demand start (an exec
//! of `true` on a reclaimed sandbox) after a hibernation beside one after a
//! stop, the restore of a saved guest (RAM in a file, device state
//! migrated in: the mechanism under boot templates) alone and 4 at once,
//! exec of `true` in a running VM beside the same in a container
//! sandbox, the host memory (supervisor + QEMU RSS) of one running VM
//! with the default memory and with `memory_mb(128)`, and the QEMU RSS and
//! PSS of 8 sandboxes restored from one template beside a cold-booted one.
//!
//! Run: `cargo bench -p burrow-cli --bench vm` (as root: the floor's
//! initramfs needs `mknod`; needs `cc` with a static libc, `cpio`, QEMU and
//! the guest kernel from scripts/build-kernel.sh).
//! Iterations: BENCH_ITERS (default 15 boots and starts, 10x that for execs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use burrow_test_support::stats::{ms, pct};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use burrow::internal::driver::vm::{
    start_record, Accel, StartKind, DEFAULT_MEMORY_MB, TEMPLATES_ENV,
};
use burrow::{IdleAction, Status};
use common::TestHome;

const MARKER: &str = "BURROW-INIT-MARKER";
/// How long one bare boot may take before it counts as hung.
const BOOT_DEADLINE: Duration = Duration::from_secs(120);

/// The floor's `/init`: the marker on the console, drained, then the VM ends
/// through the isa-debug-exit port (QEMU exits with (0 << 1) | 1 = 1). If
/// the port is unreachable, init returns, the kernel panics and resets
/// (panic=-1, reboot=t), and -no-reboot ends QEMU.
const INIT_C: &str = r#"
#include <fcntl.h>
#include <sys/io.h>
#include <termios.h>
#include <unistd.h>

int main(void) {
    static const char m[] = "BURROW-INIT-MARKER\n";
    int fd = open("/dev/console", O_WRONLY | O_NOCTTY);
    if (fd < 0)
        fd = 1;
    if (write(fd, m, sizeof m - 1) < 0)
        return 2;
    tcdrain(fd);
    if (ioperm(0xf4, 1, 1) == 0)
        outb(0x00, 0xf4);
    return 1;
}
"#;

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles the tiny init and packs it with `/dev/console` (5:1) into a
/// newc cpio archive; returns the archive's path.
fn floor_initramfs(dir: &Path) -> PathBuf {
    let src = dir.join("init.c");
    std::fs::write(&src, INIT_C).unwrap();
    let stage = dir.join("stage");
    std::fs::create_dir_all(stage.join("dev")).unwrap();
    run(
        Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(stage.join("init"))
            .arg(&src),
        "cc -static init.c",
    );
    run(
        Command::new("mknod")
            .args(["-m", "600"])
            .arg(stage.join("dev/console"))
            .args(["c", "5", "1"]),
        "mknod dev/console",
    );
    let cpio = dir.join("init.cpio");
    let script = format!(
        "cd '{}' && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 > '{}'",
        stage.display(),
        cpio.display()
    );
    run(Command::new("sh").args(["-c", &script]), "cpio -o -H newc");
    cpio
}

/// The driver's own machine (`burrow::internal::driver::vm::bare_boot_args`: the
/// same flags and kernel command line as a sandbox's VM, one vCPU, no
/// devices), so the floor moves with the driver.
fn floor_args(accel: Accel, kernel: &Path, initrd: &Path) -> Vec<String> {
    burrow::internal::driver::vm::bare_boot_args(kernel, initrd, accel, DEFAULT_MEMORY_MB)
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// One bare boot: QEMU spawn -> the marker line on its stdout. Returns the
/// time and QEMU's exit code.
fn bare_boot(qemu: &Path, args: &[String]) -> (Duration, Option<i32>) {
    let t = Instant::now();
    let mut child = Command::new(qemu)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning qemu");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut r = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    if text.contains(MARKER) {
                        let _ = tx.send(Instant::now());
                    }
                    seen.push_str(&text);
                }
            }
        }
        seen
    });
    let seen_at = rx.recv_timeout(BOOT_DEADLINE);
    let code = if seen_at.is_ok() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().unwrap().code();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    } else {
        let _ = child.kill();
        child.wait().unwrap().code()
    };
    let console = reader.join().unwrap();
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    match seen_at {
        Ok(at) => (at - t, code),
        Err(_) => panic!(
            "no {MARKER} within {BOOT_DEADLINE:?} (qemu exit {code:?})\n--- console ---\n{console}\n--- stderr ---\n{err}"
        ),
    }
}

/// Restore times (QEMU spawn -> guest running again) of one saved guest:
/// `n` one by one, and `n` rounds of 4 at once (the slowest of each round).
async fn restores(
    support: &burrow::internal::driver::vm::VmSupport,
    dir: &Path,
    n: usize,
) -> (Vec<Duration>, Vec<Duration>, Vec<(u64, u64)>) {
    use burrow::internal::driver::vm::{write_initramfs, BareMachine, BareVm};
    // The agent waits (5 s) for disks that never come: saved in that wait.
    let boot = br#"{"root_serial":"absent-root","data_serial":"absent-data","channel":"burrow.agent","hostname":"bench","env":{},"cwd":"/","uid":0,"gid":0,"hosts":""}"#;
    let initramfs = dir.join("waits.cpio");
    write_initramfs(
        &initramfs,
        &std::fs::read(common::agent_bin()).unwrap(),
        boot,
    )
    .unwrap();
    let (ram, state) = (dir.join("ram"), dir.join("state"));
    let consoles: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("console{i}"))).collect();
    let m = |i: usize| BareMachine {
        qemu: &support.qemu,
        kernel: &support.kernel,
        initramfs: &initramfs,
        accel: support.accel.accel,
        memory_mb: DEFAULT_MEMORY_MB,
        ram: &ram,
        console: &consoles[i],
    };
    let vm = BareVm::boot(&m(0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    vm.save(&state).await.unwrap();
    let mut one = Vec::new();
    for _ in 0..n {
        let (vm, took) = BareVm::restore(&m(0), &state).await.unwrap();
        one.push(took);
        drop(vm);
    }
    let mut four = Vec::new();
    let mut pss = Vec::new();
    for round in 0..n {
        let (m0, m1, m2, m3) = (m(0), m(1), m(2), m(3));
        let r = tokio::try_join!(
            BareVm::restore(&m0, &state),
            BareVm::restore(&m1, &state),
            BareVm::restore(&m2, &state),
            BareVm::restore(&m3, &state)
        )
        .unwrap();
        four.push([r.0 .1, r.1 .1, r.2 .1, r.3 .1].into_iter().max().unwrap());
        if round == 0 {
            // Memory of 4 guests sharing one RAM file, once they ran a bit.
            tokio::time::sleep(Duration::from_millis(500)).await;
            for vm in [&r.0 .0, &r.1 .0, &r.2 .0, &r.3 .0] {
                let pid = vm.pid().unwrap();
                pss.push((vm_rss_kib(pid), pss_kib(pid)));
            }
        }
    }
    (one, four, pss)
}

/// Proportional set size (shared pages split among their users), in KiB.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("Pss in smaps_rollup")
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

fn qemu_pid(home: &Path, id: &burrow::SandboxId) -> u32 {
    let path = home
        .join("sandboxes")
        .join(id.as_str())
        .join("runtime/qemu.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["pid"].as_u64().expect("pid in qemu.json") as u32
}

/// (supervisor, QEMU) VmRSS in KiB of a fresh VM sandbox after boot and
/// one exec.
async fn vm_memory(home: &TestHome, name: &str, memory_mb: Option<u64>) -> (u64, u64) {
    let mut b = home.builder(name).driver("vm");
    if let Some(mb) = memory_mb {
        b = b.memory_mb(mb);
    }
    let sb = b.create().await.unwrap();
    let out = sb.exec(["true"]).await.unwrap();
    assert_eq!(out.status.code, Some(0));
    let info = sb.info().await.unwrap();
    let sup = info
        .last_run
        .as_ref()
        .and_then(|r| r.supervisor_pid)
        .unwrap_or_else(|| {
            let pids = common::supervisors_of(&home.path().to_string_lossy());
            assert_eq!(pids.len(), 1, "supervisors of the home: {pids:?}");
            pids[0]
        });
    let qemu = qemu_pid(home.path(), sb.id());
    let rss = (vm_rss_kib(sup), vm_rss_kib(qemu));
    sb.destroy().await.unwrap();
    rss
}

fn started_from(home: &Path, id: &burrow::SandboxId) -> StartKind {
    start_record(&home.join("sandboxes").join(id.as_str()).join("runtime"))
        .expect("start.json")
        .from
}

/// The supervisor's phases of a start (ms): `launch` (the driver: QEMU
/// started and the guest restored or booting), `agent_hello` (from there
/// to the agent's hello), `total` (from the supervisor's spawn).
type Phases = BTreeMap<String, f64>;

/// `n` creates -> Running of a vm sandbox, each destroyed after; asserts
/// how each started. Returns the times and the supervisor's phases.
async fn creates(
    home: &TestHome,
    prefix: &str,
    n: usize,
    from: StartKind,
) -> (Vec<Duration>, Vec<Phases>) {
    let mut out = Vec::new();
    let mut phases = Vec::new();
    for i in 0..n {
        let builder = home.builder(&format!("{prefix}-{i}")).driver("vm");
        let t = Instant::now();
        let sb = builder.create().await.unwrap();
        out.push(t.elapsed());
        assert_eq!(started_from(home.path(), sb.id()), from);
        let info = sb.info().await.unwrap();
        let timings = info.last_run.and_then(|r| r.timings).unwrap_or_default();
        phases.push(serde_json::from_value(timings).unwrap_or_default());
        sb.destroy().await.unwrap();
    }
    (out, phases)
}

/// The median of phase `name` across `phases`, in ms.
fn phase_median(phases: &[Phases], name: &str) -> f64 {
    let mut v: Vec<f64> = phases.iter().filter_map(|p| p.get(name).copied()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// 8 creates at once from one template, `rounds` times: the time until all
/// are Running, and the QEMU (RSS, PSS) KiB of each of the last round.
async fn creates_at_once(home: &TestHome, rounds: usize) -> (Vec<Duration>, Vec<(u64, u64)>) {
    let mut times = Vec::new();
    let mut memory = Vec::new();
    for r in 0..rounds {
        let t = Instant::now();
        let all = futures::future::join_all((0..8).map(|i| {
            home.builder(&format!("eight-{r}-{i}"))
                .driver("vm")
                .create()
        }))
        .await;
        times.push(t.elapsed());
        let sandboxes: Vec<burrow::Sandbox> = all.into_iter().map(|s| s.unwrap()).collect();
        for sb in &sandboxes {
            assert_eq!(started_from(home.path(), sb.id()), StartKind::Template);
        }
        if r + 1 == rounds {
            for sb in &sandboxes {
                assert_eq!(sb.exec(["true"]).await.unwrap().status.code, Some(0));
            }
            for sb in &sandboxes {
                let pid = qemu_pid(home.path(), sb.id());
                memory.push((vm_rss_kib(pid), pss_kib(pid)));
            }
        }
        for sb in sandboxes {
            sb.destroy().await.unwrap();
        }
    }
    (times, memory)
}

/// `n` demand starts (an exec of `true` on the idle-reclaimed sandbox,
/// timed from the call to its answer) of one vm sandbox reclaimed with
/// `action`; a counter process runs in it throughout.
async fn demand_starts(home: &TestHome, name: &str, action: IdleAction, n: usize) -> Vec<Duration> {
    let sb = home
        .builder(name)
        .driver("vm")
        .idle_timeout(Duration::from_millis(500))
        .idle_action(action)
        .create()
        .await
        .unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let stopped = tokio::time::timeout(
            Duration::from_secs(60),
            sb.handle().wait_for_status(&[Status::Stopped]),
        )
        .await
        .expect("reclaimed")
        .unwrap();
        let reason = stopped.last_run.and_then(|r| r.exit_reason);
        let expected = match action {
            IdleAction::Hibernate => burrow::ExitReason::Hibernated,
            _ => burrow::ExitReason::IdleTimeout,
        };
        assert_eq!(reason, Some(expected));
        let t = Instant::now();
        let r = sb.exec(["true"]).await.unwrap();
        out.push(t.elapsed());
        assert_eq!(r.status.code, Some(0));
        let kind = started_from(home.path(), sb.id());
        let want = match action {
            IdleAction::Hibernate => StartKind::Hibernation,
            _ => StartKind::Template,
        };
        assert_eq!(kind, want);
    }
    sb.destroy().await.unwrap();
    out
}

async fn exec_samples(sb: &burrow::Sandbox, n: usize) -> Vec<Duration> {
    sb.exec(["true"]).await.unwrap();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = sb.exec(["true"]).await.unwrap();
        out.push(t.elapsed());
        assert_eq!(r.status.code, Some(0));
    }
    out
}

/// What the sandbox part of the benchmark measured.
struct Measured {
    cold: Vec<Duration>,
    cold_memory: (u64, u64),
    create: Vec<Duration>,
    create_phases: Vec<Phases>,
    eight: Vec<Duration>,
    eight_memory: Vec<(u64, u64)>,
    after_hibernate: Vec<Duration>,
    after_stop: Vec<Duration>,
    vm_exec: Vec<Duration>,
    ct_exec: Vec<Duration>,
    mem_default: (u64, u64),
    mem_128: (u64, u64),
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let execs = iters * 10;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rootfs = common::busybox_rootfs();
    common::init_env();
    // What the driver itself would use: QEMU, kernel and accelerator.
    let support = rt
        .block_on(burrow::internal::driver::vm::check_support())
        .expect("VM support (QEMU, kernel, agent)");
    let scratch = tempfile::Builder::new()
        .prefix("bv")
        .tempdir_in("/tmp")
        .unwrap();
    let initrd = floor_initramfs(scratch.path());
    let args = floor_args(support.accel.accel, &support.kernel, &initrd);

    // The floor.
    let _ = bare_boot(&support.qemu, &args);
    let mut floor = Vec::new();
    let mut odd_exits = Vec::new();
    for _ in 0..iters {
        let (d, code) = bare_boot(&support.qemu, &args);
        floor.push(d);
        if code != Some(1) {
            odd_exits.push(code);
        }
    }

    // A saved guest restored into new QEMUs (the mechanism under boot
    // templates and hibernation): one guest of the real kernel and agent,
    // saved while its agent waits, then restored `iters` times one by one
    // and 4 at once.
    let (restore, restore4, restored_memory) =
        rt.block_on(restores(&support, scratch.path(), iters));

    let measured = rt.block_on(async {
        let home = TestHome::new().await;
        // Warm-up: the image's ext4 disk (VM) and shifted copy (container)
        // are built once per image.
        for driver in ["vm", "container"] {
            home.builder(&format!("warmup-{driver}"))
                .driver(driver)
                .create()
                .await
                .unwrap()
                .destroy()
                .await
                .unwrap();
        }

        // Cold boots: templates off for the supervisors spawned meanwhile
        // (they inherit this process's environment; nothing else runs).
        std::env::set_var(TEMPLATES_ENV, "0");
        let (cold, _) = creates(&home, "cold", iters, StartKind::Cold).await;
        let cold_sb = home
            .builder("cold-memory")
            .driver("vm")
            .create()
            .await
            .unwrap();
        assert_eq!(cold_sb.exec(["true"]).await.unwrap().status.code, Some(0));
        let cold_pid = qemu_pid(home.path(), cold_sb.id());
        let cold_memory = (vm_rss_kib(cold_pid), pss_kib(cold_pid));
        cold_sb.destroy().await.unwrap();
        std::env::remove_var(TEMPLATES_ENV);
        // The warm-up above built the template.
        let (create, create_phases) = creates(&home, "bench", iters, StartKind::Template).await;
        let (eight, eight_memory) = creates_at_once(&home, iters.div_ceil(3)).await;
        let after_hibernate =
            demand_starts(&home, "hibernating", IdleAction::Hibernate, iters).await;
        let after_stop = demand_starts(&home, "stopping", IdleAction::Stop, iters).await;

        let sb = home.builder("exec-vm").driver("vm").create().await.unwrap();
        let vm_exec = exec_samples(&sb, execs).await;
        sb.destroy().await.unwrap();
        let sb = home
            .builder("exec-container")
            .driver("container")
            .create()
            .await
            .unwrap();
        let ct_exec = exec_samples(&sb, execs).await;
        sb.destroy().await.unwrap();

        let mem_default = vm_memory(&home, "mem-default", None).await;
        let mem_128 = vm_memory(&home, "mem-128", Some(128)).await;
        Measured {
            cold,
            cold_memory,
            create,
            create_phases,
            eight,
            eight_memory,
            after_hibernate,
            after_stop,
            vm_exec,
            ct_exec,
            mem_default,
            mem_128,
        }
    });
    let Measured {
        cold,
        cold_memory,
        create,
        create_phases,
        eight,
        eight_memory,
        after_hibernate,
        after_stop,
        vm_exec,
        ct_exec,
        mem_default,
        mem_128,
    } = measured;

    let floor_med = pct(&floor, 0.5);
    let ct_med = pct(&ct_exec, 0.5);
    println!(
        "\nburrow vm benchmark ({iters} bare boots, {iters} vm starts, {execs} execs per driver)"
    );
    println!("command: cargo bench -p burrow-cli --bench vm (BENCH_ITERS={iters})");
    println!(
        "accelerator: {} ({})",
        support.accel.accel.as_str(),
        support.accel.reason
    );
    println!("image: {}", rootfs.display());
    println!(
        "floor: {} {} (initramfs: static /init writing {MARKER} to /dev/console, then isa-debug-exit)",
        support.qemu.display(),
        args.iter()
            .map(|a| if a.contains(' ') { format!("'{a}'") } else { a.clone() })
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !odd_exits.is_empty() {
        println!(
            "note: {} bare boot(s) exited with {odd_exits:?} instead of 1",
            odd_exits.len()
        );
    }
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>18}",
        "operation", "median ms", "p90 ms", "max ms", "ratio (medians)"
    );
    let cold_med = pct(&cold, 0.5);
    let stop_med = pct(&after_stop, 0.5);
    let rows: [(&str, &[Duration], String); 10] = [
        (
            "bare boot -> init marker (floor)",
            &floor,
            "1.00 x floor".into(),
        ),
        (
            "restore of a saved guest -> running",
            &restore,
            format!("{:.2} x floor", ms(pct(&restore, 0.5)) / ms(floor_med)),
        ),
        (
            "4 restores at once -> all running",
            &restore4,
            format!("{:.2} x floor", ms(pct(&restore4, 0.5)) / ms(floor_med)),
        ),
        (
            "vm create -> Running, cold boot",
            &cold,
            format!("{:.2} x floor", ms(cold_med) / ms(floor_med)),
        ),
        (
            "vm create -> Running, template",
            &create,
            format!("{:.2} x cold", ms(pct(&create, 0.5)) / ms(cold_med)),
        ),
        (
            "8 creates at once -> all Running",
            &eight,
            format!("{:.2} x cold", ms(pct(&eight, 0.5)) / ms(cold_med)),
        ),
        (
            "demand start after stop (exec)",
            &after_stop,
            "1.00 x after stop".into(),
        ),
        (
            "demand start after hibernate (exec)",
            &after_hibernate,
            format!(
                "{:.2} x after stop",
                ms(pct(&after_hibernate, 0.5)) / ms(stop_med)
            ),
        ),
        (
            "vm exec true (running)",
            &vm_exec,
            format!("{:.2} x container", ms(pct(&vm_exec, 0.5)) / ms(ct_med)),
        ),
        (
            "container exec true (running)",
            &ct_exec,
            "1.00 x container".into(),
        ),
    ];
    for (name, s, ratio) in rows {
        println!(
            "{:<36} {:>10.1} {:>10.1} {:>10.1} {:>18}",
            name,
            ms(pct(s, 0.5)),
            ms(pct(s, 0.9)),
            ms(pct(s, 1.0)),
            ratio
        );
    }
    let total = phase_median(&create_phases, "total");
    println!(
        "\nwhere a template create's time goes (medians, ms): supervisor spawned {:.1}, \
         driver launch (QEMU started, guest restored, identity handed over) {:.1}, \
         guest setup to the agent's hello {:.1}, supervisor total {:.1}; \
         the caller's own part (store, spawn, answer) {:.1}",
        phase_median(&create_phases, "spawn") + phase_median(&create_phases, "supervisor_init"),
        phase_median(&create_phases, "launch"),
        phase_median(&create_phases, "agent_hello"),
        total,
        ms(pct(&create, 0.5)) - total,
    );
    println!("\nhost memory per running vm sandbox (VmRSS after boot + one exec)");
    println!(
        "{:<36} {:>14} {:>10} {:>10}",
        "vm memory", "supervisor MiB", "qemu MiB", "sum MiB"
    );
    for (name, (sup, qemu)) in [
        (format!("default ({DEFAULT_MEMORY_MB} MiB)"), mem_default),
        ("memory_mb(128)".to_string(), mem_128),
    ] {
        println!(
            "{:<36} {:>14.1} {:>10.1} {:>10.1}",
            name,
            sup as f64 / 1024.0,
            qemu as f64 / 1024.0,
            (sup + qemu) as f64 / 1024.0
        );
    }
    println!(
        "\nQEMU memory of 4 guests restored at once from one saved guest ({DEFAULT_MEMORY_MB} MiB RAM file, copy-on-write)"
    );
    println!("{:<36} {:>10} {:>10}", "guest", "RSS MiB", "PSS MiB");
    for (i, (rss, pss)) in restored_memory.iter().enumerate() {
        println!(
            "{:<36} {:>10.1} {:>10.1}",
            format!("restored #{}", i + 1),
            *rss as f64 / 1024.0,
            *pss as f64 / 1024.0
        );
    }
    println!(
        "\nQEMU memory per vm sandbox after boot + one exec: cold-booted, and 8 running at once from one template"
    );
    println!("{:<36} {:>10} {:>10}", "sandbox", "RSS MiB", "PSS MiB");
    println!(
        "{:<36} {:>10.1} {:>10.1}",
        "cold boot",
        cold_memory.0 as f64 / 1024.0,
        cold_memory.1 as f64 / 1024.0
    );
    for (i, (rss, pss)) in eight_memory.iter().enumerate() {
        println!(
            "{:<36} {:>10.1} {:>10.1}",
            format!("from the template #{}", i + 1),
            *rss as f64 / 1024.0,
            *pss as f64 / 1024.0
        );
    }
}
