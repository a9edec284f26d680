//! Lifecycle events, per tenant: every change of a sandbox record the
//! engine logs ([`burrow::Backend::events`]), copied into the server's
//! `events` table by one replica at a time ([`pump`]), served as a
//! resumable NDJSON or SSE stream (`GET /v1/events`, [`api`]), and posted
//! to the tenant's webhooks, signed, with retries ([`deliver`]).
//!
//! An event (the JSON of the stream and of a webhook's body):
//!
//! ```json
//! {"id": "42", "type": "sandbox.running", "at_ms": 1765000000000,
//!  "tenant": "default", "sandbox": {"id": "sb_...", "name": "web"},
//!  "status": "running", "previous": "starting", "generation": 1}
//! ```
//!
//! `type` is `sandbox.created`, `sandbox.removed`, or `sandbox.<status>`
//! for a change of status (`reason` says why a run ended). A warm pool
//! sandbox is the pool's until claimed: its claim is its tenant's
//! `sandbox.created` (status `running`).

pub mod api;
pub mod deliver;
pub mod pump;
pub mod webhooks;

use burrow::model::split_scope;
use burrow::{EventKind, SandboxEvent, Status};
use serde_json::{Map, Value};

use crate::store::NewEvent;
use crate::tenancy::DEFAULT_TENANT;

/// The scope of warm pool sandboxes' names (`pool/<pool>/<id>`).
const WARM_SCOPE: &str = "pool";

/// Every event type, as a webhook's filter names them.
pub fn event_types() -> Vec<String> {
    let mut types = vec!["sandbox.created".to_owned(), "sandbox.removed".to_owned()];
    types.extend(
        Status::ALL
            .iter()
            .map(|s| format!("sandbox.{}", s.as_str())),
    );
    types
}

/// The tenant of an engine name and the name it sees (`None`: a warm pool
/// sandbox, nobody's yet).
fn owner_of(name: &str) -> Option<(&str, &str)> {
    match split_scope(name) {
        (Some(WARM_SCOPE), _) => None,
        (Some(scope), base) => Some((scope, base)),
        (None, base) => Some((DEFAULT_TENANT, base)),
    }
}

/// The tenant's event for an engine event (`None`: nobody's, or nothing a
/// tenant sees, such as a warm sandbox being made).
pub fn event_of(e: &SandboxEvent) -> Option<NewEvent> {
    let (tenant, name) = owner_of(&e.name)?;
    let claimed = e.kind == EventKind::Renamed
        && e.previous_name
            .as_deref()
            .is_some_and(|p| owner_of(p).is_none());
    let kind = match e.kind {
        EventKind::Created => "sandbox.created".to_owned(),
        EventKind::Removed => "sandbox.removed".to_owned(),
        EventKind::Renamed if claimed => "sandbox.created".to_owned(),
        // No other rename exists today; if one comes, its status is news
        // enough.
        EventKind::Renamed | EventKind::Status => {
            format!("sandbox.{}", e.status?.as_str())
        }
    };
    let mut body = Map::new();
    body.insert("type".into(), kind.clone().into());
    body.insert("at_ms".into(), e.at_ms.into());
    body.insert("tenant".into(), tenant.into());
    let mut sandbox = Map::new();
    sandbox.insert("id".into(), e.id.as_str().into());
    sandbox.insert("name".into(), name.into());
    body.insert("sandbox".into(), Value::Object(sandbox));
    if let Some(s) = e.status {
        body.insert("status".into(), s.as_str().into());
    }
    if let (Some(p), false) = (e.previous, claimed) {
        body.insert("previous".into(), p.as_str().into());
    }
    body.insert("generation".into(), e.generation.into());
    if let Some(r) = e.reason {
        body.insert("reason".into(), r.as_str().into());
    }
    Some(NewEvent {
        tenant: tenant.to_owned(),
        at_ms: e.at_ms,
        kind,
        body,
    })
}

/// Wakes the followers of `GET /v1/events` and the deliverer of this
/// replica when the pump has appended.
#[derive(Debug, Default)]
pub struct Wakers {
    /// Appended events.
    pub events: tokio::sync::Notify,
    /// Made deliveries.
    pub deliveries: tokio::sync::Notify,
}

#[cfg(test)]
mod tests {
    use super::*;
    use burrow::{ExitReason, SandboxId};

    fn engine_event(name: &str, kind: EventKind) -> SandboxEvent {
        SandboxEvent {
            seq: 1,
            at_ms: 7,
            id: SandboxId::new(),
            name: name.into(),
            kind,
            status: Some(Status::Stopped),
            previous: Some(Status::Running),
            previous_name: None,
            generation: 2,
            reason: Some(ExitReason::IdleTimeout),
        }
    }

    #[test]
    fn engine_events_become_their_tenants_events() {
        let e = event_of(&engine_event("alpha/web", EventKind::Status)).unwrap();
        assert_eq!(e.tenant, "alpha");
        assert_eq!(e.kind, "sandbox.stopped");
        assert_eq!(e.body["sandbox"]["name"], "web");
        assert_eq!(e.body["reason"], "idle_timeout");
        assert_eq!(e.body["previous"], "running");
        let e = event_of(&engine_event("web", EventKind::Removed)).unwrap();
        assert_eq!(
            (e.tenant.as_str(), e.kind.as_str()),
            ("default", "sandbox.removed")
        );
        // A warm sandbox is nobody's until its claim, which creates it.
        assert_eq!(format!("{WARM_SCOPE}/"), burrow::model::WARM_NAME_PREFIX);
        assert!(event_of(&engine_event("pool/alpha/p/sb_x", EventKind::Status)).is_none());
        let mut claim = engine_event("alpha/mine", EventKind::Renamed);
        claim.status = Some(Status::Running);
        claim.previous = None;
        claim.previous_name = Some("pool/alpha/p/sb_x".into());
        let e = event_of(&claim).unwrap();
        assert_eq!(
            (e.tenant.as_str(), e.kind.as_str()),
            ("alpha", "sandbox.created")
        );
        assert_eq!(e.body["status"], "running");
        assert!(!event_types().contains(&"sandbox.hibernated".to_owned()));
        assert!(event_types().contains(&"sandbox.crashed".to_owned()));
    }
}
