//! The record of a warm pool: a `SandboxPool` object (group `burrow.dev`)
//! per pool, named as a sandbox's record is (`n-<base32(name)>`). Its
//! `spec` is the definition (the configuration and the size: a `scale`
//! subresource maps `replicas` to `spec.size`, so `kubectl scale`, a
//! HorizontalPodAutoscaler or KEDA can set it); its `status` the counts
//! (warm, starting, claims, misses, the last refill's time), written by
//! whichever backend refills it.

use burrow::{PoolInfo, Result, SandboxConfig};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use serde::{Deserialize, Serialize};

use crate::names;
use crate::record::{store_error, GROUP, MANAGED_LABEL, VERSION};

/// Kind of the pool objects.
pub const KIND: &str = "SandboxPool";
/// Plural (the resource's URL segment).
pub const PLURAL: &str = "sandboxpools";

/// The `SandboxPool` resource, for dynamic API calls.
pub fn api_resource() -> ApiResource {
    crate::record::resource(KIND, PLURAL)
}

/// The CustomResourceDefinition of `SandboxPool` (`kubectl apply`-able;
/// also created by [`crate::KubeBackend::connect`] when missing and
/// allowed).
pub fn crd() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "plural": PLURAL,
                "singular": "sandboxpool",
                "shortNames": ["bsp"]
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["name", "config", "size"],
                            "properties": {
                                "name": {"type": "string"},
                                "config": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": true
                                },
                                "size": {"type": "integer", "minimum": 0, "maximum": burrow::MAX_POOL_SIZE}
                            }
                        },
                        "status": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true
                        }
                    }
                }},
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.warm"
                    }
                },
                "additionalPrinterColumns": [
                    {"name": "Pool", "type": "string", "jsonPath": ".spec.name"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Warm", "type": "integer", "jsonPath": ".status.warm"},
                    {"name": "Claims", "type": "integer", "jsonPath": ".status.claims"},
                    {"name": "Misses", "type": "integer", "jsonPath": ".status.misses"}
                ]
            }]
        }
    })
}

/// A pool object's `spec`: its definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDef {
    /// The pool's name.
    pub name: String,
    /// What its sandboxes run.
    pub config: SandboxConfig,
    /// How many to keep warm.
    pub size: u32,
}

/// A pool object's `status`: its counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// Warm sandboxes running and unclaimed.
    #[serde(default)]
    pub warm: u32,
    /// Warm sandboxes still starting.
    #[serde(default)]
    pub starting: u32,
    /// Creates that claimed one.
    #[serde(default)]
    pub claims: u64,
    /// Creates that found none warm.
    #[serde(default)]
    pub misses: u64,
    /// How long the last refill that started sandboxes took, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refill_ms: Option<u64>,
}

/// A pool object as read.
#[derive(Debug, Clone)]
pub struct StoredPool {
    /// Its definition.
    pub def: PoolDef,
    /// Its counts.
    pub status: PoolStatus,
    /// When it was made (ms since the epoch).
    pub created_at_ms: i64,
    /// The version read (the precondition of the next write).
    pub resource_version: String,
}

impl StoredPool {
    /// Reads a pool object; one that is not a burrow pool is a store
    /// error naming it.
    pub fn from_object(object: &DynamicObject) -> Result<StoredPool> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let field = |f: &str| object.data.get(f).cloned().unwrap_or_default();
        let def: PoolDef = serde_json::from_value(field("spec"))
            .map_err(|e| store_error(format!("pool record {name} is unreadable: {e}")))?;
        if names::record_name(&def.name) != name {
            return Err(store_error(format!(
                "pool record {name} holds pool {:?}, which is not its name",
                def.name
            )));
        }
        let status = match field("status") {
            serde_json::Value::Null => PoolStatus::default(),
            v => serde_json::from_value(v)
                .map_err(|e| store_error(format!("pool record {name}'s status: {e}")))?,
        };
        let created_at_ms = object
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .unwrap_or_default();
        Ok(StoredPool {
            def,
            status,
            created_at_ms,
            resource_version: object.metadata.resource_version.clone().unwrap_or_default(),
        })
    }

    /// The pool as burrow describes it.
    pub fn info(&self) -> PoolInfo {
        let mut info = PoolInfo::new(&self.def.name, self.def.config.clone(), self.def.size);
        info.warm = self.status.warm;
        info.starting = self.status.starting;
        info.claims = self.status.claims;
        info.misses = self.status.misses;
        info.last_refill_ms = self.status.last_refill_ms;
        info.created_at_ms = self.created_at_ms;
        info
    }

    /// The object for a conditional replace of the status with `status`.
    pub fn with_status(&self, status: &PoolStatus) -> Result<DynamicObject> {
        let mut object = new_object(&self.def)?;
        object.metadata.resource_version = Some(self.resource_version.clone());
        object.data["status"] = serde_json::to_value(status)
            .map_err(|e| store_error(format!("encoding a pool's status: {e}")))?;
        Ok(object)
    }
}

/// A new pool object (no resourceVersion: a create).
pub fn new_object(def: &PoolDef) -> Result<DynamicObject> {
    let ar = api_resource();
    let name = names::record_name(&def.name);
    let mut object = DynamicObject::new(&name, &ar);
    object.metadata = ObjectMeta {
        name: Some(name),
        labels: Some([(MANAGED_LABEL.to_string(), "burrow".to_string())].into()),
        ..ObjectMeta::default()
    };
    object.data = serde_json::json!({
        "spec": serde_json::to_value(def)
            .map_err(|e| store_error(format!("encoding a pool: {e}")))?
    });
    Ok(object)
}
