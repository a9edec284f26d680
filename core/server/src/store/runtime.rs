//! Runtime state and request leases: the gateway's side of a target.

use sqlx::Row;

use super::{random_id, Result, RuntimeRow, RuntimeState, Store};

impl Store {
    /// The runtime row of a target, if it was ever called.
    pub async fn runtime(&self, id: &str) -> Result<Option<RuntimeRow>> {
        let row = sqlx::query(
            "SELECT state, generation, last_used_at, updated_at, owner, last_error \
             FROM runtime_state WHERE target_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(RuntimeRow {
                state: RuntimeState::parse(&r.try_get::<String, _>("state")?)?,
                generation: r.try_get("generation")?,
                last_used_at: r.try_get("last_used_at")?,
                updated_at: r.try_get("updated_at")?,
                owner: r.try_get("owner")?,
                last_error: r.try_get("last_error")?,
            })
        })
        .transpose()
    }

    /// The warm path: stamps `last_used_at` if the target is ready and
    /// returns its generation. A reclaim claim on the same row is
    /// serialised against this statement (row lock), so a row cannot be
    /// both stamped now and claimed as idle.
    pub async fn touch_if_ready(&self, id: &str, now: i64) -> Result<Option<i64>> {
        let row = sqlx::query(
            "UPDATE runtime_state SET last_used_at = $2 \
             WHERE target_id = $1 AND state = 'ready' RETURNING generation",
        )
        .bind(id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("generation")).transpose()?)
    }

    /// Claims the start of a target: creates its row as `starting`, or moves
    /// `dormant`/`failed`, a `starting` row last changed before
    /// `stale_before`, or the `ready` row of generation `stale_ready` (found
    /// not running) to `starting` with the next generation. One statement,
    /// one winner; `None` means someone else holds the row.
    pub async fn claim_start(
        &self,
        id: &str,
        me: &str,
        now: i64,
        stale_before: i64,
        stale_ready: Option<i64>,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(
            "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at, owner) \
             VALUES ($1, 'starting', 1, $2, $2, $3) \
             ON CONFLICT (target_id) DO UPDATE SET state = 'starting', prev_state = NULL, \
               generation = runtime_state.generation + 1, updated_at = $2, owner = $3, \
               last_error = NULL \
             WHERE runtime_state.state IN ('dormant', 'failed') \
               OR (runtime_state.state = 'starting' AND runtime_state.updated_at < $4) \
               OR (runtime_state.state = 'ready' AND runtime_state.generation = $5) \
             RETURNING generation",
        )
        .bind(id)
        .bind(now)
        .bind(me)
        .bind(stale_before)
        .bind(stale_ready.unwrap_or(-1))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get("generation")).transpose()?)
    }

    /// Ends the start of `generation`: `ready` on success, `failed` with
    /// the error otherwise. False if the row moved on meanwhile.
    pub async fn finish_start(
        &self,
        id: &str,
        generation: i64,
        now: i64,
        outcome: Result<(), String>,
    ) -> Result<bool> {
        let (state, error) = match outcome {
            Ok(()) => ("ready", None),
            Err(e) => ("failed", Some(e)),
        };
        let r = sqlx::query(
            "UPDATE runtime_state SET state = $3, last_used_at = $4, updated_at = $4, \
             owner = NULL, last_error = $5 \
             WHERE target_id = $1 AND generation = $2 AND state = 'starting'",
        )
        .bind(id)
        .bind(generation)
        .bind(state)
        .bind(now)
        .bind(error)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    /// A `ready` row whose sandbox turned out not to run: `dormant`.
    pub async fn mark_gone(&self, id: &str, generation: i64, now: i64) -> Result<()> {
        sqlx::query(
            "UPDATE runtime_state SET state = 'dormant', updated_at = $3 \
             WHERE target_id = $1 AND generation = $2 AND state = 'ready'",
        )
        .bind(id)
        .bind(generation)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // ---- leases ----

    /// Opens a lease on a target; returns its id.
    pub async fn open_lease(&self, target: &str, replica: &str, expires_at: i64) -> Result<String> {
        let id = random_id("ls_");
        sqlx::query(
            "INSERT INTO leases (id, target_id, replica, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(target)
        .bind(replica)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// Extends a lease.
    pub async fn heartbeat_lease(&self, lease: &str, expires_at: i64) -> Result<()> {
        sqlx::query("UPDATE leases SET expires_at = $2 WHERE id = $1")
            .bind(lease)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Closes a lease and stamps the target's `last_used_at`.
    pub async fn close_lease(&self, lease: &str, target: &str, now: i64) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE id = $1")
            .bind(lease)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "UPDATE runtime_state SET last_used_at = $2 \
             WHERE target_id = $1 AND last_used_at < $2",
        )
        .bind(target)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Deletes expired leases; returns how many.
    pub async fn sweep_leases(&self, now: i64) -> Result<u64> {
        let r = sqlx::query("DELETE FROM leases WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Live leases (for metrics).
    pub async fn live_leases(&self, now: i64) -> Result<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM leases WHERE expires_at >= $1")
            .bind(now)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("n")?)
    }
}
