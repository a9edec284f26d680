//! [`Kit`]: which cases to run, against which backend, and how; and
//! [`Store`]: the isolated place one case's sandboxes live in.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::{Backend, Capabilities, ListFilter, SandboxHandle};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};

use crate::cases::{Case, Cases, CasesError};
use crate::interp::{CaseRun, Ctx, Stop};
use crate::report::{CaseOutcome, CaseReport, Failure, ProcessRaces, Report};

/// The error type of the factory and of opening a backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type OpenFn = dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Backend>, BoxError>> + Send + Sync;
type FactoryFn = dyn Fn() -> BoxFuture<'static, Result<Store, BoxError>> + Send + Sync;
type SpawnFn = dyn Fn(&Caller<'_>) -> std::process::Command + Send + Sync;

/// One case's store: a fresh, empty, isolated place for sandboxes (a burrow
/// home, a server with its own database, a namespace), and how to open a
/// backend over it.
///
/// The kit opens one backend for the case's steps and, when races "in
/// processes" run as tasks (no [process spawner](Kit::process_spawner)),
/// one more per caller, as separate processes would each have their own.
/// What [`Store::keep`] holds is dropped when the case has ended and its
/// sandboxes were destroyed.
pub struct Store {
    open: Arc<OpenFn>,
    separate_instances: bool,
    location: Option<String>,
    diagnostics: Option<Box<dyn Fn() -> String + Send + Sync>>,
    keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("separate_instances", &self.separate_instances)
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store whose backends are opened by `open`: every call must give a
    /// new instance over the same store.
    pub fn new<F, Fut>(open: F) -> Store
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn Backend>, BoxError>> + Send + 'static,
    {
        Store {
            open: Arc::new(move || open().boxed()),
            separate_instances: true,
            location: None,
            diagnostics: None,
            keep: Vec::new(),
        }
    }

    /// A store reached through this one backend instance only: callers of
    /// races in processes that run as tasks then share it (the report says
    /// so).
    pub fn single(backend: Arc<dyn Backend>) -> Store {
        let mut store = Store::new(move || {
            let b = backend.clone();
            async move { Ok(b) }
        });
        store.separate_instances = false;
        store
    }

    /// Where another process finds this store (a burrow home, a server URL);
    /// given to the [process spawner](Kit::process_spawner).
    #[must_use]
    pub fn location(mut self, location: impl Into<String>) -> Store {
        self.location = Some(location.into());
        self
    }

    /// Something that explains a failure (the sandboxes' logs): called when
    /// a case fails, before its sandboxes are destroyed; the text is added
    /// to the failure.
    #[must_use]
    pub fn diagnostics(mut self, f: impl Fn() -> String + Send + Sync + 'static) -> Store {
        self.diagnostics = Some(Box::new(f));
        self
    }

    /// Keeps `guard` alive until the case has ended and been cleaned up (a
    /// temporary directory, a server process that is killed on drop).
    #[must_use]
    pub fn keep(mut self, guard: impl Any + Send + Sync) -> Store {
        self.keep.push(Box::new(guard));
        self
    }

    /// A new backend instance over this store.
    pub async fn open(&self) -> Result<Arc<dyn Backend>, BoxError> {
        (self.open)().await
    }

    pub(crate) fn separate_instances(&self) -> bool {
        self.separate_instances
    }

    pub(crate) fn location_str(&self) -> Option<&str> {
        self.location.as_deref()
    }
}

/// What the [process spawner](Kit::process_spawner) is told about the
/// caller to start.
#[derive(Debug)]
pub struct Caller<'a> {
    pub(crate) case_id: &'a str,
    pub(crate) index: usize,
    pub(crate) callers: usize,
    pub(crate) location: Option<&'a str>,
}

impl Caller<'_> {
    /// The case the race belongs to.
    pub fn case_id(&self) -> &str {
        self.case_id
    }
    /// This caller's index (0-based).
    pub fn index(&self) -> usize {
        self.index
    }
    /// How many callers race.
    pub fn callers(&self) -> usize {
        self.callers
    }
    /// The store's [location](Store::location).
    pub fn location(&self) -> Option<&str> {
        self.location
    }
}

