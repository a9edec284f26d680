//! Pool rows, and the warm sandboxes they keep: a warm sandbox is an
//! ordinary sandbox row named `pool/<pool>/<id>` with its `pool` column
//! set. A claim takes two steps: one statement reserves a running warm
//! sandbox for the claiming process (SQLite's write lock orders claims
//! across processes, so each warm sandbox goes to one claimer), and, once
//! the sandbox applies the claimer's configuration, another gives it the
//! claimer's name and clears its `pool` (the name's uniqueness makes a
//! claim and a create of one name converge as two creates do). A claimer
//! killed between the two leaves a reservation a refill removes.

use sqlx::Row;

use super::{now_ms, Store};
use crate::engine::procs::ProcIdentity;
use crate::error::{Error, Result};
use crate::model::{PoolInfo, PoolSpec, SandboxConfig, SandboxId, WARM_NAME_PREFIX};

const SELECT: &str =
    "SELECT name, config, size, claims, misses, last_refill_ms, created_at FROM pools";

pub(crate) fn not_found(name: &str) -> Error {
    Error::NotFound {
        what: format!("pool {name:?}"),
        name: Some(name.to_owned()),
        id: None,
    }
}

/// The name of a warm sandbox of `pool`.
pub(crate) fn warm_name(pool: &str, id: &SandboxId) -> String {
    format!("{WARM_NAME_PREFIX}{pool}/{}", id.as_str())
}

/// Whether `name` is a warm sandbox's (no create can take one).
pub(crate) fn is_warm_name(name: &str) -> bool {
    name.starts_with(WARM_NAME_PREFIX)
}

