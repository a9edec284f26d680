#![allow(clippy::unwrap_used)]
//! The agent as PID 1 of its own PID namespace (as in a container): it
//! reaps orphans, and on shutdown it terminates *everything* in the
//! namespace with kill(-1), which is safe only there.
//!
//! Needs `unshare --pid` (root, as in CI); fails loudly where that is missing.

mod common;

use std::process::Command;
use std::time::Duration;

use burrow_protocol::{Request, Response};
use common::{Agent, AGENT_BIN};

/// The agent as PID 1 in a new PID namespace.
fn agent_as_pid1() -> Agent {
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "cannot create a PID namespace with unshare (needs root)"
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", AGENT_BIN]);
    let mut agent = Agent::spawn_command(cmd).expect("spawn unshare");
    agent.handshake();
    agent
}

#[test]
fn pid1_reaps_orphans_and_kills_everything_on_shutdown() {
    let mut agent = agent_as_pid1();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("orphan-got-term");

    // The exec's parent is the agent, which is PID 1.
    let out = agent.exec(&["sh", "-c", "echo $PPID"]);
    assert_eq!(out.stdout_str(), "1\n");

    // Orphans that exit are reaped by the agent: no zombies pile up.
    agent.exec(&["sh", "-c", "(sleep 0.1 &); (true &); true"]);
    std::thread::sleep(Duration::from_millis(500));
    let out = agent.exec(&[
        "sh",
        "-c",
        "for s in /proc/[0-9]*/stat; do cut -d' ' -f3 $s; done | grep -c Z || true",
    ]);
    assert_eq!(out.stdout_str(), "0\n", "zombies left behind");

    // An orphan in its own session: not a process group the agent spawned,
    // so only kill(-1) reaches it.
    let script = format!(
        "trap 'echo term > {}; exit 0' TERM; while :; do sleep 0.05; done",
        marker.display()
    );
    let out = agent.exec(&[
        "sh",
        "-c",
        &format!("setsid sh -c \"{script}\" </dev/null >/dev/null 2>&1 & echo started"),
    ]);
    assert_eq!(out.stdout_str(), "started\n");
    std::thread::sleep(Duration::from_millis(200));

    let id = agent.request(Request::Shutdown { grace_ms: 2000 });
    assert_eq!(agent.collect(id).result, Ok(Response::Done));
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("agent exits");
    assert!(status.success(), "{status:?}");
    let got = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(got, "term\n", "the orphan was sent SIGTERM");
}