/// How races in processes run, for one kit run.
pub(crate) struct RaceEnv {
    pub(crate) spawner: Option<Arc<SpawnFn>>,
}

/// Runs the conformance cases against backends made by a factory.
///
/// ```no_run
/// # async fn demo(image: String) {
/// use std::sync::Arc;
/// use burrow_conformance::{Kit, Store};
///
/// let report = Kit::new(|| async {
///     let dir = tempfile::tempdir()?;
///     let home = dir.path().to_owned();
///     Ok(Store::new(move || {
///         let home = home.clone();
///         async move {
///             Ok(Arc::new(burrow::LocalBackend::open_at(home).await?) as Arc<dyn burrow::Backend>)
///         }
///     })
///     .keep(dir))
/// })
/// .image(image)
/// .skip_tags(["idle"])
/// .run()
/// .await;
/// report.assert_all_passed();
/// # }
/// ```
#[must_use]
pub struct Kit {
    factory: Arc<FactoryFn>,
    /// The document, or why `$BURROW_CONFORMANCE_CASES` could not be used
    /// (reported by [`Kit::run`]).
    cases: Result<Cases, CasesError>,
    image: Option<String>,
    only_ids: Vec<String>,
    only_tags: Vec<String>,
    skip_ids: Vec<String>,
    skip_tags: Vec<String>,
    case_timeout: Option<Duration>,
    time_scale: f64,
    spawner: Option<Arc<SpawnFn>>,
    concurrency: usize,
}

