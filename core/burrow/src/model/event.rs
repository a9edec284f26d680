//! Lifecycle events: the changes of sandbox records, in the order a
//! backend made them ([`Backend::events`](crate::Backend::events)).

use serde::{Deserialize, Serialize};

use super::{ExitReason, SandboxId, Status};

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The record was made (its status: `created`).
    Created,
    /// Its status changed (from `previous` to `status`).
    Status,
    /// It took a new name (a warm pool sandbox claimed: `previous_name` is
    /// its warm name).
    Renamed,
    /// The record was removed (`previous`: its last status).
    Removed,
}

/// One change of one sandbox's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxEvent {
    /// Its position in the backend's log ([`EventPage::log`]): increasing,
    /// never reused within one log.
    pub seq: u64,
    /// When, in milliseconds since the epoch (the writer's clock).
    pub at_ms: i64,
    /// The sandbox.
    pub id: SandboxId,
    /// Its name after the change.
    pub name: String,
    /// What changed.
    pub kind: EventKind,
    /// The status after the change (`None` once removed).
    pub status: Option<Status>,
    /// The status before the change (status changes and removals).
    pub previous: Option<Status>,
    /// The name before a rename.
    pub previous_name: Option<String>,
    /// The runtime generation the change belongs to.
    pub generation: u64,
    /// Why a run ended (a change to `stopped` or `crashed`).
    pub reason: Option<ExitReason>,
}

/// Events read from a backend's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPage {
    /// Which log: a position is meaningful only in the log it was read
    /// from (a backend made again starts a new log at 1).
    pub log: String,
    /// The events after the asked position, oldest first.
    pub events: Vec<SandboxEvent>,
    /// The oldest position the log still holds (older events were
    /// trimmed): a reader behind it missed some.
    pub oldest: u64,
}
