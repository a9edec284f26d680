//! Issue 57, the runtime's seccomp filter: the guest agent used to install
//! the container's filter itself, so whatever ran before it or in its
//! place (a guest's file bound over it, a runtime hook) ran unfiltered.
//! The runtime (runc, crun) now installs it before the first instruction
//! of the sandbox's first process, whatever file that runs; the agent adds
//! the same program as a second layer. A sandbox may add syscalls to the
//! filter (`seccomp_allow`, the operator's: `burrow serve` refuses it to
//! tenants, see `tenancy/policy.rs`); a name the filter does not know is
//! refused.
//!
//! Every test names the container driver: in the vm lane too they test
//! the container's filter (a microVM has none; its kernel is the
//! boundary).

use burrow::{Backend, ErrorCode, ListFilter, OciRuntime};
use burrow_cli_testkit::{busybox_rootfs, sh_ok, status_field, TestHome};

use super::guest::guestx;
use super::mounts::json_code;

/// The `Seccomp:` and `Seccomp_filters:` values of a `/proc/PID/status`.
fn seccomp_lines(status: &str) -> (String, String) {
    (
        status_field(status, "Seccomp:"),
        status_field(status, "Seccomp_filters:"),
    )
}

/// A first process that is not the agent (the `BURROW_AGENT_ARGS` test
/// hook puts a shell in its place, as a guest's file bound over the agent
/// would be) is filtered from its first instruction: the shell reads its
/// own status before anything of burrow's ran in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_process_that_is_not_the_agent_is_filtered() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    for runtime in ["runc", "crun"] {
        let volume = format!("seen-{runtime}");
        let out = home
            .cli()
            .env(
                "BURROW_AGENT_ARGS",
                r#"["/bin/sh","-c","cat /proc/self/status > /seen/status; exec sleep 600"]"#,
            )
            .args(["--json", "run", "--name", &format!("impostor-{runtime}")])
            .args(["--driver", "container", "--runtime", runtime])
            .args(["--startup-timeout", "3s", "-v", &format!("{volume}:/seen")])
            .arg(&image)
            .args(["--", "true"])
            .output()
            .unwrap();
        // The shell never answers as an agent would.
        assert!(!out.status.success(), "{runtime}: the run succeeded");
        assert_eq!(json_code(&out), "start_failed", "{runtime}");
        let seen = home.dir.path().join("volumes").join(&volume).join("status");
        let status = std::fs::read_to_string(&seen)
            .unwrap_or_else(|e| panic!("{runtime}: {} unread: {e}", seen.display()));
        // Mode 2 (filter), one filter: the runtime's alone.
        assert_eq!(
            seccomp_lines(&status),
            ("2".to_owned(), "1".to_owned()),
            "{runtime}: {status}"
        );
    }
}

/// The agent as PID 1 runs under both layers: the runtime's filter and its
/// own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_runs_under_the_runtimes_filter_and_its_own() {
    let home = TestHome::new().await;
    for runtime in [OciRuntime::Runc, OciRuntime::Crun] {
        let sb = home
            .builder(&format!("layers-{runtime:?}").to_lowercase())
            .driver("container")
            .runtime(runtime)
            .create()
            .await
            .unwrap();
        let status = sh_ok(&sb, "cat /proc/1/status").await;
        assert_eq!(
            seccomp_lines(&status),
            ("2".to_owned(), "2".to_owned()),
            "{runtime:?}: {status}"
        );
        sb.destroy().await.unwrap();
    }
}

/// `io_uring_setup` is out of the profile; a sandbox that adds it gets it
/// (from both layers), and only that sandbox. A name the filter does not
/// know is refused by name, and nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syscall_is_allowed_only_where_the_sandbox_adds_it() {
    let home = TestHome::new().await;
    let helper = std::fs::read(guestx()).unwrap();
    for (name, add, want) in [
        ("narrow", false, format!("errno {}", libc::EPERM)),
        ("wide", true, "ring".to_owned()),
    ] {
        let mut builder = home.builder(name).driver("container");
        if add {
            builder = builder.allow_syscall("io_uring_setup");
        }
        let sb = builder.create().await.unwrap();
        sb.fs()
            .write_with("/root/guestx", &helper, Some(0o755), false)
            .await
            .unwrap();
        let out = sh_ok(&sb, "/root/guestx uring").await;
        assert_eq!(out.trim(), want, "{name}");
        sb.destroy().await.unwrap();
    }
    for bad in ["no_such_call", "chown32", "IO_URING_SETUP", ""] {
        let err = home
            .builder("bad")
            .driver("container")
            .allow_syscall(bad)
            .define()
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidConfig, "{bad:?}");
        assert!(
            matches!(&err, burrow::Error::InvalidConfig { field, .. } if field == "seccomp_allow[0]"),
            "{bad:?}: {err}"
        );
    }
    let all = home.backend.list(&ListFilter::default()).await.unwrap();
    assert!(all.is_empty(), "{all:?}");
}
