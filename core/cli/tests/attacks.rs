#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The attack suite of the security review (issue 56, and the defence in
//! depth of issue 57): one module per class of hole, each test an attack that succeeded on the reviewed build
//! and must fail on this one. They run as root and, in the rootless lane,
//! as an unprivileged user (`cargo xtask test --rootless --test attacks`).
//! docs/security.md names the test that proves each boundary.

#[path = "attacks/audit.rs"]
mod audit;
#[path = "attacks/copy_out.rs"]
mod copy_out;
#[path = "attacks/egress.rs"]
mod egress;
#[path = "attacks/gateway_origin.rs"]
mod gateway_origin;
#[path = "attacks/guest.rs"]
mod guest;
#[path = "attacks/host_walks.rs"]
mod host_walks;
#[path = "attacks/mcp_scope.rs"]
mod mcp_scope;
#[path = "attacks/mounts.rs"]
mod mounts;
#[path = "attacks/quotas.rs"]
mod quotas;
#[path = "attacks/seccomp.rs"]
mod seccomp;
#[path = "attacks/secrets.rs"]
mod secrets;
#[path = "attacks/ssrf.rs"]
mod ssrf;
#[path = "attacks/tenant_policy.rs"]
mod tenant_policy;
#[path = "attacks/unauthenticated.rs"]
mod unauthenticated;

/// A static Go program of the guest's side (`name`, from `source`), built
/// once per user in the temporary directory (the rootless lane may not
/// write the target directory, nor a directory root made); static, so any
/// image runs it.
fn guest_program(name: &str, source: &str) -> std::path::PathBuf {
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    let dir = std::env::temp_dir().join(format!("burrow-attacks-{name}-{uid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.go"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let st = std::process::Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(&src)
        .env("CGO_ENABLED", "0")
        .env("GO111MODULE", "off")
        .status()
        .expect("running go build");
    assert!(st.success(), "building the guest's {name}");
    out
}
