//! What `burrow doctor --kubernetes` checks: that the settings reach a
//! cluster, that the runtime classes they name exist, and that a probe
//! sandbox under each one really runs. A RuntimeClass that exists proves
//! nothing (its handler may be missing on every node), so each probe starts
//! a real sandbox from the agent image, reads the guest's `/proc/version`
//! through the agent, and removes the sandbox again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::{Backend, BackendExt, Error, ErrorCode, OciRuntime, SandboxConfig};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::Api;
use serde::Serialize;

use crate::{KubeBackend, KubeSettings};

/// The findings of [`check`].
#[derive(Debug, Serialize)]
pub struct Report {
    /// Where the credentials came from.
    pub source: String,
    /// The API server's version (`major.minor`, git version).
    pub server_version: String,
    /// The namespace of records and pods.
    pub namespace: String,
    /// The image of the agent's init container.
    pub agent_image: String,
    /// The pods' image pull policy.
    pub image_pull_policy: String,
    /// One entry per runtime class a sandbox can ask for: the default one
    /// (`runtime_class`), then gVisor's (`gvisor_runtime_class`, used for
    /// `runtime = runsc`).
    pub classes: Vec<ClassReport>,
}

impl Report {
    /// Whether every required class ran its probe, and no optional class
    /// that exists failed its probe.
    pub fn ok(&self) -> bool {
        self.classes.iter().all(ClassReport::ok)
    }
}

/// One runtime class and its probe.
#[derive(Debug, Serialize)]
pub struct ClassReport {
    /// `default` or `gvisor`.
    pub role: &'static str,
    /// The RuntimeClass; `None`: the cluster's default runtime (no class).
    pub runtime_class: Option<String>,
    /// Whether a missing class is a failure: the default class always is;
    /// gVisor's only matters to sandboxes that ask for runsc.
    pub required: bool,
    /// What happened.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl ClassReport {
    /// See [`Report::ok`].
    pub fn ok(&self) -> bool {
        match self.outcome {
            Outcome::Ran { .. } => true,
            Outcome::Missing => !self.required,
            Outcome::Failed { .. } => false,
        }
    }
}

/// The outcome of one class's check.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Outcome {
    /// The probe sandbox ran.
    Ran {
        /// The RuntimeClass's handler (`None` for the default runtime).
        handler: Option<String>,
        /// The guest's `/proc/version`, first line.
        kernel: String,
        /// Create to Running of the probe, in milliseconds.
        start_ms: u64,
    },
    /// The cluster has no RuntimeClass of that name.
    Missing,
    /// The class exists (or is the default) but its probe failed.
    Failed {
        /// The error's code.
        code: ErrorCode,
        /// The error.
        reason: String,
    },
}

/// Connects with `settings` and checks each runtime class, each probe
/// bounded by `probe_timeout`. Fails only when the cluster cannot be
/// reached at all (bad credentials, unknown context, unreachable API
/// server, missing namespace: the errors of [`KubeBackend::connect`]).
pub async fn check(settings: KubeSettings, probe_timeout: Duration) -> Result<Report, Error> {
    let backend = KubeBackend::connect(settings.clone()).await?;
    let client = backend.pods.clone().into_client();
    let version = client
        .apiserver_version()
        .await
        .map(|v| format!("{}.{} ({})", v.major, v.minor, v.git_version))
        .unwrap_or_default();
    let classes: Api<RuntimeClass> = Api::all(client);
    let mut reports = Vec::new();
    for (role, class, runtime, required) in [
        (
            "default",
            settings.runtime_class.clone(),
            OciRuntime::Runc,
            true,
        ),
        (
            "gvisor",
            Some(settings.gvisor_runtime_class.clone()),
            OciRuntime::Runsc,
            false,
        ),
    ] {
        let outcome = match &class {
            None => probe(&backend, runtime, None, probe_timeout).await,
            Some(name) => match classes.get_opt(name).await {
                Ok(None) => Outcome::Missing,
                Ok(Some(rc)) => probe(&backend, runtime, Some(rc.handler), probe_timeout).await,
                Err(e) => failed(&crate::api_error("looking up the RuntimeClass", e)),
            },
        };
        reports.push(ClassReport {
            role,
            runtime_class: class,
            required,
            outcome,
        });
    }
    Ok(Report {
        source: backend.source().to_string(),
        server_version: version,
        namespace: settings.namespace,
        agent_image: settings.agent_image,
        image_pull_policy: settings.image_pull_policy,
        classes: reports,
    })
}

fn failed(e: &Error) -> Outcome {
    Outcome::Failed {
        code: e.code(),
        reason: e.to_string(),
    }
}

/// Starts a sandbox of the agent image under `runtime`'s class, reads its
/// kernel, and destroys it whatever happened.
async fn probe(
    backend: &Arc<KubeBackend>,
    runtime: OciRuntime,
    handler: Option<String>,
    timeout: Duration,
) -> Outcome {
    let b: Arc<dyn Backend> = backend.clone();
    let name = format!(
        "burrow-doctor-{}",
        burrow::SandboxId::new().as_str()[3..13].to_ascii_lowercase()
    );
    let mut config = SandboxConfig::new(backend.settings.agent_image.clone());
    config.runtime = Some(runtime);
    config.startup_timeout = timeout;
    let began = Instant::now();
    let ran = async {
        let sandbox = burrow::Sandbox::builder(&name)
            .config(config)
            .backend(b.clone())
            .create()
            .await?;
        let start_ms = began.elapsed().as_millis() as u64;
        let version = sandbox.fs().read("/proc/version").await?;
        let kernel = String::from_utf8_lossy(&version)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        Ok::<_, Error>((kernel, start_ms))
    }
    .await;
    match b.destroy_by_name(&name).await {
        Ok(()) => {}
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => {
            tracing::warn!(sandbox = %name, error = %e, "removing the doctor's probe sandbox failed");
        }
    }
    match ran {
        Ok((kernel, start_ms)) => Outcome::Ran {
            handler,
            kernel,
            start_ms,
        },
        Err(e) => failed(&e),
    }
}
