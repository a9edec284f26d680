//! The lifecycle event log: rows the triggers of migration 0006 write on
//! every change of a sandbox record (see `migrations/0006_events.sql`),
//! read here in order.

use std::str::FromStr;

use sqlx::Row;

use super::Store;
use crate::error::{Error, Result};
use crate::model::{EventKind, EventPage, ExitReason, SandboxEvent, SandboxId, Status};

fn corrupt(what: &str, value: &str) -> Error {
    Error::Store {
        reason: format!("corrupt event {what} {value:?}"),
        source: None,
    }
}

fn kind(s: &str) -> Result<EventKind> {
    Ok(match s {
        "created" => EventKind::Created,
        "status" => EventKind::Status,
        "renamed" => EventKind::Renamed,
        "removed" => EventKind::Removed,
        other => return Err(corrupt("kind", other)),
    })
}

fn status(s: Option<String>) -> Result<Option<Status>> {
    s.map(|s| Status::from_str(&s).map_err(|_| corrupt("status", &s)))
        .transpose()
}

impl Store {
    /// The events after `after`, oldest first, at most `limit`.
    pub(crate) async fn events(&self, after: u64, limit: usize) -> Result<EventPage> {
        let mut tx = self.pool.begin().await?;
        let log: String = sqlx::query_scalar("SELECT id FROM event_log LIMIT 1")
            .fetch_one(&mut *tx)
            .await?;
        let oldest: Option<i64> = sqlx::query_scalar("SELECT min(seq) FROM events")
            .fetch_one(&mut *tx)
            .await?;
        let rows = sqlx::query(
            "SELECT seq, at, sandbox_id, name, kind, status, previous, previous_name, generation, reason
             FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let events = rows
            .into_iter()
            .map(|r| {
                let id: String = r.try_get("sandbox_id")?;
                let reason: Option<String> = r.try_get("reason")?;
                Ok(SandboxEvent {
                    seq: r.try_get::<i64, _>("seq")? as u64,
                    at_ms: r.try_get("at")?,
                    id: SandboxId::from_str(&id).map_err(|_| corrupt("sandbox id", &id))?,
                    name: r.try_get("name")?,
                    kind: kind(r.try_get("kind")?)?,
                    status: status(r.try_get("status")?)?,
                    previous: status(r.try_get("previous")?)?,
                    previous_name: r.try_get("previous_name")?,
                    generation: r.try_get::<i64, _>("generation")? as u64,
                    reason: reason
                        .map(|s| ExitReason::parse(&s).ok_or_else(|| corrupt("reason", &s)))
                        .transpose()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(EventPage {
            log,
            events,
            oldest: oldest.map_or(after.saturating_add(1), |o| o as u64),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::paths::Home;
    use crate::engine::procs::ProcIdentity;
    use crate::model::SandboxConfig;

    fn summary(page: &EventPage) -> Vec<(EventKind, Option<Status>, Option<Status>)> {
        page.events
            .iter()
            .map(|e| (e.kind, e.previous, e.status))
            .collect()
    }

    #[tokio::test]
    async fn every_change_of_a_record_is_logged_in_order_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let store = Store::open(&home).await.unwrap();
        let empty = store.events(0, 100).await.unwrap();
        assert!(empty.events.is_empty());
        assert_eq!(empty.oldest, 1);

        let config = SandboxConfig::new("alpine");
        let id = SandboxId::new();
        store.insert(&id, "web", &config, true, None).await.unwrap();
        let generation = store
            .claim_start(&id, ProcIdentity::current(), None)
            .await
            .unwrap()
            .unwrap();
        assert!(store
            .set_running(&id, generation, &serde_json::Value::Null)
            .await
            .unwrap());
        assert!(store
            .finish_run(
                &id,
                generation,
                Status::Stopped,
                ExitReason::IdleTimeout,
                None
            )
            .await
            .unwrap());
        assert!(store.delete(&id).await.unwrap());

        let page = store.events(0, 100).await.unwrap();
        assert_eq!(
            summary(&page),
            vec![
                (EventKind::Created, None, Some(Status::Created)),
                (
                    EventKind::Status,
                    Some(Status::Created),
                    Some(Status::Starting)
                ),
                (
                    EventKind::Status,
                    Some(Status::Starting),
                    Some(Status::Running)
                ),
                (
                    EventKind::Status,
                    Some(Status::Running),
                    Some(Status::Stopped)
                ),
                (EventKind::Removed, Some(Status::Stopped), None),
            ]
        );
        assert!(page.events.iter().all(|e| e.id == id && e.name == "web"));
        let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        assert_eq!(page.events[3].reason, Some(ExitReason::IdleTimeout));
        assert_eq!(page.events[3].generation, generation);
        assert!(page.events.iter().take(3).all(|e| e.reason.is_none()));

        // Paging: after a position, at most `limit`; the log's identity
        // stays, and a new home has another.
        let rest = store.events(seqs[1], 2).await.unwrap();
        assert_eq!(rest.log, page.log);
        assert_eq!(
            rest.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            seqs[2..4]
        );
        let other = tempfile::tempdir().unwrap();
        let other = Store::open(&Home::at(other.path()).unwrap()).await.unwrap();
        assert_ne!(other.events(0, 1).await.unwrap().log, page.log);
    }

    #[tokio::test]
    async fn a_claimed_warm_sandbox_is_logged_as_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let store = Store::open(&home).await.unwrap();
        let config = SandboxConfig::new("alpine");
        let spec = crate::model::PoolSpec::new("p", config.clone(), 1);
        store.insert_pool(&spec).await.unwrap();
        let id = SandboxId::new();
        let warm = store.insert_warm(&id, "p", &config).await.unwrap();
        let generation = store
            .claim_start(&id, ProcIdentity::current(), None)
            .await
            .unwrap()
            .unwrap();
        store
            .set_running(&id, generation, &serde_json::Value::Null)
            .await
            .unwrap();
        let me = ProcIdentity::current();
        let got = store.reserve_warm("p", &config, true, me).await.unwrap();
        assert_eq!(got, Some(id.clone()));
        store.take_claimed(&id, "mine", me).await.unwrap();
        let page = store.events(0, 100).await.unwrap();
        let last = page.events.last().unwrap();
        assert_eq!(last.kind, EventKind::Renamed);
        assert_eq!(last.name, "mine");
        assert_eq!(last.previous_name.as_deref(), Some(warm.as_str()));
        assert_eq!(last.status, Some(Status::Running));
    }
}
