#![allow(clippy::unwrap_used)]
//! Registry pulls against a real registry (Debian's docker-registry on
//! 127.0.0.1), with images built by burrow's own OCI layout writer and
//! pushed with skopeo: layer semantics, platform selection, auth, the
//! shared blob store (corruption, interruption, concurrent processes),
//! hostile layers, pull policies, insecure registries, image management.

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burrow::image::{
    ImageConfig, ImageReference, ImageSource, PreparedImage, PullEvent, PullOptions, PullPolicy,
};
use burrow::internal::fault::{Fault, FAULT_ENV};
use burrow::internal::image::oci::{
    write_layout, LayerCompression, LayerEntry, LayerSpec, LayoutWriter, Platform, WrittenImage,
};
use burrow::internal::image::{
    list_images, normalize_reference, parse_reference, prepare, prune, pull, remove_image,
};
use burrow::internal::Home;
use burrow::{Error, ErrorCode};
use burrow_test_support::fault::FaultWindow;
use burrow_test_support::registry::TestRegistry;

const AGENT: &str = "burrow/";

struct TestEnv {
    tmp: tempfile::TempDir,
    home: Home,
}

impl TestEnv {
    /// A home that lists `registry` as insecure (plain HTTP).
    fn new(registry: &TestRegistry) -> TestEnv {
        let t = TestEnv::bare();
        fs::write(
            t.home.root().join("registries.json"),
            format!(r#"{{"insecure": ["{}"]}}"#, registry.host()),
        )
        .unwrap();
        t
    }

    /// A home with no registry settings.
    fn bare() -> TestEnv {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("home")).unwrap();
        TestEnv { tmp, home }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn blobs_dir(&self) -> PathBuf {
        self.home.images_dir().join("blobs/sha256")
    }

    fn blob(&self, digest: &str) -> PathBuf {
        self.blobs_dir().join(digest.trim_start_matches("sha256:"))
    }

    fn temp_files(&self) -> Vec<String> {
        fs::read_dir(self.blobs_dir())
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".tmp-"))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn rootfs_entries(&self) -> BTreeSet<String> {
        fs::read_dir(self.home.images_dir().join("rootfs"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.ends_with(".lock"))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn pull(&self, reference: &str, opts: &PullOptions) -> burrow::Result<PreparedImage> {
        pull(&self.home, reference, opts).await
    }

    async fn pull_ok(&self, reference: &str, opts: &PullOptions) -> PreparedImage {
        match self.pull(reference, opts).await {
            Ok(p) => p,
            Err(e) => panic!("pulling {reference}: {e}"),
        }
    }
}

impl Drop for TestEnv {
    /// Unpacked images may hold read-only directories.
    fn drop(&mut self) {
        let mut stack = vec![self.tmp.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o755));
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

fn policy(policy: PullPolicy) -> PullOptions {
    PullOptions {
        policy,
        ..PullOptions::default()
    }
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn lexists(path: impl AsRef<Path>) -> bool {
    fs::symlink_metadata(path).is_ok()
}

fn sha256_file(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

/// Incompressible bytes (xorshift), so layer sizes are what they say.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn image_config() -> ImageConfig {
    ImageConfig {
        env: vec!["PATH=/usr/bin:/bin".into(), "GREETING=from-image".into()],
        entrypoint: vec!["/bin/sh".into()],
        cmd: vec!["-c".into(), "echo hi".into()],
        workdir: Some("/srv/app".into()),
        user: Some("1000:1000".into()),
    }
}

/// Writes a one-image layout tagged `tag` and pushes it as `dest`.
fn push_image(
    reg: &TestRegistry,
    dir: &Path,
    layers: &[LayerSpec],
    config: &ImageConfig,
    dest: &str,
) -> WrittenImage {
    let image = write_layout(dir, layers, config, Some("t")).unwrap();
    reg.push(dir, "t", dest);
    image
}

fn multi_layer_image() -> Vec<LayerSpec> {
    vec![
        LayerSpec::entries([
            LayerEntry::dir("etc"),
            LayerEntry::file("etc/a", "a1"),
            LayerEntry::file("etc/b", "b1"),
            LayerEntry::dir("opt"),
            LayerEntry::dir("opt/gone"),
            LayerEntry::file("opt/gone/y", "y"),
            LayerEntry::dir("data"),
            LayerEntry::file("data/old1", "o1"),
            LayerEntry::file("data/old2", "o2"),
            LayerEntry::symlink("data/link", "old1"),
            LayerEntry::dir("bin"),
            LayerEntry::file("bin/tool", "#!/bin/sh\n").mode(0o755),
        ]),
        LayerSpec::entries([
            LayerEntry::whiteout("etc/b"),
            LayerEntry::file("etc/a", "a2"),
            LayerEntry::file("etc/c", "c2"),
            LayerEntry::whiteout("opt/gone"),
            LayerEntry::opaque("data"),
            LayerEntry::file("data/new", "n2"),
            LayerEntry::hard_link("data/new-link", "data/new"),
        ])
        .compression(LayerCompression::Zstd),
        LayerSpec::entries([LayerEntry::file("etc/third", "3")]),
    ]
}

fn assert_multi_layer_tree(root: &Path) {
    assert_eq!(read(root.join("etc/a")), "a2");
    assert!(!lexists(root.join("etc/b")), "whiteout of etc/b");
    assert_eq!(read(root.join("etc/c")), "c2");
    assert_eq!(read(root.join("etc/third")), "3");
    assert!(lexists(root.join("opt")), "opt stays");
    assert!(!lexists(root.join("opt/gone")), "whiteout of a directory");
    let data: BTreeSet<String> = fs::read_dir(root.join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        data,
        ["new", "new-link"].iter().map(|s| s.to_string()).collect(),
        "opaque dir hides everything below"
    );
    assert_eq!(read(root.join("data/new-link")), "n2");
    let mode = fs::metadata(root.join("bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(!lexists(root.join("etc/.wh.b")));
    assert!(!lexists(root.join("data/.wh..wh..opq")));
}

#[tokio::test]
async fn multi_layer_image_with_whiteouts_pulls_into_the_right_tree() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let image = push_image(
        &reg,
        &t.path("layout"),
        &multi_layer_image(),
        &image_config(),
        "multi:v1",
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let opts = PullOptions {
        progress: Some(Arc::new(move |e| sink.lock().unwrap().push(e))),
        ..PullOptions::default()
    };
    let reference = reg.reference("multi:v1");
    let p = t.pull_ok(&reference, &opts).await;
    assert_multi_layer_tree(&p.rootfs);
    assert_eq!(p.config, image_config());
    assert_eq!(p.reference, reference);
    let manifest_digest = p.digest.clone().unwrap();

    // Events: resolved with the three layers, each blob downloaded, done.
    let seen = events.lock().unwrap().clone();
    match seen.first() {
        Some(PullEvent::Resolved {
            reference: r,
            digest,
            layers,
        }) => {
            assert_eq!(r, &reference);
            assert_eq!(digest, &manifest_digest);
            let want: Vec<(String, u64)> = image
                .layers
                .iter()
                .map(|l| (l.digest.clone(), l.size))
                .collect();
            assert_eq!(layers, &want);
        }
        other => panic!("first event {other:?}"),
    }
    let done: BTreeSet<&str> = seen
        .iter()
        .filter_map(|e| match e {
            PullEvent::LayerDone { digest } => Some(digest.as_str()),
            _ => None,
        })
        .collect();
    for l in &image.layers {
        assert!(done.contains(l.digest.as_str()), "{seen:?}");
    }
    assert!(seen.contains(&PullEvent::Unpacking));
    assert_eq!(
        seen.last(),
        Some(&PullEvent::Done {
            digest: manifest_digest.clone()
        })
    );

    // Listed under its canonical reference.
    let listed = list_images(&t.home).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].reference, reference);
    assert_eq!(listed[0].digest, manifest_digest);
    assert!(listed[0].size > image.layers.iter().map(|l| l.size).sum::<u64>());
    assert!(listed[0].pulled_at_ms > 1_600_000_000_000);

    // Pulling again (if-missing) touches no blob and the same tree is
    // returned; prepare() goes through the same path.
    let gets = reg.blob_gets(AGENT);
    events.lock().unwrap().clear();
    let again = t.pull_ok(&reference, &opts).await;
    assert_eq!(again.rootfs, p.rootfs);
    let prepared = prepare(&t.home, &reference).await.unwrap();
    assert_eq!(prepared.rootfs, p.rootfs);
    assert_eq!(prepared.config, image_config());
    assert_eq!(reg.blob_gets(AGENT), gets);
    let seen = events.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, PullEvent::LayerDone { .. } | PullEvent::Unpacking)),
        "{seen:?}"
    );
    assert_eq!(t.rootfs_entries().len(), 2, "{:?}", t.rootfs_entries());

    // By digest, and by tag and digest: the same image.
    let by_digest = t
        .pull_ok(
            &reg.reference(&format!("multi@{manifest_digest}")),
            &policy(PullPolicy::Never),
        )
        .await;
    assert_eq!(by_digest.rootfs, p.rootfs);
    let both = t
        .pull_ok(
            &reg.reference(&format!("multi:v1@{manifest_digest}")),
            &opts,
        )
        .await;
    assert_eq!(both.rootfs, p.rootfs);
    // A digest the registry does not have.
    let missing = format!("sha256:{}", "0".repeat(64));
    let err = t
        .pull(&reg.reference(&format!("multi@{missing}")), &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage, "{err}");
    // An unknown tag and an unknown repository.
    for r in ["multi:nope", "nothing-here:v1"] {
        let err = t.pull(&reg.reference(r), &opts).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidImage, "{r}: {err}");
    }
}

