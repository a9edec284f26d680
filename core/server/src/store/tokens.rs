//! API tokens: stored as SHA-256 hashes, the secret shown once.

use rand::RngCore;
use sqlx::Row;

use super::{hash_token, now_ms, random_id, Result, Store, TokenInfo};

impl Store {
    /// Creates a token named `name` and returns its secret (shown once).
    pub async fn create_token(&self, name: &str) -> Result<String> {
        let _turn = self.write_turn().await;
        let mut b = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut b);
        let secret = format!("bw_{}", hex::encode(b));
        sqlx::query(
            "INSERT INTO api_tokens (id, name, token_hash, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(random_id("tok_"))
        .bind(name)
        .bind(hash_token(&secret))
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(secret)
    }

    /// The tokens (names and ids only).
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let rows = sqlx::query("SELECT id, name, created_at FROM api_tokens ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenInfo {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Deletes the token named `name`; false if there was none.
    pub async fn revoke_token(&self, name: &str) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// The name of the token whose secret is `secret`, if any.
    pub async fn check_token(&self, secret: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT name FROM api_tokens WHERE token_hash = $1")
            .bind(hash_token(secret))
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("name")).transpose()?)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::super::testutil::sqlite;

    #[tokio::test]
    async fn tokens_are_stored_hashed() {
        let (_d, s) = sqlite().await;
        let secret = s.create_token("ci").await.unwrap();
        assert_eq!(s.check_token(&secret).await.unwrap().as_deref(), Some("ci"));
        assert_eq!(s.check_token("bw_nope").await.unwrap(), None);
        let stored: String = sqlx::query("SELECT token_hash FROM api_tokens")
            .fetch_one(s.pool())
            .await
            .unwrap()
            .try_get("token_hash")
            .unwrap();
        assert_ne!(stored, secret);
        assert!(s.create_token("ci").await.is_err(), "names are unique");
        assert!(s.revoke_token("ci").await.unwrap());
        assert_eq!(s.check_token(&secret).await.unwrap(), None);
    }
}
