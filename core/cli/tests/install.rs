#![allow(clippy::unwrap_used)]
//! A fresh install works: `cargo install --path core/cli` into an empty
//! prefix, then the installed `burrow` runs a sandbox with a clean
//! environment (no `BURROW_*` variable but `BURROW_HOME`, `PATH` with system
//! directories only, a `HOME` with nothing cached), using the guest agent
//! embedded in it and the lean `burrow-supervisor` installed beside it.
//!
//! The install builds into the target directory of this test's own build,
//! with the same profile, so it reuses what `cargo test` compiled: seconds.
//! Two things made it compile half the workspace again: features the
//! `--workspace` build turns on that burrow-cli alone did not (its
//! Cargo.toml now asks for them), and the variables cargo sets for this
//! test, which rerun build scripts (scrubbed below). Needs root and runc,
//! as the other end-to-end suites.

use burrow_cli_testkit as common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `cargo install` arguments that build like this test's own build: the
/// target directory and profile that produced `CARGO_BIN_EXE_burrow`.
fn install_args() -> (PathBuf, Vec<String>) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_burrow"));
    let profile_dir = bin.parent().unwrap();
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let mut target_dir = profile_dir.parent().unwrap().to_path_buf();
    let mut args = match profile.as_str() {
        "debug" => vec!["--debug".to_owned()],
        "release" => Vec::new(),
        other => vec!["--profile".to_owned(), other.to_owned()],
    };
    // target/<triple>/<profile>/burrow under `--target` (a target triple
    // names its OS; the target directory, whatever it is called, does not).
    let dir_name = target_dir.file_name().unwrap().to_str().unwrap().to_owned();
    if dir_name.contains(&format!("-{}", std::env::consts::OS)) {
        args.extend(["--target".to_owned(), dir_name]);
        target_dir = target_dir.parent().unwrap().to_path_buf();
    }
    (target_dir, args)
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Kills what the test started in `home`, and keeps its logs on failure.
struct Cleanup<'a>(&'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        common::kill_supervisors_of(self.0);
        if std::thread::panicking() {
            common::dump_logs(self.0);
        }
    }
}

#[test]
fn cargo_install_into_an_empty_prefix_runs_a_sandbox_with_no_environment() {
    let image = common::busybox_rootfs();
    let tmp = tempfile::Builder::new()
        .prefix("bi")
        .tempdir_in("/tmp")
        .unwrap();
    let prefix = tmp.path().join("prefix");
    let home = tmp.path().join("home");
    let burrow_home = tmp.path().join("b");
    std::fs::create_dir(&home).unwrap();

    let (target_dir, profile_args) = install_args();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut install = Command::new(cargo);
    // The variables cargo sets for this test binary (OUT_DIR,
    // CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...) are ones build scripts
    // (ring's) declare with rerun-if-env-changed: seen by the inner cargo,
    // they would rerun them and rebuild everything above ring.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_EXE_")
            || matches!(
                &*key,
                "OUT_DIR"
                    | "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            )
        {
            install.env_remove(&*key);
        }
    }
    let out = install
        .args(["install", "--locked", "--offline", "--path"])
        .arg(common::workspace_root().join("core/cli"))
        .arg("--root")
        .arg(&prefix)
        .args(&profile_args)
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo install failed: {}", text(&out));
    let mut installed: Vec<_> = std::fs::read_dir(prefix.join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    installed.sort();
    assert_eq!(
        installed,
        ["burrow", "burrow-supervisor"],
        "no agent file beside them"
    );

    let _cleanup = Cleanup(&burrow_home);
    let burrow = |args: &[&str]| {
        let out = Command::new(prefix.join("bin/burrow"))
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .env("HOME", &home)
            .env("BURROW_HOME", &burrow_home)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            text(&out),
        )
    };
    let image = image.to_str().unwrap();

    // One command in a fresh sandbox.
    let (code, stdout, all) = burrow(&["run", "--name", "fresh", image, "--", "echo", "ok"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "ok\n"), "{all}");

    // The agent came out of the binary, into a content-addressed cache file
    // that the container's unprivileged root can execute.
    let agents: Vec<PathBuf> = std::fs::read_dir(home.join(".cache/burrow/agent"))
        .unwrap()
        .map(|e| e.unwrap().path().join("burrow-agent"))
        .collect();
    assert_eq!(agents.len(), 1, "{agents:?}");
    let digest = agents[0]
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    let meta = std::fs::metadata(&agents[0]).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    assert_eq!(&std::fs::read(&agents[0]).unwrap()[..4], b"\x7fELF");

    // A detached sandbox is supervised by the lean burrow-supervisor that
    // was installed beside burrow.
    let (code, _, all) = burrow(&["up", "kept", "--image", image]);
    assert_eq!(code, Some(0), "{all}");
    let supervisors = common::supervisors_of(burrow_home.to_str().unwrap());
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    let exe = std::fs::read_link(format!("/proc/{}/exe", supervisors[0])).unwrap();
    assert_eq!(exe, prefix.join("bin/burrow-supervisor"));
    let (code, stdout, all) = burrow(&["exec", "kept", "--", "echo", "still ok"]);
    assert_eq!((code, stdout.as_str()), (Some(0), "still ok\n"), "{all}");
    let (code, _, all) = burrow(&["rm", "-f", "kept"]);
    assert_eq!(code, Some(0), "{all}");

    // doctor says where the agent came from and how to get the vm driver's
    // guest kernel (typed fields; the installed prefix has no kernel).
    let (code, stdout, all) = burrow(&["--json", "doctor"]);
    assert_eq!(code, Some(0), "{all}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["agent"]["ok"], true, "{v}");
    assert_eq!(v["agent"]["source"], "embedded", "{v}");
    assert_eq!(v["agent"]["path"], agents[0].to_str().unwrap(), "{v}");
    let k = &v["vm_kernel"];
    assert_eq!(k["env"], "BURROW_VM_KERNEL", "{k}");
    assert_eq!(k["build_script"], "scripts/build-kernel.sh", "{k}");
    assert_eq!(
        k["cache_dir"],
        home.join(".cache/burrow/kernel").to_str().unwrap(),
        "{k}"
    );
    assert_eq!(
        k["install_paths"][0],
        prefix.join("bin/burrow-vmlinux").to_str().unwrap(),
        "{k}"
    );
    if k["found"].is_null() {
        assert_eq!(v["drivers"]["vm"]["ok"], false, "{v}");
        assert!(
            k["hint"]
                .as_str()
                .unwrap()
                .contains("scripts/build-kernel.sh"),
            "{k}"
        );
    }
}
