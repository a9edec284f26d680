//! API tokens (stored as SHA-256 hashes, the secret shown once) and the
//! tenants they belong to.

use rand::RngCore;
use sqlx::Row;

use super::{hash_token, now_ms, random_id, Result, Store, StoreError, TokenInfo};
use crate::tenancy::{Caller, Role, DEFAULT_TENANT};

/// A tenant as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TenantInfo {
    /// Its name.
    pub name: String,
    /// How many tokens it has.
    pub tokens: i64,
    /// Creation time (0 for the default tenant).
    pub created_at: i64,
}

impl Store {
    /// Creates a token named `name` for `tenant` (which must exist) with
    /// `role`, and returns its secret (shown once). `None`: no such tenant.
    pub async fn create_token(
        &self,
        name: &str,
        tenant: &str,
        role: Role,
    ) -> Result<Option<String>> {
        let _turn = self.write_turn().await;
        let mut b = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut b);
        let secret = format!("bw_{}", hex::encode(b));
        let r = sqlx::query(
            "INSERT INTO api_tokens (id, name, token_hash, created_at, tenant, role) \
             SELECT $1, $2, $3, $4, name, $5 FROM tenants WHERE name = $6",
        )
        .bind(random_id("tok_"))
        .bind(name)
        .bind(hash_token(&secret))
        .bind(now_ms())
        .bind(role.as_str())
        .bind(tenant)
        .execute(&self.pool)
        .await?;
        Ok((r.rows_affected() == 1).then_some(secret))
    }

    /// The tokens (never their secrets), by name.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let rows =
            sqlx::query("SELECT id, name, tenant, role, created_at FROM api_tokens ORDER BY name")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenInfo {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    tenant: r.try_get("tenant")?,
                    role: role(&r.try_get::<String, _>("role")?)?,
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

    /// Who holds the secret `secret`, if anybody.
    pub async fn check_token(&self, secret: &str) -> Result<Option<Caller>> {
        let row = sqlx::query("SELECT name, tenant, role FROM api_tokens WHERE token_hash = $1")
            .bind(hash_token(secret))
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(Caller {
                token: Some(r.try_get("name")?),
                tenant: r.try_get("tenant")?,
                role: role(&r.try_get::<String, _>("role")?)?,
            })
        })
        .transpose()
    }

    /// Creates the tenant `name` (checked by the caller); false if it
    /// exists.
    pub async fn create_tenant(&self, name: &str) -> Result<bool> {
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "INSERT INTO tenants (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// The tenants, by name, with their tokens counted.
    pub async fn list_tenants(&self) -> Result<Vec<TenantInfo>> {
        let rows = sqlx::query(
            "SELECT t.name, t.created_at, \
             (SELECT COUNT(*) FROM api_tokens k WHERE k.tenant = t.name) AS tokens \
             FROM tenants t ORDER BY t.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(TenantInfo {
                    name: r.try_get("name")?,
                    tokens: r.try_get("tokens")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Removes the tenant `name` and its tokens (its sandboxes are the
    /// engine's, and stay until removed there); false if there was none.
    /// The default tenant stays.
    pub async fn remove_tenant(&self, name: &str) -> Result<bool> {
        if name == DEFAULT_TENANT {
            return Ok(false);
        }
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM api_tokens WHERE tenant = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM tenants WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() > 0)
    }
}

pub(super) fn role(s: &str) -> Result<Role> {
    Role::parse(s).ok_or_else(|| StoreError::Corrupt(format!("token role {s:?}")))
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::super::testutil::sqlite;
    use crate::tenancy::Role;

    #[tokio::test]
    async fn tokens_are_stored_hashed() {
        let (_d, s) = sqlite().await;
        let secret = s
            .create_token("ci", "default", Role::Admin)
            .await
            .unwrap()
            .unwrap();
        let caller = s.check_token(&secret).await.unwrap().unwrap();
        assert_eq!(caller.token.as_deref(), Some("ci"));
        assert_eq!(
            (caller.tenant.as_str(), caller.role),
            ("default", Role::Admin)
        );
        assert_eq!(s.check_token("bw_nope").await.unwrap(), None);
        let stored: String = sqlx::query("SELECT token_hash FROM api_tokens")
            .fetch_one(s.pool())
            .await
            .unwrap()
            .try_get("token_hash")
            .unwrap();
        assert_ne!(stored, secret);
        assert!(
            s.create_token("ci", "default", Role::Admin).await.is_err(),
            "names are unique"
        );
        assert!(s.revoke_token("ci").await.unwrap());
        assert_eq!(s.check_token(&secret).await.unwrap(), None);
    }

    #[tokio::test]
    async fn tokens_belong_to_tenants() {
        let (_d, s) = sqlite().await;
        assert_eq!(
            s.create_token("x", "team", Role::Operator).await.unwrap(),
            None
        );
        assert!(s.create_tenant("team").await.unwrap());
        assert!(!s.create_tenant("team").await.unwrap());
        let secret = s
            .create_token("x", "team", Role::Operator)
            .await
            .unwrap()
            .unwrap();
        let caller = s.check_token(&secret).await.unwrap().unwrap();
        assert_eq!(
            (caller.tenant.as_str(), caller.role),
            ("team", Role::Operator)
        );
        let tenants = s.list_tenants().await.unwrap();
        let names: Vec<(&str, i64)> = tenants
            .iter()
            .map(|t| (t.name.as_str(), t.tokens))
            .collect();
        assert_eq!(names, [("default", 0), ("team", 1)]);
        assert!(!s.remove_tenant("default").await.unwrap());
        assert!(s.remove_tenant("team").await.unwrap());
        assert_eq!(
            s.check_token(&secret).await.unwrap(),
            None,
            "its tokens went with it"
        );
        assert!(!s.remove_tenant("team").await.unwrap());
    }
}
