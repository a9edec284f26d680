//! The images a tenant's sandboxes may use, part of its policy
//! ([`super::TenantPolicy`]): the operator's list of images and of
//! registries (`burrow serve tenant create|set --allow-image ...
//! --allow-registry ...`). Without either list a tenant may use any image
//! (within its egress ceiling); with one, an image is allowed when it
//! matches an image entry or comes from a listed registry.
//!
//! Every reference is compared in the engine's normalized form
//! ([`ImageReference`], Docker's rules), so spellings do not matter:
//! `busybox`, `library/busybox:latest` and `docker.io/library/busybox` are
//! one image. An entry is a repository (`busybox`: any tag or digest of
//! it), a tag (`busybox:1.36`: that tag, not a digest, which could name
//! anything), a digest (`busybox@sha256:...`) or a prefix ending in `/`
//! (`ghcr.io/acme/`: every repository under it). A snapshot
//! (`snapshot:NAME`) is allowed when the image it was taken from is
//! (followed through snapshots of snapshots); a host path, an OCI layout
//! or anything else that is no registry reference is not.

use burrow::internal::image::ImageReference;
use burrow::model::snapshot_of_image;
use burrow::{Backend, Error, Result};

/// How deep snapshots of snapshots are followed to their image.
const SNAPSHOT_DEPTH: usize = 16;

/// The images and registries a tenant's sandboxes may use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageAllow {
    /// Normalized entries: `REGISTRY/REPO`, `REGISTRY/REPO:TAG`,
    /// `REGISTRY/REPO@DIGEST`, or a prefix `REGISTRY/PATH/`.
    pub images: Vec<String>,
    /// Registry hosts (`docker.io` for Docker Hub).
    pub registries: Vec<String>,
}

/// An operator's image entry in the form it is stored and compared in.
pub fn normalize_image_entry(entry: &str) -> Result<String> {
    let invalid = |reason: String| Error::InvalidArgument {
        argument: "allow-image".into(),
        reason: format!("{entry:?}: {reason}"),
    };
    if snapshot_of_image(entry).is_some() {
        return Err(invalid(
            "a snapshot is allowed by the image it was taken from; name that".into(),
        ));
    }
    if let Some(prefix) = entry.strip_suffix('/') {
        let r = ImageReference::parse(&format!("{prefix}/x"))
            .map_err(|e| invalid(burrow::api::ErrorBody::from(&e).message))?;
        let path = r.repository().strip_suffix('x').unwrap_or(r.repository());
        return Ok(format!("{}/{path}", r.registry()));
    }
    let r = ImageReference::parse(entry)
        .map_err(|e| invalid(burrow::api::ErrorBody::from(&e).message))?;
    let name = format!("{}/{}", r.registry(), r.repository());
    Ok(match (r.digest(), r.tag()) {
        (Some(d), _) => format!("{name}@{d}"),
        (None, Some(t)) if t != "latest" || entry.ends_with(":latest") => format!("{name}:{t}"),
        _ => name,
    })
}

/// An operator's registry entry in the form it is stored and compared in
/// (`index.docker.io` is `docker.io`).
pub fn normalize_registry(host: &str) -> Result<String> {
    let invalid = |reason: String| Error::InvalidArgument {
        argument: "allow-registry".into(),
        reason: format!("{host:?}: {reason}"),
    };
    if host.is_empty() || host.contains('/') {
        return Err(invalid("a registry host (and port), no path".into()));
    }
    let r = ImageReference::parse(&format!("{host}/x/y"))
        .map_err(|e| invalid(burrow::api::ErrorBody::from(&e).message))?;
    if r.registry() != host && host != "index.docker.io" {
        return Err(invalid(
            "not a registry host (one has a '.' or a port, or is localhost)".into(),
        ));
    }
    Ok(r.registry().to_owned())
}

impl ImageAllow {
    /// Refuses `image` unless it is allowed: a snapshot's through
    /// `engine` (the tenant's view, `None`: snapshots are refused).
    pub async fn check(&self, image: &str, engine: Option<&dyn Backend>) -> Result<()> {
        let mut current = image.to_owned();
        for _ in 0..SNAPSHOT_DEPTH {
            let Some(name) = snapshot_of_image(&current) else {
                return self.check_reference(image, &current);
            };
            let Some(engine) = engine else {
                return Err(refused(image, "its snapshot cannot be followed here"));
            };
            current = engine.get_snapshot(name).await?.base_image;
        }
        Err(refused(image, "its snapshots go too deep to follow"))
    }

    /// Refuses a stored configuration's `image` unless allowed (a
    /// snapshot's was checked when it was made).
    pub fn check_stored(&self, image: &str) -> Result<()> {
        match snapshot_of_image(image) {
            Some(_) => Ok(()),
            None => self.check_reference(image, image),
        }
    }

    fn check_reference(&self, asked: &str, reference: &str) -> Result<()> {
        let Ok(r) = ImageReference::parse(reference) else {
            return Err(refused(asked, "it is not a registry image"));
        };
        if self.allows(&r) {
            Ok(())
        } else {
            Err(refused(asked, "it is not among them"))
        }
    }

