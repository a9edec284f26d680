//! Runtime state and request leases: the gateway's side of a target.
//!
//! The warm path of a call is two statements: [`Store::open_call`] (lease,
//! stamp, target version) and [`Store::close_lease`] (lease gone, stamp).

use sqlx::Row;

use super::{random_id, DbKind, Result, RuntimeRow, RuntimeState, Store};

/// What [`Store::open_call`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOpen {
    /// The lease opened for the call.
    pub lease: String,
    /// The target's version (its `updated_at`, see [`Store::put_target`]).
    pub target_version: i64,
    /// The generation stamped, if the target is `ready`.
    pub ready: Option<i64>,
}

/// A target as `burrow serve status` shows it.
#[derive(Debug, Clone)]
pub struct TargetStatus {
    /// The target.
    pub target: super::Target,
    /// Its runtime state; `None` until the first gateway call.
    pub runtime: Option<RuntimeRow>,
    /// Gateway calls in flight (leases not expired).
    pub live_leases: i64,
}

fn runtime_from_row(r: &sqlx::any::AnyRow) -> Result<RuntimeRow> {
    Ok(RuntimeRow {
        state: RuntimeState::parse(&r.try_get::<String, _>("state")?)?,
        generation: r.try_get("generation")?,
        last_used_at: r.try_get("last_used_at")?,
        updated_at: r.try_get("runtime_updated_at")?,
        owner: r.try_get("owner")?,
        last_error: r.try_get("last_error")?,
    })
}

impl Store {
    /// The runtime row of a target, if it was ever called.
    pub async fn runtime(&self, id: &str) -> Result<Option<RuntimeRow>> {
        let row = sqlx::query(
            "SELECT state, generation, last_used_at, updated_at AS runtime_updated_at, owner, \
             last_error FROM runtime_state WHERE target_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| runtime_from_row(&r)).transpose()
    }

    /// Every target with its runtime row (none if never called) and its
    /// live leases at `now`, oldest target first: what `burrow serve
    /// status` prints. One statement.
    pub async fn status(&self, now: i64) -> Result<Vec<TargetStatus>> {
        let rows = sqlx::query(
            "SELECT t.id, t.kind, t.port, t.url, t.metadata, t.credentials, t.command, \
                    t.created_at, t.tenant, r.state, r.generation, r.last_used_at, \
                    r.updated_at AS runtime_updated_at, r.owner, r.last_error, \
                    (SELECT COUNT(*) FROM leases l \
                     WHERE l.target_id = t.id AND l.expires_at >= $1) AS live_leases \
             FROM targets t LEFT JOIN runtime_state r ON r.target_id = t.id \
             ORDER BY t.created_at, t.id",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let state: Option<String> = r.try_get("state")?;
                Ok(TargetStatus {
                    target: super::targets::target_from_row(r)?,
                    runtime: state.map(|_| runtime_from_row(r)).transpose()?,
                    live_leases: r.try_get("live_leases")?,
                })
            })
            .collect()
    }

