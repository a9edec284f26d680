//! The audit log: who asked the API for which change, and how it ended.

use sqlx::Row;

use super::{Result, Store};

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    /// Its id: increasing (a page goes on after the last id it showed).
    pub id: i64,
    /// When, in milliseconds since the epoch.
    pub at_ms: i64,
    /// The caller's tenant (none when the request had no valid token).
    pub tenant: Option<String>,
    /// The caller's token, by name (none: no valid token, or the unix
    /// socket).
    pub token: Option<String>,
    /// The operation: the method and the route (`POST
    /// /v1/sandboxes/{id}/stop`), or the path as asked when no route has
    /// it.
    pub operation: String,
    /// The object the route names (a sandbox id, a pool or snapshot name,
    /// a target id), if any.
    pub object: Option<String>,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The error code of an error answer.
    pub code: Option<String>,
}

impl Store {
    /// Appends an entry (its id is the store's).
    pub async fn record_audit(&self, e: &AuditEntry) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO audit_log (at, tenant, token, operation, object, status, code) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(e.at_ms)
        .bind(e.tenant.as_deref())
        .bind(e.token.as_deref())
        .bind(&e.operation)
        .bind(e.object.as_deref())
        .bind(i32::from(e.status))
        .bind(e.code.as_deref())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Up to `limit` entries after id `after`, oldest first, of `tenant`
    /// (`None`: every tenant's, and the entries of requests without one).
    pub async fn audit(
        &self,
        tenant: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let q = "SELECT id, at, tenant, token, operation, object, status, code FROM audit_log \
                 WHERE id > $1 AND ($2 = '' OR tenant = $2) ORDER BY id LIMIT $3";
        let rows = sqlx::query(q)
            .bind(after)
            .bind(tenant.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let status: i32 = r.try_get("status")?;
                Ok(AuditEntry {
                    id: r.try_get("id")?,
                    at_ms: r.try_get("at")?,
                    tenant: r.try_get("tenant")?,
                    token: r.try_get("token")?,
                    operation: r.try_get("operation")?,
                    object: r.try_get("object")?,
                    status: u16::try_from(status).unwrap_or(0),
                    code: r.try_get("code")?,
                })
            })
            .collect()
    }

    /// Deletes the entries older than `before` (milliseconds since the
    /// epoch); how many.
    pub async fn prune_audit(&self, before: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM audit_log WHERE at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::sqlite;

    fn entry(tenant: Option<&str>, at_ms: i64, operation: &str) -> AuditEntry {
        AuditEntry {
            id: 0,
            at_ms,
            tenant: tenant.map(str::to_owned),
            token: Some("t".into()),
            operation: operation.into(),
            object: None,
            status: 200,
            code: None,
        }
    }

    #[tokio::test]
    async fn entries_are_paged_by_id_per_tenant_and_pruned() {
        let (_d, s) = sqlite().await;
        for (i, tenant) in [Some("a"), Some("b"), Some("a"), None, Some("a")]
            .into_iter()
            .enumerate()
        {
            let i = i64::try_from(i).unwrap();
            s.record_audit(&entry(tenant, 1000 + i, &format!("op{i}")))
                .await
                .unwrap();
        }
        let a = s.audit(Some("a"), 0, 2).await.unwrap();
        let ops: Vec<&str> = a.iter().map(|e| e.operation.as_str()).collect();
        assert_eq!(ops, ["op0", "op2"]);
        let next = s.audit(Some("a"), a[1].id, 2).await.unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].operation, "op4");
        assert_eq!(s.audit(None, 0, 100).await.unwrap().len(), 5);
        assert_eq!(s.prune_audit(1002).await.unwrap(), 2);
        let left = s.audit(None, 0, 100).await.unwrap();
        assert_eq!(left.first().map(|e| e.at_ms), Some(1002));
    }
}
