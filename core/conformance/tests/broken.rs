//! The kit against deliberately broken backends: each is the local backend
//! with one rule of the contract (`docs/backends.md`) broken, and the kit
//! must fail it in the case, step and op that check that rule. The tests
//! assert on the case id, the step and the op of the failure, never on
//! the wording of its message.
//!
//! Also: a backend that lacks a capability gets the cases needing it
//! reported unsupported (not run, not passed), and one that claims a
//! capability but answers `unsupported` fails.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use burrow::lifecycle::Operation;
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ListFilter, LocalBackend, LogOptions, LogStream,
    Metrics, Modify, ModifyPlan, Result, RuntimeStream, SandboxId, SandboxInfo, StartOptions,
    Status, StopOptions,
};
use burrow_conformance::{CaseOutcome, Kit, Report};

/// The one rule a [`Broken`] backend breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// `stop(name, id)` resolves `name` again and stops whatever holds it
    /// now: no identity check.
    StopWithoutIdentity,
    /// `create` checks that the name is free, yields, then inserts; an
    /// insert that finds the name taken meanwhile reports success with the
    /// record it found (an `INSERT OR IGNORE`): concurrent strict creates
    /// all "win".
    CreateCheckThenInsert,
    /// `stop` of a sandbox that is not running answers `invalid_state`
    /// instead of the sandbox as it is.
    StopNotIdempotent,
    /// Not broken: no pause (capabilities say so, pause answers
    /// `unsupported`).
    NoPause,
    /// Claims pause in its capabilities, answers `unsupported`.
    ClaimsPauseWithout,
}

/// The local backend with one [`Flaw`]; every other method delegates.
#[derive(Debug)]
struct Broken {
    inner: LocalBackend,
    flaw: Flaw,
}

#[async_trait]
impl Backend for Broken {
    async fn capabilities(&self) -> Result<Capabilities> {
        let mut caps = self.inner.capabilities().await?;
        if self.flaw == Flaw::NoPause {
            caps.pause = false;
        }
        Ok(caps)
    }

    async fn create(&self, req: CreateRequest) -> Result<SandboxInfo> {
        if self.flaw != Flaw::CreateCheckThenInsert {
            return self.inner.create(req).await;
        }
        // BROKEN: the check and the insert are two steps.
        match self.inner.get(&req.name).await {
            Ok(_) => return self.inner.create(req).await, // already_exists
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let name = req.name.clone();
        match self.inner.create(req).await {
            Err(Error::AlreadyExists { .. }) => self.inner.get(&name).await,
            other => other,
        }
    }
    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        self.inner.get(name).await
    }
    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        self.inner.get_by_id(id).await
    }
    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        self.inner.list(filter).await
    }
    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.inner.status(name, id).await
    }
    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.inner.start(name, id, opts).await
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.inner.connect_or_start(name, id, opts).await
    }
    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        match self.flaw {
            Flaw::StopWithoutIdentity => {
                // BROKEN: acts on whatever holds the name now.
                let holder = self.inner.get(name).await?;
                self.inner.stop(name, &holder.id, opts).await
            }
            Flaw::StopNotIdempotent => {
                // BROKEN: refuses what should be a no-op.
                let info = self.inner.status(name, id).await?;
                if !info.status.has_runtime() {
                    return Err(Error::InvalidState {
                        operation: Operation::Stop.as_str().into(),
                        name: info.name,
                        id: info.id,
                        status: info.status,
                    });
                }
                self.inner.stop(name, id, opts).await
            }
            _ => self.inner.stop(name, id, opts).await,
        }
    }
    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.inner.kill(name, id).await
    }
    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.inner.request_drain(name, id).await
    }
    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.inner.restart(name, id, opts).await
    }
    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.inner.remove(name, id).await
    }
    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.inner.destroy(name, id).await
    }
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        self.inner.wait_for_status(name, id, statuses).await
    }
    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        self.inner.open_runtime(name, id, wake).await
    }
    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.inner.detach(name, id).await
    }
    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.inner.touch(name, id).await
    }
    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        match self.flaw {
            Flaw::NoPause | Flaw::ClaimsPauseWithout => Err(Error::unsupported("pause")),
            _ => self.inner.pause(name, id).await,
        }
    }
    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        match self.flaw {
            Flaw::NoPause | Flaw::ClaimsPauseWithout => Err(Error::unsupported("resume")),
            _ => self.inner.resume(name, id).await,
        }
    }
    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        self.inner.modify(name, id, changes).await
    }
    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.inner.metrics(name, id).await
    }
    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        self.inner.logs(name, id, opts).await
    }
    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &burrow::SnapshotOptions,
    ) -> Result<burrow::SnapshotInfo> {
        self.inner.snapshot(name, id, snapshot, opts).await
    }
    async fn list_snapshots(&self) -> Result<Vec<burrow::SnapshotInfo>> {
        self.inner.list_snapshots().await
    }
    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &burrow::ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        self.inner.fork(name, id, opts).await
    }
    async fn get_snapshot(&self, snapshot: &str) -> Result<burrow::SnapshotInfo> {
        self.inner.get_snapshot(snapshot).await
    }
    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        self.inner.remove_snapshot(snapshot).await
    }
    async fn create_pool(&self, spec: burrow::PoolSpec) -> Result<burrow::PoolInfo> {
        self.inner.create_pool(spec).await
    }
    async fn get_pool(&self, pool: &str) -> Result<burrow::PoolInfo> {
        self.inner.get_pool(pool).await
    }
    async fn list_pools(&self) -> Result<Vec<burrow::PoolInfo>> {
        self.inner.list_pools().await
    }
    async fn scale_pool(&self, pool: &str, size: u32) -> Result<burrow::PoolInfo> {
        self.inner.scale_pool(pool, size).await
    }
    async fn remove_pool(&self, pool: &str) -> Result<()> {
        self.inner.remove_pool(pool).await
    }
}

