//! The backend's settings and where its cluster credentials come from.
//!
//! Credentials, first match wins:
//! 1. a kubeconfig set explicitly ([`KubeSettings::kubeconfig`]: the
//!    `BURROW_KUBECONFIG` variable or the serve config's
//!    `kubernetes.kubeconfig`);
//! 2. the in-cluster service account (a pod with
//!    `KUBERNETES_SERVICE_HOST` and its token mounted);
//! 3. `$KUBECONFIG`;
//! 4. `~/.kube/config`.
//!
//! An explicit file that cannot be loaded, or an unknown context, is an
//! error naming the file; nothing falls through to the next source.

use std::path::PathBuf;

use burrow::{Error, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Settings of a [`crate::KubeBackend`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// An explicit kubeconfig file (beats every other source).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the file's current context).
    pub context: Option<String>,
    /// Namespace of the records and pods.
    pub namespace: String,
    /// RuntimeClass of pods whose sandbox asks for no particular runtime
    /// (`None`: the cluster's default).
    pub runtime_class: Option<String>,
    /// RuntimeClass of sandboxes with runtime `runsc` (gVisor).
    pub gvisor_runtime_class: String,
    /// `imagePullPolicy` of the pods' containers.
    pub image_pull_policy: String,
    /// The image holding the static guest agent.
    pub agent_image: String,
    /// The agent's path inside that image.
    pub agent_image_path: String,
}

impl Default for KubeSettings {
    fn default() -> Self {
        KubeSettings {
            kubeconfig: None,
            context: None,
            namespace: "default".into(),
            runtime_class: None,
            gvisor_runtime_class: "gvisor".into(),
            image_pull_policy: "IfNotPresent".into(),
            agent_image: format!("burrow.dev/agent:{}", env!("CARGO_PKG_VERSION")),
            agent_image_path: "/burrow-agent".into(),
        }
    }
}

impl KubeSettings {
    /// The defaults, then the environment: `BURROW_KUBECONFIG`,
    /// `BURROW_KUBE_CONTEXT`, `BURROW_KUBE_NAMESPACE`,
    /// `BURROW_KUBE_RUNTIME_CLASS`, `BURROW_KUBE_GVISOR_RUNTIME_CLASS`,
    /// `BURROW_KUBE_IMAGE_PULL_POLICY`, `BURROW_KUBE_AGENT_IMAGE`.
    pub fn from_env() -> Result<KubeSettings> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut s = KubeSettings {
            kubeconfig: var("BURROW_KUBECONFIG").map(PathBuf::from),
            context: var("BURROW_KUBE_CONTEXT"),
            runtime_class: var("BURROW_KUBE_RUNTIME_CLASS"),
            ..KubeSettings::default()
        };
        if let Some(ns) = var("BURROW_KUBE_NAMESPACE") {
            s.namespace = ns;
        }
        if let Some(rc) = var("BURROW_KUBE_GVISOR_RUNTIME_CLASS") {
            s.gvisor_runtime_class = rc;
        }
        if let Some(p) = var("BURROW_KUBE_IMAGE_PULL_POLICY") {
            s.image_pull_policy = p;
        }
        if let Some(i) = var("BURROW_KUBE_AGENT_IMAGE") {
            s.agent_image = i;
        }
        s.validate()?;
        Ok(s)
    }

    /// Checks the values that Kubernetes would otherwise refuse later, at
    /// every pod.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, reason: String| Error::InvalidConfig {
            field: field.into(),
            reason,
        };
        if !matches!(
            self.image_pull_policy.as_str(),
            "Always" | "IfNotPresent" | "Never"
        ) {
            return Err(bad(
                "kubernetes.image_pull_policy",
                format!(
                    "{:?} is not Always, IfNotPresent or Never",
                    self.image_pull_policy
                ),
            ));
        }
        if !is_dns_label(&self.namespace) {
            return Err(bad(
                "kubernetes.namespace",
                format!("{:?} is not a DNS-1123 label", self.namespace),
            ));
        }
        for (field, class) in [
            ("kubernetes.runtime_class", self.runtime_class.as_deref()),
            (
                "kubernetes.gvisor_runtime_class",
                Some(self.gvisor_runtime_class.as_str()),
            ),
        ] {
            if let Some(c) = class {
                if !is_dns_subdomain(c) {
                    return Err(bad(field, format!("{c:?} is not a valid object name")));
                }
            }
        }
        if self.agent_image.trim().is_empty() {
            return Err(bad("kubernetes.agent_image", "empty".into()));
        }
        Ok(())
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain as Kubernetes checks object names: at most 253
/// characters of dot-separated `[a-z0-9]([-a-z0-9]*[a-z0-9])?` parts (no
/// per-part length limit, unlike a label).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// Where the credentials came from (named in errors and by `burrow doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The explicit kubeconfig file.
    Explicit(PathBuf),
    /// The in-cluster service account.
    InCluster,
    /// `$KUBECONFIG`.
    EnvKubeconfig(String),
    /// `~/.kube/config`.
    HomeKubeconfig(PathBuf),
}

