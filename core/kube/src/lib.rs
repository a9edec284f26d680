//! `burrow-kube`: a [`burrow::Backend`] that keeps sandboxes on a
//! Kubernetes cluster.
//!
//! - **Records**: one `Sandbox` object (group `burrow.dev`) per name, named
//!   by a bijective encoding of the name ([`names`]); the API server's
//!   create conflict is the name claim, and every transition is a replace
//!   conditional on the resourceVersion read ([`record`]).
//! - **Runs**: one pod per generation, owned by the record, with the static
//!   agent copied in by an init container and run as the main container's
//!   init ([`pods`]).
//! - **Guest**: an exec'd session agent per backend and run, behind a
//!   [`burrow::relay::Relay`] ([`guest`]).
//! - **Reconciliation**: a record says Running only while its pod runs; a
//!   pod that failed, was evicted or was deleted behind the backend's back
//!   reads as Crashed with the reason, and a start past its deadline as
//!   Crashed (`start_failed`).
//!
//! Pause, live resize and metrics answer `unsupported`; sandboxes are never
//! attached to a process (a cluster outlives its callers).

mod client;
pub mod doctor;
pub mod guest;
pub mod names;
pub mod pods;
pub mod record;
pub mod settings;

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use burrow::lifecycle::{Operation, Step};
use burrow::model::{validate_name, RunInfo};
use burrow::{
    Backend, Capabilities, CreateRequest, Error, ExitReason, ListFilter, OciRuntime, Result,
    RuntimeStream, SandboxId, SandboxInfo, StartOptions, Status, StopOptions,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};

pub use record::Stored;
pub use settings::{KubeSettings, Source};

use guest::{runtime_error, Guests};
use pods::PodState;
use record::{store_error, Spec, Stopping};

