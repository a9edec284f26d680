//! Tenants' quotas, and the turn a quota check takes: the check and the
//! change it allows are one step across replicas (a transaction-scoped
//! advisory lock per tenant on Postgres; a turn in process on SQLite, one
//! replica), so concurrent creates never pass a limit together.

use sqlx::Row;

use super::{lock_key, now_ms, DbKind, Result, Store};

/// A tenant's limits (`None`: no limit).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Quotas {
    /// Sandboxes (any status), warm pool sandboxes included.
    pub max_sandboxes: Option<u64>,
    /// Sandboxes with a runtime (starting, running, draining, paused),
    /// warm pool sandboxes included.
    pub max_running: Option<u64>,
    /// The sum of the running sandboxes' CPUs.
    pub max_cpus: Option<f64>,
    /// The sum of the running sandboxes' memory, in MiB.
    pub max_memory_mb: Option<u64>,
    /// Starts in any minute (sliding).
    pub max_starts_per_minute: Option<u64>,
}

impl Quotas {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        *self != Quotas::default()
    }
}

/// A quota check's turn: held from the check through the change it
/// allows, for one tenant.
pub struct QuotaTurn {
    inner: Turn,
    tenant: String,
    /// This process's turn for the tenant (released last).
    _local: tokio::sync::OwnedMutexGuard<()>,
}

enum Turn {
    Postgres(sqlx::Transaction<'static, sqlx::Any>),
    Local(Store),
}

/// This process's turns, per tenant.
pub(super) type LocalTurns = std::sync::Arc<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
>;

impl std::fmt::Debug for QuotaTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaTurn")
            .field("tenant", &self.tenant)
            .finish()
    }
}

fn opt_u64(v: Option<i64>) -> Option<u64> {
    v.map(|n| u64::try_from(n).unwrap_or(0))
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

const MINUTE_MS: i64 = 60_000;

impl Store {
    /// The limits of `tenant` (`None`: no such tenant).
    pub async fn quotas(&self, tenant: &str) -> Result<Option<Quotas>> {
        let row = sqlx::query(
            "SELECT max_sandboxes, max_running, max_cpus, max_memory_mb, max_starts_per_minute \
             FROM tenants WHERE name = $1",
        )
        .bind(tenant)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(Quotas {
                max_sandboxes: opt_u64(r.try_get("max_sandboxes")?),
                max_running: opt_u64(r.try_get("max_running")?),
                max_cpus: r.try_get("max_cpus")?,
                max_memory_mb: opt_u64(r.try_get("max_memory_mb")?),
                max_starts_per_minute: opt_u64(r.try_get("max_starts_per_minute")?),
            })
        })
        .transpose()
    }

    /// Sets the limits of `tenant`; false if there is no such tenant.
    pub async fn set_quotas(&self, tenant: &str, q: &Quotas) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "UPDATE tenants SET max_sandboxes = $2, max_running = $3, max_cpus = $4, \
             max_memory_mb = $5, max_starts_per_minute = $6 WHERE name = $1",
        )
        .bind(tenant)
        .bind(opt_i64(q.max_sandboxes))
        .bind(opt_i64(q.max_running))
        .bind(q.max_cpus)
        .bind(opt_i64(q.max_memory_mb))
        .bind(opt_i64(q.max_starts_per_minute))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Takes `tenant`'s quota turn (waits for the one before to end).
    pub async fn quota_turn(&self, tenant: &str) -> Result<QuotaTurn> {
        let local = {
            let mut turns = self.quota_turns.lock().unwrap_or_else(|p| p.into_inner());
            turns.entry(tenant.to_owned()).or_default().clone()
        };
        let local = local.lock_owned().await;
        let inner = match self.kind {
            DbKind::Postgres => {
                let mut tx = self.pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(lock_key(&format!("quota:{tenant}")))
                    .execute(&mut *tx)
                    .await?;
                Turn::Postgres(tx)
            }
            DbKind::Sqlite => Turn::Local(self.clone()),
        };
        Ok(QuotaTurn {
            inner,
            tenant: tenant.to_owned(),
            _local: local,
        })
    }
}

impl QuotaTurn {
    /// Starts of the tenant in the last minute.
    pub async fn recent_starts(&mut self) -> Result<u64> {
        let since = now_ms() - MINUTE_MS;
        let q =
            sqlx::query("SELECT COUNT(*) AS n FROM tenant_starts WHERE tenant = $1 AND at > $2")
                .bind(&self.tenant)
                .bind(since);
        let row = match &mut self.inner {
            Turn::Postgres(tx) => q.fetch_one(&mut **tx).await?,
            Turn::Local(store) => q.fetch_one(&store.pool).await?,
        };
        Ok(opt_u64(Some(row.try_get("n")?)).unwrap_or(0))
    }

    /// Counts a start (and forgets the tenant's starts older than a
    /// minute).
    pub async fn record_start(&mut self) -> Result<()> {
        let now = now_ms();
        let forget = sqlx::query("DELETE FROM tenant_starts WHERE tenant = $1 AND at <= $2")
            .bind(&self.tenant)
            .bind(now - MINUTE_MS);
        let add = sqlx::query("INSERT INTO tenant_starts (tenant, at) VALUES ($1, $2)")
            .bind(&self.tenant)
            .bind(now);
        match &mut self.inner {
            Turn::Postgres(tx) => {
                forget.execute(&mut **tx).await?;
                add.execute(&mut **tx).await?;
            }
            Turn::Local(store) => {
                let _w = store.write_turn().await;
                forget.execute(&store.pool).await?;
                add.execute(&store.pool).await?;
            }
        }
        Ok(())
    }

    /// Ends the turn, keeping what it recorded.
    pub async fn end(self) -> Result<()> {
        if let Turn::Postgres(tx) = self.inner {
            tx.commit().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::sqlite;

    #[tokio::test]
    async fn quotas_are_kept_and_starts_counted() {
        let (_d, s) = sqlite().await;
        assert_eq!(s.quotas("team").await.unwrap(), None);
        s.create_tenant("team").await.unwrap();
        assert_eq!(s.quotas("team").await.unwrap(), Some(Quotas::default()));
        let q = Quotas {
            max_sandboxes: Some(5),
            max_cpus: Some(2.5),
            ..Quotas::default()
        };
        assert!(s.set_quotas("team", &q).await.unwrap());
        assert_eq!(s.quotas("team").await.unwrap(), Some(q));
        assert!(!s.set_quotas("nobody", &Quotas::default()).await.unwrap());
        let mut turn = s.quota_turn("team").await.unwrap();
        assert_eq!(turn.recent_starts().await.unwrap(), 0);
        turn.record_start().await.unwrap();
        turn.record_start().await.unwrap();
        assert_eq!(turn.recent_starts().await.unwrap(), 2);
        turn.end().await.unwrap();
        let mut other = s.quota_turn("default").await.unwrap();
        assert_eq!(other.recent_starts().await.unwrap(), 0);
        other.end().await.unwrap();
    }
}