#[tokio::test]
async fn docker_schema2_manifests_and_lists_pull() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    // A single image, converted to Docker schema2 by skopeo on push.
    let layout = t.path("layout");
    write_layout(
        &layout,
        &[
            LayerSpec::entries([LayerEntry::file("hello", "docker")]),
            LayerSpec::entries([LayerEntry::file("second", "2")]),
        ],
        &image_config(),
        Some("t"),
    )
    .unwrap();
    reg.push_with(&layout, "t", "docker:v2", &["--format=v2s2"]);
    let p = t
        .pull_ok(&reg.reference("docker:v2"), &PullOptions::default())
        .await;
    assert_eq!(read(p.rootfs.join("hello")), "docker");
    assert_eq!(read(p.rootfs.join("second")), "2");
    assert_eq!(p.config, image_config());
    let manifest = read(t.blob(p.digest.as_deref().unwrap()));
    assert!(
        manifest.contains("application/vnd.docker.distribution.manifest.v2+json"),
        "{manifest}"
    );

    // A two-platform index, converted to a Docker manifest list.
    let layout = t.path("multi");
    let mut w = LayoutWriter::create(&layout).unwrap();
    let amd = platform_image(&w, "amd64", &Platform::linux_amd64());
    let arm = platform_image(&w, "arm64", &Platform::linux_arm64());
    let index = w
        .write_index(&[arm.manifest.clone(), amd.manifest.clone()])
        .unwrap();
    w.add(&index, Some("t"));
    w.finish().unwrap();
    reg.push_with(&layout, "t", "dockerlist:v1", &["--format=v2s2"]);
    let p = t
        .pull_ok(&reg.reference("dockerlist:v1"), &PullOptions::default())
        .await;
    assert_eq!(read(p.rootfs.join("arch")), "amd64");
    let listed = list_images(&t.home).unwrap();
    let entry = listed
        .iter()
        .find(|i| i.reference.ends_with("dockerlist:v1"))
        .unwrap();
    assert_eq!(Some(&entry.digest), p.digest.as_ref());
    let refs: serde_json::Value =
        serde_json::from_str(&read(t.home.images_dir().join("refs.json"))).unwrap();
    let list_digest = refs["images"][&entry.reference]["index_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let list = read(t.blob(&list_digest));
    assert!(
        list.contains("application/vnd.docker.distribution.manifest.list.v2+json"),
        "{list}"
    );
}

