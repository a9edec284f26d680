//! Touch, pause/resume, modify and metrics of the local backend.

use burrow_protocol::{Control, Response};

use super::lifecycle::ControlError;
use super::LocalBackend;
use crate::backend::Metrics;
use crate::error::{Error, Result};
use crate::model::{Applies, Modify, ModifyPlan, SandboxId, SandboxInfo, Status};

impl LocalBackend {
    fn not_running(info: SandboxInfo, operation: &'static str) -> Error {
        Error::InvalidState {
            operation: operation.into(),
            name: info.name,
            id: info.id,
            status: info.status,
        }
    }

    fn refused(info: &SandboxInfo, operation: &'static str, e: ControlError) -> Error {
        match e {
            ControlError::Gone => Error::InvalidState {
                operation: operation.into(),
                name: info.name.clone(),
                id: info.id.clone(),
                status: Status::Stopped,
            },
            ControlError::Refused(g) => Error::Guest {
                operation: operation.into(),
                source: crate::error::GuestFailure(g),
            },
            ControlError::Failed(e) => e,
        }
    }

    pub(super) async fn do_touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        let info = self
            .wait_until(name, id, |i| i.status != Status::Starting)
            .await?;
        if !matches!(
            info.status,
            Status::Running | Status::Draining | Status::Paused
        ) {
            return Err(Self::not_running(info, "touch"));
        }
        self.control_answer(&info, Control::Touch)
            .await
            .map_err(|e| Self::refused(&info, "touch", e))?;
        Ok(())
    }

    /// Pause (`pause = true`) or resume.
    pub(super) async fn do_pause(
        &self,
        name: &str,
        id: &SandboxId,
        pause: bool,
    ) -> Result<SandboxInfo> {
        let operation = if pause { "pause" } else { "resume" };
        let info = self
            .wait_until(name, id, |i| i.status != Status::Starting)
            .await?;
        let ok = match (pause, info.status) {
            (true, Status::Paused) | (false, Status::Running) => return Ok(info),
            (true, Status::Running) | (false, Status::Paused) => true,
            _ => false,
        };
        if !ok {
            return Err(Self::not_running(info, operation));
        }
        let body = if pause {
            Control::Pause
        } else {
            Control::Resume
        };
        self.control_answer(&info, body)
            .await
            .map_err(|e| Self::refused(&info, operation, e))?;
        self.lookup(name, id).await.map(|r| r.info)
    }

    pub(super) async fn do_modify(
        &self,
        name: &str,
        id: &SandboxId,
        changes: &Modify,
    ) -> Result<ModifyPlan> {
        let info = self
            .wait_until(name, id, |i| i.status != Status::Starting)
            .await?;
        let config = changes.apply_to(&info.config)?;
        let mut plan = changes.plan(info.status, info.config.driver);
        {
            // The per-name transition lock orders this write against starts:
            // a start claimed after it reads the new configuration.
            let _lock = self.name_lock(name).await?;
            if !self.store.update_config(id, &config).await? {
                return Err(Error::not_found_id(id));
            }
        }
        let live = plan
            .iter()
            .any(|c| matches!(c.applies, Applies::Live | Applies::FutureExecs))
            || (changes.env_set.len() + changes.env_unset.len() > 0 && info.status.has_runtime());
        if live && info.status.has_runtime() {
            if let Err(e) = self.control_answer(&info, Control::Reload).await {
                let why = match e {
                    ControlError::Gone => "the sandbox stopped meanwhile".to_string(),
                    ControlError::Refused(g) => g.message,
                    ControlError::Failed(e) => e.to_string(),
                };
                for c in plan
                    .iter_mut()
                    .filter(|c| matches!(c.applies, Applies::Live | Applies::FutureExecs))
                {
                    c.applies = Applies::NextStart;
                    c.note = Some(format!(
                        "could not be applied live ({why}); applies at the next start"
                    ));
                }
            }
        }
        let info = self.lookup(name, id).await?.info;
        Ok(ModifyPlan {
            changes: plan,
            info,
        })
    }

    pub(super) async fn do_metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        let info = self.lookup(name, id).await?.info;
        if !matches!(
            info.status,
            Status::Running | Status::Draining | Status::Paused
        ) {
            return Err(Self::not_running(info, "metrics"));
        }
        match self.control_answer(&info, Control::Metrics).await {
            Ok(Response::Metrics { metrics }) => Ok(metrics),
            Ok(other) => Err(Error::protocol(format!(
                "unexpected answer to metrics: {other:?}"
            ))),
            Err(e) => Err(Self::refused(&info, "metrics", e)),
        }
    }
}
