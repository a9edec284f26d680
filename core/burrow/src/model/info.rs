//! Snapshots of a sandbox and its runs, as returned to callers.

use serde::{Deserialize, Serialize};

use super::{SandboxConfig, SandboxId, Status};

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The guest shut down by itself.
    Completed,
    /// A graceful stop was requested.
    Stopped,
    /// A kill was requested.
    Killed,
    /// Reclaimed after being idle.
    IdleTimeout,
    /// The run reached its maximum duration.
    MaxDuration,
    /// The runtime or its supervisor died unexpectedly.
    Crashed,
    /// Stopped after a drain.
    Drain,
    /// The owning process of an attached sandbox exited.
    OwnerExited,
    /// The start failed or timed out.
    StartFailed,
    /// Reclaimed after being idle, its whole guest saved: the next start
    /// resumes it (see [`IdleAction::Hibernate`](super::IdleAction)).
    Hibernated,
}

impl ExitReason {
    /// The reason as a string.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitReason::Completed => "completed",
            ExitReason::Stopped => "stopped",
            ExitReason::Killed => "killed",
            ExitReason::IdleTimeout => "idle_timeout",
            ExitReason::MaxDuration => "max_duration",
            ExitReason::Crashed => "crashed",
            ExitReason::Drain => "drain",
            ExitReason::OwnerExited => "owner_exited",
            ExitReason::StartFailed => "start_failed",
            ExitReason::Hibernated => "hibernated",
        }
    }

    /// Whether the run was reclaimed for idleness (stopped or hibernated):
    /// the runs a demand start wakes.
    pub fn is_idle_reclaim(self) -> bool {
        matches!(self, ExitReason::IdleTimeout | ExitReason::Hibernated)
    }

    /// Parses [`ExitReason::as_str`] output.
    pub fn parse(s: &str) -> Option<Self> {
        [
            ExitReason::Completed,
            ExitReason::Stopped,
            ExitReason::Killed,
            ExitReason::IdleTimeout,
            ExitReason::MaxDuration,
            ExitReason::Crashed,
            ExitReason::Drain,
            ExitReason::OwnerExited,
            ExitReason::StartFailed,
            ExitReason::Hibernated,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One run (runtime generation) of a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunInfo {
    /// Runtime generation of this run.
    pub generation: u64,
    /// Supervisor process id, once known.
    pub supervisor_pid: Option<u32>,
    /// When the start was claimed (ms since the epoch).
    pub started_at_ms: i64,
    /// When the agent answered (ms since the epoch).
    pub running_at_ms: Option<i64>,
    /// When the run ended (ms since the epoch).
    pub ended_at_ms: Option<i64>,
    /// Why it ended.
    pub exit_reason: Option<ExitReason>,
    /// Detail (runtime error output, signal, exit code).
    pub detail: Option<String>,
    /// Phase timings of the start in milliseconds (spawn, runtime, handshake).
    pub timings: Option<serde_json::Value>,
}

impl RunInfo {
    /// Run `generation`, claimed at `started_at_ms`, not yet running.
    pub fn new(generation: u64, started_at_ms: i64) -> Self {
        RunInfo {
            generation,
            supervisor_pid: None,
            started_at_ms,
            running_at_ms: None,
            ended_at_ms: None,
            exit_reason: None,
            detail: None,
            timings: None,
        }
    }
}

/// A snapshot of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SandboxInfo {
    /// Identity.
    pub id: SandboxId,
    /// Current name.
    pub name: String,
    /// Status at the time of the snapshot (reconciled: a Starting or Running
    /// record whose owner died reads as Crashed).
    pub status: Status,
    /// Persisted configuration.
    pub config: SandboxConfig,
    /// Runtime generation (0 = never started).
    pub generation: u64,
    /// Survives its creating process.
    pub detached: bool,
    /// Creation time (ms since the epoch).
    pub created_at_ms: i64,
    /// Last status change (ms since the epoch).
    pub updated_at_ms: i64,
    /// The latest run, if any.
    pub last_run: Option<RunInfo>,
}

impl SandboxInfo {
    /// A sandbox just created: status Created, generation 0, attached,
    /// created and updated now, never run. Backends set the other fields.
    pub fn new(id: SandboxId, name: impl Into<String>, config: SandboxConfig) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        SandboxInfo {
            id,
            name: name.into(),
            status: Status::Created,
            config,
            generation: 0,
            detached: false,
            created_at_ms: now,
            updated_at_ms: now,
            last_run: None,
        }
    }
}