    fn allows(&self, r: &ImageReference) -> bool {
        if self.registries.iter().any(|h| h == r.registry()) {
            return true;
        }
        let name = format!("{}/{}", r.registry(), r.repository());
        self.images.iter().any(|entry| {
            if entry.ends_with('/') {
                return name.starts_with(entry.as_str());
            }
            if let Some((n, d)) = entry.split_once('@') {
                return n == name && r.digest() == Some(d);
            }
            match entry.strip_prefix(&name).map(|rest| rest.strip_prefix(':')) {
                Some(None) => entry.len() == name.len(),
                // A tag: only when the reference is pulled by it.
                Some(Some(tag)) => r.digest().is_none() && r.tag() == Some(tag),
                None => false,
            }
        })
    }
}

fn refused(image: &str, why: &str) -> Error {
    Error::InvalidConfig {
        field: "image".into(),
        reason: format!(
            "image {image:?} is not one this tenant's sandboxes may use ({why}): \
             its operator allows some images and registries only"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn allow(images: &[&str], registries: &[&str]) -> ImageAllow {
        ImageAllow {
            images: images
                .iter()
                .map(|e| normalize_image_entry(e).unwrap())
                .collect(),
            registries: registries
                .iter()
                .map(|h| normalize_registry(h).unwrap())
                .collect(),
        }
    }

    fn ok(a: &ImageAllow, image: &str) -> bool {
        a.check(image, None)
            .now_or_never_ok()
            .map_err(|e| {
                assert!(
                    matches!(&e, Error::InvalidConfig { field, .. } if field == "image"),
                    "{e}"
                )
            })
            .is_ok()
    }

    trait NowOrNever {
        fn now_or_never_ok(self) -> Result<()>;
    }
    impl<F: std::future::Future<Output = Result<()>>> NowOrNever for F {
        fn now_or_never_ok(self) -> Result<()> {
            futures_util::FutureExt::now_or_never(Box::pin(self)).unwrap()
        }
    }

    #[test]
    fn entries_are_normalized() {
        assert_eq!(
            normalize_image_entry("busybox").unwrap(),
            "docker.io/library/busybox"
        );
        assert_eq!(
            normalize_image_entry("busybox:1").unwrap(),
            "docker.io/library/busybox:1"
        );
        assert_eq!(
            normalize_image_entry("busybox:latest").unwrap(),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_image_entry(&format!("index.docker.io/library/busybox:1@{D}")).unwrap(),
            format!("docker.io/library/busybox@{D}")
        );
        assert_eq!(
            normalize_image_entry("ghcr.io/acme/").unwrap(),
            "ghcr.io/acme/"
        );
        assert!(normalize_image_entry("snapshot:x").is_err());
        assert!(normalize_image_entry("Bad Name").is_err());
        assert_eq!(normalize_registry("index.docker.io").unwrap(), "docker.io");
        assert_eq!(normalize_registry("ghcr.io").unwrap(), "ghcr.io");
        assert_eq!(
            normalize_registry("localhost:5000").unwrap(),
            "localhost:5000"
        );
        assert!(normalize_registry("ghcr.io/x").is_err());
        assert!(normalize_registry("acme").is_err());
    }

    #[test]
    fn every_spelling_is_one_image() {
        let a = allow(&["busybox"], &[]);
        for yes in [
            "busybox",
            "busybox:1.36",
            "library/busybox",
            "docker.io/library/busybox:latest",
            "index.docker.io/library/busybox",
            &format!("busybox@{D}"),
        ] {
            assert!(ok(&a, yes), "{yes}");
        }
        for no in [
            "alpine",
            "docker.io/library/alpine:3",
            &format!("alpine@{D}"),
            "ghcr.io/library/busybox",
            "busybox2",
            "acme/busybox",
            "/tmp/rootfs",
            "./busybox",
            "snapshot:other",
        ] {
            assert!(!ok(&a, no), "{no}");
        }
        // A tag: that tag only, never a digest (which could be anything).
        let tagged = allow(&["busybox:1.36"], &[]);
        assert!(ok(&tagged, "docker.io/library/busybox:1.36"));
        assert!(!ok(&tagged, "busybox"));
        assert!(!ok(&tagged, &format!("busybox:1.36@{D}")));
        // Prefixes and registries.
        let wide = allow(&["ghcr.io/acme/"], &["quay.io"]);
        assert!(ok(&wide, "ghcr.io/acme/tool:1"));
        assert!(ok(&wide, "quay.io/anyone/thing"));
        assert!(!ok(&wide, "ghcr.io/acmes/tool"));
        assert!(!ok(&wide, "busybox"));
        let hub = allow(&[], &["docker.io"]);
        assert!(ok(&hub, "alpine") && ok(&hub, "acme/x"));
        assert!(!ok(&hub, "ghcr.io/x/y"));
    }
}
