//! The C ABI: `include/burrow.h` is what cbindgen makes of `src/lib.rs`,
//! and a C program compiled against it and linked with `libburrow.so` of
//! this build runs a real sandbox (tests/smoke.c).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use burrow_test_support::{busybox_rootfs, init_env, new_home_dir, Home};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn header_is_what_cbindgen_makes_of_the_source() {
    let bindings = cbindgen::generate(crate_dir()).unwrap();
    let mut made = Vec::new();
    bindings.write(&mut made);
    let path = crate_dir().join("include/burrow.h");
    if std::env::var_os("BURROW_WRITE_HEADER").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == made,
        "{} is out of date: BURROW_WRITE_HEADER=1 cargo test -p burrow-c --test c_abi header",
        path.display()
    );
}

/// The directory of this build's `libburrow.so`: `target/<profile>/deps`
/// beside this test (where a test build leaves it), else `target/<profile>`
/// (where `cargo build -p burrow-c` puts it).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    if deps.join("libburrow.so").is_file() {
        deps.to_path_buf()
    } else {
        deps.parent().unwrap_or(Path::new(".")).to_path_buf()
    }
}

#[test]
fn a_c_program_runs_a_sandbox() {
    init_env();
    let lib = lib_dir();
    assert!(
        lib.join("libburrow.so").is_file(),
        "{} has no libburrow.so",
        lib.display()
    );
    let out_dir = tempfile_dir();
    let exe = out_dir.join("smoke");
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("tests/smoke.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lburrow", "-lpthread"])
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let home = Home::new(new_home_dir().unwrap());
    let run = Command::new(&exe)
        .arg(home.path())
        .arg(busybox_rootfs())
        .env_remove("BURROW_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "smoke failed ({}): {stdout}{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(stdout, "exec ok\nnot_found ok\nasync ok\ncancel ok\ndone\n");
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burrow-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
