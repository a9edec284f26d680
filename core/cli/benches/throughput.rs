//! Throughput benchmark (flow control, issue 37): bulk bytes through a
//! sandbox, each beside an anchor measured in the same run, all to the
//! same kind of fast reader (one that counts what it reads):
//!
//! - exec stdout of `head -c N /dev/zero` in a container sandbox, beside
//!   `runc exec` and `crun exec` of the same command in a container of
//!   the same rootfs (target: burrow >= 0.8x runc);
//! - with `BURROW_VM_KERNEL` set: the same exec in a vm sandbox (of
//!   BENCH_VM_BYTES, default 256 MiB: under TCG a guest copies slowly),
//!   beside the guest's own `dd` from /dev/zero to /dev/null and the same
//!   `head` piped into a `cat` in the guest (what the guest's pipes do);
//! - `fs().write` and `fs().read` of N bytes, beside this host writing and
//!   reading a file of N bytes under /tmp;
//! - a tunnel carrying N bytes from a guest `nc`, beside the same `nc`
//!   (the rootfs's busybox) on this host's loopback.
//!
//! Run: `cargo bench -p burrow-cli --bench throughput` (as root).
//! Size: BENCH_BYTES (default 1 GiB). Each figure is the best of
//! BENCH_ITERS runs (default 3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use burrow_cli_testkit as common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burrow::{DriverKind, ExecEvent, ExecOptions, Sandbox};
use common::runtimes::Running;
use common::{busybox_rootfs, TestHome};
use tokio::io::AsyncReadExt;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// MB/s (10^6 bytes) of `bytes` in `t`.
fn rate(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e6
}

/// The best rate of `iters` runs of `run` (each returns bytes and time).
fn best(iters: u64, mut run: impl FnMut() -> (u64, Duration)) -> f64 {
    (0..iters)
        .map(|_| {
            let (n, t) = run();
            rate(n, t)
        })
        .fold(0.0, f64::max)
}

/// Runs `cmd` with its stdout read to the end by a counting reader.
fn drain_command(mut cmd: Command) -> (u64, Duration) {
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match out.read(&mut buf).unwrap() {
            0 => break,
            k => n += k as u64,
        }
    }
    assert!(child.wait().unwrap().success());
    (n, t.elapsed())
}

/// Exec stdout of `head -c bytes /dev/zero`, counted as it arrives.
async fn exec_rate(sb: &Sandbox, bytes: u64) -> (u64, Duration) {
    let t = Instant::now();
    let mut p = sb
        .spawn(ExecOptions::new([
            "head",
            "-c",
            &bytes.to_string(),
            "/dev/zero",
        ]))
        .await
        .unwrap();
    let mut n = 0u64;
    while let Some(ev) = p.next_event().await.unwrap() {
        match ev {
            ExecEvent::Stdout(d) => n += d.len() as u64,
            ExecEvent::Stderr(_) => {}
            ExecEvent::Exit(s) => assert_eq!(s.code, Some(0)),
        }
    }
    (n, t.elapsed())
}

/// The rate of `script` moving `bytes` in the guest (MB/s, timed in the
/// guest by busybox `time`: "real\t0m 1.23s").
async fn guest_rate(sb: &Sandbox, script: &str, bytes: u64) -> f64 {
    let out = sb
        .exec(["sh", "-c", &format!("time sh -c '{script}'")])
        .await
        .unwrap();
    let text = out.stderr_str();
    let real = text
        .lines()
        .find_map(|l| l.strip_prefix("real"))
        .unwrap_or_else(|| panic!("no time from the guest: {text}"));
    let (min, sec) = real.trim().split_once('m').unwrap();
    let secs: f64 = min.trim().parse::<f64>().unwrap() * 60.0
        + sec.trim().trim_end_matches('s').parse::<f64>().unwrap();
    bytes as f64 / secs.max(0.01) / 1e6
}

/// A tunnel to a guest `nc` that sends `bytes` zeros, read to its end.
async fn tunnel_rate(sb: &Sandbox, bytes: u64, port: u16) -> (u64, Duration) {
    let server = sb
        .spawn(ExecOptions::new([
            "sh",
            "-c",
            &format!("head -c {bytes} /dev/zero | nc -l -p {port}"),
        ]))
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut tunnel = loop {
        match sb.tunnel(port).await {
            Ok(t) => break t,
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("tunnel: {e}"),
        }
    };
    let t = Instant::now();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match tunnel.read(&mut buf).await.unwrap() {
            0 => break,
            k => n += k as u64,
        }
        if n >= bytes {
            break;
        }
    }
    let took = t.elapsed();
    drop(tunnel);
    drop(server);
    (n, took)
}

