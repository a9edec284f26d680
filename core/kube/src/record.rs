//! The record of a sandbox: a `Sandbox` object (group `burrow.dev`) per
//! name, the API server's copy being the source of truth.
//!
//! The object's `spec` holds the [`SandboxInfo`] as burrow's own JSON plus
//! what only this backend needs (when the guest was last used, a stop in
//! progress). Every transition is a `replace` carrying the resourceVersion
//! it read: the API server applies it only if nobody wrote in between (409
//! otherwise), the cluster's `UPDATE ... WHERE status IN (...)`.

use burrow::{Error, Result, SandboxId, SandboxInfo};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use serde::{Deserialize, Serialize};

use crate::names;

/// API group of burrow's objects.
pub const GROUP: &str = "burrow.dev";
/// Version of the `Sandbox` kind.
pub const VERSION: &str = "v1";
/// Kind of the record objects.
pub const KIND: &str = "Sandbox";
/// Plural (the resource's URL segment).
pub const PLURAL: &str = "sandboxes";
/// Label carrying the sandbox id (with `-` for `_`) on records and pods.
pub const ID_LABEL: &str = "burrow.dev/id";
/// Label carrying the run generation on pods.
pub const GENERATION_LABEL: &str = "burrow.dev/generation";
/// Label marking the records of a pool's warm sandboxes (`true`).
pub const WARM_LABEL: &str = "burrow.dev/warm";
/// Label marking every object this backend made.
pub const MANAGED_LABEL: &str = "app.kubernetes.io/managed-by";

/// The `Sandbox` resource, for dynamic API calls.
pub fn api_resource() -> ApiResource {
    resource(KIND, PLURAL)
}

/// A resource of burrow's group, for dynamic API calls.
pub(crate) fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The CustomResourceDefinition of `Sandbox` (`kubectl apply`-able; also
/// created by [`crate::KubeBackend::connect`] when missing and allowed).
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
                "singular": "sandbox",
                "shortNames": ["bsb"]
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
                            "x-kubernetes-preserve-unknown-fields": true
                        }
                    }
                }},
                "additionalPrinterColumns": [
                    {"name": "Name", "type": "string", "jsonPath": ".spec.info.name"},
                    {"name": "Status", "type": "string", "jsonPath": ".spec.info.status"},
                    {"name": "Generation", "type": "integer", "jsonPath": ".spec.info.generation"}
                ]
            }]
        }
    })
}

/// A stop this backend started: the pod is being deleted on purpose, so a
/// pod found gone is the stop finishing, not a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopping {
    /// The run being stopped.
    pub generation: u64,
    /// The exit reason to record (`stopped`, `killed`, `idle_timeout`, ...).
    pub reason: burrow::ExitReason,
    /// When the stop began (ms since the epoch).
    pub at_ms: i64,
}

/// What the record object's `spec` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The sandbox as burrow describes it.
    pub info: SandboxInfo,
    /// Last use of the guest (ms since the epoch): the idle clock.
    #[serde(default)]
    pub activity_ms: i64,
    /// A stop in progress, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<Stopping>,
    /// A pool's warm sandbox (named `pool/<pool>/<slot>`), not yet claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<WarmMark>,
}

/// What marks a warm sandbox's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WarmMark {
    /// Its pool.
    pub pool: String,
    /// Its place in the pool, `0..size` (its record's name says it too).
    pub slot: u32,
    /// A claim in progress: the create it goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimMark>,
}

/// A claim of a warm sandbox, between its first write (this mark) and its
/// last (the warm record's removal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimMark {
    /// The name the sandbox goes to.
    pub name: String,
    /// When the claim was marked (ms since the epoch).
    pub at_ms: i64,
}

/// A record as read: its spec and what a conditional write needs.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The content.
    pub spec: Spec,
    /// The version read (the precondition of the next write).
    pub resource_version: String,
    /// The object's uid (owner of its pods).
    pub uid: String,
}

impl Stored {
    /// The sandbox as stored.
    pub fn info(&self) -> &SandboxInfo {
        &self.spec.info
    }

