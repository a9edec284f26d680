//! The parts of the OCI image spec (and Docker's schema2, its ancestor) that
//! burrow reads: descriptors, indexes, manifests and image configs.
//!
//! Unknown fields are ignored (the spec is extensible); the fields that are
//! used are validated where they are used.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ImageConfig;

/// OCI image index.
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest.
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// OCI image config.
pub(crate) const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// OCI gzip layer.
pub(crate) const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// OCI uncompressed layer.
pub(crate) const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// OCI zstd layer.
pub(crate) const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// Docker manifest list (schema2).
pub(crate) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker image manifest (schema2).
pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker image config.
pub(crate) const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// Docker gzip layer.
pub(crate) const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The annotation naming a tag in an image layout's `index.json`.
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// containerd's full image name annotation (`docker save` writes it too).
pub(crate) const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// Whether a layer media type is one burrow can apply (the compression itself
/// is detected from the content).
pub(crate) fn is_layer_media_type(media_type: &str) -> bool {
    media_type.starts_with("application/vnd.oci.image.layer.")
        || media_type.starts_with("application/vnd.docker.image.rootfs.")
}

/// A content descriptor: what a blob is, its digest and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced content.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    /// `sha256:<hex>` digest of the content.
    pub digest: String,
    /// Size of the content in bytes.
    pub size: u64,
    /// Platform, for entries of an image index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations (`org.opencontainers.image.ref.name` holds a tag).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image platform (`linux/amd64`, `linux/arm64/v8`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// CPU architecture in Go's naming (`amd64`, `arm64`, ...).
    pub architecture: String,
    /// Operating system (`linux`).
    pub os: String,
    /// CPU variant (`v8`, `v7`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// `linux/<arch>` of the machine this runs on, in Go's architecture names.
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "x86" => ("386", None),
            "aarch64" => ("arm64", None),
            "arm" => ("arm", Some("v7")),
            "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
            "powerpc64" => ("ppc64", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Platform {
            architecture: architecture.to_owned(),
            os: "linux".to_owned(),
            variant: variant.map(str::to_owned),
        }
    }

    /// `linux/amd64`.
    pub fn linux_amd64() -> Platform {
        Platform {
            architecture: "amd64".to_owned(),
            os: "linux".to_owned(),
            variant: None,
        }
    }

    /// `linux/arm64`.
    pub fn linux_arm64() -> Platform {
        Platform {
            architecture: "arm64".to_owned(),
            os: "linux".to_owned(),
            variant: None,
        }
    }

    /// Whether an index entry for `self` can run where `want` is asked for.
    pub(crate) fn satisfies(&self, want: &Platform) -> bool {
        if self.os != want.os || self.architecture != want.architecture {
            return false;
        }
        match (&self.variant, &want.variant) {
            (None, _) | (_, None) => true,
            (Some(a), Some(b)) => a == b,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The `oci-layout` file.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LayoutFile {
    pub(crate) image_layout_version: String,
}

/// An image index (`index.json`, a nested index, or a Docker manifest list).
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Index {
    pub(crate) schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) media_type: Option<String>,
    pub(crate) manifests: Vec<Descriptor>,
}

/// An image manifest (OCI or Docker schema2).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    pub(crate) schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) media_type: Option<String>,
    pub(crate) config: Descriptor,
    pub(crate) layers: Vec<Descriptor>,
}

/// An image configuration blob; only what burrow uses.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    pub(crate) architecture: String,
    #[serde(default)]
    pub(crate) os: String,
    #[serde(default)]
    pub(crate) config: Option<RunConfig>,
    #[serde(default)]
    pub(crate) rootfs: Option<RootFs>,
}

/// The `config` object of an image configuration.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct RunConfig {
    #[serde(rename = "Env", default, skip_serializing_if = "Option::is_none")]
    pub(crate) env: Option<Vec<String>>,
    #[serde(
        rename = "Entrypoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default, skip_serializing_if = "Option::is_none")]
    pub(crate) cmd: Option<Vec<String>>,
    #[serde(
        rename = "WorkingDir",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) working_dir: Option<String>,
    #[serde(rename = "User", default, skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<String>,
}

/// The `rootfs` object of an image configuration.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct RootFs {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) diff_ids: Vec<String>,
}

impl RunConfig {
    /// Burrow's view of the image defaults.
    pub(crate) fn to_image_config(&self) -> ImageConfig {
        ImageConfig {
            env: self.env.clone().unwrap_or_default(),
            entrypoint: self.entrypoint.clone().unwrap_or_default(),
            cmd: self.cmd.clone().unwrap_or_default(),
            workdir: self.working_dir.clone().filter(|w| !w.is_empty()),
            user: self.user.clone().filter(|u| !u.is_empty()),
        }
    }

    pub(crate) fn from_image_config(c: &ImageConfig) -> RunConfig {
        let list = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        RunConfig {
            env: list(&c.env),
            entrypoint: list(&c.entrypoint),
            cmd: list(&c.cmd),
            working_dir: c.workdir.clone(),
            user: c.user.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_with_nulls_parses() {
        let c: ConfigFile = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","config":{"Env":["A=1"],"Entrypoint":null,"Cmd":["sh"],"WorkingDir":"","User":"1000:1000","Labels":{"x":"y"}},"rootfs":{"type":"layers","diff_ids":[]},"history":[]}"#,
        )
        .expect("parse");
        let ic = c.config.expect("config").to_image_config();
        assert_eq!(ic.env, vec!["A=1"]);
        assert!(ic.entrypoint.is_empty());
        assert_eq!(ic.cmd, vec!["sh"]);
        assert_eq!(ic.workdir, None);
        assert_eq!(ic.user.as_deref(), Some("1000:1000"));
    }

    #[test]
    fn platform_matching() {
        let mut arm = Platform::linux_arm64();
        assert!(arm.satisfies(&Platform::linux_arm64()));
        assert!(!arm.satisfies(&Platform::linux_amd64()));
        arm.variant = Some("v8".into());
        assert!(arm.satisfies(&Platform::linux_arm64()));
        let mut want = Platform::linux_arm64();
        want.variant = Some("v7".into());
        assert!(!arm.satisfies(&want));
    }
}