fn platform_image(w: &LayoutWriter, arch: &str, platform: &Platform) -> WrittenImage {
    let config = ImageConfig {
        env: vec![format!("ARCH={arch}")],
        ..ImageConfig::default()
    };
    w.write_image(
        &[LayerSpec::entries([
            LayerEntry::file("arch", arch),
            LayerEntry::file(format!("only-{arch}"), noise(4096, arch.len() as u64)),
        ])],
        &config,
        platform,
    )
    .unwrap()
}

#[tokio::test]
async fn an_index_with_two_platforms_picks_amd64() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let layout = t.path("layout");
    let mut w = LayoutWriter::create(&layout).unwrap();
    let amd = platform_image(&w, "amd64", &Platform::linux_amd64());
    let arm = platform_image(&w, "arm64", &Platform::linux_arm64());
    let index = w
        .write_index(&[arm.manifest.clone(), amd.manifest.clone()])
        .unwrap();
    w.add(&index, Some("t"));
    w.finish().unwrap();
    reg.push(&layout, "t", "multiarch:v1");

    let p = t
        .pull_ok(&reg.reference("multiarch:v1"), &PullOptions::default())
        .await;
    assert_eq!(read(p.rootfs.join("arch")), "amd64");
    assert!(!lexists(p.rootfs.join("only-arm64")));
    assert_eq!(p.config.env, vec!["ARCH=amd64".to_owned()]);
    assert_eq!(p.digest.as_deref(), Some(amd.manifest.digest.as_str()));
    // The arm64 layer was never fetched.
    let gets = reg.blob_gets(AGENT);
    assert_eq!(gets.get(&amd.layers[0].digest), Some(&1), "{gets:?}");
    assert_eq!(gets.get(&arm.layers[0].digest), None, "{gets:?}");
    // The reference is recorded with its platform manifest; if-missing and
    // never work from the local store; pulling by the index digest too.
    let listed = list_images(&t.home).unwrap();
    assert_eq!(listed[0].digest, amd.manifest.digest);
    let again = t
        .pull_ok(&reg.reference("multiarch:v1"), &policy(PullPolicy::Never))
        .await;
    assert_eq!(again.rootfs, p.rootfs);
    let by_index = t
        .pull_ok(
            &reg.reference(&format!("multiarch@{}", index.digest)),
            &policy(PullPolicy::Never),
        )
        .await;
    assert_eq!(by_index.rootfs, p.rootfs);
}

