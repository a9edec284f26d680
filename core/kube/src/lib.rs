//! `burrow-kube`: a [`burrow::Backend`] that keeps sandboxes on a
//! Kubernetes cluster.
//!
//! - **Records**: one `Sandbox` object (group `burrow.dev`) per name, named
//!   by a bijective encoding of the name ([`names`]); the API server's
//!   create conflict is the name claim, and every transition is a replace
//!   conditional on the resourceVersion read ([`record`]).
//! - **Runs**: one pod per generation, owned by the record, with the static
//!   agent copied in by an init container and run as the main container's
//!   init ([`pods`]).
//! - **Guest**: an exec'd session agent per backend and run, behind a
//!   [`burrow::relay::Relay`] ([`guest`]).
//! - **Reconciliation**: a record says Running only while its pod runs; a
//!   pod that failed, was evicted or was deleted behind the backend's back
//!   reads as Crashed with the reason, and a start past its deadline as
//!   Crashed (`start_failed`).
//!
//! Pause, live resize and metrics answer `unsupported`; sandboxes are never
//! attached to a process (a cluster outlives its callers).
//!
//! The files, as the local engine's: `store` (records, their pods,
//! reconciliation), `lifecycle` (starts, stops, and the shared
//! open/demand-start decision of calls that need a run), `reaper` (the idle
//! and max-duration checker), `backend` (the [`burrow::Backend`] impl).

mod backend;
mod client;
pub mod doctor;
pub mod guest;
mod lifecycle;
pub mod names;
pub mod pods;
pub mod pool_record;
mod pools;
mod reaper;
pub mod record;
pub mod settings;
mod store;

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use burrow::{Error, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

pub use record::Stored;
pub use settings::{KubeSettings, Source};

use guest::Guests;
use record::store_error;

/// How often waits look at the cluster again.
const POLL: Duration = Duration::from_millis(100);
/// Slack after a start's deadline before another caller calls it dead.
const START_SLACK: Duration = Duration::from_secs(10);
/// How long a stop waits for the pod to be gone beyond its grace.
const STOP_SLACK: Duration = Duration::from_secs(60);
/// The idle and duration checker's period.
const REAPER_PERIOD: Duration = Duration::from_secs(1);
/// How long an idle check waits for the pod's calls lock to answer.
const RECLAIM_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// A backend whose sandboxes live on a Kubernetes cluster.
#[derive(Debug)]
pub struct KubeBackend {
    settings: KubeSettings,
    source: Source,
    records: Api<DynamicObject>,
    pools: Api<DynamicObject>,
    pods: Api<Pod>,
    guests: Guests,
    /// This backend, for the tasks it starts (a drain's stop).
    me: Weak<KubeBackend>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Maps an API call's failure: 404 and 409 are the caller's business (see
/// [`is_status`]); an unreachable server is I/O; the rest is the store's.
fn api_error(what: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => Error::Unauthorized {
            reason: format!("{what}: {}", s.message),
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => Error::Io {
            context: format!("{what}: the Kubernetes API server is unreachable: {e}"),
            path: None,
            source: std::io::Error::other(e.to_string()),
        },
        _ => store_error(format!("{what}: {e}")),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl KubeBackend {
    /// Connects with `settings`: picks the credentials (see [`settings`]),
    /// checks that the API server answers, and installs the `Sandbox`
    /// CustomResourceDefinition if it is missing (which needs the right to
    /// create CRDs; otherwise apply [`record::crd`] once beforehand). Also
    /// starts the idle and max-duration checker of this backend.
    pub async fn connect(settings: KubeSettings) -> Result<Arc<KubeBackend>> {
        settings.validate()?;
        install_tls_provider();
        let source = settings::choose(&settings, &settings::Environment::current())?;
        let mut config = settings::client_config(&settings, &source).await?;
        config.default_namespace = settings.namespace.clone();
        let client = client::build(config).map_err(|e| Error::InvalidConfig {
            field: "kubernetes.kubeconfig".into(),
            reason: format!("{source}: {e}"),
        })?;
        client.apiserver_version().await.map_err(|e| Error::Io {
            context: format!("reaching the Kubernetes API server named by {source}: {e}"),
            path: None,
            source: std::io::Error::other(e.to_string()),
        })?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if namespaces
            .get_opt(&settings.namespace)
            .await
            .map_err(|e| api_error("looking up the namespace", e))?
            .is_none()
        {
            return Err(Error::InvalidConfig {
                field: "kubernetes.namespace".into(),
                reason: format!(
                    "namespace {:?} does not exist on the cluster named by {source}",
                    settings.namespace
                ),
            });
        }
        ensure_crd(&client, &settings.namespace).await?;
        let records =
            Api::namespaced_with(client.clone(), &settings.namespace, &record::api_resource());
        let pools = Api::namespaced_with(
            client.clone(),
            &settings.namespace,
            &pool_record::api_resource(),
        );
        let pods = Api::namespaced(client, &settings.namespace);
        let backend = Arc::new_cyclic(|me| KubeBackend {
            settings,
            source,
            records,
            pools,
            pods,
            guests: Guests::default(),
            me: me.clone(),
        });
        reaper::spawn_reaper(Arc::downgrade(&backend));
        reaper::spawn_pool_keeper(Arc::downgrade(&backend));
        Ok(backend)
    }

    /// Where the credentials came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The settings in use.
    pub fn settings(&self) -> &KubeSettings {
        &self.settings
    }
}

/// Installs the `Sandbox` CRD if the cluster does not have it yet, and
/// waits until the API server serves it. A definition another caller has
/// just created exists before it is served: an early return on "exists"
/// met a 404 on the first record write.
async fn ensure_crd(client: &kube::Client, namespace: &str) -> Result<()> {
    ensure_definition(client, namespace, record::crd(), &record::api_resource()).await?;
    ensure_definition(
        client,
        namespace,
        pool_record::crd(),
        &pool_record::api_resource(),
    )
    .await
}

/// Installs one resource definition if missing and waits until it is
/// served (see [`ensure_crd`]).
async fn ensure_definition(
    client: &kube::Client,
    namespace: &str,
    definition: serde_json::Value,
    resource: &kube::api::ApiResource,
) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{}.{}", resource.plural, resource.group);
    if crds
        .get_opt(&name)
        .await
        .map_err(|e| {
            api_error(
                &format!("looking up the {} resource definition", resource.kind),
                e,
            )
        })?
        .is_none()
    {
        let crd: CustomResourceDefinition = serde_json::from_value(definition)
            .map_err(|e| store_error(format!("the {} resource definition: {e}", resource.kind)))?;
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 409) => {}
            Err(e) => {
                let what = format!("installing the {} resource definition", resource.kind);
                return Err(api_error(&what, e));
            }
        }
    }
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    // Established, then served, within a few seconds.
    for _ in 0..100 {
        let established = match crds.get_opt(&name).await {
            Ok(Some(c)) => c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            _ => false,
        };
        if established {
            match objects.list(&ListParams::default().limit(1)).await {
                Ok(_) => return Ok(()),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(api_error(&format!("listing {} objects", resource.kind), e)),
            }
        }
        tokio::time::sleep(POLL).await;
    }
    Err(store_error(format!(
        "the {} resource definition was not served within 10 s",
        resource.kind
    )))
}

/// kube's TLS is built without a provider of its own: ring's, once.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}
