//! Gateway targets: what `/gw/{id}/...` proxies to (configuration,
//! credentials, metadata; never touched by a reclaim).

use sqlx::Row;

use super::{now_ms, Result, Store, StoreError, Target, TargetKind};

const SANDBOX: &str = "sandbox";

impl Store {
    /// Creates or replaces a target (its runtime state is kept). Its
    /// `updated_at` is its version: it moves forward on every change, even
    /// two changes within a millisecond.
    pub async fn put_target(&self, t: &Target) -> Result<()> {
        let _turn = self.write_turn().await;
        let (kind, port, url, command) = match &t.kind {
            TargetKind::Sandbox { port, command } => (
                SANDBOX,
                Some(i32::from(*port)),
                None,
                command.as_ref().map(|c| serde_json::json!(c).to_string()),
            ),
            TargetKind::Url { url } => ("url", None, Some(url.clone()), None),
        };
        let headers = serde_json::to_string(&t.headers)
            .map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO targets \
               (id, kind, port, url, metadata, credentials, command, created_at, updated_at, \
                tenant) \
             VALUES ($1, $2, $3, $4, $5, $6, $8, $7, $7, $9) \
             ON CONFLICT (id) DO UPDATE SET kind = $2, port = $3, url = $4, metadata = $5, \
             credentials = $6, command = $8, \
             updated_at = CASE WHEN targets.updated_at < $7 THEN $7 \
                               ELSE targets.updated_at + 1 END",
        )
        .bind(&t.id)
        .bind(kind)
        .bind(port)
        .bind(url)
        .bind(t.metadata.to_string())
        .bind(headers)
        .bind(now)
        .bind(command)
        .bind(&t.tenant)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// One target.
    pub async fn get_target(&self, id: &str) -> Result<Option<Target>> {
        Ok(self.get_target_versioned(id).await?.map(|(t, _)| t))
    }

    /// One target and its version (see [`Store::put_target`]), as the
    /// gateway caches it.
    pub async fn get_target_versioned(&self, id: &str) -> Result<Option<(Target, i64)>> {
        let row = sqlx::query(
            "SELECT id, kind, port, url, metadata, credentials, command, created_at, updated_at, \
             tenant FROM targets WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((target_from_row(&r)?, r.try_get("updated_at")?)))
            .transpose()
    }

    /// Every target.
    pub async fn list_targets(&self) -> Result<Vec<Target>> {
        let rows = sqlx::query(
            "SELECT id, kind, port, url, metadata, credentials, command, created_at, tenant \
             FROM targets ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(target_from_row).collect()
    }

    /// Deletes a target, its runtime state, its MCP sessions and its cold
    /// starts; false if there was none.
    pub async fn delete_target(&self, id: &str) -> Result<bool> {
        let _turn = self.write_turn().await;
        for table in ["runtime_state", "mcp_sessions", "cold_starts"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE target_id = $1"))
                .bind(id)
                .execute(&self.pool)
                .await?;
        }
        let r = sqlx::query("DELETE FROM targets WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }
}

pub(super) fn target_from_row(r: &sqlx::any::AnyRow) -> Result<Target> {
    let kind: String = r.try_get("kind")?;
    let kind = match kind.as_str() {
        SANDBOX => {
            let port: i32 = r.try_get("port")?;
            let command: Option<String> = r.try_get("command")?;
            TargetKind::Sandbox {
                port: u16::try_from(port)
                    .map_err(|_| StoreError::Corrupt(format!("port {port}")))?,
                command: command
                    .map(|c| serde_json::from_str(&c))
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(format!("command: {e}")))?,
            }
        }
        "url" => TargetKind::Url {
            url: r.try_get("url")?,
        },
        other => return Err(StoreError::Corrupt(format!("target kind {other:?}"))),
    };
    let metadata: String = r.try_get("metadata")?;
    let headers: Option<String> = r.try_get("credentials")?;
    Ok(Target {
        id: r.try_get("id")?,
        kind,
        metadata: serde_json::from_str(&metadata)
            .map_err(|e| StoreError::Corrupt(format!("metadata: {e}")))?,
        headers: match headers {
            Some(h) => serde_json::from_str(&h)
                .map_err(|e| StoreError::Corrupt(format!("credentials: {e}")))?,
            None => Vec::new(),
        },
        created_at: r.try_get("created_at")?,
        tenant: r.try_get("tenant")?,
    })
}

#[cfg(test)]
mod tests {
    use crate::store::testutil::{sqlite, target};
    use crate::store::TargetKind;

    #[tokio::test]
    async fn a_target_version_moves_forward_on_every_change() {
        let (_d, s) = sqlite().await;
        assert_eq!(s.get_target_versioned("sb_v").await.unwrap(), None);
        let mut t = target("sb_v");
        s.put_target(&t).await.unwrap();
        let (got, v1) = s.get_target_versioned("sb_v").await.unwrap().unwrap();
        assert_eq!(got.kind, t.kind);
        // Changes within one millisecond still get new versions.
        let mut seen = vec![v1];
        for port in [81, 82, 83] {
            t.kind = TargetKind::Sandbox {
                port,
                command: None,
            };
            s.put_target(&t).await.unwrap();
            let (got, v) = s.get_target_versioned("sb_v").await.unwrap().unwrap();
            assert_eq!(got.kind, t.kind);
            assert!(v > *seen.last().unwrap(), "{v} after {seen:?}");
            seen.push(v);
        }
        assert!(s.delete_target("sb_v").await.unwrap());
        assert_eq!(s.get_target("sb_v").await.unwrap(), None);
    }
}