fn io_kind(err: &Error) -> Option<ErrorKind> {
    match err {
        Error::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

#[tokio::test]
async fn basic_auth_registry_needs_credentials() {
    let reg = TestRegistry::start_with_auth("alice", "s3cret");
    let t = TestEnv::new(&reg);
    push_image(
        &reg,
        &t.path("layout"),
        &[LayerSpec::entries([LayerEntry::file("secret", "inside")])],
        &ImageConfig::default(),
        "private/app:1",
    );
    let reference = reg.reference("private/app:1");

    // Anonymous: refused, typed.
    let err = t
        .pull(&reference, &PullOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");
    assert_eq!(io_kind(&err), Some(ErrorKind::PermissionDenied), "{err}");
    // Wrong password: refused the same way.
    let wrong = PullOptions {
        credentials: Some(("alice".into(), "wrong".into())),
        ..PullOptions::default()
    };
    let err = t.pull(&reference, &wrong).await.unwrap_err();
    assert_eq!(io_kind(&err), Some(ErrorKind::PermissionDenied), "{err}");
    assert!(list_images(&t.home).unwrap().is_empty());

    // Explicit credentials.
    let right = PullOptions {
        credentials: Some(("alice".into(), "s3cret".into())),
        ..PullOptions::default()
    };
    let p = t.pull_ok(&reference, &right).await;
    assert_eq!(read(p.rootfs.join("secret")), "inside");
    assert!(!format!("{right:?}").contains("s3cret"), "Debug redacts");

    // From a Docker config file (DOCKER_CONFIG is process-global, so a child
    // process pulls into a fresh home; the insecure registry comes from
    // BURROW_INSECURE_REGISTRIES there, also process-global).
    let t2 = TestEnv::bare();
    let docker = t2.path("docker");
    fs::create_dir_all(&docker).unwrap();
    fs::write(
        docker.join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{}"}}}}}}"#,
            reg.host(),
            base64_encode(b"alice:s3cret")
        ),
    )
    .unwrap();
    let out = run_child(&t2.home, &reference, "if-missing", |c| {
        c.env("DOCKER_CONFIG", &docker).env(
            "BURROW_INSECURE_REGISTRIES",
            format!("other:1, {}", reg.host()),
        );
    });
    assert!(out.ok, "child failed: {}", out.text);
    assert_eq!(out.digest.as_deref(), p.digest.as_deref());
    // Without the Docker config the same child is refused.
    let t3 = TestEnv::bare();
    let out = run_child(&t3.home, &reference, "if-missing", |c| {
        c.env("DOCKER_CONFIG", t3.path("empty"))
            .env("BURROW_INSECURE_REGISTRIES", reg.host());
    });
    assert!(!out.ok, "{}", out.text);
    assert!(out.text.contains("CHILD_ERROR_CODE=io"), "{}", out.text);
}

fn base64_encode(data: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn corrupt_or_truncated_blobs_are_fetched_again() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let base = LayerSpec::entries([LayerEntry::file("base", noise(64 << 10, 7))]);
    let top = LayerSpec::entries([LayerEntry::file("top", "top")]);
    let a = push_image(
        &reg,
        &t.path("a"),
        &[base.clone(), top],
        &ImageConfig::default(),
        "corrupt/a:1",
    );
    let extra = LayerSpec::entries([LayerEntry::file("extra", "extra")]);
    let b = push_image(
        &reg,
        &t.path("b"),
        &[base.clone(), extra],
        &ImageConfig::default(),
        "corrupt/b:1",
    );
    assert_eq!(a.layers[0].digest, b.layers[0].digest, "shared base layer");
    let base_digest = a.layers[0].digest.clone();
    let top_digest = a.layers[1].digest.clone();

    let pa = t
        .pull_ok(&reg.reference("corrupt/a:1"), &PullOptions::default())
        .await;
    assert_eq!(
        fs::read(pa.rootfs.join("base")).unwrap(),
        noise(64 << 10, 7)
    );

    // Flip one byte of the shared base layer in the store, then pull B
    // (not unpacked yet): the damage is found before unpacking, the blob is
    // fetched again, and B's tree is right.
    let blob = t.blob(&base_digest);
    let mut data = fs::read(&blob).unwrap();
    data[100] ^= 0x55;
    fs::write(&blob, &data).unwrap();
    let pb = t
        .pull_ok(&reg.reference("corrupt/b:1"), &PullOptions::default())
        .await;
    assert_eq!(
        fs::read(pb.rootfs.join("base")).unwrap(),
        noise(64 << 10, 7)
    );
    assert_eq!(read(pb.rootfs.join("extra")), "extra");
    assert_eq!(sha256_file(&blob), base_digest);
    assert_eq!(reg.blob_gets(AGENT).get(&base_digest), Some(&2));

    // Truncate A's top layer; pull A with policy always: re-resolved, the
    // intact blobs reused, the damaged one fetched again.
    let blob = t.blob(&top_digest);
    let len = fs::metadata(&blob).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let before = reg.blob_gets(AGENT);
    let again = t
        .pull_ok(&reg.reference("corrupt/a:1"), &policy(PullPolicy::Always))
        .await;
    assert_eq!(again.rootfs, pa.rootfs);
    assert_eq!(read(again.rootfs.join("top")), "top");
    assert_eq!(sha256_file(&blob), top_digest);
    let after = reg.blob_gets(AGENT);
    assert_eq!(after.get(&top_digest), Some(&(before[&top_digest] + 1)));
    assert_eq!(
        after.get(&base_digest),
        before.get(&base_digest),
        "intact blob reused"
    );

    // With policy never, a damaged blob is an error, never used (A's tree
    // is made to look unfinished, as a crashed unpack leaves it, so the
    // blobs are needed again).
    let digest_a = pa.digest.clone().unwrap();
    let marker = t
        .home
        .images_dir()
        .join("rootfs")
        .join(format!("{}.json", digest_a.trim_start_matches("sha256:")));
    fs::remove_file(&marker).unwrap();
    let mut data = fs::read(t.blob(&top_digest)).unwrap();
    data[0] ^= 1;
    fs::write(t.blob(&top_digest), &data).unwrap();
    let err = t
        .pull(&reg.reference("corrupt/a:1"), &policy(PullPolicy::Never))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage, "{err}");
    assert!(
        !lexists(t.blob(&top_digest)),
        "the damaged blob was dropped"
    );
}

const CHILD_HOME: &str = "BURROW_IMAGE_REGISTRY_TEST_HOME";
const CHILD_REF: &str = "BURROW_IMAGE_REGISTRY_TEST_REF";
const CHILD_POLICY: &str = "BURROW_IMAGE_REGISTRY_TEST_POLICY";

/// Not a test on its own: the body of the child processes of the tests
/// below, run with `--ignored`.
#[test]
#[ignore = "child process body, run by the registry tests"]
fn child_pull() {
    let (Some(home), Some(reference)) =
        (std::env::var_os(CHILD_HOME), std::env::var(CHILD_REF).ok())
    else {
        panic!("child_pull runs only as a child of the registry tests");
    };
    let policy = match std::env::var(CHILD_POLICY).as_deref() {
        Ok("always") => PullPolicy::Always,
        Ok("never") => PullPolicy::Never,
        _ => PullPolicy::IfMissing,
    };
    let home = Home::at(PathBuf::from(home)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = PullOptions {
        policy,
        ..PullOptions::default()
    };
    match rt.block_on(pull(&home, &reference, &opts)) {
        Ok(p) => println!(
            "\nCHILD_DIGEST={}\nCHILD_ROOTFS={}",
            p.digest.unwrap_or_default(),
            p.rootfs.display()
        ),
        Err(e) => {
            println!("\nCHILD_ERROR_CODE={}", e.code());
            panic!("pull failed: {e}");
        }
    }
}

struct ChildOutput {
    ok: bool,
    text: String,
    digest: Option<String>,
    rootfs: Option<PathBuf>,
}

fn child_command(home: &Home, reference: &str, policy: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_pull",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_HOME, home.root())
    .env(CHILD_REF, reference)
    .env(CHILD_POLICY, policy)
    .env_remove(FAULT_ENV)
    .env_remove("BURROW_INSECURE_REGISTRIES")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn child_result(out: std::process::Output) -> ChildOutput {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let find = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key).map(str::to_owned))
    };
    ChildOutput {
        ok: out.status.success(),
        digest: find("CHILD_DIGEST="),
        rootfs: find("CHILD_ROOTFS=").map(PathBuf::from),
        text: format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)),
    }
}

