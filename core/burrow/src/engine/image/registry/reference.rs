//! Registry image references, parsed and normalised exactly as Docker does
//! (`github.com/distribution/reference`, `ParseNormalizedNamed` followed by
//! `TagNameOnly`):
//!
//! ```text
//! python                          -> docker.io/library/python:latest
//! org/tool                        -> docker.io/org/tool:latest
//! index.docker.io/org/tool        -> docker.io/org/tool:latest
//! registry.example.com:5000/x:1.2 -> registry.example.com:5000/x:1.2
//! localhost/x                     -> localhost/x:latest
//! x@sha256:<hex>                  -> docker.io/library/x@sha256:<hex>
//! x:1@sha256:<hex>                -> docker.io/library/x:1@sha256:<hex>
//! ```
//!
//! The first path component is a registry host when it contains `.` or `:`,
//! is `localhost`, or has an uppercase letter; otherwise the reference is on
//! Docker Hub, where one-component names live under `library/`. Repository
//! paths are lowercase components joined by `.`, `_`, `__` or runs of `-`;
//! tags are `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`; digests must be `sha256:`
//! and 64 lowercase hex digits (the only algorithm burrow verifies). A
//! reference that names both a tag and a digest is pulled by its digest.

use std::fmt;

use crate::engine::image::digest::Digest;
use crate::error::{Error, Result};

/// Docker Hub's canonical registry name.
pub(crate) const DOCKER_HUB: &str = "docker.io";
/// Longest repository name (registry and path) Docker accepts.
const NAME_TOTAL_LENGTH_MAX: usize = 255;
/// Longest tag.
const TAG_MAX: usize = 128;

/// A parsed, normalised registry image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageReference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl ImageReference {
    /// Parses `reference` the way `docker pull` does; a reference Docker
    /// would refuse is an [`Error::InvalidImage`].
    pub fn parse(reference: &str) -> Result<ImageReference> {
        let invalid = |reason: String| Error::InvalidImage {
            image: reference.to_owned(),
            reason,
        };
        if reference.is_empty() {
            return Err(invalid("empty reference".into()));
        }
        if reference.len() == 64
            && reference
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(invalid(
                "a 64-digit hexadecimal string is an image id, not a reference".into(),
            ));
        }

        // Docker's splitDockerDomain.
        let (registry, remainder) = match reference.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.to_ascii_lowercase() != first =>
            {
                (first.to_owned(), rest.to_owned())
            }
            _ => (DOCKER_HUB.to_owned(), reference.to_owned()),
        };
        let registry = if registry == "index.docker.io" {
            DOCKER_HUB.to_owned()
        } else {
            registry
        };
        let remainder = if registry == DOCKER_HUB && !remainder.contains('/') {
            format!("library/{remainder}")
        } else {
            remainder
        };

        // Name, tag and digest.
        let (name_tag, digest) = match remainder.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (remainder.as_str(), None),
        };
        let (path, tag) = match name_tag.rsplit_once(':') {
            Some((p, t)) if !t.contains('/') => (p, Some(t)),
            _ => (name_tag, None),
        };
        if path.to_ascii_lowercase() != path {
            return Err(invalid(format!(
                "repository name {path:?} must be lowercase"
            )));
        }
        check_domain(&registry).map_err(|r| invalid(format!("registry {registry:?}: {r}")))?;
        check_path(path).map_err(&invalid)?;
        if registry.len() + 1 + path.len() > NAME_TOTAL_LENGTH_MAX {
            return Err(invalid(format!(
                "repository name is longer than {NAME_TOTAL_LENGTH_MAX} characters"
            )));
        }
        if let Some(tag) = tag {
            check_tag(tag).map_err(&invalid)?;
        }
        if let Some(digest) = digest {
            check_digest(digest).map_err(&invalid)?;
        }
        let tag = match (tag, digest) {
            (None, None) => Some("latest".to_owned()),
            (t, _) => t.map(str::to_owned),
        };
        Ok(ImageReference {
            registry,
            repository: path.to_owned(),
            tag,
            digest: digest.map(str::to_owned),
        })
    }

    /// The registry host (`docker.io`, `registry.example.com:5000`, ...).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository path inside the registry (`library/python`).
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if the reference has one (`latest` when it had neither a tag
    /// nor a digest).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned manifest digest, if any.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    pub(crate) fn pinned(&self) -> Option<Digest> {
        self.digest.as_deref().and_then(|d| Digest::parse(d).ok())
    }

    /// The same repository pinned to `digest` (no tag).
    pub(crate) fn with_digest(&self, digest: &Digest) -> ImageReference {
        ImageReference {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_string()),
        }
    }

    /// The reference for the registry client: by digest when pinned.
    pub(crate) fn to_client(&self) -> oci_client::Reference {
        match &self.digest {
            Some(d) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                d.clone(),
            ),
            None => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                self.tag.clone().unwrap_or_else(|| "latest".into()),
            ),
        }
    }
}

impl fmt::Display for ImageReference {
    /// The canonical form (`docker.io/library/python:latest`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ImageReference {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ImageReference::parse(s)
    }
}

