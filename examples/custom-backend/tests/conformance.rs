//! `QuotaBackend` proves itself: every case of the shared conformance list
//! (`tests/conformance/cases.json`, through `burrow-conformance`), each in a
//! fresh burrow home, with real supervisors and containers; each caller of
//! a race in processes in its own `quota-conformance-caller` process.
//!
//! Needs `target/debug/burrow` (`cargo build -p burrow-cli`: the local
//! backend spawns it as the supervisor), the static guest agent and the
//! busybox root filesystem of the repository's tests (built on first use).

// The fixtures of the kit's own tests: the guest agent, the busybox root
// filesystem, the `burrow` binary, a home that kills what it left running.
#[path = "../../../core/conformance/tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use burrow::Backend;
use burrow_conformance::{BoxError, Caller, Kit, Store};
use custom_backend::{Quota, QuotaBackend};

const NAMESPACE: &str = "conformance";

/// Roomy enough for every case (at most two sandboxes run at once in any).
fn quota() -> Quota {
    Quota::new().max_running(4).max_running_per_label("team", 2)
}

/// A fresh, empty store per case: a new burrow home; every `open` is a new
/// `QuotaBackend` on it (as another process would open its own).
async fn store() -> Result<Store, BoxError> {
    support::init_env();
    let home = support::Home::new(support::new_home_dir()?);
    let path = home.path().to_owned();
    let open_path = path.clone();
    Ok(Store::new(move || {
        let path = open_path.clone();
        async move {
            Ok(Arc::new(QuotaBackend::open(path, NAMESPACE, quota()).await?) as Arc<dyn Backend>)
        }
    })
    .location(path.to_string_lossy())
    .diagnostics(support::diagnostics_of(&path))
    .keep(home))
}

/// A caller of a race in processes: the same backend, in another process.
fn caller(caller: &Caller<'_>) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_quota-conformance-caller"));
    c.arg("--home")
        .arg(caller.location().expect("the store has a location"))
        .args(["--namespace", NAMESPACE, "--max-running", "4"])
        .args(["--max-running-per-label", "team=2"]);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_quota_backend_passes_every_conformance_case() {
    let report = Kit::new(store)
        .image(support::busybox_rootfs().to_string_lossy())
        .process_spawner(caller)
        .run()
        .await;
    println!("{report}");
    report.assert_all_passed();
    // Every case but full snapshots (the inner backend's default driver is
    // a container) and pools (the quota backend offers none).
    assert!(
        report
            .unsupported()
            .iter()
            .all(|(case, _)| case.tagged("full_snapshots") || case.tagged("pools")),
        "{report}"
    );
}
