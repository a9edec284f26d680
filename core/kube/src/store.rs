//! The records as the API server keeps them: reads, conditional writes,
//! the run's pod, and reconciliation of a record with its pod.

use std::time::Duration;

use burrow::model::validate_name;
use burrow::{Error, ExitReason, Result, SandboxId, SandboxInfo, Status};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};

use crate::pods::{self, PodState};
use crate::record::{store_error, Spec, Stored};
use crate::{api_error, is_status, names, now_ms, KubeBackend, POLL, START_SLACK};

impl KubeBackend {
    /// The record of `name` as stored (not reconciled), if any.
    pub(crate) async fn read(&self, name: &str) -> Result<Option<Stored>> {
        match self.records.get_opt(&names::record_name(name)).await {
            Ok(Some(o)) => Stored::from_object(o).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(api_error("reading a sandbox record", e)),
        }
    }

    /// The reconciled record of exactly `id` (known as `name`), or why not.
    pub(crate) async fn exact(&self, name: &str, id: &SandboxId) -> Result<Stored> {
        // A warm sandbox's name is no create's, but its starts and stops
        // are the pool's.
        if !crate::pools::is_warm_name(name) {
            validate_name(name)?;
        }
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
    pub(crate) async fn write(&self, stored: &Stored, mut spec: Spec) -> Result<Option<Stored>> {
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

    pub(crate) async fn pod(&self, id: &SandboxId, generation: u64) -> Result<Option<Pod>> {
        self.pods
            .get_opt(&names::pod_name(id, generation))
            .await
            .map_err(|e| api_error("reading a sandbox's pod", e))
    }

    pub(crate) async fn delete_pod(
        &self,
        id: &SandboxId,
        generation: u64,
        grace: Duration,
    ) -> Result<()> {
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
    pub(crate) async fn reconcile(&self, mut stored: Stored) -> Result<Stored> {
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
    pub(crate) async fn finish(
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
    pub(crate) async fn wait_until(
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
}

pub(crate) fn info_name(s: &Stored) -> String {
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
