//! The reaper's statements, batched: a sweep finds its candidates in one
//! statement, then takes their locks, claims them, records how their
//! reclaims ended and releases the locks a chunk at a time, one statement
//! each, whatever the chunk's size.

use std::collections::HashSet;

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, Connection, Row};

use super::calls::{holds, LocalHold, LocalHolds};
use super::{json_list, lock_key, Candidate, DbKind, Result, RuntimeState, Store, SweepCutoffs};

/// Which rows a claim takes: every reclaim condition, re-checked in the
/// claiming statement itself. Calls in flight are not a condition here:
/// the claimer holds the target's exclusive lock, which no replica with a
/// call in flight on it lets it have ([`super::CallLocks`]); a lease is no
/// guard (a lease left by a replica that died would hold the target until
/// it expired).
const CLAIMABLE: &str = "( \
        (state = 'ready' AND last_used_at < $4) \
     OR (state = 'starting' AND updated_at < $5) \
     OR (state = 'failed' AND updated_at < $6) \
     OR state = 'reaping')";

impl Store {
    /// Reclaim candidates: sandbox targets (never URL targets) whose row is
    /// `ready` and idle, `starting`/`failed` and stranded, or `reaping`
    /// (its reaper may have died: the advisory lock tells). Targets never
    /// called have no row and are never candidates. Whether a call is in
    /// flight is for the lock to tell ([`ReapLocker::try_lock_many`]).
    pub async fn reap_candidates(&self, c: SweepCutoffs, limit: i64) -> Result<Vec<Candidate>> {
        let rows = sqlx::query(
            "SELECT r.target_id, r.state FROM runtime_state r \
             JOIN targets t ON t.id = r.target_id \
             WHERE t.kind = 'sandbox' AND ( \
                 (r.state = 'ready' AND r.last_used_at < $1) \
              OR (r.state = 'starting' AND r.updated_at < $2) \
              OR (r.state = 'failed' AND r.updated_at < $3) \
              OR r.state = 'reaping') \
             ORDER BY r.last_used_at LIMIT $4",
        )
        .bind(c.idle_before)
        .bind(c.starting_before)
        .bind(c.failed_before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Candidate {
                    target_id: r.try_get("target_id")?,
                    state: RuntimeState::parse(&r.try_get::<String, _>("state")?)?,
                })
            })
            .collect()
    }

    /// Claims candidates for reclaim (their locks held), in one statement
    /// that re-checks every condition (idle, stranded): each row taken becomes
    /// `reaping`, remembering the state it had. Returns the rows taken and
    /// that state; an id missing from the answer is no longer a candidate.
    pub async fn claim_reaps(
        &self,
        ids: &[String],
        me: &str,
        c: SweepCutoffs,
    ) -> Result<Vec<(String, RuntimeState)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.write_turn().await;
        let among = match self.kind {
            DbKind::Postgres => "target_id = ANY(ARRAY(SELECT json_array_elements_text($1::json)))",
            DbKind::Sqlite => "target_id IN (SELECT value FROM json_each($1))",
        };
        let sql = format!(
            "UPDATE runtime_state SET \
               prev_state = CASE WHEN state = 'reaping' THEN prev_state ELSE state END, \
               state = 'reaping', updated_at = $2, owner = $3 \
             WHERE {among} AND {CLAIMABLE} \
             RETURNING target_id, prev_state"
        );
        let rows = sqlx::query(&sql)
            .bind(json_list(ids))
            .bind(c.now)
            .bind(me)
            .bind(c.idle_before)
            .bind(c.starting_before)
            .bind(c.failed_before)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let prev: Option<String> = r.try_get("prev_state")?;
                Ok((
                    r.try_get("target_id")?,
                    RuntimeState::parse(prev.as_deref().unwrap_or("ready"))?,
                ))
            })
            .collect()
    }

    /// Claims one candidate (see [`Store::claim_reaps`]): the state it had,
    /// or `None` if it is no longer a candidate.
    pub async fn claim_reap(
        &self,
        id: &str,
        me: &str,
        c: SweepCutoffs,
    ) -> Result<Option<RuntimeState>> {
        let mut taken = self.claim_reaps(&[id.to_owned()], me, c).await?;
        Ok(taken.pop().map(|(_, prev)| prev))
    }

    /// Ends reclaims, in one statement: each row `dormant`, or back to the
    /// state it had with the error. Rows no longer `reaping` are left alone.
    pub async fn finish_reaps(
        &self,
        now: i64,
        outcomes: &[(String, Result<(), String>)],
    ) -> Result<()> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        // [[id, error or null], ...]
        let list = serde_json::Value::from(
            outcomes
                .iter()
                .map(|(id, o)| serde_json::json!([id, o.as_ref().err()]))
                .collect::<Vec<_>>(),
        )
        .to_string();
        let from = match self.kind {
            DbKind::Postgres => {
                "(SELECT e->>0 AS id, e->>1 AS err FROM json_array_elements($1::json) e) f"
            }
            DbKind::Sqlite => {
                "(SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS err \
                  FROM json_each($1)) f"
            }
        };
        let sql = format!(
            "UPDATE runtime_state SET \
               state = CASE WHEN f.err IS NULL THEN 'dormant' \
                            ELSE COALESCE(runtime_state.prev_state, 'ready') END, \
               prev_state = NULL, updated_at = $2, owner = NULL, last_error = f.err \
             FROM {from} \
             WHERE runtime_state.target_id = f.id AND runtime_state.state = 'reaping'"
        );
        sqlx::query(&sql)
            .bind(list)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends one reclaim (see [`Store::finish_reaps`]).
    pub async fn finish_reap(&self, id: &str, now: i64, outcome: Result<(), String>) -> Result<()> {
        self.finish_reaps(now, &[(id.to_owned(), outcome)]).await
    }

    /// A lock connection for the reaper: Postgres advisory locks on a
    /// connection of its own (a dying replica's locks go with it), or an
    /// in-process set for SQLite (one replica).
    pub async fn reap_locker(&self) -> Result<ReapLocker> {
        Ok(match self.kind {
            DbKind::Postgres => {
                let opts: AnyConnectOptions = self.url.parse()?;
                ReapLocker(Locker::Postgres(AnyConnection::connect_with(&opts).await?))
            }
            DbKind::Sqlite => ReapLocker(Locker::Local(self.local_locks.clone())),
        })
    }
}

