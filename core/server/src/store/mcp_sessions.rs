//! MCP sessions the gateway keeps across reclaims (see
//! [`crate::gateway`]'s `mcp` module): the client's session id, the id the
//! current server gave it, and the client's `initialize` request.

use sqlx::Row;

use super::{Result, Store};

/// One MCP session of a target, as the gateway keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSession {
    /// The target (a sandbox id).
    pub target_id: String,
    /// The session id the client holds (the first server's).
    pub session: String,
    /// The target's tenant.
    pub tenant: String,
    /// The session id of the server running now (the client's own until a
    /// reclaim).
    pub upstream: String,
    /// The client's `initialize` request (its JSON-RPC message).
    pub initialize: String,
    /// When the client initialized it.
    pub created_at: i64,
    /// When a call last used it.
    pub last_used_at: i64,
}

impl Store {
    /// Keeps a session the client just initialized (one it initialized
    /// again under the same id replaces it).
    pub async fn put_mcp_session(&self, s: &McpSession) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO mcp_sessions \
               (target_id, session, tenant, upstream, initialize, created_at, last_used_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (target_id, session) DO UPDATE SET tenant = $3, upstream = $4, \
             initialize = $5, created_at = $6, last_used_at = $7",
        )
        .bind(&s.target_id)
        .bind(&s.session)
        .bind(&s.tenant)
        .bind(&s.upstream)
        .bind(&s.initialize)
        .bind(s.created_at)
        .bind(s.last_used_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The session `session` of `target`, if it was used at `used_after` or
    /// later (an older one has expired, whether or not it was purged yet).
    pub async fn mcp_session(
        &self,
        target: &str,
        session: &str,
        used_after: i64,
    ) -> Result<Option<McpSession>> {
        let row = sqlx::query(
            "SELECT target_id, session, tenant, upstream, initialize, created_at, last_used_at \
             FROM mcp_sessions WHERE target_id = $1 AND session = $2 AND last_used_at >= $3",
        )
        .bind(target)
        .bind(session)
        .bind(used_after)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(McpSession {
                target_id: r.try_get("target_id")?,
                session: r.try_get("session")?,
                tenant: r.try_get("tenant")?,
                upstream: r.try_get("upstream")?,
                initialize: r.try_get("initialize")?,
                created_at: r.try_get("created_at")?,
                last_used_at: r.try_get("last_used_at")?,
            })
        })
        .transpose()
    }

    /// Points the session at the server's new id, if it still points at
    /// `old` (false: another call, on any replica, moved it first).
    pub async fn remap_mcp_session(
        &self,
        target: &str,
        session: &str,
        old: &str,
        new: &str,
        now: i64,
    ) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "UPDATE mcp_sessions SET upstream = $4, last_used_at = $5 \
             WHERE target_id = $1 AND session = $2 AND upstream = $3",
        )
        .bind(target)
        .bind(session)
        .bind(old)
        .bind(new)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Stamps a session's last use.
    pub async fn touch_mcp_session(&self, target: &str, session: &str, now: i64) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "UPDATE mcp_sessions SET last_used_at = $3 \
             WHERE target_id = $1 AND session = $2 AND last_used_at < $3",
        )
        .bind(target)
        .bind(session)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets a session (the client ended it).
    pub async fn delete_mcp_session(&self, target: &str, session: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM mcp_sessions WHERE target_id = $1 AND session = $2")
            .bind(target)
            .bind(session)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deletes the sessions last used before `before`; returns how many.
    pub async fn purge_mcp_sessions(&self, before: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM mcp_sessions WHERE last_used_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::sqlite;
    use super::*;

    fn session(upstream: &str, at: i64) -> McpSession {
        McpSession {
            target_id: "sb_1".into(),
            session: "client".into(),
            tenant: "default".into(),
            upstream: upstream.into(),
            initialize: r#"{"jsonrpc":"2.0","id":0,"method":"initialize"}"#.into(),
            created_at: at,
            last_used_at: at,
        }
    }

    #[tokio::test]
    async fn a_session_is_remapped_once_expires_and_goes_with_its_target() {
        let (_d, s) = sqlite().await;
        s.put_mcp_session(&session("client", 100)).await.unwrap();
        let got = s.mcp_session("sb_1", "client", 0).await.unwrap().unwrap();
        assert_eq!(got, session("client", 100));
        // Expired: not found, though still stored.
        assert_eq!(s.mcp_session("sb_1", "client", 101).await.unwrap(), None);

        // Two remaps from the same old id: the first wins.
        assert!(s
            .remap_mcp_session("sb_1", "client", "client", "new-1", 200)
            .await
            .unwrap());
        assert!(!s
            .remap_mcp_session("sb_1", "client", "client", "new-2", 201)
            .await
            .unwrap());
        let got = s.mcp_session("sb_1", "client", 0).await.unwrap().unwrap();
        assert_eq!((got.upstream.as_str(), got.last_used_at), ("new-1", 200));

        // A touch never moves the stamp back.
        s.touch_mcp_session("sb_1", "client", 150).await.unwrap();
        s.touch_mcp_session("sb_1", "client", 300).await.unwrap();
        let got = s.mcp_session("sb_1", "client", 0).await.unwrap().unwrap();
        assert_eq!(got.last_used_at, 300);

        assert_eq!(s.purge_mcp_sessions(300).await.unwrap(), 0);
        assert_eq!(s.purge_mcp_sessions(301).await.unwrap(), 1);
        assert_eq!(s.mcp_session("sb_1", "client", 0).await.unwrap(), None);

        // Deleting the target deletes its sessions.
        s.put_target(&super::super::testutil::target("sb_1"))
            .await
            .unwrap();
        s.put_mcp_session(&session("client", 100)).await.unwrap();
        assert!(s.delete_target("sb_1").await.unwrap());
        assert_eq!(s.mcp_session("sb_1", "client", 0).await.unwrap(), None);
    }
}