    /// Reads a record object; an object that is not a burrow record (wrong
    /// name, unreadable spec) is a store error naming it.
    pub fn from_object(object: DynamicObject) -> Result<Stored> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let spec = object
            .data
            .get("spec")
            .cloned()
            .ok_or_else(|| store_error(format!("record {name} has no spec")))?;
        let spec: Spec = serde_json::from_value(spec)
            .map_err(|e| store_error(format!("record {name} is unreadable: {e}")))?;
        if names::record_name(&spec.info.name) != name {
            return Err(store_error(format!(
                "record {name} holds sandbox {:?}, which is not its name",
                spec.info.name
            )));
        }
        Ok(Stored {
            spec,
            resource_version: object.metadata.resource_version.unwrap_or_default(),
            uid: object.metadata.uid.unwrap_or_default(),
        })
    }

    /// The object for a conditional replace of this record with `spec`.
    pub fn replacement(&self, spec: &Spec) -> Result<DynamicObject> {
        let mut object = new_object(spec)?;
        object.metadata.resource_version = Some(self.resource_version.clone());
        object.metadata.uid = Some(self.uid.clone());
        Ok(object)
    }
}

/// A new record object (no resourceVersion: a create).
pub fn new_object(spec: &Spec) -> Result<DynamicObject> {
    let ar = api_resource();
    let mut object = DynamicObject::new(&names::record_name(&spec.info.name), &ar);
    object.metadata = ObjectMeta {
        name: Some(names::record_name(&spec.info.name)),
        labels: Some({
            let mut labels: std::collections::BTreeMap<String, String> = [
                (ID_LABEL.to_string(), names::id_label(&spec.info.id)),
                (MANAGED_LABEL.to_string(), "burrow".to_string()),
            ]
            .into();
            if spec.warm.is_some() {
                labels.insert(WARM_LABEL.to_string(), "true".to_string());
            }
            labels
        }),
        ..ObjectMeta::default()
    };
    object.data = serde_json::json!({
        "spec": serde_json::to_value(spec)
            .map_err(|e| store_error(format!("encoding the record: {e}")))?
    });
    Ok(object)
}

/// The label selector of the record of `id`.
pub fn id_selector(id: &SandboxId) -> String {
    format!("{ID_LABEL}={}", names::id_label(id))
}

/// A failure of the record store (the API server).
pub fn store_error(reason: impl Into<String>) -> Error {
    Error::Store {
        reason: reason.into(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burrow::SandboxConfig;

    fn spec(name: &str) -> Spec {
        Spec {
            info: SandboxInfo::new(SandboxId::new(), name, SandboxConfig::new("busybox")),
            activity_ms: 7,
            stopping: None,
            warm: None,
        }
    }

    #[test]
    fn records_round_trip_through_objects() {
        let s = spec("web/1 é");
        let mut object = new_object(&s).unwrap();
        object.metadata.resource_version = Some("42".into());
        object.metadata.uid = Some("u-1".into());
        let stored = Stored::from_object(object).unwrap();
        assert_eq!(stored.spec, s);
        assert_eq!(stored.resource_version, "42");
        let again = stored.replacement(&stored.spec).unwrap();
        assert_eq!(again.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            again.metadata.labels.unwrap()[ID_LABEL],
            names::id_label(&s.info.id)
        );
    }

    #[test]
    fn a_record_under_a_foreign_name_is_refused() {
        let s = spec("web");
        let mut object = new_object(&s).unwrap();
        object.metadata.name = Some(names::record_name("other"));
        let err = Stored::from_object(object).unwrap_err();
        assert_eq!(err.code(), burrow::ErrorCode::Store);
        let mut object = new_object(&s).unwrap();
        object.data = serde_json::json!({"spec": {"info": 3}});
        assert_eq!(
            Stored::from_object(object).unwrap_err().code(),
            burrow::ErrorCode::Store
        );
    }

    #[test]
    fn the_crd_names_the_kind() {
        let crd = crd();
        assert_eq!(crd["metadata"]["name"], "sandboxes.burrow.dev");
        assert_eq!(crd["spec"]["names"]["kind"], KIND);
    }
}