/// Per-target reclaim locks taken by try-lock: a busy lock (another
/// reaper's, or a replica's calls in flight) is a skip.
#[derive(Debug)]
pub struct ReapLocker(Locker);

#[derive(Debug)]
enum Locker {
    /// Exclusive session-level advisory locks on a dedicated connection.
    Postgres(AnyConnection),
    /// In-process (SQLite, one replica), in the table the calls use.
    Local(LocalHolds),
}

impl ReapLocker {
    /// Takes the locks of `targets` that are free, in one statement;
    /// returns the targets locked, in the order given.
    pub async fn try_lock_many(&mut self, targets: &[String]) -> Result<Vec<String>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        match &mut self.0 {
            Locker::Postgres(conn) => {
                // [[id, key], ...]: the keys are computed here, as before.
                let list = serde_json::Value::from(
                    targets
                        .iter()
                        .map(|t| serde_json::json!([t, lock_key(t)]))
                        .collect::<Vec<_>>(),
                )
                .to_string();
                let rows = sqlx::query(
                    "SELECT e->>0 AS id FROM json_array_elements($1::json) e \
                     WHERE pg_try_advisory_lock((e->>1)::int8)",
                )
                .bind(list)
                .fetch_all(&mut *conn)
                .await?;
                let got = rows
                    .iter()
                    .map(|r| r.try_get::<String, _>("id"))
                    .collect::<Result<HashSet<String>, _>>()?;
                Ok(targets
                    .iter()
                    .filter(|t| got.contains(*t))
                    .cloned()
                    .collect())
            }
            Locker::Local(h) => {
                let mut h = holds(h);
                Ok(targets
                    .iter()
                    .filter(|t| {
                        if h.contains_key(*t) {
                            return false;
                        }
                        h.insert((*t).clone(), LocalHold::Reclaim);
                        true
                    })
                    .cloned()
                    .collect())
            }
        }
    }

    /// Releases the locks of `targets` (taken by [`ReapLocker::try_lock_many`]),
    /// in one statement.
    pub async fn unlock_many(&mut self, targets: &[String]) -> Result<()> {
        if targets.is_empty() {
            return Ok(());
        }
        match &mut self.0 {
            Locker::Postgres(conn) => {
                let keys: Vec<i64> = targets.iter().map(|t| lock_key(t)).collect();
                sqlx::query(
                    "SELECT pg_advisory_unlock(k::int8) FROM json_array_elements_text($1::json) k",
                )
                .bind(serde_json::Value::from(keys).to_string())
                .execute(&mut *conn)
                .await?;
            }
            Locker::Local(h) => {
                let mut h = holds(h);
                for t in targets {
                    if h.get(t) == Some(&LocalHold::Reclaim) {
                        h.remove(t);
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes the lock of `target` if it is free.
    pub async fn try_lock(&mut self, target: &str) -> Result<bool> {
        Ok(!self.try_lock_many(&[target.to_owned()]).await?.is_empty())
    }

    /// Releases the lock of `target`.
    pub async fn unlock(&mut self, target: &str) -> Result<()> {
        self.unlock_many(&[target.to_owned()]).await
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testutil::{cut, sqlite, target};
    use crate::store::{RuntimeState, Store, TargetKind};

    #[tokio::test]
    async fn one_start_claim_wins_and_a_call_in_flight_fences_the_reaper() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_a")).await.unwrap();
        assert_eq!(
            s.get_target("sb_a").await.unwrap().unwrap().headers.len(),
            1
        );
        let t0 = 1_000_000;
        assert_eq!(
            s.claim_start("sb_a", "r1", t0, t0 - 5000, None)
                .await
                .unwrap(),
            Some(1)
        );
        assert_eq!(
            s.claim_start("sb_a", "r2", t0, t0 - 5000, None)
                .await
                .unwrap(),
            None
        );
        assert!(s.finish_start("sb_a", 1, t0, Ok(())).await.unwrap());
        assert_eq!(s.touch_if_ready("sb_a", t0 + 10).await.unwrap(), Some(1));
        // Idle by its stamp, but with calls in flight (two, then one): a
        // candidate whose lock the reaper cannot have.
        let later = t0 + 10_000;
        let first = s.calls().enter("sb_a").await.unwrap().unwrap();
        let second = s.calls().enter("sb_a").await.unwrap().unwrap();
        let mut locker = s.reap_locker().await.unwrap();
        assert_eq!(s.reap_candidates(cut(later), 100).await.unwrap().len(), 1);
        assert!(!locker.try_lock("sb_a").await.unwrap(), "two calls");
        first.release().await;
        assert!(!locker.try_lock("sb_a").await.unwrap(), "one call left");
        assert_eq!(s.calls().held().await, vec!["sb_a".to_string()]);
        // The last call ends (stamping last_used_at), then time passes.
        let lease = s.open_lease("sb_a", "r1", later + 30_000).await.unwrap();
        s.close_lease(&lease, "sb_a", later).await.unwrap();
        second.release().await;
        assert!(s.calls().held().await.is_empty());
        assert!(s
            .reap_candidates(cut(later + 500), 100)
            .await
            .unwrap()
            .is_empty());
        let c = s.reap_candidates(cut(later + 2000), 100).await.unwrap();
        assert_eq!(c.len(), 1);
        assert!(locker.try_lock("sb_a").await.unwrap());
        // While the reaper holds it, no call enters.
        assert!(s.calls().enter("sb_a").await.unwrap().is_none());
        assert_eq!(
            s.claim_reap("sb_a", "r1", cut(later + 2000)).await.unwrap(),
            Some(RuntimeState::Ready)
        );
        // A failed reclaim restores the previous state with the error.
        s.finish_reap("sb_a", later + 2001, Err("boom".into()))
            .await
            .unwrap();
        let row = s.runtime("sb_a").await.unwrap().unwrap();
        assert_eq!(row.state, RuntimeState::Ready);
        assert_eq!(row.last_error.as_deref(), Some("boom"));
        s.claim_reap("sb_a", "r1", cut(later + 3000))
            .await
            .unwrap()
            .unwrap();
        s.finish_reap("sb_a", later + 3001, Ok(())).await.unwrap();
        locker.unlock("sb_a").await.unwrap();
        drop(s.calls().enter("sb_a").await.unwrap().unwrap());
        assert_eq!(
            s.runtime("sb_a").await.unwrap().unwrap().state,
            RuntimeState::Dormant
        );
        // Dormant: the next call claims generation 2.
        assert_eq!(s.touch_if_ready("sb_a", later + 4000).await.unwrap(), None);
        assert_eq!(
            s.claim_start("sb_a", "r2", later + 4000, later - 1000, None)
                .await
                .unwrap(),
            Some(2)
        );
    }

    #[tokio::test]
    async fn url_targets_and_uncalled_sandboxes_are_never_candidates() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_never")).await.unwrap();
        let mut u = target("tg_url");
        u.kind = TargetKind::Url {
            url: "http://127.0.0.1:9".into(),
        };
        s.put_target(&u).await.unwrap();
        // Even with a (forged) idle ready row, a URL target is not reclaimable.
        sqlx::query(
            "INSERT INTO runtime_state (target_id, state, generation, last_used_at, updated_at) \
             VALUES ('tg_url', 'ready', 1, 0, 0)",
        )
        .execute(s.pool())
        .await
        .unwrap();
        assert!(s
            .reap_candidates(cut(10_000_000), 100)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn stranded_starting_rows_are_reclaimable_and_reclaimed_again() {
        let (_d, s) = sqlite().await;
        s.put_target(&target("sb_s")).await.unwrap();
        let t0 = 1_000_000;
        s.claim_start("sb_s", "dead", t0, t0 - 5000, None)
            .await
            .unwrap()
            .unwrap();
        assert!(s
            .reap_candidates(cut(t0 + 1000), 10)
            .await
            .unwrap()
            .is_empty());
        let c = cut(t0 + 6000);
        assert_eq!(s.reap_candidates(c, 10).await.unwrap().len(), 1);
        assert_eq!(
            s.claim_reap("sb_s", "r1", c).await.unwrap(),
            Some(RuntimeState::Starting)
        );
        // The reaper dies here; the row stays `reaping` and is found again,
        // keeping the state it had before.
        let c2 = cut(t0 + 7000);
        assert_eq!(s.reap_candidates(c2, 10).await.unwrap().len(), 1);
        assert_eq!(
            s.claim_reap("sb_s", "r2", c2).await.unwrap(),
            Some(RuntimeState::Starting)
        );
        let mut l1 = s.reap_locker().await.unwrap();
        let mut l2 = s.reap_locker().await.unwrap();
        assert!(l1.try_lock("sb_s").await.unwrap());
        assert!(!l2.try_lock("sb_s").await.unwrap(), "busy is a skip");
        l1.unlock("sb_s").await.unwrap();
        assert!(l2.try_lock("sb_s").await.unwrap());
    }

    /// A runtime row as a test wants it.
    async fn row(s: &Store, id: &str, state: &str, last_used_at: i64, updated_at: i64) {
        s.put_target(&target(id)).await.unwrap();
        sqlx::query(
            "INSERT INTO runtime_state \
               (target_id, state, prev_state, generation, last_used_at, updated_at) \
             VALUES ($1, $2, $3, 1, $4, $5)",
        )
        .bind(id)
        .bind(state)
        .bind((state == "reaping").then_some("ready"))
        .bind(last_used_at)
        .bind(updated_at)
        .execute(s.pool())
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_batch_claims_exactly_the_candidates_and_finishes_each_its_own_way() {
        let (_d, s) = sqlite().await;
        let now = 10_000_000;
        let c = cut(now);
        row(&s, "sb_idle1", "ready", now - 5000, now - 5000).await;
        row(&s, "sb_idle2", "ready", now - 9000, now - 9000).await;
        row(&s, "sb_fresh", "ready", now - 10, now - 10).await;
        row(&s, "sb_leased", "ready", now - 9000, now - 9000).await;
        row(&s, "sb_stale_start", "starting", now - 9000, now - 9000).await;
        row(&s, "sb_new_start", "starting", now - 9000, now - 100).await;
        row(&s, "sb_old_fail", "failed", now - 9000, now - 2000).await;
        row(&s, "sb_dormant", "dormant", now - 9000, now - 9000).await;
        row(&s, "sb_orphan", "reaping", now - 9000, now - 9000).await;
        let lease = s.open_lease("sb_leased", "r1", now + 30_000).await.unwrap();
        let all: Vec<String> = [
            "sb_idle1",
            "sb_idle2",
            "sb_fresh",
            "sb_leased",
            "sb_stale_start",
            "sb_new_start",
            "sb_old_fail",
            "sb_dormant",
            "sb_orphan",
            "sb_no_row",
        ]
        .map(String::from)
        .to_vec();
        let found: Vec<String> = s
            .reap_candidates(c, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.target_id)
            .collect();
        let mut claimed = s.claim_reaps(&all, "r1", c).await.unwrap();
        claimed.sort_by(|a, b| a.0.cmp(&b.0));
        // A lease is no guard: only the lock of a call in flight is (the
        // sweep takes it before it claims).
        let want = [
            ("sb_idle1", RuntimeState::Ready),
            ("sb_idle2", RuntimeState::Ready),
            ("sb_leased", RuntimeState::Ready),
            ("sb_old_fail", RuntimeState::Failed),
            ("sb_orphan", RuntimeState::Ready),
            ("sb_stale_start", RuntimeState::Starting),
        ]
        .map(|(i, st)| (i.to_string(), st))
        .to_vec();
        assert_eq!(claimed, want);
        // The claim takes what the candidate query found, no more.
        let mut found = found;
        found.sort();
        assert_eq!(
            found,
            want.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>()
        );
        for (id, _) in &want {
            let r = s.runtime(id).await.unwrap().unwrap();
            assert_eq!(
                (r.state, r.owner.as_deref()),
                (RuntimeState::Reaping, Some("r1"))
            );
        }
        // Nothing else moved.
        for (id, st) in [
            ("sb_fresh", RuntimeState::Ready),
            ("sb_new_start", RuntimeState::Starting),
            ("sb_dormant", RuntimeState::Dormant),
        ] {
            assert_eq!(s.runtime(id).await.unwrap().unwrap().state, st, "{id}");
        }
        // Claimed again by another reaper (the first one died): the state
        // they had before is kept.
        let again = s.claim_reaps(&all, "r2", cut(now + 1)).await.unwrap();
        assert_eq!(again.len(), want.len());
        assert!(again.contains(&("sb_stale_start".to_string(), RuntimeState::Starting)));

        // One statement ends them all, each its own way; an id that is not
        // reaping is left alone.
        s.finish_reaps(
            now + 2,
            &[
                ("sb_idle1".into(), Ok(())),
                ("sb_idle2".into(), Err("it \"said\" no".into())),
                ("sb_old_fail".into(), Ok(())),
                ("sb_orphan".into(), Ok(())),
                ("sb_stale_start".into(), Err("boom".into())),
                ("sb_fresh".into(), Ok(())),
            ],
        )
        .await
        .unwrap();
        let get = |id: &'static str| {
            let s = s.clone();
            async move { s.runtime(id).await.unwrap().unwrap() }
        };
        for id in ["sb_idle1", "sb_old_fail", "sb_orphan"] {
            let r = get(id).await;
            assert_eq!(
                (r.state, r.owner, r.last_error),
                (RuntimeState::Dormant, None, None)
            );
            assert_eq!(r.updated_at, now + 2);
        }
        let r = get("sb_idle2").await;
        assert_eq!(
            (r.state, r.last_error.as_deref()),
            (RuntimeState::Ready, Some("it \"said\" no"))
        );
        let r = get("sb_stale_start").await;
        assert_eq!(
            (r.state, r.last_error.as_deref()),
            (RuntimeState::Starting, Some("boom"))
        );
        let r = get("sb_fresh").await;
        assert_eq!((r.state, r.updated_at), (RuntimeState::Ready, now - 10));
        s.close_lease(&lease, "sb_leased", now - 8000)
            .await
            .unwrap();
        let c = cut(now + 3);
        assert!(s.claim_reaps(&[], "r1", c).await.unwrap().is_empty());
        s.finish_reaps(now, &[]).await.unwrap();
    }

    #[tokio::test]
    async fn local_locks_are_taken_and_released_in_batches() {
        let (_d, s) = sqlite().await;
        let mut a = s.reap_locker().await.unwrap();
        let mut b = s.reap_locker().await.unwrap();
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            a.try_lock_many(&ids(&["x", "y"])).await.unwrap(),
            ids(&["x", "y"])
        );
        // Busy ones are left out, free ones taken, in the order given.
        assert_eq!(
            b.try_lock_many(&ids(&["z", "y", "x", "w"])).await.unwrap(),
            ids(&["z", "w"])
        );
        a.unlock_many(&ids(&["x", "y"])).await.unwrap();
        assert_eq!(
            b.try_lock_many(&ids(&["x", "y", "z"])).await.unwrap(),
            ids(&["x", "y"])
        );
        b.unlock_many(&ids(&["x", "y", "z", "w"])).await.unwrap();
        assert!(a.try_lock("z").await.unwrap());
        assert!(a.try_lock_many(&[]).await.unwrap().is_empty());
    }
}
