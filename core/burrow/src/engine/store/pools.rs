//! Pool rows, and the warm sandboxes they keep: a warm sandbox is an
//! ordinary sandbox row named `pool/<pool>/<id>` with its `pool` column
//! set. A claim is one statement that renames a running warm sandbox to
//! the creator's name and clears its `pool`: SQLite's write lock orders
//! claims across processes, so each warm sandbox goes to one claimer, and
//! the name's uniqueness makes a claim and a create of one name converge
//! as two creates do.

use sqlx::Row;

use super::{now_ms, Store};
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

    /// The ids and statuses of `pool`'s warm sandboxes (the unclaimed).
    pub(crate) async fn warm_of(&self, pool: &str) -> Result<Vec<(SandboxId, String)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, status FROM sandboxes WHERE pool = ? ORDER BY created_at, id",
        )
        .bind(pool)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, status)| Ok((parse_id(&id)?, status)))
            .collect()
    }

    /// Claims a running warm sandbox of `pool` for a create: renames it to
    /// `name`, gives it `config` (the creator's, whose launch part is the
    /// pool's), `detached` and `config`'s labels, and counts the claim, in
    /// one transaction whose first statement is the claiming write. `None`:
    /// no warm sandbox was running. A taken `name` is
    /// [`Error::AlreadyExists`] with its holder, and claims nothing.
    pub(crate) async fn claim_warm(
        &self,
        pool: &str,
        name: &str,
        config: &SandboxConfig,
        detached: bool,
    ) -> Result<Option<SandboxId>> {
        // Again only when the name's holder went away between the claim's
        // refusal and its lookup.
        loop {
            if let Some(claimed) = self.try_claim_warm(pool, name, config, detached).await? {
                return Ok(claimed);
            }
        }
    }

    /// One try of [`Store::claim_warm`]; `None`: try again.
    async fn try_claim_warm(
        &self,
        pool: &str,
        name: &str,
        config: &SandboxConfig,
        detached: bool,
    ) -> Result<Option<Option<SandboxId>>> {
        let mut tx = self.pool.begin().await?;
        let claimed: std::result::Result<Option<(String,)>, sqlx::Error> = sqlx::query_as(
            "UPDATE sandboxes SET name = ?, pool = NULL, config = ?, detached = ?, updated_at = ?
             WHERE id = (SELECT id FROM sandboxes WHERE pool = ? AND status = 'running'
                         ORDER BY created_at, id LIMIT 1)
             RETURNING id",
        )
        .bind(name)
        .bind(encode(config)?)
        .bind(detached)
        .bind(now_ms())
        .bind(pool)
        .fetch_optional(&mut *tx)
        .await;
        let id = match claimed {
            Ok(Some((id,))) => id,
            Ok(None) => return Ok(Some(None)),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                drop(tx);
                return match self.get_by_name(name).await? {
                    Some(h) => Err(Error::AlreadyExists {
                        name: name.to_owned(),
                        id: h.info.id,
                    }),
                    None => Ok(None),
                };
            }
            Err(e) => return Err(e.into()),
        };
        for (k, v) in &config.labels {
            sqlx::query("INSERT INTO labels (sandbox_id, key, value) VALUES (?, ?, ?)")
                .bind(&id)
                .bind(k)
                .bind(v)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE pools SET claims = claims + 1 WHERE name = ?")
            .bind(pool)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        parse_id(&id).map(|id| Some(Some(id)))
    }
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
    async fn a_warm_sandbox_is_claimed_once_and_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let store = Store::open(&home).await.unwrap();
        let config = SandboxConfig::new("alpine");
        let spec = PoolSpec::new("web", config.clone(), 2);
        store.insert_pool(&spec).await.unwrap();
        let again = store.insert_pool(&spec).await.unwrap_err();
        assert_eq!(again.code(), ErrorCode::AlreadyExists);

        // Created, not running: nothing to claim.
        let cold = SandboxId::new();
        let cold_name = store.insert_warm(&cold, "web", &config).await.unwrap();
        assert!(is_warm_name(&cold_name));
        assert_eq!(
            store.claim_warm("web", "a", &config, false).await.unwrap(),
            None
        );

        let warm = running_warm(&store, "web", &config).await;
        let mut wanted = config.clone();
        wanted.labels.insert("team".into(), "a".into());
        // A taken name claims nothing.
        let err = store
            .claim_warm("web", &cold_name, &wanted, false)
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::AlreadyExists);
        assert_eq!(store.warm_of("web").await.unwrap().len(), 2);

        let got = store.claim_warm("web", "a", &wanted, true).await.unwrap();
        assert_eq!(got, Some(warm.clone()));
        let rec = store.get_by_name("a").await.unwrap().unwrap();
        assert_eq!(rec.info.id, warm);
        assert!(rec.info.detached);
        assert_eq!(rec.info.config.labels["team"], "a");
        assert_eq!(
            store.warm_of("web").await.unwrap(),
            vec![(cold, "created".into())]
        );
        assert_eq!(
            store.claim_warm("web", "b", &config, false).await.unwrap(),
            None
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
        for i in 0..16 {
            // A database handle of its own, as another process has.
            let store = Store::open(&home).await.unwrap();
            let config = config.clone();
            claimers.spawn(async move {
                store
                    .claim_warm("p", &format!("c{i}"), &config, false)
                    .await
                    .unwrap()
            });
        }
        let mut got: Vec<SandboxId> = claimers.join_all().await.into_iter().flatten().collect();
        got.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        warm.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        assert_eq!(got, warm);
        assert_eq!(store.get_pool("p").await.unwrap().unwrap().claims, 4);
    }
}
