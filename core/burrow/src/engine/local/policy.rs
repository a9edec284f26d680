//! Touch, pause/resume, modify and metrics of the local backend.

use burrow_protocol::{Control, Response};

use super::transitions::ControlError;
use super::LocalBackend;
use crate::backend::Metrics;
use crate::error::{Error, Result};
use crate::lifecycle::Operation;
use crate::model::{Applies, Modify, ModifyPlan, SandboxId, SandboxInfo, Status};

impl LocalBackend {
    pub(super) async fn do_touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.control_live(name, id, Operation::Touch, Control::Touch)
            .await?;
        Ok(())
    }

    /// Pause (`pause = true`) or resume.
    pub(super) async fn do_pause(
        &self,
        name: &str,
        id: &SandboxId,
        pause: bool,
    ) -> Result<SandboxInfo> {
        let operation = if pause {
            Operation::Pause
        } else {
            Operation::Resume
        };
        let body = if pause {
            Control::Pause
        } else {
            Control::Resume
        };
        match self.control_live(name, id, operation, body).await? {
            (info, None) => Ok(info),
            (_, Some(_)) => self.lookup(name, id).await.map(|r| r.info),
        }
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
        let mut config = changes.apply_to(&info.config)?;
        crate::engine::driver::check_limits(&config)?;
        // A limit removed gets its default back.
        crate::engine::driver::fill_default_limits(&mut config, &self.config.default_limits);
        let mut plan = changes.plan(info.status, info.config.driver.unwrap_or_default());
        if !info.config.network.is_enabled() {
            // No stack in the running guest to change.
            for c in plan
                .iter_mut()
                .filter(|c| c.field == "network" && c.applies == Applies::Live)
            {
                c.applies = Applies::NextStart;
                c.note = Some(
                    "the sandbox runs without a network: the setting applies at its next start"
                        .into(),
                );
            }
        }
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
                    ControlError::Ended => "the sandbox stopped meanwhile".to_string(),
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
        match self
            .control_live(name, id, Operation::Metrics, Control::Metrics)
            .await?
        {
            (_, Some(Response::Metrics { metrics })) => Ok(metrics),
            (_, other) => Err(Error::protocol(format!(
                "unexpected answer to metrics: {other:?}"
            ))),
        }
    }
}
