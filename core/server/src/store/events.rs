//! Lifecycle events, webhooks and their outbox.
//!
//! One replica at a time copies the engine's event log into `events` (the
//! pump's turn: a transaction-scoped advisory lock taken by try-lock on
//! Postgres, this process's write turn on SQLite), giving each event the
//! next id and writing, in the same transaction, one delivery per webhook
//! of the event's tenant that wants its type. Any replica leases due
//! deliveries (`FOR UPDATE SKIP LOCKED` on Postgres), posts them, and
//! records the attempt; a lease that runs out makes a delivery due again,
//! so a delivery whose replica died is posted again (at least once).

use sqlx::Row;

use super::{json_list, lock_key, now_ms, random_id, DbKind, Result, Store, StoreError};

/// An event to append (its id is given by [`PumpTurn::append`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Its tenant.
    pub tenant: String,
    /// When it happened (ms since the epoch).
    pub at_ms: i64,
    /// Its type (`sandbox.running`, ...).
    pub kind: String,
    /// Its JSON object, without `id` (added here).
    pub body: serde_json::Map<String, serde_json::Value>,
}

/// A webhook as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Webhook {
    /// Its id (`wh_...`).
    pub id: String,
    /// Where events are posted.
    pub url: String,
    /// The event types it receives (empty: every type).
    pub types: Vec<String>,
    /// Creation time (ms since the epoch).
    pub created_at_ms: i64,
}

/// One attempt to post a delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryAttempt {
    /// 1, 2, ...
    pub attempt: u32,
    /// When it began (ms since the epoch).
    pub started_at_ms: i64,
    /// When it ended (none: cut short, its replica stopped while posting).
    pub ended_at_ms: Option<i64>,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did without an answer.
    pub error: Option<String>,
}

/// One event's delivery to one webhook, with its attempts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delivery {
    /// Its id: increasing (a page goes on after the last id it showed).
    pub id: i64,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// `pending`, `delivered` (a 2xx answer) or `failed` (attempts used up).
    pub state: String,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at_ms: Option<i64>,
    /// Creation time (ms since the epoch).
    pub created_at_ms: i64,
    /// When it was delivered or given up.
    pub done_at_ms: Option<i64>,
    /// Its attempts, oldest first.
    pub attempts: Vec<DeliveryAttempt>,
}

/// A delivery leased for posting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    /// Its id.
    pub id: i64,
    /// This attempt's number.
    pub attempt: u32,
    /// The webhook's URL.
    pub url: String,
    /// The webhook's secret.
    pub secret: String,
    /// The event's id.
    pub event_id: i64,
    /// The event's type.
    pub event_type: String,
    /// The event's JSON.
    pub body: String,
}

/// The pump's turn: one transaction, held by one replica at a time.
pub struct PumpTurn {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    _local: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for PumpTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PumpTurn").finish_non_exhaustive()
    }
}

/// Counters kept in `event_cursors` under names no engine log has.
const EVENT_IDS: &str = "_events";
const DELIVERY_IDS: &str = "_deliveries";

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

