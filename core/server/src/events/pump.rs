//! The pump: copies the engine's event log into the server's `events`
//! table, one replica at a time, and makes the webhooks' deliveries in the
//! same transaction (so an event is delivered if and only if it was
//! stored, whichever replica dies when).

use std::sync::Arc;
use std::time::Duration;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use burrow::{ErrorCode, EventKind, ListFilter, SandboxEvent, SandboxId, Status};

use crate::app::AppState;
use crate::store::{now_ms, SeenRow, StoreError};

/// Engine events read per turn.
const BATCH: usize = 500;

/// How often each replica tries the pump's turn.
pub const POLL: Duration = Duration::from_millis(200);

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    /// The server's database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine.
    #[error(transparent)]
    Engine(#[from] burrow::Error),
}

/// Copies what the engine logged since the last turn (at most [`BATCH`]
/// events). Returns how many engine events were read (0 also when another
/// replica holds the turn). An engine without a log
/// (`unsupported`) is [`PumpError::Engine`] with that code.
pub async fn turn(state: &AppState) -> Result<usize, PumpError> {
    let Some(mut turn) = state.store.pump_turn().await? else {
        return Ok(0);
    };
    // Which log the engine keeps now (a home made again has a new one).
    let log = state.engine.events(u64::MAX, 0).await?.log;
    let after = turn.cursor(&log).await?;
    let page = state.engine.events(after, BATCH).await?;
    if page.log != log {
        // Changed between the two reads: the next turn starts over.
        return Ok(0);
    }
    if page.oldest > after.saturating_add(1) && after > 0 {
        tracing::warn!(
            missed = page.oldest - after - 1,
            "the engine's event log was trimmed past what was copied: some events are lost"
        );
    }
    let read = page.events.len();
    let Some(last) = page.events.last().map(|e| e.seq) else {
        return Ok(0);
    };
    let events = page.events.iter().filter_map(super::event_of).collect();
    let made = turn.append(events).await?;
    turn.set_cursor(&log, last).await?;
    turn.commit().await?;
    state.wakers.events.notify_waiters();
    if made > 0 {
        state.wakers.deliveries.notify_waiters();
    }
    Ok(read)
}

/// For an engine without an event log (the Kubernetes backend): lists
/// every sandbox and compares the listing with the last one (kept in the
/// database), each difference an event: a new sandbox is
/// `sandbox.created` (with the status it has), a changed status or name
/// a change, a sandbox gone `sandbox.removed`. A status that came and
/// went between two listings is not seen.
pub async fn diff_turn(state: &AppState) -> Result<(), PumpError> {
    let Some(mut turn) = state.store.pump_turn().await? else {
        return Ok(());
    };
    let listed = state.engine.list(&ListFilter::default()).await?;
    let seen: HashMap<String, SeenRow> = turn
        .seen()
        .await?
        .into_iter()
        .map(|r| (r.0.clone(), r))
        .collect();
    let now = now_ms();
    let mut events = Vec::new();
    let mut changed = Vec::new();
    let mut listed_ids = HashSet::new();
    for info in &listed {
        listed_ids.insert(info.id.as_str().to_owned());
        let row: SeenRow = (
            info.id.as_str().to_owned(),
            info.name.clone(),
            info.status.as_str().to_owned(),
            i64::try_from(info.generation).unwrap_or(i64::MAX),
        );
        let base = SandboxEvent {
            seq: 0,
            at_ms: now,
            id: info.id.clone(),
            name: info.name.clone(),
            kind: EventKind::Created,
            status: Some(info.status),
            previous: None,
            previous_name: None,
            generation: info.generation,
            reason: None,
        };
        match seen.get(info.id.as_str()) {
            None => events.push(base),
            Some(old) if *old == row => continue,
            Some((_, name, status, _)) => {
                let previous = Status::from_str(status).ok();
                if *name != info.name {
                    events.push(SandboxEvent {
                        kind: EventKind::Renamed,
                        previous_name: Some(name.clone()),
                        ..base.clone()
                    });
                }
                if previous != Some(info.status) {
                    let ended = !info.status.has_runtime() && info.status != Status::Created;
                    events.push(SandboxEvent {
                        kind: EventKind::Status,
                        previous,
                        reason: info
                            .last_run
                            .as_ref()
                            .filter(|_| ended)
                            .and_then(|r| r.exit_reason),
                        ..base
                    });
                }
            }
        }
        changed.push(row);
    }
    let mut gone = Vec::new();
    for (id, name, status, generation) in seen.values() {
        if listed_ids.contains(id) {
            continue;
        }
        let Ok(sid) = SandboxId::from_str(id) else {
            continue;
        };
        events.push(SandboxEvent {
            seq: 0,
            at_ms: now,
            id: sid,
            name: name.clone(),
            kind: EventKind::Removed,
            status: None,
            previous: Status::from_str(status).ok(),
            previous_name: None,
            generation: u64::try_from(*generation).unwrap_or(0),
            reason: None,
        });
        gone.push(id.clone());
    }
    if events.is_empty() {
        return Ok(());
    }
    let made = turn
        .append(events.iter().filter_map(super::event_of).collect())
        .await?;
    turn.note_seen(&changed).await?;
    turn.forget_seen(&gone).await?;
    turn.commit().await?;
    state.wakers.events.notify_waiters();
    if made > 0 {
        state.wakers.deliveries.notify_waiters();
    }
    Ok(())
}

/// How often the pump lists an engine without an event log.
pub const DIFF_POLL: Duration = Duration::from_secs(1);

/// Runs turns until the server shuts down: at once while there is a
/// backlog, every [`POLL`] otherwise. An engine without an event log
/// (`unsupported`) is listed every [`DIFF_POLL`] instead (said once).
pub async fn run(state: Arc<AppState>) {
    let mut shutdown = state.shutdown.subscribe();
    let mut diff = false;
    loop {
        let every = if diff {
            if let Err(e) = diff_turn(&state).await {
                tracing::warn!(error = %e, "listing sandboxes for lifecycle events failed");
            }
            DIFF_POLL
        } else {
            match turn(&state).await {
                Ok(n) if n == BATCH => continue,
                Ok(_) => {}
                Err(PumpError::Engine(e)) if e.code() == ErrorCode::Unsupported => {
                    tracing::info!(
                        "the backend keeps no event log: lifecycle events come from listing its \
                         sandboxes every {} ms (a status shorter than that may not be seen)",
                        DIFF_POLL.as_millis()
                    );
                    diff = true;
                    continue;
                }
                Err(e) => tracing::warn!(error = %e, "copying lifecycle events failed"),
            }
            POLL
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
