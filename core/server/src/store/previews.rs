//! Preview links of the gateway's own origin: how a browser reaches a
//! private target without an API token.
//!
//! A link carries a short-lived token ([`Store::create_preview`]) that the
//! gateway trades once ([`Store::exchange_preview`]) for a cookie of that
//! target's origin alone; the cookie is good for that target (and the
//! link's port, if it names one) until the link expires or is revoked, or
//! the API token that made it is revoked ([`Store::preview_caller`]). Only
//! hashes of the token and the cookie are stored.

use rand::RngCore;
use sqlx::Row;

use super::{hash_token, now_ms, Result, Store};

/// A preview link as made: what the API answers once (the token is never
/// shown again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// Its id (`pv_` and 32 hex digits): what revokes it.
    pub id: String,
    /// The secret the link carries (64 hex digits).
    pub token: String,
    /// When it stops working (ms since the epoch).
    pub expires_at: i64,
}

/// What a preview's cookie lets its holder reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewGrant {
    /// The preview's id.
    pub id: String,
    /// The tenant of the target.
    pub tenant: String,
    /// The target.
    pub target_id: String,
    /// The one port of it (`None`: the target's own).
    pub port: Option<u16>,
    /// When the cookie stops working (ms since the epoch).
    pub expires_at: i64,
}

fn secret(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

fn grant(r: &sqlx::any::AnyRow) -> Result<PreviewGrant> {
    let port: Option<i64> = r.try_get("port")?;
    Ok(PreviewGrant {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        target_id: r.try_get("target_id")?,
        port: port.and_then(|p| u16::try_from(p).ok()),
        expires_at: r.try_get("expires_at")?,
    })
}

/// The condition that a preview row still stands: not revoked, not
/// expired, and its API token (if one made it) not revoked.
const STANDS: &str = "p.revoked_at IS NULL AND p.expires_at > $2 \
     AND (p.token_id IS NULL OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = p.token_id))";

impl Store {
    /// Makes a preview link of `target_id` (of `tenant`), for `port` if
    /// given, until `expires_at`, on behalf of the API token named
    /// `token_name` (`None`: the unix socket or a server without auth).
    pub async fn create_preview(
        &self,
        tenant: &str,
        target_id: &str,
        port: Option<u16>,
        token_name: Option<&str>,
        expires_at: i64,
    ) -> Result<Preview> {
        let _turn = self.write_turn().await;
        let preview = Preview {
            id: format!("pv_{}", secret(16)),
            token: secret(32),
            expires_at,
        };
        sqlx::query(
            "INSERT INTO gateway_previews \
             (id, tenant, target_id, port, token_hash, token_id, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, (SELECT id FROM api_tokens WHERE name = $6), $7, $8)",
        )
        .bind(&preview.id)
        .bind(tenant)
        .bind(target_id)
        .bind(port.map(i64::from))
        .bind(hash_token(&preview.token))
        .bind(token_name)
        .bind(now_ms())
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(preview)
    }

    /// Trades a link's `token` for a new cookie value, once: the grant and
    /// the cookie, or `None` when the token is unknown, already traded,
    /// revoked or expired.
    pub async fn exchange_preview(&self, token: &str) -> Result<Option<(PreviewGrant, String)>> {
        let _turn = self.write_turn().await;
        let cookie = secret(32);
        let now = now_ms();
        // One conditional update: of two trades of one token, one wins.
        let r = sqlx::query(&format!(
            "UPDATE gateway_previews AS p SET cookie_hash = $1, exchanged_at = $2 \
             WHERE p.token_hash = $3 AND p.exchanged_at IS NULL AND {STANDS}"
        ))
        .bind(hash_token(&cookie))
        .bind(now)
        .bind(hash_token(token))
        .execute(&self.pool)
        .await?;
        if r.rows_affected() != 1 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT id, tenant, target_id, port, expires_at FROM gateway_previews \
             WHERE cookie_hash = $1",
        )
        .bind(hash_token(&cookie))
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((grant(&r)?, cookie))).transpose()
    }

    /// What the preview cookie `cookie` grants now (`None`: unknown,
    /// revoked, expired, or its token revoked).
    pub async fn preview_caller(&self, cookie: &str) -> Result<Option<PreviewGrant>> {
        let row = sqlx::query(&format!(
            "SELECT p.id, p.tenant, p.target_id, p.port, p.expires_at FROM gateway_previews p \
             WHERE p.cookie_hash = $1 AND {STANDS}"
        ))
        .bind(hash_token(cookie))
        .bind(now_ms())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| grant(&r)).transpose()
    }

    /// Revokes preview `id` of `target_id` (of `tenant`); whether it was
    /// there to revoke.
    pub async fn revoke_preview(&self, tenant: &str, target_id: &str, id: &str) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "UPDATE gateway_previews SET revoked_at = $1 \
             WHERE id = $2 AND tenant = $3 AND target_id = $4 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .bind(tenant)
        .bind(target_id)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Deletes the previews that expired before `now` and those of
    /// targets that are gone; returns how many.
    pub async fn purge_previews(&self, now: i64) -> Result<u64> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "DELETE FROM gateway_previews WHERE expires_at <= $1 \
             OR target_id NOT IN (SELECT id FROM targets)",
        )
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }
}
