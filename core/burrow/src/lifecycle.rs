//! The lifecycle table of `docs/lifecycle.md` as code: what each operation
//! does to a sandbox in each status. Every backend decides with these
//! functions, so "stop is idempotent", "a strict start refuses Starting" or
//! "remove needs a stopped sandbox" mean the same everywhere.
//!
//! ```
//! use burrow::lifecycle::{Operation, Step};
//! use burrow::Status;
//!
//! assert_eq!(Operation::Stop.step(Status::Stopped), Step::Done);
//! assert_eq!(Operation::Stop.step(Status::Starting), Step::Wait);
//! assert_eq!(Operation::ConnectOrStart.step(Status::Crashed), Step::Act);
//! assert_eq!(Operation::Remove.step(Status::Running), Step::Refuse);
//! ```

use crate::error::Error;
use crate::model::{SandboxInfo, Status};

listed_enum! {
    /// A lifecycle operation, as far as the status it meets decides it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum Operation {
        /// Strict start.
        Start = "start",
        /// Converge on a running sandbox.
        ConnectOrStart = "connect_or_start",
        /// Graceful stop.
        Stop = "stop",
        /// Immediate stop.
        Kill = "kill",
        /// Stop once in-flight work is done.
        Drain = "drain",
        /// Survive the owner from now on.
        Detach = "detach",
        /// Delete the record.
        Remove = "remove",
        /// Suspend.
        Pause = "pause",
        /// Continue after a pause.
        Resume = "resume",
        /// Count as activity.
        Touch = "touch",
        /// Read resource usage.
        Metrics = "metrics",
        /// Change the configuration.
        Modify = "modify",
        /// Run commands, file operations or tunnels (a runtime stream).
        Exec = "exec",
    }
}

/// What an operation does in a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Already where the operation leads (or nothing runs that it could
    /// reach): answer with the sandbox as it is.
    Done,
    /// A start is in progress: wait until it settles, then decide again.
    Wait,
    /// Do it.
    Act,
    /// Not in this status: [`Operation::refusal`].
    Refuse,
}

impl Operation {
    /// What this operation does to a sandbox in `status`.
    pub fn step(self, status: Status) -> Step {
        use Status::*;
        use Step::*;
        match (self, status) {
            (Operation::Start, Created | Stopped | Crashed) => Act,
            (Operation::Start, _) => Refuse,

            (Operation::ConnectOrStart, Running) => Done,
            (Operation::ConnectOrStart, Starting) => Wait,
            (Operation::ConnectOrStart, Created | Stopped | Crashed) => Act,
            (Operation::ConnectOrStart, Draining | Paused) => Refuse,

            (Operation::Stop | Operation::Kill, Created | Stopped | Crashed) => Done,
            (Operation::Stop | Operation::Kill, Starting) => Wait,
            (Operation::Stop | Operation::Kill, Running | Draining | Paused) => Act,

            (Operation::Drain, Draining | Created | Stopped | Crashed) => Done,
            (Operation::Drain, Starting) => Wait,
            (Operation::Drain, Running) => Act,
            (Operation::Drain, Paused) => Refuse,

            (Operation::Detach, Starting) => Wait,
            (Operation::Detach, Running | Draining | Paused) => Act,
            (Operation::Detach, Created | Stopped | Crashed) => Done,

            (Operation::Remove, Created | Stopped | Crashed) => Act,
            (Operation::Remove, _) => Refuse,

            (Operation::Pause, Paused) | (Operation::Resume, Running) => Done,
            (Operation::Pause, Running) | (Operation::Resume, Paused) => Act,
            (Operation::Pause | Operation::Resume, Starting) => Wait,
            (Operation::Pause | Operation::Resume, _) => Refuse,

            (Operation::Touch | Operation::Metrics, Running | Draining | Paused) => Act,
            (Operation::Touch | Operation::Metrics, Starting) => Wait,
            (Operation::Touch | Operation::Metrics, _) => Refuse,

            (Operation::Modify, Starting) => Wait,
            (Operation::Modify, _) => Act,

            (Operation::Exec, Running) => Act,
            (Operation::Exec, _) => Refuse,
        }
    }

    /// The statuses in which this operation acts (for a backend that claims
    /// a transition in one statement, e.g. `WHERE status IN (...)`).
    pub fn acts_in(self) -> impl Iterator<Item = Status> {
        Status::ALL
            .into_iter()
            .filter(move |s| self.step(*s) == Step::Act)
    }

    /// The error of a [`Step::Refuse`] for `info`: [`Error::Starting`] for a
    /// strict start that met a start in progress, else
    /// [`Error::InvalidState`] with the status it met.
    pub fn refusal(self, info: &SandboxInfo) -> Error {
        if self == Operation::Start && info.status == Status::Starting {
            return Error::Starting {
                name: info.name.clone(),
                id: info.id.clone(),
            };
        }
        Error::InvalidState {
            operation: self.as_str().into(),
            name: info.name.clone(),
            id: info.id.clone(),
            status: info.status,
        }
    }
}

