#![allow(clippy::unwrap_used)]
//! The snapshot mechanism under boot templates and hibernation, on real
//! QEMU under TCG: a guest of burrow's kernel and agent, with its RAM in a
//! file, is saved mid-run and restored into new QEMU processes, where it
//! goes on from where it stopped.
//!
//! The guest: the agent as `/init` waits (5 s) for disks that never come,
//! then ends the VM with the code of that stage (`Disks`, 12). It is saved
//! during that wait. The restoring side gets an initramfs of the same size
//! whose boot configuration is invalid (the agent would end at once with
//! `Boot`, 11): a guest that booted again instead of going on would say 11.

use std::path::{Path, PathBuf};
use std::time::Duration;

use burrow::internal::driver::vm::{
    locate_kernel, locate_qemu, write_initramfs, Accel, BareMachine, BareVm,
};
use sha2::{Digest, Sha256};

/// The agent's exit codes of the two setup stages (see the agent's
/// `vm::Stage`).
const STAGE_BOOT: i32 = 11;
const STAGE_DISKS: i32 = 12;

const MEMORY_MB: u64 = 128;

/// A valid boot configuration naming disks that do not exist, or (with
/// `uix` for `uid`, the same length) an invalid one.
fn boot_json(valid: bool) -> Vec<u8> {
    let uid = if valid { "uid" } else { "uix" };
    format!(
        r#"{{"root_serial":"absent-root","data_serial":"absent-data","channel":"burrow.agent","hostname":"snap","env":{{}},"cwd":"/","{uid}":0,"gid":0,"hosts":""}}"#
    )
    .into_bytes()
}

fn sha256(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

/// QEMU, the kernel, and a scratch directory with both initramfs.
struct Files {
    _dir: tempfile::TempDir,
    root: PathBuf,
    qemu: PathBuf,
    kernel: PathBuf,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let agent = std::fs::read(burrow_test_support::agent_bin()).unwrap();
        write_initramfs(&root.join("waits.cpio"), &agent, &boot_json(true)).unwrap();
        write_initramfs(&root.join("invalid.cpio"), &agent, &boot_json(false)).unwrap();
        assert_eq!(
            std::fs::metadata(root.join("waits.cpio")).unwrap().len(),
            std::fs::metadata(root.join("invalid.cpio")).unwrap().len()
        );
        Files {
            _dir: dir,
            root,
            qemu: locate_qemu().expect("QEMU (qemu-system-x86_64)"),
            kernel: locate_kernel().expect("the guest kernel (scripts/build-kernel.sh)"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The machine of these tests (TCG, 128 MiB) with RAM in `ram`.
    fn machine<'a>(
        &'a self,
        initramfs: &'a Path,
        ram: &'a Path,
        console: &'a Path,
    ) -> BareMachine<'a> {
        BareMachine {
            qemu: &self.qemu,
            kernel: &self.kernel,
            initramfs,
            accel: Accel::Tcg,
            memory_mb: MEMORY_MB,
            ram,
            console,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_saved_mid_run_goes_on_in_new_qemus_sharing_its_ram_file() {
    let f = Files::new();
    let (ram, state) = (f.path("ram"), f.path("state"));
    let (waits, invalid) = (f.path("waits.cpio"), f.path("invalid.cpio"));
    let (console_a, console_b, console_c) = (f.path("a.log"), f.path("b.log"), f.path("c.log"));

    let saving = f.machine(&waits, &ram, &console_a);
    let vm = BareVm::boot(&saving).await.unwrap();
    // Into the agent's 5 s wait (the kernel boots in about a second).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    vm.save(&state).await.unwrap();

    // The RAM stayed out of the state: it is the RAM file.
    let state_len = std::fs::metadata(&state).unwrap().len();
    assert!(
        state_len > 0 && state_len < 1 << 20,
        "state {state_len} bytes"
    );
    assert_eq!(
        std::fs::metadata(&ram).unwrap().len(),
        MEMORY_MB << 20,
        "the RAM file is the guest's RAM"
    );
    let ram_digest = sha256(&ram);

    // Two guests from one snapshot at once, each with a private copy of the
    // RAM file, booting nothing: they end as the saved guest would have.
    let restoring = |console| BareMachine {
        initramfs: &invalid,
        console,
        ..saving
    };
    let (b, c) = (restoring(&console_b), restoring(&console_c));
    let ((vm_b, took_b), (vm_c, took_c)) =
        tokio::try_join!(BareVm::restore(&b, &state), BareVm::restore(&c, &state)).unwrap();
    println!(
        "state {state_len} bytes; restored in {} ms and {} ms (QEMU spawn to guest running)",
        took_b.as_millis(),
        took_c.as_millis()
    );
    let (exit_b, exit_c) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::try_join!(vm_b.wait(), vm_c.wait())
    })
    .await
    .expect("the restored guests end")
    .unwrap();
    for (exit, console) in [(exit_b, &console_b), (exit_c, &console_c)] {
        assert_eq!(
            exit.code,
            Some(STAGE_DISKS),
            "{exit:?}: {}",
            std::fs::read_to_string(console).unwrap_or_default()
        );
        assert_ne!(exit.code, Some(STAGE_BOOT));
    }
    // Private copies: the snapshot's RAM is as it was saved.
    assert_eq!(sha256(&ram), ram_digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_cannot_work_is_an_error_and_leaves_no_qemu() {
    let f = Files::new();
    let (ram, state) = (f.path("ram"), f.path("state"));
    let waits = f.path("waits.cpio");
    let console = f.path("a.log");
    let m = f.machine(&waits, &ram, &console);
    // No state file at all.
    let err = BareVm::restore(&m, &state).await.unwrap_err();
    assert_eq!(err.code(), burrow::ErrorCode::Io, "{err}");
    // A state saved with another memory size.
    let vm = BareVm::boot(&m).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    vm.save(&state).await.unwrap();
    let other = BareMachine {
        memory_mb: MEMORY_MB * 2,
        ram: &f.path("ram2"),
        ..m
    };
    let err = BareVm::restore(&other, &state).await.unwrap_err();
    assert_eq!(err.code(), burrow::ErrorCode::RuntimeUnavailable, "{err}");
    // A state path no shell could be given restores: QEMU reads the state
    // through a descriptor it inherits.
    std::fs::copy(&state, f.path("it's")).unwrap();
    let (vm, _) = BareVm::restore(&m, &f.path("it's")).await.unwrap();
    vm.save(&f.path("again")).await.unwrap();
    // Every QEMU of this test is gone.
    let root = f.root.to_string_lossy().into_owned();
    let left = burrow_test_support::processes_with(|argv| argv.iter().any(|a| a.contains(&root)));
    assert!(left.is_empty(), "QEMU processes left: {left:?}");
}