impl Store {
    /// Records a pool. A taken name is [`Error::PoolExists`].
    pub(crate) async fn insert_pool(&self, spec: &PoolSpec) -> Result<()> {
        let now = now_ms();
        let res = sqlx::query(
            "INSERT INTO pools (name, config, size, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(&spec.name)
        .bind(encode(&spec.config)?)
        .bind(i64::from(spec.size))
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Err(Error::PoolExists {
                name: spec.name.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// One pool (its warm counts are the caller's to fill in).
    pub(crate) async fn get_pool(&self, name: &str) -> Result<Option<PoolInfo>> {
        let row = sqlx::query(&format!("{SELECT} WHERE name = ?"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Every pool, by name.
    pub(crate) async fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        let rows = sqlx::query(&format!("{SELECT} ORDER BY name"))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    /// Sets a pool's size. False: there is no such pool.
    pub(crate) async fn scale_pool(&self, name: &str, size: u32) -> Result<bool> {
        let done = sqlx::query("UPDATE pools SET size = ?, updated_at = ? WHERE name = ?")
            .bind(i64::from(size))
            .bind(now_ms())
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a pool's row (its warm sandboxes are the caller's to
    /// remove). False: there was none.
    pub(crate) async fn remove_pool(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM pools WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Counts a create of a pool's configuration that found no warm
    /// sandbox.
    pub(crate) async fn count_pool_miss(&self, name: &str) -> Result<()> {
        sqlx::query("UPDATE pools SET misses = misses + 1 WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records how long a refill took to start its sandboxes.
    pub(crate) async fn set_pool_refill(&self, name: &str, ms: u64) -> Result<()> {
        sqlx::query("UPDATE pools SET last_refill_ms = ? WHERE name = ?")
            .bind(i64::try_from(ms).unwrap_or(i64::MAX))
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Inserts a warm sandbox of `pool` (status Created, detached).
    pub(crate) async fn insert_warm(
        &self,
        id: &SandboxId,
        pool: &str,
        config: &SandboxConfig,
    ) -> Result<String> {
        let name = warm_name(pool, id);
        self.insert(id, &name, config, true, None).await?;
        sqlx::query("UPDATE sandboxes SET pool = ? WHERE id = ?")
            .bind(pool)
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(name)
    }

    /// Sandboxes with a warm sandbox's name but no pool: a refill killed
    /// between the insert and the pool's mark left them, unclaimable.
    pub(crate) async fn stray_warm(&self) -> Result<Vec<(SandboxId, String)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, name FROM sandboxes WHERE pool IS NULL AND substr(name, 1, ?) = ?",
        )
        .bind(WARM_NAME_PREFIX.len() as i64)
        .bind(WARM_NAME_PREFIX)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, name)| Ok((parse_id(&id)?, name)))
            .collect()
    }

    /// `pool`'s warm sandboxes (the unclaimed and the reserved), oldest
    /// first.
    pub(crate) async fn warm_of(&self, pool: &str) -> Result<Vec<Warm>> {
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
            "SELECT id, status, claimer FROM sandboxes WHERE pool = ? ORDER BY created_at, id",
        )
        .bind(pool)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, status, claimer)| {
                Ok(Warm {
                    id: parse_id(&id)?,
                    status,
                    claimer: claimer.as_deref().and_then(parse_claimer),
                })
            })
            .collect()
    }

    /// Reserves a running warm sandbox of `pool` for `claimer`'s create
    /// (the claim's first step): gives it `config` (the creator's, whose
    /// launch part is the pool's), `detached` and `config`'s labels, in one
    /// transaction whose first statement is the
    /// reserving write, so each warm sandbox goes to one claimer across
    /// processes. It keeps its warm name and its pool until
    /// [`Store::take_claimed`], which counts the claim. `None`: no warm
    /// sandbox was running.
    pub(crate) async fn reserve_warm(
        &self,
        pool: &str,
        config: &SandboxConfig,
        detached: bool,
        claimer: ProcIdentity,
    ) -> Result<Option<SandboxId>> {
        let mut tx = self.pool.begin().await?;
        let reserved: Option<(String,)> = sqlx::query_as(
            "UPDATE sandboxes SET claimer = ?, config = ?, detached = ?, updated_at = ?
             WHERE id = (SELECT id FROM sandboxes
                         WHERE pool = ? AND status = 'running' AND claimer IS NULL
                         ORDER BY created_at, id LIMIT 1)
             RETURNING id",
        )
        .bind(claimer_text(claimer))
        .bind(encode(config)?)
        .bind(detached)
        .bind(now_ms())
        .bind(pool)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((id,)) = reserved else {
            return Ok(None);
        };
        for (k, v) in &config.labels {
            sqlx::query("INSERT INTO labels (sandbox_id, key, value) VALUES (?, ?, ?)")
                .bind(&id)
                .bind(k)
                .bind(v)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        parse_id(&id).map(Some)
    }

    /// The claim's second step: the sandbox `claimer` reserved takes
    /// `name` and leaves its pool. A taken `name` is
    /// [`Error::AlreadyExists`] with its holder; a reservation that is gone
    /// (its pool removed meanwhile) is [`Error::NotFound`].
    pub(crate) async fn take_claimed(
        &self,
        id: &SandboxId,
        name: &str,
        claimer: ProcIdentity,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // Counted first, while the row still names its pool.
        sqlx::query(
            "UPDATE pools SET claims = claims + 1
             WHERE name = (SELECT pool FROM sandboxes WHERE id = ? AND claimer = ?)",
        )
        .bind(id.as_str())
        .bind(claimer_text(claimer))
        .execute(&mut *tx)
        .await?;
        let taken = sqlx::query(
            "UPDATE sandboxes SET name = ?, pool = NULL, claimer = NULL, updated_at = ?
             WHERE id = ? AND claimer = ?",
        )
        .bind(name)
        .bind(now_ms())
        .bind(id.as_str())
        .bind(claimer_text(claimer))
        .execute(&mut *tx)
        .await;
        match taken {
            Ok(done) if done.rows_affected() == 1 => tx.commit().await.map_err(Into::into),
            Ok(_) => Err(Error::NotFound {
                what: format!("reserved warm sandbox {id}"),
                name: None,
                id: Some(id.clone()),
            }),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                drop(tx);
                let holder = self.get_by_name(name).await?.map(|h| h.info.id);
                Err(Error::AlreadyExists {
                    name: name.to_owned(),
                    id: holder.unwrap_or_else(|| id.clone()),
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A warm sandbox of a pool, as a refill sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warm {
    pub id: SandboxId,
    /// Its recorded status (`running`, `created`, ...).
    pub status: String,
    /// The process that reserved it, mid-claim.
    pub claimer: Option<ProcIdentity>,
}

fn claimer_text(p: ProcIdentity) -> String {
    format!("{}:{}", p.pid, p.start)
}

fn parse_claimer(text: &str) -> Option<ProcIdentity> {
    let (pid, start) = text.split_once(':')?;
    Some(ProcIdentity {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    })
}

fn parse_id(id: &str) -> Result<SandboxId> {
    id.parse().map_err(|_| Error::Store {
        reason: format!("corrupt sandbox id {id:?}"),
        source: None,
    })
}

fn encode(config: &SandboxConfig) -> Result<String> {
    serde_json::to_string(config).map_err(|e| Error::store("encoding a pool's configuration", e))
}

fn decode(row: &sqlx::sqlite::SqliteRow) -> Result<PoolInfo> {
    let config: String = row.try_get("config")?;
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(PoolInfo {
        name: row.try_get("name")?,
        config: serde_json::from_str(&config)
            .map_err(|e| Error::store("decoding a pool's configuration", e))?,
        size: u32::try_from(row.try_get::<i64, _>("size")?).unwrap_or(0),
        warm: 0,
        starting: 0,
        claims: count(row.try_get("claims")?),
        misses: count(row.try_get("misses")?),
        last_refill_ms: row.try_get::<Option<i64>, _>("last_refill_ms")?.map(count),
        created_at_ms: row.try_get("created_at")?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::paths::Home;
    use crate::engine::procs::ProcIdentity;
    use crate::ErrorCode;

    async fn running_warm(store: &Store, pool: &str, config: &SandboxConfig) -> SandboxId {
        let id = SandboxId::new();
        store.insert_warm(&id, pool, config).await.unwrap();
        let generation = store
            .claim_start(&id, ProcIdentity::current(), None)
            .await
            .unwrap()
            .unwrap();
        assert!(store
            .set_running(&id, generation, &serde_json::Value::Null)
            .await
            .unwrap());
        id
    }

    #[tokio::test]
    async fn a_warm_sandbox_is_reserved_once_then_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let store = Store::open(&home).await.unwrap();
        let config = SandboxConfig::new("alpine");
        let spec = PoolSpec::new("web", config.clone(), 2);
        store.insert_pool(&spec).await.unwrap();
        let again = store.insert_pool(&spec).await.unwrap_err();
        assert_eq!(again.code(), ErrorCode::AlreadyExists);
        let me = ProcIdentity::current();

        // Created, not running: nothing to reserve.
        let cold = SandboxId::new();
        let cold_name = store.insert_warm(&cold, "web", &config).await.unwrap();
        assert!(is_warm_name(&cold_name));
        let none = store.reserve_warm("web", &config, false, me).await.unwrap();
        assert_eq!(none, None);

        let warm = running_warm(&store, "web", &config).await;
        let mut wanted = config.clone();
        wanted.labels.insert("team".into(), "a".into());
        let got = store.reserve_warm("web", &wanted, true, me).await.unwrap();
        assert_eq!(got, Some(warm.clone()));
        // Reserved: no other claimer gets it, and it is still the pool's.
        let none = store.reserve_warm("web", &config, false, me).await.unwrap();
        assert_eq!(none, None);
        // (Rows made in one clock tick are in id order: find it by id.)
        let reserved = store.warm_of("web").await.unwrap();
        let claimers: Vec<_> = reserved.iter().map(|w| (w.id.clone(), w.claimer)).collect();
        assert!(claimers.contains(&(warm.clone(), Some(me))), "{claimers:?}");
        assert!(claimers.contains(&(cold.clone(), None)), "{claimers:?}");

        // A taken name takes nothing; nor does another claimer.
        let err = store.take_claimed(&warm, &cold_name, me).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::AlreadyExists);
        let other = ProcIdentity {
            pid: me.pid,
            start: me.start + 1,
        };
        let err = store.take_claimed(&warm, "a", other).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::NotFound);
        assert_eq!(store.warm_of("web").await.unwrap(), reserved);

        store.take_claimed(&warm, "a", me).await.unwrap();
        let rec = store.get_by_name("a").await.unwrap().unwrap();
        assert_eq!(rec.info.id, warm);
        assert!(rec.info.detached);
        assert_eq!(rec.info.config.labels["team"], "a");
        let left = store.warm_of("web").await.unwrap();
        assert_eq!(
            left,
            vec![Warm {
                id: cold,
                status: "created".into(),
                claimer: None
            }]
        );
        let info = store.get_pool("web").await.unwrap().unwrap();
        assert_eq!((info.claims, info.misses, info.size), (1, 0, 2));
        assert!(store.stray_warm().await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_claims_on_separate_connections_take_each_warm_sandbox_once() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let store = Store::open(&home).await.unwrap();
        let config = SandboxConfig::new("alpine");
        store
            .insert_pool(&PoolSpec::new("p", config.clone(), 4))
            .await
            .unwrap();
        let mut warm = Vec::new();
        for _ in 0..4 {
            warm.push(running_warm(&store, "p", &config).await);
        }
        let mut claimers = tokio::task::JoinSet::new();
        for i in 0..16u64 {
            // A database handle of its own, as another process has.
            let store = Store::open(&home).await.unwrap();
            let config = config.clone();
            let claimer = ProcIdentity { pid: 1, start: i };
            claimers.spawn(async move {
                let id = store
                    .reserve_warm("p", &config, false, claimer)
                    .await
                    .unwrap()?;
                store
                    .take_claimed(&id, &format!("c{i}"), claimer)
                    .await
                    .unwrap();
                Some(id)
            });
        }
        let mut got: Vec<SandboxId> = claimers.join_all().await.into_iter().flatten().collect();
        got.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        warm.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        assert_eq!(got, warm);
        assert_eq!(store.get_pool("p").await.unwrap().unwrap().claims, 4);
        assert!(store.warm_of("p").await.unwrap().is_empty());
    }
}
