//! A wake on the runtime stream is the tenant's own start.
//!
//! A call that may wake an idle-reclaimed sandbox (`open_runtime` with
//! `wake`: an exec, a file call, a tunnel — the gateway's and the
//! console's, which open the stream through the tenant's view too) starts
//! it first through the tenant's start ([`Scoped::connect_or_start`]: its
//! policy, its quota turn), then opens the stream asking the engine for no
//! start of its own. The engine's demand start would start it outside
//! both: a tenant at its `max_running` had a second sandbox running by
//! asking for `?wake=true` (issue 56).
//!
//! The decision is the engine's own ([`open_step`]): a start in progress is
//! waited for, then decided again; a reclaimed sandbox with demand start on
//! is started (in a task of its own, so that it completes and records its
//! outcome even if the caller gives up); anything else opens, or is
//! refused, as it would have been. A sandbox reclaimed again between that
//! start and the open is woken again, a bounded number of times.

use burrow::lifecycle::{open_step, Open};
use burrow::{Backend, Error, Result, RuntimeStream, SandboxId, StartOptions, Status};

use super::Scoped;

/// How many times one open wakes its sandbox at most.
const WAKES: usize = 3;

impl Scoped {
    /// [`Backend::open_runtime`] for the tenant: a wake through its own
    /// start (see the module's doc).
    pub(super) async fn open_woken(
        &self,
        name: &str,
        id: &SandboxId,
        wake: bool,
    ) -> Result<RuntimeStream> {
        let mut wakes = 0;
        loop {
            if wake {
                self.wake(name, id).await?;
            }
            let open = self
                .by_id(name, id, |n, i| async move {
                    self.inner.open_runtime(&n, &i, false).await
                })
                .await;
            // Refused for its status: reclaimed (or restarted) since the
            // wake, it is woken again; else the refusal stands.
            match open {
                Err(Error::InvalidState { .. }) if wake && wakes < WAKES => {
                    if !self.wants_wake(name, id).await? {
                        return open;
                    }
                    wakes += 1;
                }
                open => return open,
            }
        }
    }

    /// Whether a waking call would start `id`, or wait for its start.
    async fn wants_wake(&self, name: &str, id: &SandboxId) -> Result<bool> {
        let info = self.status(name, id).await?;
        Ok(matches!(
            open_step(&info, true, false),
            Open::DemandStart | Open::WaitForStart
        ))
    }

    /// Makes `id` ready for a waking call: waits through a start in
    /// progress, starts it if it was reclaimed for idleness (within the
    /// tenant's quota and policy), and leaves anything else as it is.
    async fn wake(&self, name: &str, id: &SandboxId) -> Result<()> {
        loop {
            let info = self.status(name, id).await?;
            match open_step(&info, true, false) {
                Open::WaitForStart => {
                    let settled: Vec<Status> = Status::ALL
                        .into_iter()
                        .filter(|s| *s != Status::Starting)
                        .collect();
                    self.wait_for_status(name, id, &settled).await?;
                }
                Open::DemandStart => {
                    tracing::info!(sandbox = %id, "demand start after idle reclaim");
                    let (this, n, i) = (self.clone(), name.to_owned(), id.clone());
                    let start = tokio::spawn(async move {
                        this.connect_or_start(&n, &i, StartOptions::default()).await
                    });
                    start.await.map_err(|e| Error::Protocol {
                        reason: format!("demand start task failed: {e}"),
                    })??;
                    return Ok(());
                }
                _ => return Ok(()),
            }
        }
    }
}
