//! What an agent may do through one server: which images, how many
//! sandboxes, how large, with a network or not. [`Policy::admit`] is the
//! one check of a create's arguments (both create tools call it), and
//! fills in the limits an agent left out.

use std::path::{Path, PathBuf};

use burrow::Error;

use crate::CreateArgs;

/// What an agent may do.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Images it may use (empty: any registry reference or named image).
    /// A host directory or a snapshot named here is allowed too.
    pub allowed_images: Vec<String>,
    /// Whether any host directory may be an image (a path, `./x`, `../x`
    /// or `oci:PATH`); otherwise only one named in
    /// [`Self::allowed_images`]. The burrow home, a directory under it, or
    /// one that holds it, never.
    pub allow_host_images: bool,
    /// The burrow home of this host, never an image (nor anything under or
    /// above it). `None`: only the other checks.
    pub home: Option<PathBuf>,
    /// Sandboxes it may have at once (its own, by [`crate::LABEL`]; `None`:
    /// no limit).
    pub max_sandboxes: Option<usize>,
    /// The most CPUs one sandbox may have (`None`: no limit); a create
    /// that does not say gets this many.
    pub max_cpus: Option<f64>,
    /// The most memory one sandbox may have, in MiB (`None`: no limit); a
    /// create that does not say gets this much.
    pub max_memory_mb: Option<u64>,
    /// Whether a sandbox may have a network at all (default: none).
    pub allow_network: bool,
}

fn refuse<T>(field: &str, reason: String) -> Result<T, Error> {
    Err(Error::InvalidConfig {
        field: field.into(),
        reason,
    })
}

/// The directory of the host an image reference names, as the engine reads
/// it (core/burrow/src/engine/image/resolve.rs): `oci:PATH[:TAG]` (the tag
/// after the last `:` that no `/` follows), or a reference that starts with
/// `/`, `./` or `../`. `None`: a registry reference, a named image or a
/// snapshot.
fn host_path(reference: &str) -> Option<&str> {
    if let Some(rest) = reference.strip_prefix("oci:") {
        return Some(match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => &rest[..i],
            _ => rest,
        });
    }
    let path =
        reference.starts_with('/') || reference.starts_with("./") || reference.starts_with("../");
    path.then_some(reference)
}

/// `path` with its links followed, or as given (made absolute) if it
/// cannot be (a home not made yet).
fn real_or_absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned())
}

impl Policy {
    /// Admits a create: checks its arguments (a refusal is `invalid_name`
    /// for the name, else `invalid_config` naming the field) and returns
    /// them with each limit left out set to this server's maximum. (The
    /// count of sandboxes is the server's to check: it needs the backend.)
    pub fn admit(&self, mut a: CreateArgs) -> Result<CreateArgs, Error> {
        crate::scope::check_name(&a.name)?;
        self.check_image(&a.image)?;
        if let Some(max) = self.max_cpus {
            match a.cpus {
                // NaN is over any limit too.
                Some(c) if c > max || c.is_nan() => {
                    return refuse("cpus", format!("{c} is over this server's limit of {max}"));
                }
                Some(_) => {}
                None => a.cpus = Some(max),
            }
        }
        if let Some(max) = self.max_memory_mb {
            match a.memory_mb {
                Some(m) if m > max => {
                    return refuse(
                        "memory_mb",
                        format!("{m} is over this server's limit of {max}"),
                    );
                }
                Some(_) => {}
                None => a.memory_mb = Some(max),
            }
        }
        if a.network_allow.is_some() && !self.allow_network {
            return refuse(
                "network_allow",
                "this server's sandboxes have no network".into(),
            );
        }
        Ok(a)
    }

