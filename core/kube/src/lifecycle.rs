//! Runs: the one start per generation (a claim conditional on the
//! record's resourceVersion, then the pod and the agent's hello), stops,
//! and the open/demand-start decision of calls that need a run (the shared
//! [`burrow::lifecycle::open_step`]).

use std::time::Duration;

use burrow::lifecycle::{open_step, Open, Operation, Step};
use burrow::model::RunInfo;
use burrow::{
    Error, ExitReason, Result, RuntimeStream, SandboxId, SandboxInfo, StartOptions, Status,
};
use kube::api::{Api, ListParams, PostParams};

use crate::guest::runtime_error;
use crate::pods::{self, PodState};
use crate::record::{store_error, Stopping, Stored};
use crate::store::info_name;
use crate::{api_error, guest, is_status, names, now_ms, KubeBackend, POLL, STOP_SLACK};

impl KubeBackend {
    /// Start (strict) or converge (connect_or_start): one start per
    /// generation however many callers.
    pub(crate) async fn start_as(
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
    pub(crate) async fn boot(&self, claimed: Stored) -> Result<SandboxInfo> {
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
    pub(crate) async fn last_warning(&self, pod: &str) -> Option<String> {
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
    pub(crate) async fn launch(&self, claimed: &Stored) -> Result<burrow::relay::Relay> {
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
            info.config.guest_env(),
        )
        .await
    }

    /// Starting -> Running for the claimed generation (retrying on writes
    /// that do not change that); `None` if the start was superseded.
    pub(crate) async fn publish_running(
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
    pub(crate) async fn stop_as(
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

    /// A runtime stream to the current run of exactly `id`: the shared
    /// open/demand-start decision ([`open_step`]), as the local backend
    /// makes it. A run found ending is waited for, and a start that follows
    /// it converged on; a demand start runs in a task of its own, so it
    /// completes (and records its outcome) even if this caller gives up.
    pub(crate) async fn open(
        &self,
        name: &str,
        id: &SandboxId,
        wake: bool,
    ) -> Result<RuntimeStream> {
        let mut settled = false;
        loop {
            let s = self.exact(name, id).await?;
            let info = s.info();
            match open_step(info, wake, settled) {
                Open::Connect => {}
                Open::WaitForStart => {
                    self.wait_until(name, id, |i| i.status != Status::Starting)
                        .await?;
                    continue;
                }
                Open::DemandStart => {
                    tracing::info!(sandbox = %id, "demand start after idle reclaim");
                    let me = self.me.upgrade().ok_or_else(|| Error::Io {
                        context: "the backend is being dropped".into(),
                        path: None,
                        source: std::io::Error::other("backend dropped"),
                    })?;
                    let (n, i) = (name.to_owned(), id.clone());
                    let started = tokio::spawn(async move {
                        me.start_as(Operation::ConnectOrStart, &n, &i, StartOptions::default())
                            .await
                    })
                    .await
                    .map_err(|e| Error::Io {
                        context: "the demand start task failed".into(),
                        path: None,
                        source: std::io::Error::other(e.to_string()),
                    })?;
                    match started {
                        Ok(_) | Err(Error::Starting { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                _ => return Err(Operation::Exec.refusal(info)),
            }
            let relay = match self.guests.get(id, info.generation) {
                Some(r) => {
                    // The record's, as it is now (a claim changes it).
                    r.set_env(info.config.guest_env());
                    r
                }
                None => {
                    let pod = names::pod_name(id, info.generation);
                    match guest::session(
                        &self.pods,
                        &pod,
                        id,
                        info.generation,
                        info.config.startup_timeout,
                        info.config.guest_env(),
                    )
                    .await
                    {
                        Ok(r) => self.guests.keep(id, r),
                        Err(e) => {
                            // The run may be ending: wait for its end, then
                            // decide again on what it settled to.
                            let generation = info.generation;
                            let again = self
                                .wait_until(name, id, |i| {
                                    i.generation != generation
                                        || i.status == Status::Running
                                        || !i.status.has_runtime()
                                })
                                .await?;
                            if again.info().generation == generation
                                && again.info().status == Status::Running
                            {
                                return Err(e);
                            }
                            settled = true;
                            continue;
                        }
                    }
                }
            };
            relay.touch();
            return Ok(relay.connect());
        }
    }
}