fn run_child(
    home: &Home,
    reference: &str,
    policy: &str,
    setup: impl FnOnce(&mut Command),
) -> ChildOutput {
    let mut c = child_command(home, reference, policy);
    setup(&mut c);
    child_result(c.output().unwrap())
}

#[tokio::test]
async fn four_processes_pulling_at_once_fetch_each_blob_once() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let layers: Vec<LayerSpec> = (0..3)
        .map(|i| LayerSpec::entries([LayerEntry::file(format!("f{i}"), noise(2 << 20, i + 11))]))
        .collect();
    let image = push_image(
        &reg,
        &t.path("layout"),
        &layers,
        &ImageConfig::default(),
        "shared/app:1",
    );
    let reference = reg.reference("shared/app:1");
    let children: Vec<_> = (0..4)
        .map(|_| {
            child_command(&t.home, &reference, "if-missing")
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<ChildOutput> = children
        .into_iter()
        .map(|c| child_result(c.wait_with_output().unwrap()))
        .collect();
    let mut rootfs = BTreeSet::new();
    for r in &results {
        assert!(r.ok, "child failed: {}", r.text);
        assert_eq!(r.digest.as_deref(), Some(image.manifest.digest.as_str()));
        rootfs.insert(r.rootfs.clone().unwrap());
    }
    assert_eq!(rootfs.len(), 1, "{rootfs:?}");
    let root = rootfs.into_iter().next().unwrap();
    for i in 0..3u64 {
        assert_eq!(
            fs::read(root.join(format!("f{i}"))).unwrap(),
            noise(2 << 20, i + 11)
        );
    }
    let gets = reg.blob_gets(AGENT);
    let mut want: Vec<&str> = image.layers.iter().map(|l| l.digest.as_str()).collect();
    want.push(&image.config.digest);
    for d in want {
        assert_eq!(gets.get(d), Some(&1), "{d} fetched {gets:?}");
    }
    assert_eq!(gets.len(), 4, "{gets:?}");
    assert!(t.temp_files().is_empty(), "{:?}", t.temp_files());
    assert_eq!(t.rootfs_entries().len(), 2, "{:?}", t.rootfs_entries());
}

#[tokio::test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "the fault point exists in debug builds only"
)]
async fn an_interrupted_pull_restarts_cleanly() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let big = noise(8 << 20, 99);
    push_image(
        &reg,
        &t.path("layout"),
        &[
            LayerSpec::entries([LayerEntry::file("small", "s")]),
            LayerSpec::entries([LayerEntry::file("big", big.clone())]),
        ],
        &ImageConfig::default(),
        "big/app:1",
    );
    let reference = reg.reference("big/app:1");
    let w = FaultWindow::new(t.tmp.path(), Fault::ImagePullMidDownload.as_str());
    let mut child = w
        .arm(&mut child_command(&t.home, &reference, "if-missing"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w.is_open() {
        assert!(
            Instant::now() < deadline,
            "the child never reached the fault point"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The child is mid-download: a partial temporary file, no blob yet.
    let temps = t.temp_files();
    assert!(!temps.is_empty(), "no download in progress");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !t.temp_files().is_empty(),
        "the killed pull left its temp file"
    );
    assert!(list_images(&t.home).unwrap().is_empty());

    let p = t.pull_ok(&reference, &PullOptions::default()).await;
    assert_eq!(fs::read(p.rootfs.join("big")).unwrap(), big);
    assert!(
        t.temp_files().is_empty(),
        "stray temp files: {:?}",
        t.temp_files()
    );
    assert_eq!(t.rootfs_entries().len(), 2, "{:?}", t.rootfs_entries());
}

#[tokio::test]
async fn path_traversal_layers_are_refused() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let hostile: Vec<(&str, Vec<LayerEntry>)> = vec![
        ("dotdot", vec![LayerEntry::file("../escape", "x")]),
        (
            "symlink-parent",
            vec![
                LayerEntry::symlink("link", "/tmp"),
                LayerEntry::file("link/escape", "x"),
            ],
        ),
        (
            "hardlink-out",
            vec![LayerEntry::hard_link("passwd", "../../../../etc/passwd")],
        ),
    ];
    for (name, entries) in hostile {
        push_image(
            &reg,
            &t.path(name),
            &[
                LayerSpec::entries([LayerEntry::file("ok", "fine")]),
                LayerSpec::entries(entries),
            ],
            &ImageConfig::default(),
            &format!("hostile/{name}:1"),
        );
        let err = t
            .pull(
                &reg.reference(&format!("hostile/{name}:1")),
                &PullOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidImage, "{name}: {err}");
    }
    assert!(!lexists(t.tmp.path().join("escape")));
    assert!(!lexists(t.home.images_dir().join("escape")));
    assert!(!lexists("/tmp/escape") || read("/tmp/escape") != "x");
    assert!(
        t.rootfs_entries().iter().all(|e| !e.ends_with(".json")),
        "{:?}",
        t.rootfs_entries()
    );
    assert!(list_images(&t.home).unwrap().is_empty());
}

#[tokio::test]
async fn policy_never_without_a_local_image_is_invalid_image() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let err = t
        .pull(&reg.reference("absent:1"), &policy(PullPolicy::Never))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage, "{err}");
    let err = t
        .pull("docker.io/library/python:3.12", &policy(PullPolicy::Never))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidImage, "{err}");
    assert!(
        reg.requests_by(AGENT).is_empty(),
        "never contacted the registry"
    );
}