impl std::fmt::Debug for Kit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit")
            .field("cases", &self.cases.as_ref().map(|c| c.all().len()))
            .field("image", &self.image)
            .field("only_ids", &self.only_ids)
            .field("only_tags", &self.only_tags)
            .field("skip_ids", &self.skip_ids)
            .field("skip_tags", &self.skip_tags)
            .field("case_timeout", &self.case_timeout)
            .field("time_scale", &self.time_scale)
            .field("process_spawner", &self.spawner.is_some())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl Kit {
    /// A kit whose `factory` makes a fresh [`Store`] for every case.
    ///
    /// Defaults: every case of [`Cases::from_env`] (the embedded file, or
    /// `$BURROW_CONFORMANCE_CASES`), bounds scaled by
    /// `$BURROW_CONFORMANCE_TIME_SCALE` (default 1), one case at a time,
    /// races in processes as tasks.
    pub fn new<F, Fut>(factory: F) -> Kit
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Store, BoxError>> + Send + 'static,
    {
        let time_scale = std::env::var("BURROW_CONFORMANCE_TIME_SCALE")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0);
        Kit {
            factory: Arc::new(move || factory().boxed()),
            cases: Cases::from_env(),
            image: None,
            only_ids: Vec::new(),
            only_tags: Vec::new(),
            skip_ids: Vec::new(),
            skip_tags: Vec::new(),
            case_timeout: None,
            time_scale,
            spawner: None,
            concurrency: 1,
        }
    }

    /// Runs these cases instead.
    pub fn with_cases(mut self, cases: Cases) -> Kit {
        self.cases = Ok(cases);
        self
    }

    /// The image of every create and define whose step names none (for the
    /// local backend: a root filesystem directory).
    pub fn image(mut self, image: impl Into<String>) -> Kit {
        self.image = Some(image.into());
        self
    }

    /// Runs only these cases (and those of [`Kit::tags`]). An id that names
    /// no case is reported as a failure.
    pub fn cases<I, S>(mut self, ids: I) -> Kit
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only_ids.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Runs only the cases with one of these tags (and those of [`Kit::cases`]).
    pub fn tags<I, S>(mut self, tags: I) -> Kit
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only_tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// Leaves these cases out.
    pub fn skip_cases<I, S>(mut self, ids: I) -> Kit
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.skip_ids.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Leaves out the cases with any of these tags (`idle`, `processes`).
    pub fn skip_tags<I, S>(mut self, tags: I) -> Kit
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.skip_tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// The bound of every case (instead of the case's own `timeout`,
    /// default 180 s, times the time scale).
    pub fn case_timeout(mut self, timeout: Duration) -> Kit {
        self.case_timeout = Some(timeout);
        self
    }

    /// The factor of every bound (`within`, wait timeouts, case timeouts),
    /// not of policy durations or sleeps: 3 for QEMU under TCG, say.
    pub fn time_scale(mut self, scale: f64) -> Kit {
        if scale.is_finite() && scale > 0.0 {
            self.time_scale = scale;
        }
        self
    }

    /// Runs each caller of a race in processes as its own OS process: the
    /// `Command` this returns, when run, must serve one caller with
    /// [`crate::caller::serve`] (or [`crate::caller::main`]) over a backend of
    /// the store at [`Caller::location`]. The kit pipes its stdin and stdout.
    ///
    /// Without a spawner those callers run as tasks in this process, each on
    /// its own backend instance from the store, and a race whose callers
    /// would own an attached sandbox (their exit must stop it) is reported
    /// unsupported.
    pub fn process_spawner<F>(mut self, spawner: F) -> Kit
    where
        F: Fn(&Caller<'_>) -> std::process::Command + Send + Sync + 'static,
    {
        self.spawner = Some(Arc::new(spawner));
        self
    }

    /// How many cases run at once, each in its own store (default 1).
    pub fn concurrency(mut self, n: usize) -> Kit {
        self.concurrency = n.max(1);
        self
    }

    /// The cases the kit will run, in document order (none if the cases
    /// document is unusable).
    pub fn selected(&self) -> Vec<&Case> {
        let Ok(cases) = &self.cases else {
            return Vec::new();
        };
        let picked = |c: &Case| {
            (self.only_ids.is_empty() && self.only_tags.is_empty())
                || self.only_ids.contains(&c.id)
                || self.only_tags.iter().any(|t| c.has_tag(t))
        };
        cases
            .all()
            .iter()
            .filter(|c| picked(c))
            .filter(|c| !self.skip_ids.contains(&c.id))
            .filter(|c| !self.skip_tags.iter().any(|t| c.has_tag(t)))
            .collect()
    }

    /// Runs the selected cases; never panics on a failing case (see
    /// [`Report::assert_all_passed`]).
    pub async fn run(&self) -> Report {
        let env = RaceEnv {
            spawner: self.spawner.clone(),
        };
        let selected = self.selected();
        // Boxed before they enter the stream: a closure mapping the cases
        // would make this future not Send (a higher-ranked lifetime).
        let runs: Vec<BoxFuture<'_, CaseReport>> = selected
            .into_iter()
            .map(|case| self.run_case(case, &env).boxed())
            .collect();
        let mut cases: Vec<CaseReport> = futures_util::stream::iter(runs)
            .buffered(self.concurrency)
            .collect()
            .await;
        if let Err(e) = &self.cases {
            cases.push(CaseReport::new(
                "cases".into(),
                String::new(),
                CaseOutcome::Failed(Failure::new(None, None, e.to_string())),
            ));
        }
        for id in &self.only_ids {
            if self.cases.as_ref().is_ok_and(|c| c.get(id).is_none()) {
                cases.push(CaseReport::new(
                    id.clone(),
                    String::new(),
                    CaseOutcome::Failed(Failure::new(
                        None,
                        None,
                        format!("{id}: no case with this id"),
                    )),
                ));
            }
        }
        Report::new(
            cases,
            match &self.spawner {
                Some(_) => ProcessRaces::Spawned,
                None => ProcessRaces::InProcess,
            },
            self.time_scale,
        )
    }

    async fn run_case(&self, case: &Case, env: &RaceEnv) -> CaseReport {
        let started = Instant::now();
        let mut report = self.run_case_in_store(case, env).await;
        report.duration = started.elapsed();
        report.tags = case.tags.clone();
        report
    }

    async fn run_case_in_store(&self, case: &Case, env: &RaceEnv) -> CaseReport {
        let failed = |message: String| {
            CaseReport::new(
                case.id.clone(),
                case.title.clone(),
                CaseOutcome::Failed(Failure::new(None, None, message)),
            )
        };
        let store = match (self.factory)().await {
            Ok(s) => s,
            Err(e) => return failed(format!("{}: making its store failed: {e}", case.id)),
        };
        let backend = match store.open().await {
            Ok(b) => b,
            Err(e) => return failed(format!("{}: opening a backend failed: {e}", case.id)),
        };
        // A case that needs a capability the backend does not report is
        // not run: unsupported, never passed.
        let caps = match backend.capabilities().await {
            Ok(caps) => caps,
            Err(e) => {
                return failed(format!(
                    "{}: reading the backend's capabilities failed: {e}",
                    case.id
                ))
            }
        };
        let lacking: Vec<&str> = case
            .capabilities()
            .into_iter()
            .filter(|c| !claims(&caps, c))
            .collect();
        if !lacking.is_empty() {
            let mut report = CaseReport::new(
                case.id.clone(),
                case.title.clone(),
                CaseOutcome::Unsupported {
                    reason: format!(
                        "{}: needs the capabilities {lacking:?}, which Backend::capabilities does not report; not run",
                        case.id
                    ),
                },
            );
            if let Err(e) = cleanup(&backend).await {
                report.notes.push(format!("cleanup: {e}"));
            }
            return report;
        }
        let ctx = Arc::new(
            Ctx::new(backend.clone(), self.image.clone(), self.time_scale).with_capabilities(caps),
        );
        let mut run = CaseRun::new(ctx, &case.id, env, &store);
        let bound = self
            .case_timeout
            .unwrap_or_else(|| case.bound(self.time_scale));
        let result = match tokio::time::timeout(bound, run.run_steps(&case.steps)).await {
            Ok(r) => r,
            Err(_) => Err(Stop::fail(format!(
                "{}{}: the case did not finish within {:.0} s",
                case.id,
                run.at
                    .as_ref()
                    .map(|(i, op)| format!(" step {i} ({op})"))
                    .unwrap_or_default(),
                bound.as_secs_f64()
            ))),
        };
        run.abort_jobs();
        let at = run.at.take();
        let mut notes = std::mem::take(&mut run.notes);
        drop(run);
        let outcome = match result {
            Ok(()) => CaseOutcome::Passed,
            Err(Stop::Unsupported(reason)) => CaseOutcome::Unsupported { reason },
            Err(Stop::Fail {
                message,
                mut detail,
            }) => {
                if let Some(diag) = &store.diagnostics {
                    let text = diag();
                    if !text.is_empty() {
                        detail.push(format!("diagnostics of the store:\n{text}"));
                    }
                }
                let (step, op) = at.map_or((None, None), |(i, op)| (Some(i), Some(op)));
                let mut failure = Failure::new(step, op, message);
                failure.detail = detail;
                CaseOutcome::Failed(failure)
            }
        };
        if let Err(e) = cleanup(&backend).await {
            notes.push(format!("cleanup: {e}"));
        }
        drop(backend);
        drop(store);
        let mut report = CaseReport::new(case.id.clone(), case.title.clone(), outcome);
        report.notes = notes;
        report
    }
}