/// How often waits look at the cluster again.
const POLL: Duration = Duration::from_millis(100);
/// Slack after a start's deadline before another caller calls it dead.
const START_SLACK: Duration = Duration::from_secs(10);
/// How long a stop waits for the pod to be gone beyond its grace.
const STOP_SLACK: Duration = Duration::from_secs(60);
/// The idle and duration checker's period.
const REAPER_PERIOD: Duration = Duration::from_secs(1);
/// How long an idle check waits for the pod's calls lock to answer.
const RECLAIM_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// A backend whose sandboxes live on a Kubernetes cluster.
#[derive(Debug)]
pub struct KubeBackend {
    settings: KubeSettings,
    source: Source,
    records: Api<DynamicObject>,
    pods: Api<Pod>,
    guests: Guests,
    /// This backend, for the tasks it starts (a drain's stop).
    me: Weak<KubeBackend>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Maps an API call's failure: 404 and 409 are the caller's business (see
/// [`is_status`]); an unreachable server is I/O; the rest is the store's.
fn api_error(what: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => Error::Unauthorized {
            reason: format!("{what}: {}", s.message),
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => Error::Io {
            context: format!("{what}: the Kubernetes API server is unreachable: {e}"),
            path: None,
            source: std::io::Error::other(e.to_string()),
        },
        _ => store_error(format!("{what}: {e}")),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl KubeBackend {
    /// Connects with `settings`: picks the credentials (see [`settings`]),
    /// checks that the API server answers, and installs the `Sandbox`
    /// CustomResourceDefinition if it is missing (which needs the right to
    /// create CRDs; otherwise apply [`record::crd`] once beforehand). Also
    /// starts the idle and max-duration checker of this backend.
    pub async fn connect(settings: KubeSettings) -> Result<Arc<KubeBackend>> {
        settings.validate()?;
        install_tls_provider();
        let source = settings::choose(&settings, &settings::Environment::current())?;
        let mut config = settings::client_config(&settings, &source).await?;
        config.default_namespace = settings.namespace.clone();
        let client = client::build(config).map_err(|e| Error::InvalidConfig {
            field: "kubernetes.kubeconfig".into(),
            reason: format!("{source}: {e}"),
        })?;
        client.apiserver_version().await.map_err(|e| Error::Io {
            context: format!("reaching the Kubernetes API server named by {source}: {e}"),
            path: None,
            source: std::io::Error::other(e.to_string()),
        })?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if namespaces
            .get_opt(&settings.namespace)
            .await
            .map_err(|e| api_error("looking up the namespace", e))?
            .is_none()
        {
            return Err(Error::InvalidConfig {
                field: "kubernetes.namespace".into(),
                reason: format!(
                    "namespace {:?} does not exist on the cluster named by {source}",
                    settings.namespace
                ),
            });
        }
        ensure_crd(&client, &settings.namespace).await?;
        let records =
            Api::namespaced_with(client.clone(), &settings.namespace, &record::api_resource());
        let pods = Api::namespaced(client, &settings.namespace);
        let backend = Arc::new_cyclic(|me| KubeBackend {
            settings,
            source,
            records,
            pods,
            guests: Guests::default(),
            me: me.clone(),
        });
        spawn_reaper(Arc::downgrade(&backend));
        Ok(backend)
    }

    /// Where the credentials came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The settings in use.
    pub fn settings(&self) -> &KubeSettings {
        &self.settings
    }

    /// The record of `name` as stored (not reconciled), if any.
    async fn read(&self, name: &str) -> Result<Option<Stored>> {
        match self.records.get_opt(&names::record_name(name)).await {
            Ok(Some(o)) => Stored::from_object(o).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(api_error("reading a sandbox record", e)),
        }
    }

    /// The reconciled record of exactly `id` (known as `name`), or why not.
    async fn exact(&self, name: &str, id: &SandboxId) -> Result<Stored> {
        validate_name(name)?;
        match self.read(name).await? {
            Some(s) if &s.info().id == id => self.reconcile(s).await,
            Some(s) => {
                burrow::ensure_identity(name, id, s.info())?;
                unreachable!("ensure_identity accepts only equal ids")
            }
            None => Err(Error::NotFound {
                what: format!("sandbox {id}"),
                name: Some(name.to_owned()),
                id: Some(id.clone()),
            }),
        }
    }

    /// Replaces the record with `spec` if nobody wrote since `stored` was
    /// read; `None` when somebody did (read again and decide again).
    async fn write(&self, stored: &Stored, mut spec: Spec) -> Result<Option<Stored>> {
        spec.info.updated_at_ms = now_ms();
        let object = stored.replacement(&spec)?;
        let name = names::record_name(&spec.info.name);
        match self
            .records
            .replace(&name, &PostParams::default(), &object)
            .await
        {
            Ok(o) => Stored::from_object(o).map(Some),
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => Ok(None),
            Err(e) => Err(api_error("updating a sandbox record", e)),
        }
    }

    async fn pod(&self, id: &SandboxId, generation: u64) -> Result<Option<Pod>> {
        self.pods
            .get_opt(&names::pod_name(id, generation))
            .await
            .map_err(|e| api_error("reading a sandbox's pod", e))
    }

    async fn delete_pod(&self, id: &SandboxId, generation: u64, grace: Duration) -> Result<()> {
        let params = DeleteParams {
            grace_period_seconds: Some(grace.as_secs().min(u32::MAX as u64) as u32),
            ..DeleteParams::default()
        };
        match self
            .pods
            .delete(&names::pod_name(id, generation), &params)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(api_error("deleting a sandbox's pod", e)),
        }
    }

    /// Brings a record in line with its pod (and its start's deadline),
    /// writing the change; the record as it then is.
    async fn reconcile(&self, mut stored: Stored) -> Result<Stored> {
        for _ in 0..16 {
            let info = stored.info();
            let live = matches!(
                info.status,
                Status::Running | Status::Draining | Status::Paused
            );
            let pod = if live {
                Some(self.pod(&info.id, info.generation).await?)
            } else {
                None
            };
            let Some((status, reason, detail)) = verdict(&stored, pod.as_ref().map(Option::as_ref))
            else {
                return Ok(stored);
            };
            let (id, generation) = (info.id.clone(), info.generation);
            if let Some(next) = self.finish(&stored, status, reason, detail).await? {
                if status == Status::Crashed {
                    // A failed pod stays until deleted; the crash is recorded.
                    let _ = self.delete_pod(&id, generation, Duration::ZERO).await;
                }
                self.guests.forget(&id);
                return Ok(next);
            }
            stored = match self.read(&info_name(&stored)).await? {
                Some(s) if s.info().id == id => s,
                Some(s) => return Ok(s),
                None => {
                    return Err(Error::NotFound {
                        what: format!("sandbox {id}"),
                        name: Some(info_name(&stored)),
                        id: Some(id),
                    })
                }
            };
        }
        Err(store_error(
            "the record kept changing while it was being reconciled",
        ))
    }

    /// Records the end of the current run (conditional).
    async fn finish(
        &self,
        stored: &Stored,
        status: Status,
        reason: ExitReason,
        detail: Option<String>,
    ) -> Result<Option<Stored>> {
        let mut spec = stored.spec.clone();
        spec.info.status = status;
        spec.stopping = None;
        if let Some(run) = spec.info.last_run.as_mut() {
            run.ended_at_ms = Some(now_ms());
            run.exit_reason = Some(reason);
            run.detail = detail;
        }
        self.write(stored, spec).await
    }

    /// Waits until `done` holds for the record of `id` (no deadline of its
    /// own: callers bound it).
    async fn wait_until(
        &self,
        name: &str,
        id: &SandboxId,
        done: impl Fn(&SandboxInfo) -> bool,
    ) -> Result<Stored> {
        loop {
            let s = self.exact(name, id).await?;
            if done(s.info()) {
                return Ok(s);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Start (strict) or converge (connect_or_start): one start per
    /// generation however many callers.
    async fn start_as(
        &self,
        op: Operation,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        loop {
            let s = self.exact(name, id).await?;
            match op.step(s.info().status) {
                Step::Done => return Ok(s.spec.info),
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Act => {
                    let mut spec = s.spec.clone();
                    let generation = spec.info.generation + 1;
                    spec.info.status = Status::Starting;
                    spec.info.generation = generation;
                    spec.info.last_run = Some(RunInfo::new(generation, now_ms()));
                    if let Some(d) = opts.detached {
                        spec.info.detached = d;
                    }
                    spec.stopping = None;
                    spec.activity_ms = now_ms();
                    if let Some(claimed) = self.write(&s, spec).await? {
                        return self.boot(claimed).await;
                    }
                }
                _ => return Err(op.refusal(s.info())),
            }
        }
    }

    /// Runs a claimed start: the pod, the agent's hello, then Running. Any
    /// failure is recorded (Crashed, `start_failed`) and the pod deleted.
    async fn boot(&self, claimed: Stored) -> Result<SandboxInfo> {
        let info = claimed.info().clone();
        let started = std::time::Instant::now();
        let timeout = info.config.startup_timeout;
        let outcome = tokio::time::timeout(timeout, self.launch(&claimed)).await;
        let failure = match outcome {
            Ok(Ok(relay)) => {
                let mut timings = serde_json::Map::new();
                timings.insert(
                    "total".into(),
                    serde_json::json!(started.elapsed().as_secs_f64() * 1000.0),
                );
                match self.publish_running(&claimed, timings).await {
                    Ok(Some(running)) => {
                        self.guests.keep(&info.id, relay);
                        return Ok(running.spec.info);
                    }
                    Ok(None) => "the start was superseded while booting".to_string(),
                    Err(e) => e.to_string(),
                }
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "the pod was not running within the startup timeout ({timeout:?}){}",
                self.last_warning(&names::pod_name(&info.id, info.generation))
                    .await
                    .map(|w| format!("; the cluster said: {w}"))
                    .unwrap_or_default()
            ),
        };
        let _ = self
            .delete_pod(&info.id, info.generation, Duration::ZERO)
            .await;
        // Recorded only if this start is still the current one.
        if let Ok(Some(s)) = self.read(&info.name).await {
            if s.info().id == info.id
                && s.info().generation == info.generation
                && s.info().status == Status::Starting
            {
                let _ = self
                    .finish(
                        &s,
                        Status::Crashed,
                        ExitReason::StartFailed,
                        Some(failure.clone()),
                    )
                    .await;
            }
        }
        Err(Error::StartFailed {
            name: info.name,
            id: info.id,
            reason: failure,
        })
    }

    /// The newest warning event of pod `pod` (`Reason: message`), the
    /// cluster's word on why it is not running (a runtime handler no node
    /// has, an image it cannot pull). `None` when there is none or events
    /// cannot be read.
    async fn last_warning(&self, pod: &str) -> Option<String> {
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.pods.clone().into_client(), &self.settings.namespace);
        let params =
            ListParams::default().fields(&format!("involvedObject.name={pod},type=Warning"));
        let list = events.list(&params).await.ok()?;
        let newest = list.items.into_iter().max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
        })?;
        Some(format!(
            "{}: {}",
            newest.reason.unwrap_or_default(),
            newest.message.unwrap_or_default()
        ))
    }

    /// Creates the run's pod, waits for it to run and connects a session.
    async fn launch(&self, claimed: &Stored) -> Result<burrow::relay::Relay> {
        let info = claimed.info();
        let owner = pods::Owner {
            name: names::record_name(&info.name),
            uid: &claimed.uid,
        };
        let pod = pods::pod(
            &info.id,
            info.generation,
            &info.config,
            &self.settings,
            &owner,
        );
        let created = loop {
            match self.pods.create(&PostParams::default(), &pod).await {
                // A namespace just made has no default service account until
                // the controller manager adds it, and admission refuses pods
                // meanwhile (bounded by the caller's startup timeout).
                Err(kube::Error::Api(s))
                    if s.code == 403 && s.message.contains("serviceaccount") =>
                {
                    tokio::time::sleep(POLL).await;
                }
                other => break other,
            }
        };
        match created {
            Ok(_) => {}
            // Left by an earlier claim of this generation: never reused.
            Err(e) if is_status(&e, 409) => {
                return Err(runtime_error(format!(
                    "pod {} already exists",
                    names::pod_name(&info.id, info.generation)
                )))
            }
            Err(e) => return Err(api_error("creating the sandbox's pod", e)),
        }
        loop {
            match pods::state(self.pod(&info.id, info.generation).await?.as_ref()) {
                PodState::Running => break,
                PodState::Pending => tokio::time::sleep(POLL).await,
                PodState::Failed(why) => return Err(runtime_error(why)),
                PodState::Gone | PodState::Terminating => {
                    return Err(runtime_error("the pod was deleted while starting".into()))
                }
            }
        }
        guest::session(
            &self.pods,
            &names::pod_name(&info.id, info.generation),
            &info.id,
            info.generation,
            info.config.startup_timeout,
        )
        .await
    }

    /// Starting -> Running for the claimed generation (retrying on writes
    /// that do not change that); `None` if the start was superseded.
    async fn publish_running(
        &self,
        claimed: &Stored,
        timings: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<Stored>> {
        let (id, generation) = (claimed.info().id.clone(), claimed.info().generation);
        let mut current = claimed.clone();
        for _ in 0..16 {
            let info = current.info();
            if info.id != id || info.generation != generation || info.status != Status::Starting {
                return Ok(None);
            }
            let mut spec = current.spec.clone();
            spec.info.status = Status::Running;
            if let Some(run) = spec.info.last_run.as_mut() {
                run.running_at_ms = Some(now_ms());
                run.timings = Some(serde_json::Value::Object(timings.clone()));
            }
            spec.activity_ms = now_ms();
            if let Some(s) = self.write(&current, spec).await? {
                return Ok(Some(s));
            }
            match self.read(&info_name(&current)).await? {
                Some(s) => current = s,
                None => return Ok(None),
            }
        }
        Err(store_error(
            "the record kept changing while publishing Running",
        ))
    }

    /// Stops the current run (graceful with `grace`, or at once), recording
    /// `reason`; waits through a start first. Idempotent.
    async fn stop_as(
        &self,
        name: &str,
        id: &SandboxId,
        grace: Duration,
        reason: ExitReason,
    ) -> Result<SandboxInfo> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Stop.step(s.info().status) {
                Step::Act => {}
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                _ => return Ok(s.spec.info),
            }
            let generation = s.info().generation;
            // The intent first: a reader that finds the pod gone then
            // records this stop, not a crash.
            let marked = s
                .spec
                .stopping
                .as_ref()
                .is_some_and(|st| st.generation == generation);
            if !marked {
                let mut spec = s.spec.clone();
                spec.stopping = Some(Stopping {
                    generation,
                    reason,
                    at_ms: now_ms(),
                });
                if self.write(&s, spec).await?.is_none() {
                    continue;
                }
            }
            self.guests.forget(id);
            self.delete_pod(id, generation, grace).await?;
            let deadline = tokio::time::Instant::now() + grace + STOP_SLACK;
            loop {
                let now = self.exact(name, id).await?;
                if now.info().generation != generation
                    || !matches!(
                        now.info().status,
                        Status::Running | Status::Draining | Status::Paused
                    )
                {
                    return Ok(now.spec.info);
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(Error::Timeout {
                        operation: format!("stopping sandbox {name:?} (its pod is still there)"),
                        after: grace + STOP_SLACK,
                    });
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// The idle and max-duration checks of one pass over the records.
    async fn reap_once(&self) -> Result<()> {
        // This process's own use of its guests counts as activity.
        let local = self.guests.all();
        let list = self
            .records
            .list(&ListParams::default().labels(&format!("{}=burrow", record::MANAGED_LABEL)))
            .await
            .map_err(|e| api_error("listing sandbox records", e))?;
        for object in list {
            let Ok(s) = Stored::from_object(object) else {
                continue;
            };
            let info = s.info().clone();
            if info.status != Status::Running {
                continue;
            }
            let mine: Vec<_> = local
                .iter()
                .filter(|(id, _)| *id == info.id)
                .map(|(_, r)| r)
                .collect();
            let busy = mine.iter().any(|r| r.in_flight() > 0);
            let used_ago = mine.iter().map(|r| r.idle_for()).min();
            let now = now_ms();
            if let Some(ago) = used_ago {
                let used_at = now - ago.as_millis() as i64;
                // Stamp the record only when it moves the clock by a while.
                if used_at > s.spec.activity_ms + 500 {
                    let _ = self.stamp(&info.name, used_at).await;
                }
            }
            let activity = used_ago
                .map(|a| now - a.as_millis() as i64)
                .unwrap_or(0)
                .max(s.spec.activity_ms);
            let idle = info
                .config
                .idle_timeout
                .is_some_and(|idle| !busy && now - activity > idle.as_millis() as i64);
            let overdue = matches!(
                (info.config.max_duration, info.last_run.as_ref().and_then(|r| r.running_at_ms)),
                (Some(max), Some(at)) if now - at > max.as_millis() as i64
            );
            let reclaim = if overdue {
                Some((Duration::from_secs(10), ExitReason::MaxDuration))
            } else {
                idle.then_some((Duration::from_secs(2), ExitReason::IdleTimeout))
            };
            // Idle by every clock; whether some session, of any process,
            // has requests in flight is the pod's to say, and it holds the
            // answer while the pod is deleted. When it cannot say (the exec
            // failed), the pod stays: the next pass asks again.
            let mut held = None;
            if reclaim.is_some() && !overdue {
                let pod = names::pod_name(&info.id, info.generation);
                match tokio::time::timeout(
                    RECLAIM_LOCK_TIMEOUT,
                    guest::reclaim_lock(&self.pods, &pod),
                )
                .await
                {
                    Ok(Ok(Some(lock))) => held = Some(lock),
                    Ok(Ok(None)) => continue,
                    Ok(Err(e)) => {
                        tracing::debug!(sandbox = %info.id, error = %e, "idle, but whether requests are in flight cannot be told; keeping it");
                        continue;
                    }
                    Err(_) => {
                        tracing::debug!(sandbox = %info.id, "idle, but its reclaim lock did not answer; keeping it");
                        continue;
                    }
                }
                tracing::info!(sandbox = %info.id, "idle timeout: deleting the pod, keeping the record");
            }
            if let Some((grace, reason)) = reclaim {
                let _ = self.stop_as(&info.name, &info.id, grace, reason).await;
            }
            drop(held);
        }
        Ok(())
    }

    /// Moves the record's idle clock to `at_ms` (a merge patch: activity is
    /// not a transition, so it needs no precondition).
    async fn stamp(&self, name: &str, at_ms: i64) -> Result<()> {
        let patch = serde_json::json!({"spec": {"activityMs": at_ms}});
        self.records
            .patch(
                &names::record_name(name),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| api_error("recording activity", e))
    }
}

fn info_name(s: &Stored) -> String {
    s.info().name.clone()
}

/// What a record should become given its run's pod (`pod`: `None` when not
/// looked up, `Some(None)` when there is none): `None` when it is right.
fn verdict(
    stored: &Stored,
    pod: Option<Option<&Pod>>,
) -> Option<(Status, ExitReason, Option<String>)> {
    let info = stored.info();
    match info.status {
        Status::Starting => {
            let run = info.last_run.as_ref()?;
            let deadline =
                run.started_at_ms + (info.config.startup_timeout + START_SLACK).as_millis() as i64;
            (now_ms() > deadline).then(|| {
                (
                    Status::Crashed,
                    ExitReason::StartFailed,
                    Some("the start did not finish (its starter is gone)".to_string()),
                )
            })
        }
        Status::Running | Status::Draining | Status::Paused => {
            let state = pods::state(pod?);
            let stopping = stored
                .spec
                .stopping
                .as_ref()
                .filter(|s| s.generation == info.generation);
            match (state, stopping) {
                (PodState::Running | PodState::Pending, _) => None,
                (PodState::Terminating, Some(_)) => None,
                (PodState::Gone, Some(st)) => Some((Status::Stopped, st.reason, None)),
                (PodState::Failed(_), Some(st)) => Some((Status::Stopped, st.reason, None)),
                (PodState::Gone, None) => Some((
                    Status::Crashed,
                    ExitReason::Crashed,
                    Some("the pod is gone (deleted or evicted)".into()),
                )),
                (PodState::Terminating, None) => Some((
                    Status::Crashed,
                    ExitReason::Crashed,
                    Some("the pod was deleted".into()),
                )),
                (PodState::Failed(why), None) => {
                    Some((Status::Crashed, ExitReason::Crashed, Some(why)))
                }
            }
        }
        _ => None,
    }
}

fn spawn_reaper(backend: Weak<KubeBackend>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REAPER_PERIOD).await;
            let Some(b) = backend.upgrade() else {
                return;
            };
            if let Err(e) = b.reap_once().await {
                tracing::debug!(error = %e, "idle check failed; trying again");
            }
        }
    });
}

/// Installs the `Sandbox` CRD if the cluster does not have it yet, and
/// waits until the API server serves it. A definition another caller has
/// just created exists before it is served: an early return on "exists"
/// met a 404 on the first record write.
async fn ensure_crd(client: &kube::Client, namespace: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{}.{}", record::PLURAL, record::GROUP);
    if crds
        .get_opt(&name)
        .await
        .map_err(|e| api_error("looking up the Sandbox resource definition", e))?
        .is_none()
    {
        let crd: CustomResourceDefinition = serde_json::from_value(record::crd())
            .map_err(|e| store_error(format!("the Sandbox resource definition: {e}")))?;
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => {}
            Err(e) => return Err(api_error("installing the Sandbox resource definition", e)),
        }
    }
    let records: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &record::api_resource());
    // Established, then served, within a few seconds.
    for _ in 0..100 {
        let established = match crds.get_opt(&name).await {
            Ok(Some(c)) => c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            _ => false,
        };
        if established {
            match records.list(&ListParams::default().limit(1)).await {
                Ok(_) => return Ok(()),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(api_error("listing sandbox records", e)),
            }
        }
        tokio::time::sleep(POLL).await;
    }
    Err(store_error(
        "the Sandbox resource definition was not served within 10 s",
    ))
}

