//! Client sessions of remote backends and the sandboxes attached through
//! them.

use sqlx::Row;

use super::{random_id, Result, Store};

impl Store {
    /// Registers a session held by `replica`.
    pub async fn open_session(
        &self,
        replica: &str,
        tenant: &str,
        expires_at: i64,
    ) -> Result<String> {
        let _turn = self.write_turn().await;
        let id = random_id("ses_");
        sqlx::query(
            "INSERT INTO sessions (id, replica, expires_at, tenant) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(replica)
        .bind(expires_at)
        .bind(tenant)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    /// Extends a session; false if it is gone.
    pub async fn heartbeat_session(&self, id: &str, expires_at: i64) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("UPDATE sessions SET expires_at = $2 WHERE id = $1")
            .bind(id)
            .bind(expires_at)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Whether a session of `tenant` is live (another tenant's is as if
    /// there were none).
    pub async fn session_live(&self, id: &str, tenant: &str, now: i64) -> Result<bool> {
        if id.contains('\0') {
            // Never an id this server gave out (PostgreSQL's text has no NUL).
            return Ok(false);
        }
        let row = sqlx::query(
            "SELECT 1 AS one FROM sessions WHERE id = $1 AND expires_at >= $2 AND tenant = $3",
        )
        .bind(id)
        .bind(now)
        .bind(tenant)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    /// Attaches a sandbox to a session (replacing an earlier attachment).
    pub async fn attach(&self, sandbox_id: &str, name: &str, session: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO attachments (sandbox_id, name, session_id) VALUES ($1, $2, $3) \
             ON CONFLICT (sandbox_id) DO UPDATE SET name = $2, session_id = $3",
        )
        .bind(sandbox_id)
        .bind(name)
        .bind(session)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets a sandbox's attachment (detached, removed).
    pub async fn detach(&self, sandbox_id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM attachments WHERE sandbox_id = $1")
            .bind(sandbox_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Ends a session: deletes it and returns the (id, name) of the
    /// sandboxes attached through it, whose attachments are deleted too.
    pub async fn end_session(&self, id: &str) -> Result<Vec<(String, String)>> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        let rows =
            sqlx::query("DELETE FROM attachments WHERE session_id = $1 RETURNING sandbox_id, name")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("sandbox_id")?, r.try_get("name")?)))
            .collect()
    }

    /// Sessions whose replica stopped heartbeating them.
    pub async fn expired_sessions(&self, now: i64) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM sessions WHERE expires_at < $1")
            .bind(now)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testutil::sqlite;

    #[tokio::test]
    async fn sessions_collect_their_attachments() {
        let (_d, s) = sqlite().await;
        let ses = s.open_session("r1", "default", 100).await.unwrap();
        assert!(s.session_live(&ses, "default", 50).await.unwrap());
        // Another tenant's session is as if there were none.
        assert!(!s.session_live(&ses, "team", 50).await.unwrap());
        s.attach("sb_1", "one", &ses).await.unwrap();
        s.attach("sb_2", "two", &ses).await.unwrap();
        s.detach("sb_2").await.unwrap();
        assert_eq!(s.expired_sessions(200).await.unwrap(), vec![ses.clone()]);
        let gone = s.end_session(&ses).await.unwrap();
        assert_eq!(gone, vec![("sb_1".to_string(), "one".to_string())]);
        assert!(!s.session_live(&ses, "default", 50).await.unwrap());
    }
}