/// Whether `caps` has the capability named by the tag `tag` (one of
/// [`crate::CAPABILITY_TAGS`]; an unknown name is never claimed).
pub(crate) fn claims(caps: &Capabilities, tag: &str) -> bool {
    match tag {
        "pause" => caps.pause,
        "modify_live" => caps.modify_live,
        "metrics" => caps.metrics,
        "logs" => caps.logs,
        "idle_reclaim" => caps.idle_reclaim,
        "attached" => caps.attached,
        "persistent_layer" => caps.persistent_layer,
        "network_policy" => caps.network_policy,
        "published_ports" => caps.published_ports,
        "secrets" => caps.secrets,
        "snapshots" => caps.snapshots,
        "full_snapshots" => caps.full_snapshots,
        "fork" => caps.fork,
        "pools" => caps.pools,
        _ => false,
    }
}

/// Removes every pool the case left behind (its warm sandboxes are not
/// listed), then destroys every sandbox it left.
async fn cleanup(backend: &Arc<dyn Backend>) -> Result<(), String> {
    let mut problems = Vec::new();
    if let Err(e) = remove_pools(backend).await {
        problems.push(e);
    }
    let infos = tokio::time::timeout(
        Duration::from_secs(30),
        backend.list(&ListFilter::default()),
    )
    .await
    .map_err(|_| "listing the sandboxes left behind timed out".to_owned())?
    .map_err(|e| format!("listing the sandboxes left behind: {e}"))?;
    for info in infos {
        let destroy = async {
            SandboxHandle::get_by_id_in(backend.clone(), &info.id)
                .await?
                .destroy()
                .await
        };
        match tokio::time::timeout(Duration::from_secs(60), destroy).await {
            Ok(Ok(())) | Ok(Err(burrow::Error::NotFound { .. })) => {}
            Ok(Err(e)) => problems.push(format!("destroying {} ({}): {e}", info.name, info.id)),
            Err(_) => problems.push(format!("destroying {} ({}) timed out", info.name, info.id)),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Removes every pool left behind (none on a backend without pools).
async fn remove_pools(backend: &Arc<dyn Backend>) -> Result<(), String> {
    let pools = match tokio::time::timeout(Duration::from_secs(30), backend.list_pools()).await {
        Err(_) => return Err("listing the pools left behind timed out".to_owned()),
        Ok(Err(e)) if e.code() == burrow::ErrorCode::Unsupported => return Ok(()),
        Ok(Err(e)) => return Err(format!("listing the pools left behind: {e}")),
        Ok(Ok(pools)) => pools,
    };
    let mut problems = Vec::new();
    for pool in pools {
        match tokio::time::timeout(Duration::from_secs(60), backend.remove_pool(&pool.name)).await {
            Ok(Ok(())) | Ok(Err(burrow::Error::NotFound { .. })) => {}
            Ok(Err(e)) => problems.push(format!("removing the pool {}: {e}", pool.name)),
            Err(_) => problems.push(format!("removing the pool {} timed out", pool.name)),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_can_be_spawned_and_selection_follows_ids_and_tags() {
        fn is_send<T: Send>(_: &T) {}
        let kit = Kit::new(|| async { Err::<Store, BoxError>("no store".into()) });
        is_send(&kit.run());
        let all = kit.selected().len();
        assert_eq!(all, Cases::embedded().all().len());
        let kit = kit
            .tags(["idle"])
            .cases(["create.strict_on_existing_name_is_already_exists"])
            .skip_cases(["idle.ping_is_not_activity"]);
        let picked: Vec<_> = kit.selected().iter().map(|c| c.id.clone()).collect();
        assert!(picked.contains(&"create.strict_on_existing_name_is_already_exists".to_owned()));
        assert!(picked.contains(&"idle.reclaim_then_demand_start".to_owned()));
        assert!(!picked.contains(&"idle.ping_is_not_activity".to_owned()));
        assert!(!picked.contains(&"lifecycle.exec_fs_stop".to_owned()));
        let kit = kit.skip_tags(["idle"]);
        assert_eq!(kit.selected().len(), 1);
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_made_fails_each_case() {
        let report = Kit::new(|| async { Err::<Store, BoxError>("no store".into()) })
            .cases(["lifecycle.exec_fs_stop", "no.such_case"])
            .run()
            .await;
        assert_eq!(
            report.failure_messages(),
            [
                "lifecycle.exec_fs_stop: making its store failed: no store",
                "no.such_case: no case with this id"
            ]
        );
    }
}