/// What a call that needs a run (exec, file operations, a tunnel: a
/// runtime stream) does with the sandbox as it is now: the one
/// open/demand-start decision of every backend ([`open_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Open {
    /// A run is there: connect to it.
    Connect,
    /// A start is in progress (a demand start of another caller, or the run
    /// that follows one that ended): wait until it settles, then decide
    /// again.
    WaitForStart,
    /// Reclaimed for idleness, with demand start on: start it through the
    /// normal start path, in a task of its own that completes (and records
    /// its outcome) even if this caller gives up, then decide again.
    DemandStart,
    /// Not now: [`Operation::Exec`]'s [`Operation::refusal`].
    Refuse,
}

/// The open/demand-start decision for `info`. `wake`: the call may start a
/// reclaimed sandbox (calls that do work; a ping or a metrics read never
/// wake one). `settled`: this caller found the run it was about to use
/// ending and waited for its end, so a start that follows it is converged
/// on, not refused.
pub fn open_step(info: &SandboxInfo, wake: bool, settled: bool) -> Open {
    let demand = wake && info.config.demand_start_enabled();
    let reclaimed = info
        .last_run
        .as_ref()
        .and_then(|r| r.exit_reason)
        .is_some_and(crate::model::ExitReason::is_idle_reclaim);
    match info.status {
        _ if Operation::Exec.step(info.status) == Step::Act => Open::Connect,
        Status::Starting if demand || settled => Open::WaitForStart,
        Status::Stopped if demand && reclaimed => Open::DemandStart,
        _ => Open::Refuse,
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_kill_and_drain_are_idempotent_where_nothing_runs() {
        for op in [Operation::Stop, Operation::Kill, Operation::Drain] {
            for s in [Status::Created, Status::Stopped, Status::Crashed] {
                assert_eq!(op.step(s), Step::Done, "{op} in {s}");
            }
        }
    }

    #[test]
    fn starting_is_waited_through_except_by_a_strict_start_remove_and_exec() {
        for op in Operation::ALL {
            let expected = match op {
                Operation::Start | Operation::Remove | Operation::Exec => Step::Refuse,
                _ => Step::Wait,
            };
            assert_eq!(op.step(Status::Starting), expected, "{op}");
        }
    }

    #[test]
    fn only_settled_statuses_without_a_runtime_can_be_removed_or_started() {
        let removable: Vec<Status> = Operation::Remove.acts_in().collect();
        let startable: Vec<Status> = Operation::Start.acts_in().collect();
        assert_eq!(removable, startable);
        for s in Status::ALL {
            assert_eq!(removable.contains(&s), !s.has_runtime(), "{s}");
            assert_eq!(startable.contains(&s), s.can_start(), "{s}");
        }
    }

    #[test]
    fn open_connects_to_a_run_converges_on_starts_and_wakes_only_idle_reclaims() {
        use crate::model::{ExitReason, RunInfo};
        let mut info = SandboxInfo::new(
            crate::model::SandboxId::new(),
            "w",
            crate::model::SandboxConfig::new("img"),
        );
        info.config.idle_timeout = Some(std::time::Duration::from_secs(60));
        assert!(info.config.demand_start_enabled());
        for status in Status::ALL {
            info.status = status;
            let expected = match status {
                Status::Running => Open::Connect,
                _ => Open::Refuse,
            };
            // Without a call that wakes, and with no reclaimed run.
            assert_eq!(open_step(&info, false, false), expected, "{status}");
        }
        info.status = Status::Starting;
        assert_eq!(open_step(&info, true, false), Open::WaitForStart);
        assert_eq!(open_step(&info, false, true), Open::WaitForStart);
        assert_eq!(open_step(&info, false, false), Open::Refuse);
        // Stopped: woken only after an idle reclaim, by a call that wakes.
        info.status = Status::Stopped;
        let mut run = RunInfo::new(1, 0);
        run.exit_reason = Some(ExitReason::Stopped);
        info.last_run = Some(run.clone());
        assert_eq!(open_step(&info, true, false), Open::Refuse);
        for reason in [ExitReason::IdleTimeout, ExitReason::Hibernated] {
            run.exit_reason = Some(reason);
            info.last_run = Some(run.clone());
            assert_eq!(
                open_step(&info, true, false),
                Open::DemandStart,
                "{reason:?}"
            );
            assert_eq!(open_step(&info, false, false), Open::Refuse, "{reason:?}");
        }
        // Demand start off: refused.
        info.config.demand_start = Some(false);
        assert_eq!(open_step(&info, true, false), Open::Refuse);
    }

    #[test]
    fn a_strict_start_meeting_a_start_is_starting_other_refusals_invalid_state() {
        let mut info = SandboxInfo::new(
            crate::model::SandboxId::new(),
            "w",
            crate::model::SandboxConfig::new("img"),
        );
        info.status = Status::Starting;
        assert_eq!(
            Operation::Start.refusal(&info).code(),
            crate::ErrorCode::Starting
        );
        info.status = Status::Running;
        let e = Operation::Start.refusal(&info);
        assert_eq!(e.code(), crate::ErrorCode::InvalidState);
        assert_eq!(e.status(), Some(Status::Running));
    }
}
