//! The web console's logins (a session cookie stands for the token it was
//! made with) and the gateway's cold-start history the console plots.

use rand::RngCore;
use sqlx::Row;

use super::tokens::role;
use super::{hash_token, now_ms, Result, Store};
use crate::tenancy::Caller;

/// Cold starts kept per target.
pub const COLD_STARTS_KEPT: i64 = 50;

/// A console login, as [`Store::create_console_session`] made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// The cookie's value (stored only as its hash).
    pub id: String,
    /// The token that the requests of the session must carry in
    /// `X-Burrow-Csrf` when they change something.
    pub csrf: String,
}

/// A cold start of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ColdStart {
    /// When the call started it (ms since the epoch).
    pub at_ms: i64,
    /// How long the call waited for the workload (ms).
    pub ms: i64,
}

fn secret() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

impl Store {
    /// Opens a console session for the holder of `token` (a secret), until
    /// `expires_at`; `None` when nobody holds it.
    pub async fn create_console_session(
        &self,
        token: &str,
        expires_at: i64,
    ) -> Result<Option<ConsoleSession>> {
        let _turn = self.write_turn().await;
        let session = ConsoleSession {
            id: secret(),
            csrf: secret(),
        };
        let r = sqlx::query(
            "INSERT INTO console_sessions (id_hash, token_id, csrf, created_at, expires_at) \
             SELECT $1, id, $2, $3, $4 FROM api_tokens WHERE token_hash = $5",
        )
        .bind(hash_token(&session.id))
        .bind(&session.csrf)
        .bind(now_ms())
        .bind(expires_at)
        .bind(hash_token(token))
        .execute(&self.pool)
        .await?;
        Ok((r.rows_affected() == 1).then_some(session))
    }

    /// Who the session `id` (a cookie's value) is, and its CSRF token;
    /// `None` when it does not exist, has expired, or its token was
    /// revoked.
    pub async fn console_caller(&self, id: &str) -> Result<Option<(Caller, String)>> {
        let row = sqlx::query(
            "SELECT t.name, t.tenant, t.role, s.csrf FROM console_sessions s \
             JOIN api_tokens t ON t.id = s.token_id \
             WHERE s.id_hash = $1 AND s.expires_at > $2",
        )
        .bind(hash_token(id))
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            let caller = Caller {
                token: Some(r.try_get("name")?),
                tenant: r.try_get("tenant")?,
                role: role(&r.try_get::<String, _>("role")?)?,
            };
            Ok((caller, r.try_get("csrf")?))
        })
        .transpose()
    }

    /// Ends the session `id` (a logout).
    pub async fn delete_console_session(&self, id: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM console_sessions WHERE id_hash = $1")
            .bind(hash_token(id))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deletes the sessions that expired before `now`, and those whose
    /// token is gone; returns how many.
    pub async fn purge_console_sessions(&self, now: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "DELETE FROM console_sessions WHERE expires_at <= $1 \
             OR token_id NOT IN (SELECT id FROM api_tokens)",
        )
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    /// Records a cold start of `target`, keeping its last
    /// [`COLD_STARTS_KEPT`].
    pub async fn record_cold_start(&self, target: &str, start: ColdStart) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("INSERT INTO cold_starts (target_id, at, ms) VALUES ($1, $2, $3)")
            .bind(target)
            .bind(start.at_ms)
            .bind(start.ms)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "DELETE FROM cold_starts WHERE target_id = $1 AND at < (\
               SELECT MIN(at) FROM (SELECT at FROM cold_starts WHERE target_id = $1 \
               ORDER BY at DESC LIMIT $2) AS kept)",
        )
        .bind(target)
        .bind(COLD_STARTS_KEPT)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The last cold starts of `target`, oldest first.
    pub async fn cold_starts(&self, target: &str) -> Result<Vec<ColdStart>> {
        let rows = sqlx::query(
            "SELECT at, ms FROM cold_starts WHERE target_id = $1 ORDER BY at DESC LIMIT $2",
        )
        .bind(target)
        .bind(COLD_STARTS_KEPT)
        .fetch_all(&self.pool)
        .await?;
        let mut starts = rows
            .iter()
            .map(|r| {
                Ok(ColdStart {
                    at_ms: r.try_get("at")?,
                    ms: r.try_get("ms")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        starts.reverse();
        Ok(starts)
    }

    /// Forgets the cold starts of `target` (it was deleted).
    pub async fn delete_cold_starts(&self, target: &str) -> Result<()> {
        let _turn = self.write_turn().await;
        sqlx::query("DELETE FROM cold_starts WHERE target_id = $1")
            .bind(target)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::sqlite;
    use super::*;
    use crate::tenancy::Role;

    #[tokio::test]
    async fn a_session_stands_for_its_token_until_it_is_revoked_or_expires() {
        let (_dir, store) = sqlite().await;
        let secret = store
            .create_token("ops", "default", Role::Operator)
            .await
            .unwrap()
            .unwrap();
        assert!(store
            .create_console_session("bw_nobody", now_ms() + 60_000)
            .await
            .unwrap()
            .is_none());
        let s = store
            .create_console_session(&secret, now_ms() + 60_000)
            .await
            .unwrap()
            .unwrap();
        let (caller, csrf) = store.console_caller(&s.id).await.unwrap().unwrap();
        assert_eq!(caller.token.as_deref(), Some("ops"));
        assert_eq!(caller.role, Role::Operator);
        assert_eq!(csrf, s.csrf);
        assert!(store.console_caller(&s.csrf).await.unwrap().is_none());

        let expired = store
            .create_console_session(&secret, now_ms() - 1)
            .await
            .unwrap()
            .unwrap();
        assert!(store.console_caller(&expired.id).await.unwrap().is_none());
        assert_eq!(store.purge_console_sessions(now_ms()).await.unwrap(), 1);

        assert!(store.revoke_token("ops").await.unwrap());
        assert!(store.console_caller(&s.id).await.unwrap().is_none());
        assert_eq!(store.purge_console_sessions(now_ms()).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn cold_starts_keep_the_last_few_per_target() {
        let (_dir, store) = sqlite().await;
        for i in 0..COLD_STARTS_KEPT + 5 {
            let start = ColdStart {
                at_ms: i,
                ms: i * 2,
            };
            store.record_cold_start("a", start).await.unwrap();
        }
        let other = ColdStart { at_ms: 7, ms: 1 };
        store.record_cold_start("b", other).await.unwrap();
        let a = store.cold_starts("a").await.unwrap();
        assert_eq!(a.len(), COLD_STARTS_KEPT as usize);
        assert_eq!(a[0].at_ms, 5);
        assert_eq!(a.last().unwrap().ms, (COLD_STARTS_KEPT + 4) * 2);
        store.delete_cold_starts("a").await.unwrap();
        assert!(store.cold_starts("a").await.unwrap().is_empty());
        assert_eq!(store.cold_starts("b").await.unwrap(), vec![other]);
    }
}
