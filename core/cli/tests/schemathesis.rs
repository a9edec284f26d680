#![allow(clippy::unwrap_used)]
//! The HTTP API against its own OpenAPI document: schemathesis (from PyPI,
//! `scripts/schemathesis.sh`) runs its examples, coverage, fuzzing and
//! stateful phases against a real `burrow serve` on a real PostgreSQL, with
//! every check on. The stateful phase follows the document's links, from a
//! created sandbox to its lifecycle and from a registered target to the
//! gateway. (Not to `POST .../destroy`: schemathesis counts only a `DELETE`
//! as the end of a resource, and takes a later 404 for a lost one.)
//!
//! `tests/schemathesis/hooks.py` drops the failures no document can rule
//! out (answers relayed from a gateway target, refusals that depend on the
//! server's state, upstream failures answered 502/504); its doc says which,
//! exactly. Everything else fails the test.
//!
//! Left to their own tests (`serve.rs`, `serve_events.rs`): the streams
//! (`/logs`, `/runtime`, `/v1/sessions`, `/v1/events`) and `/wait`, which
//! holds its answer open. Webhooks are made pointing at 127.0.0.1 (the
//! hooks rewrite their URLs), so the run reaches no other host.
//!
//! Bounded for CI: `BURROW_SCHEMATHESIS_EXAMPLES` examples per operation
//! (default 20). A longer run by hand: `BURROW_SCHEMATHESIS_EXAMPLES=500`;
//! `BURROW_SCHEMATHESIS_SEED` repeats a run (the seed is printed).

use burrow_cli_testkit as common;

use std::process::Command;
use std::sync::OnceLock;

use common::serve::pg::PgCluster;
use common::serve::ServeEnv;
use common::{schemathesis_bin, workspace_root, TestHome};

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

/// `N generated` of schemathesis's summary.
fn generated(out: &str) -> Option<u64> {
    out.lines().find_map(|l| {
        let (n, _) = l.trim().split_once(" generated, ")?;
        n.parse().ok()
    })
}

/// The `N` of the summary's `Operations: N selected / M total`.
fn selected(out: &str) -> Option<u64> {
    out.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("Operations:")?;
        rest.trim().split_once(" selected")?.0.parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_matches_its_openapi_document() {
    let st = tokio::task::spawn_blocking(schemathesis_bin).await.unwrap();
    let th = TestHome::new().await;
    let url = tokio::task::spawn_blocking(|| cluster().create_database("schemathesis"))
        .await
        .unwrap()
        .unwrap();
    // Webhooks are pointed at 127.0.0.1's discard port (hooks.py), which
    // the server's outbound calls reach only where the operator allows;
    // a gateway listener of its own makes preview links.
    let env = ServeEnv::new(th.path(), &url)
        .set("OUTBOUND_ALLOW", "tcp:127.0.0.1:9")
        .set("GATEWAY_LISTEN", "127.0.0.1:0");
    let (server, token) = tokio::task::spawn_blocking(move || {
        // A tenant's admin, not the server's: every answer goes through
        // the tenant's scope (names, errors, quotas' bookkeeping).
        env.create_tenant("st");
        let token = env.create_token_in("schemathesis", "st", "tenant_admin");
        (env.start("st"), token)
    })
    .await
    .unwrap();
    let examples = std::env::var("BURROW_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "20".into());
    let mut cmd = Command::new(&st);
    cmd.arg("run")
        .arg(format!("{}/v1/openapi.json", server.url))
        .args(["--url", &server.url])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--checks", "all"])
        .args(["--max-examples", &examples])
        .args([
            "--exclude-path-regex",
            "/runtime$|/logs$|/wait$|^/v1/sessions$|^/v1/events$",
        ])
        // One worker: with two, the stateful phase of one destroys what
        // the other just created (it lists sandboxes and follows the ids),
        // which the `ensure_resource_availability` check takes for a lost
        // resource.
        .args(["--workers", "1"])
        .args(["--no-color"])
        // Its reports (.schemathesis/) go to the test's home, not the tree.
        .current_dir(th.path())
        .env("PYTHONPATH", workspace_root().join("tests/schemathesis"))
        .env("SCHEMATHESIS_HOOKS", "hooks");
    if let Ok(seed) = std::env::var("BURROW_SCHEMATHESIS_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("running schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stdout.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    println!("{}", tail.join("\n"));
    // The server's log first and cut to its end, schemathesis's report
    // last: what CI keeps of a failure is the end of its output.
    let log = server.log();
    let log_tail: Vec<&str> = log.lines().rev().take(60).collect();
    let log_tail: Vec<&str> = log_tail.into_iter().rev().collect();
    assert!(
        out.status.success(),
        "the server's log, its end:\n{}\nschemathesis's stderr:\n{stderr}\n\
         schemathesis found mismatches:\n{stdout}",
        log_tail.join("\n")
    );
    // A run that tested nothing must not pass: every operation the
    // document has but the excluded ones (78 of 83), most of them with
    // many cases each.
    let n = generated(&stdout).expect("the summary's test case count");
    assert!(n >= 500, "only {n} test cases were generated:\n{stdout}");
    let selected = selected(&stdout).expect("the count of selected operations");
    assert!(
        selected >= 78,
        "only {selected} operations were selected:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("Tested: {selected}")),
        "not every selected operation was tested:\n{stdout}"
    );
}
