//! Sandbox status and the transitions it allows.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

listed_enum! {
    /// Lifecycle status of a sandbox.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Status {
        /// Persisted, never started.
        Created = "created",
        /// A start is in progress; it has a live owner or is reconciled to Crashed.
        Starting = "starting",
        /// The guest agent answered; commands can run.
        Running = "running",
        /// Finishing in-flight work before stopping; no new work is accepted.
        Draining = "draining",
        /// Execution suspended.
        Paused = "paused",
        /// Stopped cleanly (or never to run again until started).
        Stopped = "stopped",
        /// The runtime died or failed to start.
        Crashed = "crashed",
    }
}

impl Status {
    /// A runtime (supervisor) is expected to exist in this status.
    pub fn has_runtime(self) -> bool {
        matches!(
            self,
            Status::Starting | Status::Running | Status::Draining | Status::Paused
        )
    }

    /// A start may be claimed from this status.
    pub fn can_start(self) -> bool {
        matches!(self, Status::Created | Status::Stopped | Status::Crashed)
    }

    /// Commands and file operations are accepted.
    pub fn can_exec(self) -> bool {
        matches!(self, Status::Running)
    }

    /// The record may be removed.
    pub fn can_remove(self) -> bool {
        !self.has_runtime()
    }

    /// The status will not change without an external action.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            Status::Created | Status::Running | Status::Paused | Status::Stopped | Status::Crashed
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| crate::Error::InvalidArgument {
                argument: "status".into(),
                reason: format!("unknown status {s:?}"),
            })
    }
}