/// `host[:port]` where host is DNS-like components or a bracketed IPv6
/// address.
fn check_domain(domain: &str) -> Result<(), String> {
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        let Some((addr, after)) = rest.split_once(']') else {
            return Err("unterminated IPv6 address".into());
        };
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return Err("invalid IPv6 address".into());
        }
        match after {
            "" => (None, None),
            p => match p.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return Err("unexpected characters after the IPv6 address".into()),
            },
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(domain), None),
        }
    };
    if let Some(host) = host {
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        };
        if !host.split('.').all(component_ok) {
            return Err("not a valid host name".into());
        }
    }
    if let Some(port) = port {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("port {port:?} is not a number"));
        }
    }
    Ok(())
}

/// Path components: `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("repository name is empty".into());
    }
    for component in path.split('/') {
        if !path_component_ok(component) {
            return Err(format!(
                "repository path component {component:?} is invalid (lowercase letters and digits, separated by '.', '_', '__' or '-')"
            ));
        }
    }
    Ok(())
}

fn path_component_ok(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: ".", "_", "__" or one or more "-".
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        match &c[start..i] {
            "." | "_" | "__" => {}
            s if s.bytes().all(|x| x == b'-') => {}
            _ => return false,
        }
    }
    true
}

fn check_tag(tag: &str) -> Result<(), String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok = !tag.is_empty()
        && tag.len() <= TAG_MAX
        && tag.bytes().next().is_some_and(word)
        && tag.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} is invalid (letters, digits, '_', '.', '-', at most {TAG_MAX}, not starting with '.' or '-')"
        ))
    }
}

fn check_digest(digest: &str) -> Result<(), String> {
    match digest.split_once(':') {
        Some(("sha256", _)) => Digest::parse(digest).map(|_| ()),
        Some((alg, hex))
            if !alg.is_empty()
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_+.".contains(&b))
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Err(format!(
                "digest {digest:?}: unsupported algorithm {alg:?} (only sha256)"
            ))
        }
        _ => Err(format!("digest {digest:?} is invalid")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn canon(s: &str) -> String {
        match ImageReference::parse(s) {
            Ok(r) => r.to_string(),
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    fn bad(s: &str) {
        match ImageReference::parse(s) {
            Ok(r) => panic!("{s:?} accepted as {r}"),
            Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{s:?}: {e}"),
        }
    }

    #[test]
    fn normalises_like_docker() {
        let hex = "a".repeat(64);
        for (input, want) in [
            ("python", "docker.io/library/python:latest".to_owned()),
            ("python:3.12", "docker.io/library/python:3.12".into()),
            ("org/tool", "docker.io/org/tool:latest".into()),
            ("docker.io/python", "docker.io/library/python:latest".into()),
            (
                "index.docker.io/org/tool",
                "docker.io/org/tool:latest".into(),
            ),
            (
                "docker.io/library/python:3",
                "docker.io/library/python:3".into(),
            ),
            (
                "registry.example.com:5000/org/tool:1.2",
                "registry.example.com:5000/org/tool:1.2".into(),
            ),
            ("localhost/x", "localhost/x:latest".into()),
            ("localhost:5000/a/b/c", "localhost:5000/a/b/c:latest".into()),
            (
                "127.0.0.1:5000/x:v_1.0-rc",
                "127.0.0.1:5000/x:v_1.0-rc".into(),
            ),
            ("[::1]:5000/x", "[::1]:5000/x:latest".into()),
            (
                "a/b__c/d-e.f_g--h",
                "docker.io/a/b__c/d-e.f_g--h:latest".into(),
            ),
            (
                &format!("python@sha256:{hex}"),
                format!("docker.io/library/python@sha256:{hex}"),
            ),
            (
                &format!("python:3@sha256:{hex}"),
                format!("docker.io/library/python:3@sha256:{hex}"),
            ),
            // An uppercase first component is a host, as in Docker.
            ("Example/tool", "Example/tool:latest".into()),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
        let r = ImageReference::parse("registry.example.com:5000/org/tool:1.2").expect("parse");
        assert_eq!(r.registry(), "registry.example.com:5000");
        assert_eq!(r.repository(), "org/tool");
        assert_eq!(r.tag(), Some("1.2"));
        assert_eq!(r.digest(), None);
        let pinned = ImageReference::parse(&format!("x:1@sha256:{hex}")).expect("parse");
        assert_eq!(
            pinned.to_client().digest(),
            Some(format!("sha256:{hex}").as_str())
        );
    }

    #[test]
    fn refuses_what_docker_refuses() {
        let hex = "a".repeat(64);
        for input in [
            "",
            "Python",
            "org/Tool",
            "python:",
            "python:-x",
            "python:.x",
            &format!("python:{}", "a".repeat(129)),
            "python:a/b",
            "python@sha256:abc",
            &format!("python@sha256:{}", "A".repeat(64)),
            &format!("python@sha512:{}", "a".repeat(128)),
            "python@",
            "python@latest",
            "/python",
            "python/",
            "a//b",
            "a/-b",
            "a/b-",
            "a/b...c",
            "a/b___c",
            "a b",
            "host:port/x",
            "host:/x",
            "-host.com/x",
            "[::1/x",
            "[zz]:5/x",
            &hex,
            &format!("x/{}", "a".repeat(300)),
        ] {
            bad(input);
        }
    }
}