    /// Whether `image` may be used: a host directory only when allowed and
    /// never the home's; a snapshot only when named; anything else when
    /// named or when no image is named.
    fn check_image(&self, image: &str) -> Result<(), Error> {
        let named = self.allowed_images.iter().any(|i| i == image);
        if let Some(path) = host_path(image) {
            let real = std::fs::canonicalize(path).or_else(|e| {
                refuse(
                    "image",
                    format!("{image:?} is not a directory of this host: {e}"),
                )
            })?;
            if let Some(home) = &self.home {
                let home = real_or_absolute(home);
                if real.starts_with(&home) || home.starts_with(&real) {
                    return refuse(
                        "image",
                        format!("{image:?} is or holds burrow's home, never an image"),
                    );
                }
            }
            let named = named
                || self.allowed_images.iter().any(|i| {
                    host_path(i).and_then(|p| std::fs::canonicalize(p).ok()) == Some(real.clone())
                });
            if !(named || self.allow_host_images) {
                return refuse(
                    "image",
                    format!(
                        "{image:?} is a host directory: this server allows one only when \
                         --allow-image names it or with --allow-host-images"
                    ),
                );
            }
            return Ok(());
        }
        if burrow::snapshot_of_image(image).is_some() && !named {
            return refuse(
                "image",
                format!("{image:?} is a snapshot: this server allows one only when --allow-image names it"),
            );
        }
        if !self.allowed_images.is_empty() && !named {
            return refuse(
                "image",
                format!("{image:?} is not an image this server allows"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed at the end.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("burrow-mcp-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir.canonicalize().unwrap())
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn args(image: &str) -> CreateArgs {
        CreateArgs {
            name: "a".into(),
            image: image.into(),
            cpus: None,
            memory_mb: None,
            network_allow: None,
            idle_timeout_s: None,
        }
    }

    fn refused_field(p: &Policy, a: CreateArgs) -> Option<String> {
        match p.admit(a) {
            Ok(_) => None,
            Err(Error::InvalidConfig { field, .. }) => Some(field),
            Err(e) => panic!("not invalid_config: {e:?}"),
        }
    }

    #[test]
    fn each_limit_refuses_its_own_field_and_the_default_allows_all_but_network() {
        let open = Policy::default();
        assert_eq!(refused_field(&open, args("busybox")), None);
        let net = || {
            let mut a = args("busybox");
            a.network_allow = Some(vec![]);
            a
        };
        assert_eq!(
            refused_field(&open, net()).as_deref(),
            Some("network_allow")
        );

        let p = Policy {
            allowed_images: vec!["busybox".into()],
            max_cpus: Some(1.0),
            max_memory_mb: Some(256),
            allow_network: true,
            ..Policy::default()
        };
        assert_eq!(refused_field(&p, net()), None);
        assert_eq!(refused_field(&p, args("alpine")).as_deref(), Some("image"));
        let big = |cpus, memory_mb| {
            let mut a = args("busybox");
            a.cpus = cpus;
            a.memory_mb = memory_mb;
            a
        };
        assert_eq!(
            refused_field(&p, big(Some(1.5), None)).as_deref(),
            Some("cpus")
        );
        assert_eq!(
            refused_field(&p, big(Some(f64::NAN), None)).as_deref(),
            Some("cpus")
        );
        assert_eq!(
            refused_field(&p, big(Some(1.0), Some(257))).as_deref(),
            Some("memory_mb")
        );
        assert_eq!(refused_field(&p, big(Some(1.0), Some(256))), None);
    }

    #[test]
    fn a_limit_left_out_is_the_maximum_and_one_given_is_kept() {
        let p = Policy {
            max_cpus: Some(2.0),
            max_memory_mb: Some(64),
            ..Policy::default()
        };
        let a = p.admit(args("busybox")).unwrap();
        assert_eq!((a.cpus, a.memory_mb), (Some(2.0), Some(64)));
        let mut small = args("busybox");
        small.cpus = Some(0.5);
        small.memory_mb = Some(32);
        let a = p.admit(small).unwrap();
        assert_eq!((a.cpus, a.memory_mb), (Some(0.5), Some(32)));
        // No maximum: nothing is set.
        let a = Policy::default().admit(args("busybox")).unwrap();
        assert_eq!((a.cpus, a.memory_mb), (None, None));
    }

    #[test]
    fn a_scoped_name_is_invalid_name() {
        let mut a = args("busybox");
        a.name = "t1/x".into();
        let e = Policy::default().admit(a).unwrap_err();
        assert_eq!(e.code(), burrow::ErrorCode::InvalidName);
    }

    #[test]
    fn host_paths_are_read_as_the_engine_reads_them() {
        assert_eq!(host_path("/srv/img"), Some("/srv/img"));
        assert_eq!(host_path("./img"), Some("./img"));
        assert_eq!(host_path("../img"), Some("../img"));
        assert_eq!(host_path("oci:/srv/layout:v1"), Some("/srv/layout"));
        assert_eq!(host_path("oci:/srv/lay:out/x"), Some("/srv/lay:out/x"));
        assert_eq!(host_path("oci:rel"), Some("rel"));
        for not in [
            "busybox",
            "docker.io/library/alpine:3",
            "snapshot:s",
            ".hidden",
        ] {
            assert_eq!(host_path(not), None, "{not}");
        }
    }

    #[test]
    fn host_directories_only_when_allowed_and_the_home_never() {
        let dir = TempDir::new();
        let home = dir.path().join("home");
        let img = dir.path().join("img");
        std::fs::create_dir_all(home.join("sandboxes")).unwrap();
        std::fs::create_dir_all(&img).unwrap();
        std::os::unix::fs::symlink(&home, dir.path().join("link")).unwrap();
        let s = |p: &Path| p.display().to_string();
        let base = Policy {
            home: Some(home.clone()),
            ..Policy::default()
        };
        let refused = |p: &Policy, image: &str| refused_field(p, args(image));

        // Without the flag, no host directory: any spelling of a path.
        for image in [
            s(&img),
            format!("oci:{}", s(&img)),
            format!("oci:{}:v1", s(&img)),
        ] {
            assert_eq!(refused(&base, &image).as_deref(), Some("image"), "{image}");
        }
        // A path that is not there is refused, whatever the flag.
        let flag = Policy {
            allow_host_images: true,
            ..base.clone()
        };
        assert_eq!(
            refused(&flag, &s(&dir.path().join("nothing"))).as_deref(),
            Some("image")
        );
        // With it, or named: yes.
        assert_eq!(refused(&flag, &s(&img)), None);
        let named = Policy {
            allowed_images: vec![format!("oci:{}:v1", s(&img))],
            ..base.clone()
        };
        assert_eq!(refused(&named, &s(&img)), None);
        assert_eq!(refused(&named, &format!("{}/.", s(&img))), None);
        // The home, under it, above it, through a link: never, even named.
        let never = Policy {
            allowed_images: vec![s(&home), "/".into()],
            ..flag.clone()
        };
        for image in [
            s(&home),
            s(&home.join("sandboxes")),
            format!("{}/../home", s(&img)),
            s(&dir.path().join("link")),
            format!("oci:{}", s(&home)),
            s(dir.path()),
            "/".into(),
        ] {
            assert_eq!(refused(&never, &image).as_deref(), Some("image"), "{image}");
        }
    }

    #[test]
    fn snapshots_only_when_named_and_the_list_binds_the_rest() {
        let open = Policy::default();
        assert_eq!(
            refused_field(&open, args("snapshot:t1/theirs")).as_deref(),
            Some("image")
        );
        let named = Policy {
            allowed_images: vec!["snapshot:base".into()],
            ..Policy::default()
        };
        assert_eq!(refused_field(&named, args("snapshot:base")), None);
        assert_eq!(
            refused_field(&named, args("busybox")).as_deref(),
            Some("image")
        );
    }
}