/// The same `nc` (this rootfs's busybox) on this host's loopback.
fn loopback_rate(bytes: u64, port: u16) -> (u64, Duration) {
    let busybox = busybox_rootfs().join("bin/busybox");
    let mut server = Command::new("sh")
        .args([
            "-c",
            &format!(
                "head -c {bytes} /dev/zero | {} nc -l -p {port}",
                busybox.display()
            ),
        ])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut conn = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("loopback: {e}"),
        }
    };
    let t = Instant::now();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match conn.read(&mut buf).unwrap() {
            0 => break,
            k => n += k as u64,
        }
        if n >= bytes {
            break;
        }
    }
    let took = t.elapsed();
    drop(conn);
    let _ = server.kill();
    let _ = server.wait();
    (n, took)
}

fn row(name: &str, value: f64, anchor_name: &str, anchor: f64) {
    println!(
        "{name:<34} {value:>9.1} MB/s   {anchor_name:<28} {anchor:>9.1} MB/s   {:>5.2}x",
        value / anchor
    );
}

fn main() {
    let bytes = env_num("BENCH_BYTES", 1 << 30);
    let iters = env_num("BENCH_ITERS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("bt")
        .tempdir_in("/tmp")
        .unwrap();
    let rootfs = busybox_rootfs();
    let head = ["head", "-c", &bytes.to_string(), "/dev/zero"];
    println!(
        "throughput of {bytes} bytes, best of {iters} (MB = 10^6 bytes); ratio = burrow / anchor\n"
    );

    let runc = Running::start("runc", scratch.path(), &rootfs);
    let runc_rate = best(iters, || drain_command(runc.exec(&head)));
    drop(runc);
    let crun = Running::start("crun", scratch.path(), &rootfs);
    let crun_rate = best(iters, || drain_command(crun.exec(&head)));
    drop(crun);

    let home = rt.block_on(TestHome::new());
    let sb = rt.block_on(async {
        home.builder("throughput")
            .driver(DriverKind::Container)
            .create()
            .await
            .unwrap()
    });
    let exec = best(iters, || rt.block_on(exec_rate(&sb, bytes)));
    row("container exec stdout", exec, "runc exec", runc_rate);
    row("container exec stdout", exec, "crun exec", crun_rate);

    // fs: the same bytes written and read back, beside this host's own.
    let data = vec![7u8; bytes as usize];
    let fs_write = best(iters, || {
        let t = Instant::now();
        rt.block_on(sb.fs().write("/tmp/big", &data)).unwrap();
        (bytes, t.elapsed())
    });
    let fs_read = best(iters, || {
        let t = Instant::now();
        let got = rt.block_on(sb.fs().read("/tmp/big")).unwrap();
        (got.len() as u64, t.elapsed())
    });
    rt.block_on(sb.fs().remove("/tmp/big", false)).unwrap();
    let host_file = scratch.path().join("big");
    let host_write = best(iters, || {
        let t = Instant::now();
        let mut f = std::fs::File::create(&host_file).unwrap();
        f.write_all(&data).unwrap();
        f.sync_data().ok();
        (bytes, t.elapsed())
    });
    let host_read = best(iters, || {
        let t = Instant::now();
        let got = std::fs::read(&host_file).unwrap();
        (got.len() as u64, t.elapsed())
    });
    std::fs::remove_file(&host_file).unwrap();
    drop(data);
    row("fs write", fs_write, "host file write", host_write);
    row("fs read", fs_read, "host file read", host_read);

    let tunnel = best(iters, || rt.block_on(tunnel_rate(&sb, bytes, 9000)));
    let loopback = best(iters, || loopback_rate(bytes, 9001));
    row(
        "tunnel (guest nc -> host)",
        tunnel,
        "loopback nc -> host",
        loopback,
    );
    rt.block_on(sb.destroy()).unwrap();

    if std::env::var_os("BURROW_VM_KERNEL").is_some() {
        let vm = rt.block_on(async {
            home.builder("throughput-vm")
                .driver(DriverKind::Vm)
                .create()
                .await
                .unwrap()
        });
        let vm_bytes = env_num("BENCH_VM_BYTES", 256 << 20);
        println!("\nvm (TCG here: no usable KVM), {vm_bytes} bytes:");
        let vm_exec = best(iters, || rt.block_on(exec_rate(&vm, vm_bytes)));
        let count = vm_bytes / 65536;
        let dd = format!("dd if=/dev/zero of=/dev/null bs=65536 count={count}");
        let dd = rt.block_on(guest_rate(&vm, &dd, count * 65536));
        let pipe = format!("head -c {vm_bytes} /dev/zero | cat > /dev/null");
        let pipe = rt.block_on(guest_rate(&vm, &pipe, vm_bytes));
        row("vm exec stdout", vm_exec, "guest dd to /dev/null", dd);
        row("vm exec stdout", vm_exec, "guest head | cat", pipe);
        rt.block_on(vm.destroy()).unwrap();
    } else {
        println!("vm rows left out: BURROW_VM_KERNEL is not set (scripts/build-kernel.sh)");
    }
}
