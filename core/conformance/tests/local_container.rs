//! The conformance kit against the local backend with the host's default
//! driver (the container driver, runc, unless `$BURROW_DRIVER` says
//! otherwise): every case of `tests/conformance/cases.json`, each in a fresh
//! burrow home, with real supervisor processes and real containers; races
//! in processes run each caller in its own `burrow-conformance-caller`.

mod support;

use burrow_conformance::{CaseOutcome, Kit, ProcessRaces};

/// The caller program of races in processes: this crate's
/// `burrow-conformance-caller` on the case's home.
fn caller_command(caller: &burrow_conformance::Caller<'_>) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_burrow-conformance-caller"));
    c.arg("--home")
        .arg(caller.location().expect("the local store has a location"));
    c
}

fn kit() -> Kit {
    Kit::new(support::local_store).image(support::busybox_rootfs().to_string_lossy())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_case_passes_on_the_local_backend() {
    let report = kit().process_spawner(caller_command).run().await;
    println!("{report}");
    assert_eq!(report.process_races, ProcessRaces::Spawned);
    report.assert_all_passed();
    // Every case, but pausing where the host's default driver cannot pause
    // for this user (a rootless container without a delegated cgroup; the
    // backend's capabilities say so, and the kit leaves those cases out).
    let config = burrow::LocalConfig::from_env().expect("the host's defaults");
    let driver = burrow::internal::driver::for_kind(config.default_driver, config.default_runtime);
    let pauses = driver.pauses();
    // Filesystem snapshots (both drivers, a vm's running only); full
    // snapshots, the vm driver's alone.
    let snapshots = driver.snapshots();
    let full = config.default_driver == burrow::DriverKind::Vm;
    let unsupported: Vec<&str> = report
        .unsupported()
        .iter()
        .filter(|(case, _)| full || !case.tagged("full_snapshots"))
        .map(|(case, _)| case.id.as_str())
        .filter(|id| pauses || !id.starts_with("pause."))
        .filter(|id| snapshots || !id.starts_with("snapshots."))
        .collect();
    assert!(
        unsupported.is_empty(),
        "the local backend supports every case: {unsupported:?}: {report}"
    );
    if !pauses {
        assert!(
            !report.unsupported().is_empty(),
            "the pause cases are left out: {report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_spawner_races_in_processes_run_as_tasks() {
    let report = kit().tags(["processes"]).concurrency(2).run().await;
    println!("{report}");
    assert_eq!(report.process_races, ProcessRaces::InProcess);
    report.assert_all_passed();
    // An attached sandbox's owner must exit: no task can stand in for that.
    let attached = report
        .case("convergence.attached_owner_exit_detached_survives")
        .expect("the attached case ran");
    assert!(
        matches!(&attached.outcome, CaseOutcome::Unsupported { reason } if reason.contains("Kit::process_spawner")),
        "{report}"
    );
    let converged = report
        .case("convergence.many_callers_one_sandbox")
        .expect("the convergence case ran");
    assert!(converged.passed(), "{report}");
    assert!(
        converged
            .notes
            .iter()
            .any(|n| n.contains("separate backend instances")),
        "{report}"
    );
}

/// A copy of cases with deliberately wrong expectations: the kit must fail
/// each with a message naming the case, the step, the op, the expected and
/// the actual outcome.
const WRONG: &str = r#"{"format": "burrow-conformance/1", "cases": [
  {"id": "wrong.stale_exec_succeeds", "title": "t", "reference": "r::f", "steps": [
    {"op": "create", "name": "w", "as": "old"},
    {"op": "destroy", "sandbox": "old"},
    {"op": "create", "name": "w", "as": "new"},
    {"op": "exec", "sandbox": "old", "argv": ["true"], "expect": {"exit_code": 0}}
  ]},
  {"id": "wrong.define_is_not_taken", "title": "t", "reference": "r::f", "steps": [
    {"op": "define", "name": "d", "expect": {"error": "already_exists"}}
  ]},
  {"id": "wrong.status", "title": "t", "reference": "r::f", "steps": [
    {"op": "create", "name": "s", "as": "s1", "save": {"g": "generation"}},
    {"op": "info", "sandbox": "s1", "expect": {"status": "running", "generation": {"var": "g", "add": 1}}}
  ]},
  {"id": "wrong.error_code", "title": "t", "reference": "r::f", "steps": [
    {"op": "get", "name": "missing", "expect": {"error": "invalid_state"}}
  ]},
  {"id": "wrong.starts", "title": "t", "reference": "r::f", "steps": [
    {"op": "race", "callers": 3, "processes": false, "do": {"op": "connect_or_create", "name": "r"}, "expect": {"starts": 3}}
  ]},
  {"id": "wrong.outcomes", "title": "t", "reference": "r::f", "tags": ["processes"], "steps": [
    {"op": "race", "callers": 2, "processes": true, "do": {"op": "create", "name": "p", "options": {"detached": true}}, "expect": {"outcomes": {"ok": 2}}}
  ]},
  {"id": "wrong.slow", "title": "t", "reference": "r::f", "timeout": 1, "steps": [
    {"op": "sleep", "seconds": 5}
  ]}
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_expectations_fail_with_precise_messages() {
    let cases = burrow_conformance::Cases::from_json(WRONG).expect("a well-formed document");
    let report = kit()
        .with_cases(cases)
        .time_scale(1.0)
        .process_spawner(caller_command)
        .cases([
            "wrong.stale_exec_succeeds",
            "wrong.define_is_not_taken",
            "wrong.status",
        ])
        .cases([
            "wrong.error_code",
            "wrong.starts",
            "wrong.outcomes",
            "wrong.slow",
            "wrong.nope",
        ])
        .run()
        .await;
    println!("{report}");
    assert!(report.passed().is_empty(), "{report}");
    let mut messages = report.failure_messages();
    messages.sort();
    assert_eq!(
        messages,
        [
            "wrong.define_is_not_taken step 1 (define): expected error code already_exists, got ok",
            "wrong.error_code step 1 (get): expected error code invalid_state, got error code not_found",
            "wrong.nope: no case with this id",
            "wrong.outcomes step 1 (race): expected outcomes {ok: 2}, got {already_exists: 1, ok: 1}",
            "wrong.slow step 1 (sleep): the case did not finish within 1 s",
            "wrong.stale_exec_succeeds step 4 (exec): expected ok, got error code sandbox_replaced",
            "wrong.starts step 1 (race): expected 3 starts, got 1 (generation 0 -> 1)",
            "wrong.status step 2 (info): field generation: expected 2, got 1",
        ]
    );
    let (_, failure) = report
        .failed()
        .into_iter()
        .find(|(c, _)| c.id == "wrong.stale_exec_succeeds")
        .expect("failed");
    assert_eq!(
        (failure.step, failure.op.as_deref()),
        (Some(4), Some("exec"))
    );
    let panic = std::panic::catch_unwind(|| report.assert_all_passed())
        .expect_err("assert_all_passed panics");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("8 of 8 conformance cases failed"), "{text}");
    assert!(text.contains("wrong.starts step 1 (race)"), "{text}");
}
