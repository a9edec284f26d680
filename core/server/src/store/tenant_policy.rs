//! A tenant's rules beyond its quotas, as the operator set them (`burrow
//! serve tenant create|set --allow-image ... --sandbox-max-memory ...`):
//! the images and registries its sandboxes may use and the most one of its
//! sandboxes may have. Read afresh for each request of the tenant (see
//! [`crate::tenancy::Caller::engine`]), so a change holds at once on every
//! replica.

use sqlx::Row;

use super::{Result, Store, StoreError};

/// A tenant's stored rules (`None`: not set, today's freedom).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TenantRules {
    /// The images its sandboxes may use: references (normalized) and
    /// repository prefixes (ending in `/`).
    pub allowed_images: Option<Vec<String>>,
    /// The registries (hosts, `docker.io` for Docker Hub) whose images its
    /// sandboxes may use.
    pub allowed_registries: Option<Vec<String>>,
    /// The most memory (MiB) one of its sandboxes may have.
    pub sandbox_max_memory_mb: Option<u64>,
    /// The most CPUs one of its sandboxes may have.
    pub sandbox_max_cpus: Option<f64>,
}

fn list_in(v: &Option<Vec<String>>) -> Result<Option<String>> {
    v.as_ref()
        .map(|l| serde_json::to_string(l).map_err(|e| StoreError::Corrupt(e.to_string())))
        .transpose()
}

fn list_out(v: Option<String>) -> Result<Option<Vec<String>>> {
    v.map(|s| {
        serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("tenant images: {e}")))
    })
    .transpose()
}

impl Store {
    /// The rules of `tenant` (`None`: no such tenant).
    pub async fn tenant_rules(&self, tenant: &str) -> Result<Option<TenantRules>> {
        let row = sqlx::query(
            "SELECT allowed_images, allowed_registries, sandbox_max_memory_mb, \
             sandbox_max_cpus FROM tenants WHERE name = $1",
        )
        .bind(tenant)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(TenantRules {
                allowed_images: list_out(r.try_get("allowed_images")?)?,
                allowed_registries: list_out(r.try_get("allowed_registries")?)?,
                sandbox_max_memory_mb: r
                    .try_get::<Option<i64>, _>("sandbox_max_memory_mb")?
                    .map(|n| u64::try_from(n).unwrap_or(0)),
                sandbox_max_cpus: r.try_get("sandbox_max_cpus")?,
            })
        })
        .transpose()
    }

    /// Sets the rules of `tenant`; false if there is no such tenant.
    pub async fn set_tenant_rules(&self, tenant: &str, rules: &TenantRules) -> Result<bool> {
        let images = list_in(&rules.allowed_images)?;
        let registries = list_in(&rules.allowed_registries)?;
        let _turn = self.write_turn().await;
        let r = sqlx::query(
            "UPDATE tenants SET allowed_images = $2, allowed_registries = $3, \
             sandbox_max_memory_mb = $4, sandbox_max_cpus = $5 WHERE name = $1",
        )
        .bind(tenant)
        .bind(images)
        .bind(registries)
        .bind(
            rules
                .sandbox_max_memory_mb
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
        .bind(rules.sandbox_max_cpus)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::sqlite;

    #[tokio::test]
    async fn rules_are_kept() {
        let (_d, s) = sqlite().await;
        assert_eq!(s.tenant_rules("team").await.unwrap(), None);
        s.create_tenant("team").await.unwrap();
        assert_eq!(
            s.tenant_rules("team").await.unwrap(),
            Some(TenantRules::default())
        );
        let r = TenantRules {
            allowed_images: Some(vec!["docker.io/library/busybox".into()]),
            allowed_registries: Some(vec![]),
            sandbox_max_memory_mb: Some(256),
            sandbox_max_cpus: Some(0.5),
        };
        assert!(s.set_tenant_rules("team", &r).await.unwrap());
        assert_eq!(s.tenant_rules("team").await.unwrap(), Some(r));
        assert!(!s
            .set_tenant_rules("nobody", &TenantRules::default())
            .await
            .unwrap());
    }
}