impl PumpTurn {
    async fn counter(&mut self, key: &str) -> Result<i64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT seq FROM event_cursors WHERE log = $1")
            .bind(key)
            .fetch_optional(&mut *self.tx)
            .await?;
        Ok(v.unwrap_or(0))
    }

    async fn set_counter(&mut self, key: &str, value: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO event_cursors (log, seq) VALUES ($1, $2) \
             ON CONFLICT (log) DO UPDATE SET seq = excluded.seq",
        )
        .bind(key)
        .bind(value)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// How far the engine's log `log` has been copied (0: not at all).
    pub async fn cursor(&mut self, log: &str) -> Result<u64> {
        Ok(u64::try_from(self.counter(log).await?).unwrap_or(0))
    }

    /// Records that `log` has been copied up to `seq`.
    pub async fn set_cursor(&mut self, log: &str, seq: u64) -> Result<()> {
        self.set_counter(log, i64::try_from(seq).unwrap_or(i64::MAX))
            .await
    }

    /// Appends `events` in order, each with the next id, and a delivery
    /// for each webhook of its tenant that takes its type. Returns how
    /// many deliveries were made.
    pub async fn append(&mut self, events: Vec<NewEvent>) -> Result<u64> {
        if events.is_empty() {
            return Ok(0);
        }
        let mut next_event = self.counter(EVENT_IDS).await?;
        let mut next_delivery = self.counter(DELIVERY_IDS).await?;
        let mut hooks: std::collections::HashMap<String, Vec<(String, Vec<String>)>> =
            Default::default();
        let now = now_ms();
        let mut made = 0;
        for e in events {
            next_event += 1;
            let mut body = e.body;
            body.insert("id".into(), next_event.to_string().into());
            let text = serde_json::Value::Object(body).to_string();
            sqlx::query(
                "INSERT INTO events (id, tenant, at, type, body) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(next_event)
            .bind(&e.tenant)
            .bind(e.at_ms)
            .bind(&e.kind)
            .bind(&text)
            .execute(&mut *self.tx)
            .await?;
            if !hooks.contains_key(&e.tenant) {
                let rows: Vec<(String, String)> =
                    sqlx::query_as("SELECT id, types FROM webhooks WHERE tenant = $1 ORDER BY id")
                        .bind(&e.tenant)
                        .fetch_all(&mut *self.tx)
                        .await?;
                let parsed = rows
                    .into_iter()
                    .map(|(id, types)| {
                        let types: Vec<String> = serde_json::from_str(&types)
                            .map_err(|e| corrupt("webhook types", e))?;
                        Ok((id, types))
                    })
                    .collect::<Result<Vec<_>>>()?;
                hooks.insert(e.tenant.clone(), parsed);
            }
            for (hook, types) in &hooks[&e.tenant] {
                if !types.is_empty() && !types.contains(&e.kind) {
                    continue;
                }
                next_delivery += 1;
                sqlx::query(
                    "INSERT INTO deliveries (id, webhook, event, state, next_at, created_at) \
                     VALUES ($1, $2, $3, 'pending', $4, $4)",
                )
                .bind(next_delivery)
                .bind(hook)
                .bind(next_event)
                .bind(now)
                .execute(&mut *self.tx)
                .await?;
                made += 1;
            }
        }
        self.set_counter(EVENT_IDS, next_event).await?;
        self.set_counter(DELIVERY_IDS, next_delivery).await?;
        Ok(made)
    }

    /// Every sandbox as the last listing saw it: (id, name, status,
    /// generation).
    pub async fn seen(&mut self) -> Result<Vec<SeenRow>> {
        Ok(
            sqlx::query_as("SELECT id, name, status, generation FROM event_states")
                .fetch_all(&mut *self.tx)
                .await?,
        )
    }

    /// Records sandboxes as a listing saw them (new or changed).
    pub async fn note_seen(&mut self, rows: &[SeenRow]) -> Result<()> {
        for (id, name, status, generation) in rows {
            sqlx::query(
                "INSERT INTO event_states (id, name, status, generation) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, status = excluded.status, \
                 generation = excluded.generation",
            )
            .bind(id)
            .bind(name)
            .bind(status)
            .bind(generation)
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }

    /// Forgets sandboxes a listing no longer shows.
    pub async fn forget_seen(&mut self, ids: &[String]) -> Result<()> {
        for id in ids {
            sqlx::query("DELETE FROM event_states WHERE id = $1")
                .bind(id)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    /// Commits what was appended and the cursor together.
    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// A row of `delivery_attempts`: attempt, started, ended, status, error.
type AttemptRow = (i32, i64, Option<i64>, Option<i32>, Option<String>);

/// A row of `event_states`: id, name, status, generation.
pub type SeenRow = (String, String, String, i64);

/// A row of `events` as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// Its id.
    pub id: i64,
    /// Its type (`sandbox.running`, ...).
    pub kind: String,
    /// Its JSON.
    pub body: String,
}

impl Store {
    /// The pump's turn, if no other replica holds it.
    pub async fn pump_turn(&self) -> Result<Option<PumpTurn>> {
        let local = match self.kind {
            DbKind::Sqlite => Some(self.sqlite_writer.clone().lock_owned().await),
            DbKind::Postgres => None,
        };
        let mut tx = self.pool.begin().await?;
        if self.kind == DbKind::Postgres {
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                .bind(lock_key("events:pump"))
                .fetch_one(&mut *tx)
                .await?;
            if !got {
                return Ok(None);
            }
        }
        Ok(Some(PumpTurn { tx, _local: local }))
    }

    /// Up to `limit` events after id `after`, oldest first, of `tenant`
    /// (`None`: every tenant's).
    pub async fn events_after(
        &self,
        tenant: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT id, type, body FROM events WHERE id > $1 AND ($2 = '' OR tenant = $2) \
             ORDER BY id LIMIT $3",
        )
        .bind(after)
        .bind(tenant.unwrap_or(""))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, kind, body)| EventRow { id, kind, body })
            .collect())
    }

    /// The last event id given (0: none yet).
    pub async fn last_event_id(&self) -> Result<i64> {
        let v: Option<i64> = sqlx::query_scalar("SELECT seq FROM event_cursors WHERE log = $1")
            .bind(EVENT_IDS)
            .fetch_optional(&self.pool)
            .await?;
        Ok(v.unwrap_or(0))
    }

    /// Drops events older than `before` (but those a delivery still
    /// waits on) and finished deliveries made before it.
    pub async fn prune_events(&self, before: i64) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM deliveries WHERE state <> 'pending' AND created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "DELETE FROM events WHERE at < $1 AND NOT EXISTS \
             (SELECT 1 FROM deliveries d WHERE d.event = events.id AND d.state = 'pending')",
        )
        .bind(before)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Adds a webhook of `tenant`; returns it.
    pub async fn create_webhook(
        &self,
        tenant: &str,
        url: &str,
        types: &[String],
        secret: &str,
    ) -> Result<Webhook> {
        let _turn = self.write_turn().await;
        let hook = Webhook {
            id: random_id("wh_"),
            url: url.to_owned(),
            types: types.to_vec(),
            created_at_ms: now_ms(),
        };
        sqlx::query(
            "INSERT INTO webhooks (id, tenant, url, secret, types, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&hook.id)
        .bind(tenant)
        .bind(url)
        .bind(secret)
        .bind(json_list(types))
        .bind(hook.created_at_ms)
        .execute(&self.pool)
        .await?;
        Ok(hook)
    }

    /// The webhooks of `tenant`, oldest first.
    pub async fn webhooks(&self, tenant: &str) -> Result<Vec<Webhook>> {
        let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
            "SELECT id, url, types, created_at FROM webhooks WHERE tenant = $1 \
             ORDER BY created_at, id",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, url, types, created_at_ms)| {
                Ok(Webhook {
                    id,
                    url,
                    types: serde_json::from_str(&types).map_err(|e| corrupt("webhook types", e))?,
                    created_at_ms,
                })
            })
            .collect()
    }

    /// One webhook of `tenant` (`None`: no such webhook in the tenant).
    pub async fn webhook(&self, tenant: &str, id: &str) -> Result<Option<Webhook>> {
        Ok(self
            .webhooks(tenant)
            .await?
            .into_iter()
            .find(|w| w.id == id))
    }

    /// Removes a webhook of `tenant` and its deliveries; false if there
    /// was none.
    pub async fn remove_webhook(&self, tenant: &str, id: &str) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM webhooks WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(tenant)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Up to `limit` deliveries of webhook `id` after delivery id `after`,
    /// oldest first, with their attempts.
    pub async fn deliveries(&self, id: &str, after: i64, limit: u32) -> Result<Vec<Delivery>> {
        let rows = sqlx::query(
            "SELECT d.id, d.event, e.type, d.state, d.next_at, d.created_at, d.done_at \
             FROM deliveries d JOIN events e ON e.id = d.event \
             WHERE d.webhook = $1 AND d.id > $2 ORDER BY d.id LIMIT $3",
        )
        .bind(id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let id: i64 = r.try_get("id")?;
            let state: String = r.try_get("state")?;
            let attempts: Vec<AttemptRow> = sqlx::query_as(
                "SELECT attempt, started_at, ended_at, status, error FROM delivery_attempts \
                     WHERE delivery = $1 ORDER BY attempt",
            )
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
            let event: i64 = r.try_get("event")?;
            out.push(Delivery {
                id,
                event_id: event.to_string(),
                event_type: r.try_get("type")?,
                next_attempt_at_ms: (state == "pending")
                    .then(|| r.try_get("next_at"))
                    .transpose()?,
                state,
                created_at_ms: r.try_get("created_at")?,
                done_at_ms: r.try_get("done_at")?,
                attempts: attempts
                    .into_iter()
                    .map(|(attempt, started, ended, status, error)| DeliveryAttempt {
                        attempt: u32::try_from(attempt).unwrap_or(0),
                        started_at_ms: started,
                        ended_at_ms: ended,
                        status: status.and_then(|s| u16::try_from(s).ok()),
                        error,
                    })
                    .collect(),
            });
        }
        Ok(out)
    }

    /// Leases up to `limit` due deliveries until `lease_until`, counting
    /// an attempt of each (recorded as begun).
    pub async fn lease_deliveries(&self, limit: u32, lease_until: i64) -> Result<Vec<DueDelivery>> {
        let now = now_ms();
        let _turn = self.write_turn().await;
        let lock = match self.kind {
            DbKind::Postgres => "FOR UPDATE SKIP LOCKED",
            DbKind::Sqlite => "",
        };
        let mut tx = self.pool.begin().await?;
        let leased: Vec<(i64, i32)> = sqlx::query_as(&format!(
            "UPDATE deliveries SET leased_until = $1, attempts = attempts + 1 \
             WHERE id IN (SELECT id FROM deliveries WHERE state = 'pending' AND next_at <= $2 \
               AND (leased_until IS NULL OR leased_until < $2) ORDER BY next_at, id LIMIT $3 {lock}) \
             RETURNING id, attempts"
        ))
        .bind(lease_until)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        let mut due = Vec::with_capacity(leased.len());
        for (id, attempt) in leased {
            sqlx::query(
                "INSERT INTO delivery_attempts (delivery, attempt, started_at) VALUES ($1, $2, $3)",
            )
            .bind(id)
            .bind(attempt)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let row: (String, String, i64, String, String) = sqlx::query_as(
                "SELECT w.url, w.secret, e.id, e.type, e.body FROM deliveries d \
                 JOIN webhooks w ON w.id = d.webhook JOIN events e ON e.id = d.event \
                 WHERE d.id = $1",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
            due.push(DueDelivery {
                id,
                attempt: u32::try_from(attempt).unwrap_or(0),
                url: row.0,
                secret: row.1,
                event_id: row.2,
                event_type: row.3,
                body: row.4,
            });
        }
        tx.commit().await?;
        Ok(due)
    }

    /// Records how attempt `attempt` of delivery `id` ended (`status`: the
    /// receiver's answer; `error`: why there was none) and what follows:
    /// `Done(delivered)` or a retry at `next_at`. An attempt whose lease
    /// was taken over meanwhile records only itself.
    pub async fn finish_delivery(
        &self,
        id: i64,
        attempt: u32,
        status: Option<u16>,
        error: Option<&str>,
        next: DeliveryNext,
    ) -> Result<()> {
        let now = now_ms();
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE delivery_attempts SET ended_at = $1, status = $2, error = $3 \
             WHERE delivery = $4 AND attempt = $5",
        )
        .bind(now)
        .bind(status.map(i32::from))
        .bind(error)
        .bind(id)
        .bind(i64::from(attempt))
        .execute(&mut *tx)
        .await?;
        let (state, next_at, done_at) = match next {
            DeliveryNext::Delivered => ("delivered", now, Some(now)),
            DeliveryNext::GiveUp => ("failed", now, Some(now)),
            DeliveryNext::RetryAt(at) => ("pending", at, None),
        };
        sqlx::query(
            "UPDATE deliveries SET state = $1, next_at = $2, done_at = $3, leased_until = NULL \
             WHERE id = $4 AND attempts = $5 AND state = 'pending'",
        )
        .bind(state)
        .bind(next_at)
        .bind(done_at)
        .bind(id)
        .bind(i64::from(attempt))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryNext {
    /// The receiver took it (2xx).
    Delivered,
    /// Attempts are used up.
    GiveUp,
    /// Try again at this time (ms since the epoch).
    RetryAt(i64),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testutil::sqlite;
    use super::*;

    fn event(tenant: &str, kind: &str) -> NewEvent {
        let mut body = serde_json::Map::new();
        body.insert("type".into(), kind.into());
        NewEvent {
            tenant: tenant.into(),
            at_ms: now_ms(),
            kind: kind.into(),
            body,
        }
    }

    #[tokio::test]
    async fn the_pump_appends_in_order_and_makes_the_outbox() {
        let (_dir, s) = sqlite().await;
        let all = s
            .create_webhook("a", "http://127.0.0.1:9/", &[], "secretsecret1234")
            .await
            .unwrap();
        let only = s
            .create_webhook(
                "a",
                "http://127.0.0.1:9/x",
                &["sandbox.removed".into()],
                "secretsecret1234",
            )
            .await
            .unwrap();
        let mut turn = s.pump_turn().await.unwrap().unwrap();
        assert_eq!(turn.cursor("log1").await.unwrap(), 0);
        let made = turn
            .append(vec![
                event("a", "sandbox.created"),
                event("b", "sandbox.created"),
                event("a", "sandbox.removed"),
            ])
            .await
            .unwrap();
        // `all` takes both of a's; `only` its removal; b has no webhook.
        assert_eq!(made, 3);
        turn.set_cursor("log1", 42).await.unwrap();
        turn.commit().await.unwrap();
        let mut turn = s.pump_turn().await.unwrap().unwrap();
        assert_eq!(turn.cursor("log1").await.unwrap(), 42);
        drop(turn);

        let a = s.events_after(Some("a"), 0, 10).await.unwrap();
        assert_eq!(a.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(a[1].kind, "sandbox.removed");
        let body: serde_json::Value = serde_json::from_str(&a[1].body).unwrap();
        assert_eq!(body["id"], "3");
        assert_eq!(s.events_after(None, 1, 10).await.unwrap().len(), 2);
        assert_eq!(s.last_event_id().await.unwrap(), 3);

        // Leased once until the lease runs out; an attempt is recorded.
        let due = s.lease_deliveries(16, now_ms() + 60_000).await.unwrap();
        assert_eq!(due.len(), 3);
        assert!(s
            .lease_deliveries(16, now_ms() + 60_000)
            .await
            .unwrap()
            .is_empty());
        let first = due.iter().find(|d| d.url.ends_with(":9/")).unwrap();
        assert_eq!((first.attempt, first.event_id), (1, 1));
        s.finish_delivery(first.id, 1, Some(500), None, DeliveryNext::RetryAt(0))
            .await
            .unwrap();
        let again = s.lease_deliveries(16, now_ms() + 60_000).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].id, again[0].attempt), (first.id, 2));
        // A stale attempt's end records itself only.
        s.finish_delivery(first.id, 1, Some(200), None, DeliveryNext::Delivered)
            .await
            .unwrap();
        let log = s.deliveries(&all.id, 0, 10).await.unwrap();
        assert_eq!(log[0].state, "pending");
        s.finish_delivery(first.id, 2, Some(200), None, DeliveryNext::Delivered)
            .await
            .unwrap();
        let log = s.deliveries(&all.id, 0, 10).await.unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].state, "delivered");
        assert_eq!(log[0].event_type, "sandbox.created");
        let statuses: Vec<_> = log[0].attempts.iter().map(|a| a.status).collect();
        assert_eq!(statuses, [Some(200), Some(200)]);
        // A lapsed lease makes a delivery due again (its replica died).
        sqlx::query("UPDATE deliveries SET leased_until = 1 WHERE state = 'pending'")
            .execute(s.pool())
            .await
            .unwrap();
        let retaken = s.lease_deliveries(16, now_ms() + 60_000).await.unwrap();
        assert_eq!(retaken.len(), 2);
        assert!(retaken.iter().all(|d| d.attempt == 2));
        let cut = s.deliveries(&only.id, 0, 10).await.unwrap();
        assert_eq!(cut[0].attempts[0].ended_at_ms, None);

        // Pruning keeps what a pending delivery waits on.
        s.prune_events(now_ms() + 1).await.unwrap();
        let left = s.events_after(None, 0, 10).await.unwrap();
        assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
        // Ids are never reused after a prune.
        let mut turn = s.pump_turn().await.unwrap().unwrap();
        turn.append(vec![event("b", "sandbox.created")])
            .await
            .unwrap();
        turn.commit().await.unwrap();
        assert_eq!(s.last_event_id().await.unwrap(), 4);
        // Removing a webhook takes its deliveries.
        assert!(s.remove_webhook("a", &only.id).await.unwrap());
        assert!(!s.remove_webhook("b", &all.id).await.unwrap());
        assert!(s.deliveries(&only.id, 0, 10).await.unwrap().is_empty());
    }
}