impl Source {
    /// A stable name of the source, for logs and checks: `explicit`,
    /// `in_cluster`, `kubeconfig_env` or `kubeconfig_home`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Explicit(_) => "explicit",
            Source::InCluster => "in_cluster",
            Source::EnvKubeconfig(_) => "kubeconfig_env",
            Source::HomeKubeconfig(_) => "kubeconfig_home",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Explicit(p) => write!(f, "kubeconfig {} (set explicitly)", p.display()),
            Source::InCluster => f.write_str("the in-cluster service account"),
            Source::EnvKubeconfig(v) => write!(f, "KUBECONFIG={v}"),
            Source::HomeKubeconfig(p) => write!(f, "kubeconfig {}", p.display()),
        }
    }
}

/// The inputs of the choice, so that the order can be tested without the
/// process's own environment.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `KUBERNETES_SERVICE_HOST` is set (and the token file exists).
    pub in_cluster: bool,
    /// `$KUBECONFIG`.
    pub kubeconfig_var: Option<String>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
}

impl Environment {
    /// This process's.
    pub fn current() -> Environment {
        Environment {
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
                && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
                    .exists(),
            kubeconfig_var: std::env::var("KUBECONFIG").ok().filter(|v| !v.is_empty()),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

/// Which source the settings and `env` select (without reading it).
pub fn choose(settings: &KubeSettings, env: &Environment) -> Result<Source> {
    if let Some(p) = &settings.kubeconfig {
        return Ok(Source::Explicit(p.clone()));
    }
    if env.in_cluster {
        return Ok(Source::InCluster);
    }
    if let Some(v) = &env.kubeconfig_var {
        return Ok(Source::EnvKubeconfig(v.clone()));
    }
    if let Some(home) = &env.home {
        let p = home.join(".kube/config");
        if p.exists() {
            return Ok(Source::HomeKubeconfig(p));
        }
    }
    Err(Error::InvalidConfig {
        field: "kubernetes.kubeconfig".into(),
        reason: "no cluster credentials: set BURROW_KUBECONFIG (or kubernetes.kubeconfig), \
                 run in a pod with a service account, or set KUBECONFIG or ~/.kube/config"
            .into(),
    })
}

/// The client configuration of `source`.
pub async fn client_config(settings: &KubeSettings, source: &Source) -> Result<kube::Config> {
    let options = KubeConfigOptions {
        context: settings.context.clone(),
        ..KubeConfigOptions::default()
    };
    let unloadable = |what: String, e: &dyn std::fmt::Display| Error::InvalidConfig {
        field: "kubernetes.kubeconfig".into(),
        reason: format!("{what}: {e}"),
    };
    match source {
        Source::InCluster => {
            kube::Config::incluster().map_err(|e| unloadable(source.to_string(), &e))
        }
        Source::Explicit(path) | Source::HomeKubeconfig(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|e| unloadable(source.to_string(), &e))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| unloadable(source.to_string(), &e))
        }
        Source::EnvKubeconfig(_) => {
            let file = Kubeconfig::from_env()
                .map_err(|e| unloadable(source.to_string(), &e))?
                .ok_or_else(|| unloadable(source.to_string(), &"no file"))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| unloadable(source.to_string(), &e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_beats_in_cluster_beats_env_beats_home() {
        let home = std::env::temp_dir().join(format!("burrow-kube-home-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".kube")).unwrap();
        std::fs::write(home.join(".kube/config"), "{}").unwrap();
        let mut settings = KubeSettings {
            kubeconfig: Some("/explicit".into()),
            ..KubeSettings::default()
        };
        let mut env = Environment {
            in_cluster: true,
            kubeconfig_var: Some("/env".into()),
            home: Some(home.clone()),
        };
        assert_eq!(
            choose(&settings, &env).unwrap(),
            Source::Explicit("/explicit".into())
        );
        settings.kubeconfig = None;
        assert_eq!(choose(&settings, &env).unwrap(), Source::InCluster);
        env.in_cluster = false;
        assert_eq!(
            choose(&settings, &env).unwrap(),
            Source::EnvKubeconfig("/env".into())
        );
        env.kubeconfig_var = None;
        assert_eq!(
            choose(&settings, &env).unwrap(),
            Source::HomeKubeconfig(home.join(".kube/config"))
        );
        env.home = None;
        assert_eq!(
            choose(&settings, &env).unwrap_err().code(),
            burrow::ErrorCode::InvalidConfig
        );
        std::fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn settings_are_checked() {
        assert!(KubeSettings::default().validate().is_ok());
        for bad in [
            KubeSettings {
                image_pull_policy: "Sometimes".into(),
                ..KubeSettings::default()
            },
            KubeSettings {
                namespace: "Not_A_Label".into(),
                ..KubeSettings::default()
            },
            KubeSettings {
                runtime_class: Some("bad class".into()),
                ..KubeSettings::default()
            },
            KubeSettings {
                agent_image: " ".into(),
                ..KubeSettings::default()
            },
        ] {
            assert_eq!(
                bad.validate().unwrap_err().code(),
                burrow::ErrorCode::InvalidConfig,
                "{bad:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_unloadable_explicit_file_is_named() {
        let settings = KubeSettings {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..KubeSettings::default()
        };
        let source = choose(&settings, &Environment::default()).unwrap();
        let err = client_config(&settings, &source).await.unwrap_err();
        assert_eq!(err.code(), burrow::ErrorCode::InvalidConfig);
    }
}
