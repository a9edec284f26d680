//! Embeds the static guest agent (`burrow-agent`) in the `burrow` and
//! `burrow-supervisor` binaries, so that an installed `burrow` starts
//! sandboxes with no environment variables (at run time the library writes
//! it once to `<cache>/agent/<sha256>/burrow-agent`; see
//! `burrow::internal::agent::locate_agent`).
//!
//! `BURROW_EMBED_AGENT` chooses the agent:
//! - unset or empty: build `core/agent` here with a nested cargo, for
//!   `<arch>-unknown-linux-musl`, or, when that Rust target is not
//!   installed, for `<arch>-unknown-linux-gnu` with
//!   `-C target-feature=+crt-static` (see [`nested_target_dir`] for where);
//! - a path: embed that prebuilt static agent (CI and `scripts/test.sh`
//!   pass `scripts/build-agent.sh`'s output, so the agent is compiled once);
//! - `none`: embed nothing (the binaries then rely on the library's other
//!   lookups: `BURROW_AGENT_BIN`, a `burrow-agent` beside `burrow`, ...).
//!
//! Emits `BURROW_EMBEDDED_AGENT_SHA256` (empty when nothing is embedded) and
//! writes the bytes to `$OUT_DIR/burrow-agent`, which `src/agent.rs`
//! includes.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Set for the nested cargo: if the agent's build ever ran this script
/// again (the agent depending on the CLI), it stops instead of recursing.
const NESTED: &str = "BURROW_CLI_BUILDING_AGENT";

fn main() {
    println!("cargo:rerun-if-env-changed=BURROW_EMBED_AGENT");
    if std::env::var_os(NESTED).is_some() {
        panic!("core/cli/build.rs ran inside its own nested build of the guest agent: burrow-agent must not depend on burrow-cli");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let choice = std::env::var("BURROW_EMBED_AGENT").unwrap_or_default();
    let bytes = match choice.as_str() {
        "none" => {
            println!("cargo:warning=BURROW_EMBED_AGENT=none: the burrow binaries carry no guest agent (set BURROW_AGENT_BIN when running them)");
            Vec::new()
        }
        "" => read_agent(&build_agent(&out)),
        path => {
            println!("cargo:rerun-if-changed={path}");
            read_agent(Path::new(path))
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
    let dest = out.join("burrow-agent");
    // Rewritten only when it changed: an unchanged agent recompiles nothing.
    if std::fs::read(&dest).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(&dest, &bytes).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
    }
    println!("cargo:rustc-env=BURROW_EMBEDDED_AGENT_SHA256={sha}");
}

/// Reads the agent and checks that it is a statically linked ELF: it runs
/// as PID 1 of guests that have no dynamic loader.
fn read_agent(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("reading the guest agent {}: {e}", path.display()));
    if let Err(why) = check_static_elf(&bytes) {
        panic!(
            "the guest agent {} cannot be embedded: {why}; build it with scripts/build-agent.sh",
            path.display()
        );
    }
    bytes
}

fn check_static_elf(b: &[u8]) -> Result<(), &'static str> {
    if b.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF executable");
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF");
    }
    let num = |at: usize, len: usize| -> Option<usize> {
        let mut v = 0usize;
        for (i, byte) in b.get(at..at + len)?.iter().enumerate() {
            v |= usize::from(*byte) << (8 * i);
        }
        Some(v)
    };
    let (phoff, phentsize, phnum) = match (num(32, 8), num(54, 2), num(56, 2)) {
        (Some(o), Some(s), Some(n)) => (o, s, n),
        _ => return Err("truncated ELF header"),
    };
    for i in 0..phnum {
        const PT_INTERP: usize = 3;
        match num(phoff + i * phentsize, 4) {
            Some(PT_INTERP) => {
                return Err("it is dynamically linked (it names an ELF interpreter)")
            }
            Some(_) => {}
            None => return Err("truncated ELF program headers"),
        }
    }
    Ok(())
}

/// Builds `core/agent` in release mode and returns the binary's path.
fn build_agent(out: &Path) -> PathBuf {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let workspace = manifest_dir.join("../..");
    let agent_manifest = workspace.join("core/agent/Cargo.toml");
    if !agent_manifest.is_file() {
        panic!(
            "{} is missing, so the guest agent cannot be built to embed it: build burrow-cli from a burrow checkout, or set BURROW_EMBED_AGENT to a static burrow-agent (or to `none`)",
            agent_manifest.display()
        );
    }
    // The agent's sources, the protocol crate it uses, and the workspace's
    // lock file and profiles.
    for p in ["core/agent", "core/protocol", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }

    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let musl = format!("{arch}-unknown-linux-musl");
    let (triple, rustflags) = if target_installed(&musl) {
        (musl, "")
    } else {
        let gnu = format!("{arch}-unknown-linux-gnu");
        println!("cargo:warning=the Rust target {musl} is not installed (rustup target add {musl}); embedding a static glibc build of the guest agent ({gnu}, +crt-static) instead");
        (gnu, "-Ctarget-feature=+crt-static")
    };
    let target_dir = nested_target_dir(out);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--package",
        "burrow-agent",
        "--manifest-path",
    ])
    .arg(&agent_manifest)
    .args(["--target", &triple, "--target-dir"])
    .arg(&target_dir)
    // Settings of the outer build that must not leak into this one: its
    // flags and wrappers (clippy-driver under `cargo clippy`), its
    // target and target directory.
    .env_remove("RUSTFLAGS")
    .env_remove("CARGO_BUILD_RUSTFLAGS")
    .env_remove("RUSTC_WORKSPACE_WRAPPER")
    .env_remove("CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER")
    .env_remove("CLIPPY_ARGS")
    .env_remove("CARGO_TARGET_DIR")
    .env_remove("CARGO_BUILD_TARGET_DIR")
    .env_remove("CARGO_BUILD_BUILD_DIR")
    .env_remove("CARGO_BUILD_TARGET")
    .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
    .env(NESTED, "1");
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("running cargo to build the guest agent: {e}"));
    if !output.status.success() {
        panic!(
            "building the guest agent (burrow-agent for {triple}) failed; install the target with `rustup target add {arch}-unknown-linux-musl`, or set BURROW_EMBED_AGENT to a prebuilt static agent (scripts/build-agent.sh) or to `none`\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    target_dir
        .join(&triple)
        .join("release")
        .join("burrow-agent")
}

/// The nested build's target directory: `agent/` inside the target
/// directory of the build running this script, which is where
/// `scripts/build-agent.sh` and the tests build the agent too. A target
/// directory of its own, so the nested cargo never waits on a lock the
/// outer build holds; and one for every outer profile (dev, release, and
/// `cargo clippy`'s build scripts, which get an `OUT_DIR` of their own), so
/// the agent is compiled once, not once per `OUT_DIR`. When `OUT_DIR` is not
/// under a recognisable target directory: `$OUT_DIR/agent-target`.
fn nested_target_dir(out: &Path) -> PathBuf {
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<pkg>-<hash>/out; cargo
    // marks <target> with CACHEDIR.TAG.
    out.ancestors()
        .skip(3)
        .take(3)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(|target| target.join("agent"))
        .unwrap_or_else(|| out.join("agent-target"))
}

/// Whether the Rust standard library for `triple` is installed.
fn target_installed(triple: &str) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .args(["--print", "target-libdir", "--target", triple])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| has_libstd(&dir))
}

fn has_libstd(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    })
}