/// kube's TLS is built without a provider of its own: ring's, once.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

#[async_trait]
impl Backend for KubeBackend {
    async fn capabilities(&self) -> Result<Capabilities> {
        let mut c = Capabilities::NONE;
        c.idle_reclaim = true;
        Ok(c)
    }

    async fn create(&self, mut req: CreateRequest) -> Result<SandboxInfo> {
        validate_name(&req.name)?;
        // Recorded as the configuration says, or runc: the runtime class is
        // the gVisor class for runsc, the backend's default otherwise.
        req.config.runtime.get_or_insert(OciRuntime::Runc);
        req.config.validate()?;
        pods::validate_image(&req.config.image)?;
        let mut info = SandboxInfo::new(SandboxId::new(), &req.name, req.config);
        info.detached = true;
        let spec = Spec {
            info,
            activity_ms: now_ms(),
            stopping: None,
        };
        loop {
            match self
                .records
                .create(&PostParams::default(), &record::new_object(&spec)?)
                .await
            {
                Ok(o) => return Stored::from_object(o).map(|s| s.spec.info),
                Err(e) if is_status(&e, 409) => {
                    // The winner's create is complete: it is readable.
                    if let Some(existing) = self.read(&req.name).await? {
                        return Err(Error::AlreadyExists {
                            name: req.name,
                            id: existing.spec.info.id,
                        });
                    }
                    // Removed meanwhile: claim the name again.
                }
                Err(e) => return Err(api_error("creating a sandbox record", e)),
            }
        }
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        validate_name(name)?;
        match self.read(name).await? {
            Some(s) => Ok(self.reconcile(s).await?.spec.info),
            None => Err(Error::NotFound {
                what: format!("sandbox named {name:?}"),
                name: Some(name.to_owned()),
                id: None,
            }),
        }
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        let list = self
            .records
            .list(&ListParams::default().labels(&record::id_selector(id)))
            .await
            .map_err(|e| api_error("looking up a sandbox record", e))?;
        for object in list {
            let s = Stored::from_object(object)?;
            if &s.info().id == id {
                return Ok(self.reconcile(s).await?.spec.info);
            }
        }
        Err(Error::NotFound {
            what: format!("sandbox {id}"),
            name: None,
            id: Some(id.clone()),
        })
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let list = self
            .records
            .list(&ListParams::default().labels(&format!("{}=burrow", record::MANAGED_LABEL)))
            .await
            .map_err(|e| api_error("listing sandbox records", e))?;
        let mut out = Vec::new();
        for object in list {
            let s = Stored::from_object(object)?;
            let info = self.reconcile(s).await?.spec.info;
            if filter.matches(&info) {
                out.push(info);
            }
        }
        out.sort_by(|a, b| {
            a.created_at_ms
                .cmp(&b.created_at_ms)
                .then(a.name.cmp(&b.name))
        });
        Ok(out)
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        Ok(self.exact(name, id).await?.spec.info)
    }

    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        self.start_as(Operation::Start, name, id, opts).await
    }

    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        self.start_as(Operation::ConnectOrStart, name, id, opts)
            .await
    }

    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        let reason = if opts.owner_exited {
            ExitReason::OwnerExited
        } else {
            ExitReason::Stopped
        };
        self.stop_as(name, id, opts.grace, reason).await
    }

    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.stop_as(name, id, Duration::ZERO, ExitReason::Killed)
            .await
    }

    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Drain.step(s.info().status) {
                Step::Done => return Ok(s.spec.info),
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Act => {
                    let mut spec = s.spec.clone();
                    spec.info.status = Status::Draining;
                    let Some(draining) = self.write(&s, spec).await? else {
                        continue;
                    };
                    // This process's in-flight work finishes; then the run
                    // stops (reason `drain`).
                    let relays: Vec<_> = self
                        .guests
                        .all()
                        .into_iter()
                        .filter(|(rid, _)| rid == id)
                        .map(|(_, r)| r)
                        .collect();
                    for r in &relays {
                        r.set_closing(true);
                    }
                    let (n, i) = (name.to_owned(), id.clone());
                    let me = self.me.clone();
                    tokio::spawn(async move {
                        for r in relays {
                            // Subscribed before looking: no change is missed.
                            let mut changes = r.in_flight_changes();
                            while r.in_flight() > 0 && !r.is_agent_gone() {
                                if changes.changed().await.is_err() {
                                    break;
                                }
                            }
                        }
                        if let Some(b) = me.upgrade() {
                            let _ = b
                                .stop_as(&n, &i, Duration::from_secs(10), ExitReason::Drain)
                                .await;
                        }
                    });
                    return Ok(draining.spec.info);
                }
                _ => return Err(Operation::Drain.refusal(s.info())),
            }
        }
    }

    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.stop(name, id, opts).await?;
        self.start_as(Operation::Start, name, id, StartOptions::default())
            .await
    }

    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Remove.step(s.info().status) {
                Step::Act => {}
                _ => return Err(Operation::Remove.refusal(s.info())),
            }
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: Some(s.resource_version.clone()),
                    uid: Some(s.uid.clone()),
                }),
                ..DeleteParams::default()
            };
            match self
                .records
                .delete(&names::record_name(name), &params)
                .await
            {
                Ok(_) => {
                    self.guests.forget(id);
                    return Ok(());
                }
                Err(e) if is_status(&e, 409) => continue,
                Err(e) if is_status(&e, 404) => continue,
                Err(e) => return Err(api_error("removing a sandbox record", e)),
            }
        }
    }

    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        for _ in 0..32 {
            self.kill(name, id).await?;
            match self.remove(name, id).await {
                Err(Error::InvalidState { .. }) | Err(Error::Starting { .. }) => continue,
                other => return other,
            }
        }
        Err(Error::Timeout {
            operation: format!("destroying sandbox {name:?} against repeated starts"),
            after: Duration::ZERO,
        })
    }

    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        Ok(self
            .wait_until(name, id, |i| statuses.contains(&i.status))
            .await?
            .spec
            .info)
    }

    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        loop {
            let s = self.exact(name, id).await?;
            let info = s.info();
            let demand = wake && info.config.demand_start_enabled();
            let reclaimed = info.status == Status::Stopped
                && info
                    .last_run
                    .as_ref()
                    .and_then(|r| r.exit_reason)
                    .is_some_and(ExitReason::is_idle_reclaim);
            match info.status {
                _ if Operation::Exec.step(info.status) == Step::Act => {}
                Status::Starting if demand => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Status::Stopped if demand && reclaimed => {
                    tracing::info!(sandbox = %id, "demand start after idle reclaim");
                    match self
                        .start_as(Operation::ConnectOrStart, name, id, StartOptions::default())
                        .await
                    {
                        Ok(_) | Err(Error::Starting { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                _ => return Err(Operation::Exec.refusal(info)),
            }
            let relay = match self.guests.get(id, info.generation) {
                Some(r) => r,
                None => {
                    let pod = names::pod_name(id, info.generation);
                    match guest::session(
                        &self.pods,
                        &pod,
                        id,
                        info.generation,
                        info.config.startup_timeout,
                    )
                    .await
                    {
                        Ok(r) => self.guests.keep(id, r),
                        Err(e) => {
                            // The run may have ended meanwhile: decide again
                            // on what it became.
                            let again = self.exact(name, id).await?;
                            if again.info().generation == info.generation
                                && again.info().status == Status::Running
                            {
                                return Err(e);
                            }
                            continue;
                        }
                    }
                }
            };
            relay.touch();
            return Ok(relay.connect());
        }
    }

    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        // Kubernetes sandboxes are never attached to a process.
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Detach.step(s.info().status) {
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Done | Step::Act => return Ok(s.spec.info),
                _ => return Err(Operation::Detach.refusal(s.info())),
            }
        }
    }

    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        loop {
            let s = self.exact(name, id).await?;
            match Operation::Touch.step(s.info().status) {
                Step::Wait => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                }
                Step::Act => {
                    if let Some(r) = self.guests.get(id, s.info().generation) {
                        r.touch();
                    }
                    return self.stamp(name, now_ms()).await;
                }
                _ => return Err(Operation::Touch.refusal(s.info())),
            }
        }
    }
}
