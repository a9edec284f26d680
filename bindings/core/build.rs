//! Embeds the supervisor program (`burrow-supervisor`, which carries the
//! guest agent) in the binding core, so that every SDK package built on it
//! (the wheel's, the npm package's and the gem's native library, the Go
//! module's `libburrow.a`) runs sandboxes by itself: at run time the
//! library writes it once to `<cache>/supervisor/<sha256>/burrow-supervisor`
//! (see `burrow::internal::supervisor_bin`).
//!
//! `BURROW_EMBED_SUPERVISOR` chooses it:
//! - a path: embed that `burrow-supervisor` (CI builds one, once, for the
//!   four SDKs);
//! - `none`: embed nothing (the library then finds the supervisor through
//!   `$BURROW_BIN` or a `burrow` beside the program or on `PATH`);
//! - unset: in a release build (what the SDKs' package builds are:
//!   maturin, `napi build --release`, the gem's and the Go module's
//!   `cargo build --release`), build `burrow-supervisor` here with a nested
//!   cargo, in release, into `<target>/embed`; in any other build, nothing
//!   (the workspace's own tests set `$BURROW_BIN`).
//!
//! Emits `BURROW_EMBEDDED_SUPERVISOR_SHA256` (empty when nothing is
//! embedded) and writes the bytes to `$OUT_DIR/burrow-supervisor`.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Set for the nested cargo, so that it embeds nothing itself.
const NESTED: &str = "BURROW_BINDING_BUILDING_SUPERVISOR";

fn main() {
    println!("cargo:rerun-if-env-changed=BURROW_EMBED_SUPERVISOR");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let choice = std::env::var("BURROW_EMBED_SUPERVISOR").unwrap_or_default();
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let bytes = match choice.as_str() {
        "none" => Vec::new(),
        "" if !release || std::env::var_os(NESTED).is_some() => Vec::new(),
        "" => read(&build_supervisor(&out)),
        path => {
            println!("cargo:rerun-if-changed={path}");
            read(Path::new(path))
        }
    };
    let sha = if bytes.is_empty() {
        String::new()
    } else {
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let dest = out.join("burrow-supervisor");
    if std::fs::read(&dest).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(&dest, &bytes).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
    }
    println!("cargo:rustc-env=BURROW_EMBEDDED_SUPERVISOR_SHA256={sha}");
}

fn read(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("reading the supervisor program {}: {e}", path.display()));
    if bytes.get(..4) != Some(b"\x7fELF") {
        panic!("{} is not an ELF executable", path.display());
    }
    bytes
}

/// Builds `burrow-supervisor` in release mode and returns its path.
fn build_supervisor(out: &Path) -> PathBuf {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let cli_manifest = manifest_dir.join("../../core/cli/Cargo.toml");
    if !cli_manifest.is_file() {
        panic!(
            "{} is missing, so the supervisor cannot be built to embed it: build from a burrow checkout (or a package that carries the workspace), or set BURROW_EMBED_SUPERVISOR to a burrow-supervisor (or to `none`)",
            cli_manifest.display()
        );
    }
    let workspace = manifest_dir.join("../..");
    for p in ["core", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
    // <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out: cargo marks
    // <target> with CACHEDIR.TAG.
    let target_dir = out
        .ancestors()
        .skip(3)
        .take(3)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(|target| target.join("embed"))
        .unwrap_or_else(|| out.join("embed-target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--package",
            "burrow-cli",
            "--bin",
            "burrow-supervisor",
        ])
        .arg("--manifest-path")
        .arg(&cli_manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        // The outer build's flags, wrappers and target must not leak in.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env(NESTED, "1")
        .output()
        .unwrap_or_else(|e| panic!("running cargo to build the supervisor: {e}"));
    if !output.status.success() {
        panic!(
            "building burrow-supervisor to embed it failed; set BURROW_EMBED_SUPERVISOR to a prebuilt one (cargo build --release -p burrow-cli --bin burrow-supervisor) or to `none`\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    target_dir.join("release").join("burrow-supervisor")
}