    /// The warm path: stamps `last_used_at` if the target is ready and
    /// returns its generation. A reclaim claim on the same row is
    /// serialised against this statement (row lock), so a row cannot be
    /// both stamped now and claimed as idle.
    pub async fn touch_if_ready(&self, id: &str, now: i64) -> Result<Option<i64>> {
        let _turn = self.write_turn().await;
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
        let _turn = self.write_turn().await;
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
        let _turn = self.write_turn().await;
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
        let _turn = self.write_turn().await;
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

    /// The start of a gateway call, in one statement on Postgres (one
    /// transaction on SQLite): opens a lease on `target` expiring at
    /// `expires_at`, stamps `last_used_at = now` if the target is ready
    /// (as [`Store::touch_if_ready`], never moving it back), and reads the
    /// target's version.
    /// `None` if there is no such target (and then no lease is opened).
    ///
    /// The lease and the stamp commit together; a reclaim claim on the same
    /// row is serialised against the stamp (row lock) and re-checks both,
    /// so a row cannot be both used and claimed as idle.
    pub async fn open_call(
        &self,
        target: &str,
        replica: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<Option<LeaseOpen>> {
        let _turn = self.write_turn().await;
        let lease = random_id("ls_");
        let found = match self.kind {
            DbKind::Postgres => {
                let row = sqlx::query(
                    "WITH t AS (SELECT id, updated_at FROM targets WHERE id = $2), \
                     opened AS (INSERT INTO leases (id, target_id, replica, expires_at) \
                                SELECT $1, t.id, $3, $4 FROM t), \
                     touched AS (UPDATE runtime_state \
                                 SET last_used_at = GREATEST(last_used_at, $5) \
                                 WHERE target_id = $2 AND state = 'ready' \
                                 RETURNING generation) \
                     SELECT t.updated_at AS version, \
                            (SELECT generation FROM touched) AS generation \
                     FROM t",
                )
                .bind(&lease)
                .bind(target)
                .bind(replica)
                .bind(expires_at)
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|r| -> Result<(i64, Option<i64>)> {
                    Ok((r.try_get("version")?, r.try_get("generation")?))
                })
                .transpose()?
            }
            DbKind::Sqlite => {
                // Writes first: the transaction takes the write lock at its
                // first statement (waiting for it rather than failing).
                let mut tx = self.pool.begin().await?;
                let version = sqlx::query(
                    "INSERT INTO leases (id, target_id, replica, expires_at) \
                     SELECT $1, id, $3, $4 FROM targets WHERE id = $2 \
                     RETURNING (SELECT updated_at FROM targets WHERE id = $2) AS version",
                )
                .bind(&lease)
                .bind(target)
                .bind(replica)
                .bind(expires_at)
                .fetch_optional(&mut *tx)
                .await?;
                match version {
                    None => None,
                    Some(v) => {
                        let generation = sqlx::query(
                            "UPDATE runtime_state SET last_used_at = MAX(last_used_at, $2) \
                             WHERE target_id = $1 AND state = 'ready' RETURNING generation",
                        )
                        .bind(target)
                        .bind(now)
                        .fetch_optional(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        Some((
                            v.try_get("version")?,
                            generation.map(|r| r.try_get("generation")).transpose()?,
                        ))
                    }
                }
            }
        };
        Ok(found.map(|(target_version, ready)| LeaseOpen {
            lease,
            target_version,
            ready,
        }))
    }

    /// Opens a lease on a target; returns its id.
    pub async fn open_lease(&self, target: &str, replica: &str, expires_at: i64) -> Result<String> {
        let _turn = self.write_turn().await;
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
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE leases SET expires_at = $2 WHERE id = $1")
            .bind(lease)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Closes a lease and stamps the target's `last_used_at`, atomically:
    /// one statement on Postgres, one transaction on SQLite (so a reclaim
    /// never sees the lease gone and the stamp not yet there).
    pub async fn close_lease(&self, lease: &str, target: &str, now: i64) -> Result<()> {
        let _turn = self.write_turn().await;
        match self.kind {
            DbKind::Postgres => {
                sqlx::query(
                    "WITH closed AS (DELETE FROM leases WHERE id = $1) \
                     UPDATE runtime_state SET last_used_at = $3 \
                     WHERE target_id = $2 AND last_used_at < $3",
                )
                .bind(lease)
                .bind(target)
                .bind(now)
                .execute(&self.pool)
                .await?;
            }
            DbKind::Sqlite => {
                let mut tx = self.pool.begin().await?;
                sqlx::query("DELETE FROM leases WHERE id = $1")
                    .bind(lease)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "UPDATE runtime_state SET last_used_at = $2 \
                     WHERE target_id = $1 AND last_used_at < $2",
                )
                .bind(target)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// Deletes expired leases; returns how many.
    pub async fn sweep_leases(&self, now: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM leases WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Live leases of one target: its gateway calls in flight.
    pub async fn target_leases(&self, target: &str, now: i64) -> Result<i64> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM leases WHERE target_id = $1 AND expires_at >= $2",
        )
        .bind(target)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("n")?)
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

#[cfg(test)]
mod tests {
    use crate::store::testutil::{sqlite, target};
    use crate::store::RuntimeState;

    async fn leases(s: &crate::store::Store, target: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE target_id = $1")
            .bind(target)
            .fetch_one(s.pool())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_call_opens_its_lease_stamps_a_ready_target_and_reads_its_version() {
        let (_d, s) = sqlite().await;
        // No target: nothing opened.
        assert_eq!(s.open_call("sb_none", "r1", 100, 10).await.unwrap(), None);
        assert_eq!(leases(&s, "sb_none").await, 0);

        s.put_target(&target("sb_c")).await.unwrap();
        let (_, version) = s.get_target_versioned("sb_c").await.unwrap().unwrap();
        // Never called: a lease, no stamp, not ready.
        let o = s.open_call("sb_c", "r1", 100, 10).await.unwrap().unwrap();
        assert_eq!((o.target_version, o.ready), (version, None));
        assert_eq!(leases(&s, "sb_c").await, 1);
        assert_eq!(s.runtime("sb_c").await.unwrap(), None);
        s.close_lease(&o.lease, "sb_c", 20).await.unwrap();
        assert_eq!(leases(&s, "sb_c").await, 0);

        // Starting: a lease, no stamp.
        let t0 = 1_000_000;
        assert_eq!(
            s.claim_start("sb_c", "r1", t0, t0 - 5000, None)
                .await
                .unwrap(),
            Some(1)
        );
        let o = s
            .open_call("sb_c", "r1", t0 + 30_000, t0 + 5)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.ready, None);
        assert_eq!(s.runtime("sb_c").await.unwrap().unwrap().last_used_at, t0);
        s.close_lease(&o.lease, "sb_c", t0 + 6).await.unwrap();
        assert!(s.finish_start("sb_c", 1, t0 + 10, Ok(())).await.unwrap());

        // Ready: the stamp and the generation come with the lease.
        let o = s
            .open_call("sb_c", "r1", t0 + 30_000, t0 + 20)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.ready, Some(1));
        assert_eq!(leases(&s, "sb_c").await, 1);
        let row = s.runtime("sb_c").await.unwrap().unwrap();
        assert_eq!(
            (row.state, row.last_used_at),
            (RuntimeState::Ready, t0 + 20)
        );
        // Closing stamps the end, never backwards.
        s.close_lease(&o.lease, "sb_c", t0 + 50).await.unwrap();
        assert_eq!(leases(&s, "sb_c").await, 0);
        assert_eq!(
            s.runtime("sb_c").await.unwrap().unwrap().last_used_at,
            t0 + 50
        );
        let o = s
            .open_call("sb_c", "r1", t0 + 30_000, t0 + 60)
            .await
            .unwrap()
            .unwrap();
        s.close_lease(&o.lease, "sb_c", t0 + 40).await.unwrap();
        assert_eq!(
            s.runtime("sb_c").await.unwrap().unwrap().last_used_at,
            t0 + 60
        );

        // A change of the target shows in the version.
        let mut t = target("sb_c");
        t.metadata = serde_json::json!({"tools": 4});
        s.put_target(&t).await.unwrap();
        let o = s
            .open_call("sb_c", "r1", t0 + 30_000, t0 + 70)
            .await
            .unwrap()
            .unwrap();
        assert!(o.target_version > version);
        s.close_lease(&o.lease, "sb_c", t0 + 71).await.unwrap();

        // Deleted: nothing opened, as for a target that never was.
        assert!(s.delete_target("sb_c").await.unwrap());
        assert_eq!(
            s.open_call("sb_c", "r1", t0 + 30_000, t0 + 80)
                .await
                .unwrap(),
            None
        );
        assert_eq!(leases(&s, "sb_c").await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_calls_take_turns_to_write_and_all_land() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_busy")).await.unwrap();
        let t0 = 1_000_000;
        s.claim_start("sb_busy", "r1", t0, t0 - 5000, None)
            .await
            .unwrap();
        s.finish_start("sb_busy", 1, t0, Ok(())).await.unwrap();
        let calls: Vec<_> = (0..64)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move {
                    let o = s
                        .open_call("sb_busy", "r1", t0 + 30_000, t0 + i)
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(o.ready, Some(1));
                    s.close_lease(&o.lease, "sb_busy", t0 + 100 + i)
                        .await
                        .unwrap();
                })
            })
            .collect();
        for c in calls {
            c.await.unwrap();
        }
        assert_eq!(leases(&s, "sb_busy").await, 0);
        assert_eq!(
            s.runtime("sb_busy").await.unwrap().unwrap().last_used_at,
            t0 + 163
        );
    }
}