/// The kit over a fresh local home per case, each backend opened with
/// `flaw`. No process spawner: races in processes run as tasks, each
/// caller on its own instance.
fn kit(flaw: Flaw) -> Kit {
    Kit::new(move || {
        support::local_store_with(move |inner| Arc::new(Broken { inner, flaw }) as Arc<dyn Backend>)
    })
    .image(support::busybox_rootfs().to_string_lossy())
}

/// The (step, op) of the failure of case `id`; panics if it did not fail.
fn failed_at<'r>(report: &'r Report, id: &str) -> (Option<usize>, Option<&'r str>) {
    let case = report
        .case(id)
        .unwrap_or_else(|| panic!("{id} did not run: {report}"));
    match &case.outcome {
        CaseOutcome::Failed(f) => (f.step, f.op.as_deref()),
        other => panic!("{id} should have failed, it is {other:?}: {report}"),
    }
}

/// A control case every broken backend passes (each breaks one rule only).
const CONTROL: &str = "lifecycle.exec_fs_stop";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_without_identity_check_fails_the_identity_case_at_its_stop() {
    let report = kit(Flaw::StopWithoutIdentity)
        .cases(["identity.stale_receivers_get_sandbox_replaced", CONTROL])
        .run()
        .await;
    println!("{report}");
    // Step 10: `stop` on the handle of the destroyed sandbox, whose name
    // now belongs to a new one: sandbox_replaced expected, the broken
    // backend stopped the new sandbox instead.
    assert_eq!(
        failed_at(&report, "identity.stale_receivers_get_sandbox_replaced"),
        (Some(10), Some("stop"))
    );
    assert!(report.case(CONTROL).is_some_and(|c| c.passed()), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_that_checks_then_inserts_fails_the_strict_race() {
    let report = kit(Flaw::CreateCheckThenInsert)
        .cases(["create.strict_race_has_one_winner", CONTROL])
        .run()
        .await;
    println!("{report}");
    // Step 1: 8 callers strictly create one name at once; one must win and
    // seven get already_exists. Every broken create "wins".
    assert_eq!(
        failed_at(&report, "create.strict_race_has_one_winner"),
        (Some(1), Some("race"))
    );
    assert!(report.case(CONTROL).is_some_and(|c| c.passed()), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_that_is_not_idempotent_fails_the_noop_case_at_its_second_stop() {
    let report = kit(Flaw::StopNotIdempotent)
        .cases(["stop.reasons_and_noops", CONTROL])
        .run()
        .await;
    println!("{report}");
    // Step 3: the second stop of a stopped sandbox must answer it as it is.
    assert_eq!(
        failed_at(&report, "stop.reasons_and_noops"),
        (Some(3), Some("stop"))
    );
    assert!(report.case(CONTROL).is_some_and(|c| c.passed()), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cases_needing_a_capability_the_backend_lacks_are_unsupported_not_run() {
    let tolerant = "state.crashed_sandbox_operations";
    let report = kit(Flaw::NoPause)
        .tags(["pause"])
        .cases([tolerant])
        .run()
        .await;
    println!("{report}");
    let pause_cases: Vec<&str> = report
        .cases
        .iter()
        .filter(|c| c.id != tolerant)
        .map(|c| c.id.as_str())
        .collect();
    assert!(pause_cases.len() >= 3, "{report}");
    for id in pause_cases {
        let case = report.case(id).expect("ran");
        assert!(
            matches!(&case.outcome, CaseOutcome::Unsupported { .. }),
            "{id}: {report}"
        );
        // Not run: it did not even create a sandbox.
        assert!(case.duration < Duration::from_secs(5), "{id}: {report}");
    }
    assert!(report.failed().is_empty(), "{report}");
    // Its pause step tolerates `unsupported`: the case runs and passes.
    assert!(
        report.case(tolerant).is_some_and(|c| c.passed()),
        "{report}"
    );
    assert_eq!(report.passed().len(), 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backend_claiming_a_capability_it_answers_unsupported_for_fails() {
    let report = kit(Flaw::ClaimsPauseWithout)
        .cases(["pause.refuses_work_until_resume"])
        .run()
        .await;
    println!("{report}");
    let (step, op) = failed_at(&report, "pause.refuses_work_until_resume");
    assert_eq!(op, Some("pause"), "{report}");
    assert!(step.is_some(), "{report}");
}