#[tokio::test]
async fn an_insecure_registry_must_be_listed() {
    let reg = TestRegistry::start();
    let t = TestEnv::bare();
    push_image(
        &reg,
        &t.path("layout"),
        &[LayerSpec::entries([LayerEntry::file("x", "y")])],
        &ImageConfig::default(),
        "plain:1",
    );
    let reference = reg.reference("plain:1");
    // Not listed: HTTPS is tried and fails; there is no silent HTTP fallback.
    let err = t
        .pull(&reference, &PullOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");
    assert_ne!(io_kind(&err), Some(ErrorKind::PermissionDenied), "{err}");
    assert!(
        !reg.requests_by(AGENT)
            .iter()
            .any(|l| l.contains("/manifests/")),
        "a manifest was requested over plain HTTP: {:?}",
        reg.requests_by(AGENT)
    );
    // prepare() behaves the same.
    let err = prepare(&t.home, &reference).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io, "{err}");

    // Forced for one pull.
    let forced = PullOptions {
        insecure: true,
        ..PullOptions::default()
    };
    let p = t.pull_ok(&reference, &forced).await;
    assert_eq!(read(p.rootfs.join("x")), "y");

    // Listed in the home's registries.json; a malformed file is a typed
    // configuration error.
    let t2 = TestEnv::bare();
    let file = t2.home.root().join("registries.json");
    fs::write(&file, r#"{"insecure": ["127.0.0.1:1"], "typo": true}"#).unwrap();
    let err = t2
        .pull(&reference, &PullOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidConfig, "{err}");
    fs::write(&file, format!(r#"{{"insecure": ["{}"]}}"#, reg.host())).unwrap();
    let p2 = t2.pull_ok(&reference, &PullOptions::default()).await;
    assert_eq!(read(p2.rootfs.join("x")), "y");
}

#[tokio::test]
async fn remove_and_prune_keep_what_is_referenced_or_in_use() {
    let reg = TestRegistry::start();
    let t = TestEnv::new(&reg);
    let shared = LayerSpec::entries([LayerEntry::file("shared", noise(32 << 10, 3))]);
    let a = push_image(
        &reg,
        &t.path("a"),
        &[
            shared.clone(),
            LayerSpec::entries([LayerEntry::file("a", "a")]),
        ],
        &ImageConfig::default(),
        "prune/a:1",
    );
    let b = push_image(
        &reg,
        &t.path("b"),
        &[shared, LayerSpec::entries([LayerEntry::file("b", "b")])],
        &ImageConfig::default(),
        "prune/b:1",
    );
    let ra = reg.reference("prune/a:1");
    let rb = reg.reference("prune/b:1");
    let pa = t.pull_ok(&ra, &PullOptions::default()).await;
    let pb = t.pull_ok(&rb, &PullOptions::default()).await;
    // An OCI layout prepared for a sandbox shares the rootfs cache.
    let layout = t.path("local");
    write_layout(
        &layout,
        &[LayerSpec::entries([LayerEntry::file("local", "l")])],
        &ImageConfig::default(),
        None,
    )
    .unwrap();
    let local_ref = format!("oci:{}", layout.display());
    let pl = prepare(&t.home, &local_ref).await.unwrap();

    let listed: Vec<String> = list_images(&t.home)
        .unwrap()
        .into_iter()
        .map(|i| i.reference)
        .collect();
    assert_eq!(listed, vec![ra.clone(), rb.clone()]);

    // Nothing to prune while everything is referenced or in use.
    let report = prune(&t.home, std::slice::from_ref(&local_ref), &[]).unwrap();
    assert_eq!(
        (report.blobs_removed, report.rootfs_removed),
        (0, 0),
        "{report:?}"
    );

    // Remove A: its own blobs and tree go, the shared layer stays.
    remove_image(&t.home, &ra).unwrap();
    let err = remove_image(&t.home, &ra).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    let report = prune(&t.home, std::slice::from_ref(&local_ref), &[]).unwrap();
    // A's manifest, config and top layer.
    assert_eq!(report.blobs_removed, 3, "{report:?}");
    assert_eq!(report.rootfs_removed, 1, "{report:?}");
    assert!(report.bytes_freed > 0);
    assert!(!lexists(&pa.rootfs));
    assert!(!lexists(t.blob(&a.layers[1].digest)));
    assert!(lexists(t.blob(&a.layers[0].digest)), "shared layer kept");
    assert!(lexists(t.blob(&b.layers[1].digest)));
    assert!(lexists(&pb.rootfs) && lexists(&pl.rootfs));
    let again = t.pull_ok(&rb, &policy(PullPolicy::Never)).await;
    assert_eq!(again.rootfs, pb.rootfs);

    // Remove B while a sandbox still uses it (by its short or full name):
    // in use, nothing of it goes.
    remove_image(&t.home, &rb).unwrap();
    assert!(list_images(&t.home).unwrap().is_empty());
    let in_use = vec![rb.clone(), local_ref.clone()];
    let report = prune(&t.home, &in_use, &[]).unwrap();
    assert_eq!(
        (report.blobs_removed, report.rootfs_removed),
        (0, 0),
        "{report:?}"
    );
    assert!(lexists(&pb.rootfs));

    // Nothing in use: everything goes.
    let report = prune(&t.home, &[], &[]).unwrap();
    assert_eq!(report.rootfs_removed, 2, "{report:?}");
    assert_eq!(report.blobs_removed, 4, "{report:?}");
    assert!(t
        .rootfs_entries()
        .iter()
        .all(|e| e.starts_with('.') || e.len() != 64));
    let left: Vec<_> = fs::read_dir(t.blobs_dir()).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn references_parse_and_normalise_like_docker() {
    let t = TestEnv::bare();
    let canon = |r: &str| ImageReference::parse(r).map(|r| r.to_string());
    assert_eq!(canon("python").unwrap(), "docker.io/library/python:latest");
    assert_eq!(canon("org/tool").unwrap(), "docker.io/org/tool:latest");
    assert_eq!(
        canon("registry.example.com:5000/org/tool:1.2").unwrap(),
        "registry.example.com:5000/org/tool:1.2"
    );
    assert_eq!(canon("localhost/x").unwrap(), "localhost/x:latest");
    let hex = "b".repeat(64);
    assert_eq!(
        canon(&format!("name@sha256:{hex}")).unwrap(),
        format!("docker.io/library/name@sha256:{hex}")
    );
    assert_eq!(
        canon(&format!("name:tag@sha256:{hex}")).unwrap(),
        format!("docker.io/library/name:tag@sha256:{hex}")
    );
    let r = ImageReference::parse("localhost:5000/a/b:c").unwrap();
    assert_eq!(
        (r.registry(), r.repository(), r.tag(), r.digest()),
        ("localhost:5000", "a/b", Some("c"), None)
    );
    for bad in [
        "Python",
        "org/Tool:1",
        "python:bad tag",
        "python:-x",
        "python@sha256:123",
        "python@md5:0123456789abcdef0123456789abcdef",
    ] {
        assert_eq!(
            ImageReference::parse(bad).unwrap_err().code(),
            ErrorCode::InvalidImage,
            "{bad}"
        );
        assert_eq!(
            parse_reference(&t.home, bad).unwrap_err().code(),
            ErrorCode::InvalidImage,
            "{bad}"
        );
    }
    // Registry references stay as given in ImageSource and are normalised
    // for storage; local sources keep working.
    assert_eq!(
        parse_reference(&t.home, "python:3").unwrap(),
        ImageSource::Registry("python:3".into())
    );
    assert_eq!(
        normalize_reference(&t.home, "python:3").unwrap(),
        "docker.io/library/python:3"
    );
    assert!(matches!(
        parse_reference(&t.home, "oci:/x/y:tag").unwrap(),
        ImageSource::OciLayout { .. }
    ));
    assert!(matches!(
        parse_reference(&t.home, "/some/dir").unwrap(),
        ImageSource::RootfsDir(_)
    ));
    assert_eq!(
        remove_image(&t.home, "never-pulled").unwrap_err().code(),
        ErrorCode::NotFound
    );
}
