//! The conformance kit against the remote backend: every case of
//! `tests/conformance/cases.json` through `burrow::RemoteBackend` and a
//! real `burrow serve` (`target/debug/burrow`), a fresh server with its own
//! home, SQLite database and API token per case, listening on loopback TCP.
//! Races in processes run each caller in its own
//! `burrow-conformance-caller --url`, a remote client of the case's server:
//! an attached sandbox's owner is then a real client process whose exit
//! closes its session.

mod support;

use std::time::Instant;

use burrow_conformance::{Kit, ProcessRaces};

/// A caller of a race in processes: a remote client of the case's server.
fn caller_command(caller: &burrow_conformance::Caller<'_>) -> std::process::Command {
    let url = caller.location().expect("the remote store has a location");
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_burrow-conformance-caller"));
    c.arg("--url").arg(url).env(
        "BURROW_TOKEN",
        support::serve::token_of(url).expect("a token for the server"),
    );
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_case_passes_on_the_remote_backend() {
    let started = Instant::now();
    let report = Kit::new(support::serve::remote_store)
        .image(support::busybox_rootfs().to_string_lossy())
        .process_spawner(caller_command)
        .run()
        .await;
    println!("{report}");
    println!(
        "the remote run took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report.process_races, ProcessRaces::Spawned);
    report.assert_all_passed();
    // Every case but full snapshots, which the server's default driver
    // (a container) lacks.
    assert!(
        report
            .unsupported()
            .iter()
            .all(|(case, _)| case.tagged("full_snapshots")),
        "the remote backend supports every case: {report}"
    );
}
