#![allow(clippy::unwrap_used)]
//! OCI image layouts: selection, verification, safe unpacking and the
//! rootfs cache, through `burrow::internal::image::prepare`.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};

use burrow::image::{ImageConfig, ImageSource, PreparedImage};
use burrow::internal::image::oci::{
    write_layout, LayerCompression, LayerEntry, LayerSpec, LayoutWriter, Platform, WrittenImage,
};
use burrow::internal::image::{parse_reference, prepare};
use burrow::internal::Home;
use burrow::ErrorCode;

struct TestEnv {
    tmp: tempfile::TempDir,
    home: Home,
}

impl TestEnv {
    fn new() -> TestEnv {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = Home::at(tmp.path().join("home")).expect("home");
        TestEnv { tmp, home }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn cache(&self) -> PathBuf {
        self.home.images_dir().join("rootfs")
    }

    /// Everything in the rootfs cache except lock files.
    fn cache_entries(&self) -> BTreeSet<String> {
        match fs::read_dir(self.cache()) {
            Ok(rd) => rd
                .map(|e| {
                    e.expect("dirent")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .filter(|n| !n.ends_with(".lock"))
                .collect(),
            Err(_) => BTreeSet::new(),
        }
    }

    async fn prepare(&self, reference: &str) -> burrow::Result<PreparedImage> {
        prepare(&self.home, reference).await
    }

    async fn prepare_ok(&self, reference: &str) -> PreparedImage {
        match self.prepare(reference).await {
            Ok(p) => p,
            Err(e) => panic!("preparing {reference}: {e}"),
        }
    }

    async fn expect_invalid(&self, reference: &str) {
        match self.prepare(reference).await {
            Ok(p) => panic!("{reference} was accepted: {}", p.rootfs.display()),
            Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{reference}: {e}"),
        }
    }
}

impl Drop for TestEnv {
    /// Unpacked images may hold read-only directories, which an unprivileged
    /// owner cannot empty: make them writable so the temp dir can go.
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

fn oci_ref(layout: &Path, tag: Option<&str>) -> String {
    match tag {
        Some(t) => format!("oci:{}:{t}", layout.display()),
        None => format!("oci:{}", layout.display()),
    }
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn lexists(path: impl AsRef<Path>) -> bool {
    fs::symlink_metadata(path).is_ok()
}

fn running_as_root(dir: &Path) -> bool {
    let probe = dir.join(".uid-probe");
    fs::write(&probe, b"").expect("probe");
    let uid = fs::metadata(&probe).expect("probe").uid();
    fs::remove_file(&probe).expect("probe");
    uid == 0
}

fn all_paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("dirent");
            out.push(e.path());
            if e.file_type().expect("file_type").is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

fn base_layer() -> LayerSpec {
    let long = format!("deep/{}/file", "n".repeat(120));
    LayerSpec::entries([
        LayerEntry::dir("etc"),
        LayerEntry::file("etc/keep", "kept"),
        LayerEntry::file("etc/gone", "to be deleted"),
        LayerEntry::dir("opq"),
        LayerEntry::file("opq/old", "lower"),
        LayerEntry::dir("opq/sub"),
        LayerEntry::file("opq/sub/old2", "lower"),
        LayerEntry::dir("olddir"),
        LayerEntry::file("olddir/x", "x"),
        LayerEntry::dir("bin"),
        LayerEntry::file("bin/tool", "#!/bin/sh\n")
            .mode(0o755)
            .mtime(1_600_000_000),
        LayerEntry::hard_link("bin/tool2", "bin/tool"),
        LayerEntry::symlink("bin/sh", "/usr/bin/busybox"),
        LayerEntry::dir("ro").mode(0o555),
        LayerEntry::file("ro/a", "a").mode(0o444),
        LayerEntry::file("owned", "o").owner(1000, 1001).mode(0o640),
        LayerEntry::file(long, "long name"),
        // Parent directories that the tar does not list are created.
        LayerEntry::file("implicit/parent/file", "p"),
    ])
}

fn upper_layer() -> LayerSpec {
    LayerSpec::entries([
        LayerEntry::whiteout("etc/gone"),
        LayerEntry::opaque("opq"),
        LayerEntry::file("opq/new", "upper"),
        LayerEntry::whiteout("olddir"),
        LayerEntry::file("ro/b", "b"),
        LayerEntry::file("etc/keep", "replaced"),
        LayerEntry::fifo("dev-fifo"),
        LayerEntry::char_device("dev-null", 1, 3),
    ])
}

#[tokio::test]
async fn two_layers_with_whiteouts_and_opaque_dir() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let img = write_layout(
        &layout,
        &[base_layer(), upper_layer()],
        &ImageConfig::default(),
        None,
    )
    .expect("write");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    let r = &p.rootfs;

    assert_eq!(p.digest.as_deref(), Some(img.manifest.digest.as_str()));
    let hex = img.manifest.digest.trim_start_matches("sha256:");
    assert_eq!(*r, t.cache().join(hex));
    assert!(t.cache().join(format!("{hex}.json")).is_file());

    assert_eq!(read(r.join("etc/keep")), "replaced");
    assert!(!lexists(r.join("etc/gone")), "whiteout did not delete");
    assert!(
        !lexists(r.join("opq/old")) && !lexists(r.join("opq/sub")),
        "opaque dir kept lower content"
    );
    assert_eq!(read(r.join("opq/new")), "upper");
    assert!(!lexists(r.join("olddir")), "whiteout of a directory");
    assert!(
        all_paths(r).iter().all(|p| !p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".wh."))),
        "whiteout entries must not be materialised"
    );

    let tool = fs::metadata(r.join("bin/tool")).expect("tool");
    assert_eq!(tool.permissions().mode() & 0o7777, 0o755);
    assert_eq!(tool.mtime(), 1_600_000_000);
    assert_eq!(
        tool.ino(),
        fs::metadata(r.join("bin/tool2")).expect("tool2").ino()
    );
    assert_eq!(
        fs::read_link(r.join("bin/sh")).expect("symlink"),
        PathBuf::from("/usr/bin/busybox")
    );

    // A read-only directory still received the upper layer's file and keeps
    // its mode.
    assert_eq!(read(r.join("ro/b")), "b");
    assert_eq!(
        fs::metadata(r.join("ro")).expect("ro").permissions().mode() & 0o7777,
        0o555
    );
    assert_eq!(
        fs::metadata(r.join("ro/a"))
            .expect("ro/a")
            .permissions()
            .mode()
            & 0o7777,
        0o444
    );

    let owned = fs::metadata(r.join("owned")).expect("owned");
    assert_eq!(owned.permissions().mode() & 0o777, 0o640);
    if running_as_root(t.tmp.path()) {
        assert_eq!((owned.uid(), owned.gid()), (1000, 1001));
    }

    assert_eq!(
        read(r.join(format!("deep/{}/file", "n".repeat(120)))),
        "long name"
    );
    assert_eq!(read(r.join("implicit/parent/file")), "p");
    assert!(
        !lexists(r.join("dev-fifo")) && !lexists(r.join("dev-null")),
        "devices and fifos are skipped"
    );
}

#[tokio::test]
async fn image_config_comes_through() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let config = ImageConfig {
        env: vec!["PATH=/usr/bin:/bin".into(), "GREETING=hi there".into()],
        entrypoint: vec!["/bin/entry".into()],
        cmd: vec!["serve".into(), "--port".into(), "80".into()],
        workdir: Some("/srv".into()),
        user: Some("1000:1000".into()),
    };
    write_layout(
        &layout,
        &[LayerSpec::entries([LayerEntry::file("f", "x")])],
        &config,
        Some("latest"),
    )
    .expect("write");
    let p = t.prepare_ok(&oci_ref(&layout, Some("latest"))).await;
    assert_eq!(p.config, config);
    assert_eq!(p.reference, oci_ref(&layout, Some("latest")));
    // And again from the cache.
    assert_eq!(
        t.prepare_ok(&oci_ref(&layout, Some("latest"))).await.config,
        config
    );
}

#[tokio::test]
async fn tags_select_the_manifest() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let mut w = LayoutWriter::create(&layout).expect("create");
    for tag in ["v1", "v2"] {
        let img = w
            .write_image(
                &[LayerSpec::entries([LayerEntry::file("version", tag)])],
                &ImageConfig::default(),
                &Platform::host(),
            )
            .expect("image");
        w.add(&img.manifest, Some(tag));
    }
    w.finish().expect("finish");

    let v1 = t.prepare_ok(&oci_ref(&layout, Some("v1"))).await;
    let v2 = t.prepare_ok(&oci_ref(&layout, Some("v2"))).await;
    assert_eq!(read(v1.rootfs.join("version")), "v1");
    assert_eq!(read(v2.rootfs.join("version")), "v2");
    assert_ne!(v1.rootfs, v2.rootfs);
    // Two manifests and no tag, or an unknown tag: refused.
    t.expect_invalid(&oci_ref(&layout, None)).await;
    t.expect_invalid(&oci_ref(&layout, Some("v3"))).await;
}

fn expected_arch() -> String {
    let host = Platform::host().architecture;
    if host == "arm64" {
        host
    } else {
        "amd64".into()
    }
}

#[tokio::test]
async fn index_with_two_platforms_picks_the_host() {
    let t = TestEnv::new();
    for docker in [false, true] {
        let layout = t.path(if docker { "docker" } else { "oci" });
        let mut w = LayoutWriter::create(&layout)
            .expect("create")
            .docker_media_types(docker);
        let mut manifests = Vec::new();
        for platform in [Platform::linux_arm64(), Platform::linux_amd64()] {
            let layer =
                LayerSpec::entries([LayerEntry::file("arch", platform.architecture.clone())]);
            manifests.push(
                w.write_image(&[layer], &ImageConfig::default(), &platform)
                    .expect("image")
                    .manifest,
            );
        }
        let index = w.write_index(&manifests).expect("index");
        w.add(&index, Some("multi"));
        w.finish().expect("finish");

        let p = t.prepare_ok(&oci_ref(&layout, Some("multi"))).await;
        assert_eq!(
            read(p.rootfs.join("arch")),
            expected_arch(),
            "docker media types: {docker}"
        );
        let picked = manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|pl| pl.architecture == expected_arch())
            })
            .expect("picked");
        assert_eq!(p.digest.as_deref(), Some(picked.digest.as_str()));
    }

    // index.json itself listing one manifest per platform, untagged.
    let layout = t.path("flat");
    let mut w = LayoutWriter::create(&layout).expect("create");
    for platform in [Platform::linux_arm64(), Platform::linux_amd64()] {
        let layer = LayerSpec::entries([LayerEntry::file("arch", platform.architecture.clone())]);
        let img = w
            .write_image(&[layer], &ImageConfig::default(), &platform)
            .expect("image");
        w.add(&img.manifest, None);
    }
    w.finish().expect("finish");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    assert_eq!(read(p.rootfs.join("arch")), expected_arch());

    // An index with no manifest for this host (nor amd64) is refused.
    let layout = t.path("foreign");
    let mut w = LayoutWriter::create(&layout).expect("create");
    let s390x = Platform {
        architecture: "s390x".into(),
        os: "linux".into(),
        variant: None,
    };
    let img = w
        .write_image(&[LayerSpec::entries([])], &ImageConfig::default(), &s390x)
        .expect("image");
    let index = w.write_index(&[img.manifest]).expect("index");
    w.add(&index, None);
    w.finish().expect("finish");
    t.expect_invalid(&oci_ref(&layout, None)).await;
}

#[tokio::test]
async fn uncompressed_and_zstd_layers() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let layers = [
        LayerSpec::entries([LayerEntry::file("a", "plain")]).compression(LayerCompression::None),
        LayerSpec::entries([LayerEntry::file("b", "zstd")]).compression(LayerCompression::Zstd),
        LayerSpec::entries([LayerEntry::file("c", "gzip")]),
    ];
    write_layout(&layout, &layers, &ImageConfig::default(), None).expect("write");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    assert_eq!(read(p.rootfs.join("a")), "plain");
    assert_eq!(read(p.rootfs.join("b")), "zstd");
    assert_eq!(read(p.rootfs.join("c")), "gzip");
}

#[tokio::test]
async fn layer_from_a_directory() {
    let t = TestEnv::new();
    let src = t.path("src");
    fs::create_dir_all(src.join("usr/bin")).expect("mkdir");
    fs::write(src.join("usr/bin/hello"), "hello").expect("write");
    fs::set_permissions(src.join("usr/bin/hello"), fs::Permissions::from_mode(0o751))
        .expect("chmod");
    std::os::unix::fs::symlink("usr/bin", src.join("bin")).expect("symlink");
    let layout = t.path("layout");
    write_layout(
        &layout,
        &[LayerSpec::dir(&src)],
        &ImageConfig::default(),
        None,
    )
    .expect("write");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    assert_eq!(read(p.rootfs.join("usr/bin/hello")), "hello");
    let mode = fs::metadata(p.rootfs.join("usr/bin/hello"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
    assert_eq!(
        fs::read_link(p.rootfs.join("bin")).expect("link"),
        PathBuf::from("usr/bin")
    );
}

fn simple_image(layout: &Path) -> WrittenImage {
    let files: Vec<LayerEntry> = (0..50)
        .map(|i| LayerEntry::file(format!("files/{i}"), format!("content {i}")))
        .collect();
    write_layout(
        layout,
        &[LayerSpec::entries(files)],
        &ImageConfig::default(),
        None,
    )
    .expect("write")
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

#[tokio::test]
async fn corrupt_blobs_are_refused_and_nothing_is_cached() {
    for which in ["layer", "config", "manifest"] {
        let t = TestEnv::new();
        let layout = t.path("layout");
        let img = simple_image(&layout);
        let digest = match which {
            "layer" => &img.layers[0].digest,
            "config" => &img.config.digest,
            _ => &img.manifest.digest,
        };
        let path = blob(&layout, digest);
        let mut data = fs::read(&path).expect("blob");
        let mid = data.len() / 2;
        data[mid] ^= 0x01;
        fs::write(&path, &data).expect("corrupt");
        t.expect_invalid(&oci_ref(&layout, None)).await;
        assert!(
            t.cache_entries().is_empty(),
            "{which}: cache holds {:?}",
            t.cache_entries()
        );
    }
}

#[tokio::test]
async fn truncated_blobs_are_refused_and_nothing_is_cached() {
    for which in ["layer", "config"] {
        let t = TestEnv::new();
        let layout = t.path("layout");
        let img = simple_image(&layout);
        let digest = if which == "layer" {
            &img.layers[0].digest
        } else {
            &img.config.digest
        };
        let path = blob(&layout, digest);
        let data = fs::read(&path).expect("blob");
        fs::write(&path, &data[..data.len() - 10]).expect("truncate");
        t.expect_invalid(&oci_ref(&layout, None)).await;
        assert!(
            t.cache_entries().is_empty(),
            "{which}: cache holds {:?}",
            t.cache_entries()
        );
    }
}

#[tokio::test]
async fn wrong_diff_id_is_refused() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let mut w = LayoutWriter::create(&layout).expect("create");
    let img = w
        .write_image(
            &[LayerSpec::entries([LayerEntry::file("f", "x")])],
            &ImageConfig::default(),
            &Platform::host(),
        )
        .expect("image");
    // A config whose diff_id does not describe the layer.
    let config = serde_json::json!({
        "architecture": Platform::host().architecture, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", "0".repeat(64))]}
    });
    let config = w
        .write_blob(
            "application/vnd.oci.image.config.v1+json",
            config.to_string().as_bytes(),
        )
        .expect("config");
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": img.layers,
    });
    let manifest = w
        .write_blob(
            "application/vnd.oci.image.manifest.v1+json",
            manifest.to_string().as_bytes(),
        )
        .expect("manifest");
    w.add(&manifest, None);
    w.finish().expect("finish");
    t.expect_invalid(&oci_ref(&layout, None)).await;
    assert!(t.cache_entries().is_empty());
}

/// A layout whose one manifest lists these raw layer blobs (no diff_ids).
fn layout_with_raw_layers(layout: &Path, layers: &[(&str, Vec<u8>)]) {
    let mut w = LayoutWriter::create(layout).expect("create");
    let layers: Vec<_> = layers
        .iter()
        .map(|(mt, data)| w.write_blob(mt, data).expect("layer"))
        .collect();
    let config = serde_json::json!({"architecture": Platform::host().architecture, "os": "linux", "config": {}});
    let config = w
        .write_blob(
            "application/vnd.oci.image.config.v1+json",
            config.to_string().as_bytes(),
        )
        .expect("config");
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": layers,
    });
    let manifest = w
        .write_blob(
            "application/vnd.oci.image.manifest.v1+json",
            manifest.to_string().as_bytes(),
        )
        .expect("manifest");
    w.add(&manifest, None);
    w.finish().expect("finish");
}

#[tokio::test]
async fn malformed_layers_are_refused() {
    let t = TestEnv::new();
    let gzip = |data: &[u8]| {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(data).expect("gzip");
        enc.finish().expect("gzip")
    };
    let gz = "application/vnd.oci.image.layer.v1.tar+gzip";
    let mut truncated_tar = {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(4000);
        h.set_mode(0o644);
        b.append_data(&mut h, "big", &[1u8; 4000][..]).expect("tar");
        b.into_inner().expect("tar")
    };
    truncated_tar.truncate(2048);
    let mut truncated_gzip = gzip(&[7u8; 4096]);
    truncated_gzip.truncate(truncated_gzip.len() / 2);
    type RawLayers<'a> = Vec<(&'a str, Vec<u8>)>;
    let cases: Vec<(&str, RawLayers)> = vec![
        ("gzip of garbage", vec![(gz, gzip(&[7u8; 4096]))]),
        ("truncated gzip stream", vec![(gz, truncated_gzip)]),
        (
            "gzip with trailing garbage",
            vec![(gz, [gzip(&[0u8; 1024]), b"trailing".to_vec()].concat())],
        ),
        (
            "not a layer media type",
            vec![("application/vnd.in-toto+json", b"{}".to_vec())],
        ),
        (
            "tar cut inside an entry",
            vec![("application/vnd.oci.image.layer.v1.tar", truncated_tar)],
        ),
        (
            "not a tar at all",
            vec![("application/vnd.oci.image.layer.v1.tar", vec![b'x'; 2048])],
        ),
    ];
    for (name, layers) in cases {
        let layout = t.path(&format!("layout-{}", name.replace(' ', "-")));
        layout_with_raw_layers(&layout, &layers);
        match t.prepare(&oci_ref(&layout, None)).await {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{name}: {e}"),
        }
        assert!(
            t.cache_entries().is_empty(),
            "{name}: cache holds {:?}",
            t.cache_entries()
        );
    }
    // An empty layer (two zero blocks) is fine.
    let layout = t.path("layout-empty");
    layout_with_raw_layers(&layout, &[(gz, gzip(&[0u8; 1024]))]);
    t.prepare_ok(&oci_ref(&layout, None)).await;
}

#[tokio::test]
async fn bad_layouts_are_refused() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    simple_image(&layout);

    // Digests that would be paths.
    let index_path = layout.join("index.json");
    let good_index = read(&index_path);
    let index: serde_json::Value = serde_json::from_str(&good_index).expect("index");
    let digest = index["manifests"][0]["digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    for bad in [
        format!("sha256:../../{}", &digest[13..]),
        "sha256:/etc/passwd".to_owned(),
        digest.to_uppercase().replacen("SHA256", "sha256", 1),
        format!("sha512:{}", &digest[7..]),
    ] {
        fs::write(&index_path, good_index.replace(&digest, &bad)).expect("index");
        t.expect_invalid(&oci_ref(&layout, None)).await;
    }
    fs::write(&index_path, &good_index).expect("index");

    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"2.0.0"}"#,
    )
    .expect("layout");
    t.expect_invalid(&oci_ref(&layout, None)).await;
    fs::remove_file(layout.join("oci-layout")).expect("rm");
    t.expect_invalid(&oci_ref(&layout, None)).await;
    t.expect_invalid(&oci_ref(&t.path("missing"), None)).await;
    assert!(t.cache_entries().is_empty());
}

/// Each hostile layer must be refused without writing outside the rootfs.
#[tokio::test]
async fn hostile_layers_cannot_escape() {
    let t = TestEnv::new();
    let outside = t.path("outside");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join("secret"), "secret").expect("write");
    let out = outside.display().to_string();
    let secret = outside.join("secret").display().to_string();

    let cases: Vec<(&str, Vec<Vec<LayerEntry>>)> = vec![
        ("dotdot", vec![vec![LayerEntry::file("../escape", "x")]]),
        (
            "deep dotdot",
            vec![vec![LayerEntry::file("../../../../escape", "x")]],
        ),
        (
            "absolute dotdot",
            vec![vec![LayerEntry::file("/abs/../../escape", "x")]],
        ),
        (
            "inner dotdot",
            vec![vec![
                LayerEntry::dir("a"),
                LayerEntry::file("./a/../../escape", "x"),
            ]],
        ),
        (
            "write through absolute symlink",
            vec![vec![
                LayerEntry::symlink("a", &out),
                LayerEntry::file("a/passwd", "x"),
            ]],
        ),
        (
            "write through relative symlink",
            vec![vec![
                LayerEntry::symlink("a", "../../../../../../../.."),
                LayerEntry::file("a/escape", "x"),
            ]],
        ),
        (
            "dir through symlink",
            vec![vec![
                LayerEntry::symlink("a", &out),
                LayerEntry::dir("a/newdir"),
            ]],
        ),
        (
            "symlink through symlink",
            vec![vec![
                LayerEntry::symlink("a", &out),
                LayerEntry::symlink("a/l", "/"),
            ]],
        ),
        (
            "write through symlink of a lower layer",
            vec![
                vec![LayerEntry::symlink("a", &out)],
                vec![LayerEntry::file("a/passwd", "x")],
            ],
        ),
        (
            "whiteout through symlink",
            vec![
                vec![LayerEntry::symlink("a", &out)],
                vec![LayerEntry::whiteout("a/secret")],
            ],
        ),
        (
            "opaque through symlink",
            vec![
                vec![LayerEntry::symlink("a", &out)],
                vec![LayerEntry::opaque("a")],
            ],
        ),
        (
            "hard link to dotdot",
            vec![vec![LayerEntry::hard_link("x", "../../../outside/secret")]],
        ),
        (
            "hard link to absolute host path",
            vec![vec![LayerEntry::hard_link("x", &secret)]],
        ),
        (
            "hard link through symlink",
            vec![vec![
                LayerEntry::symlink("a", &out),
                LayerEntry::hard_link("x", "a/secret"),
            ]],
        ),
        (
            "hard link to nothing yet",
            vec![vec![
                LayerEntry::hard_link("x", "later"),
                LayerEntry::file("later", ""),
            ]],
        ),
        (
            "hard link to a directory",
            vec![vec![LayerEntry::dir("d"), LayerEntry::hard_link("x", "d")]],
        ),
        (
            "hard link over its own target's directory",
            vec![vec![
                LayerEntry::dir("d"),
                LayerEntry::file("d/f", ""),
                LayerEntry::hard_link("d", "d/f"),
            ]],
        ),
    ];
    for (name, layers) in cases {
        let layout = t.path(&format!("layout-{}", name.replace(' ', "-")));
        let layers: Vec<LayerSpec> = layers.into_iter().map(LayerSpec::entries).collect();
        write_layout(&layout, &layers, &ImageConfig::default(), None).expect("write");
        match t.prepare(&oci_ref(&layout, None)).await {
            Ok(p) => panic!("{name}: accepted ({})", p.rootfs.display()),
            Err(e) => assert_eq!(e.code(), ErrorCode::InvalidImage, "{name}: {e}"),
        }
        let left: Vec<String> = fs::read_dir(&outside)
            .expect("outside")
            .map(|e| {
                e.expect("dirent")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(left, vec!["secret".to_owned()], "{name}: wrote outside");
        assert_eq!(read(outside.join("secret")), "secret", "{name}");
        assert_eq!(
            fs::metadata(outside.join("secret"))
                .expect("secret")
                .nlink(),
            1,
            "{name}: linked outside"
        );
        assert!(
            t.cache_entries().is_empty(),
            "{name}: cache holds {:?}",
            t.cache_entries()
        );
        // The temporary tree lived in images/rootfs/: nothing may appear
        // around it either.
        for dir in [
            t.cache(),
            t.home.images_dir(),
            t.home.root().to_path_buf(),
            t.tmp.path().to_path_buf(),
        ] {
            assert!(
                !lexists(dir.join("escape")),
                "{name}: escaped into {}",
                dir.display()
            );
            assert!(
                !lexists(dir.join("passwd")),
                "{name}: escaped into {}",
                dir.display()
            );
        }
    }
}

#[tokio::test]
async fn later_layer_replaces_a_symlink_instead_of_writing_through_it() {
    let t = TestEnv::new();
    let outside = t.path("outside");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join("target"), "untouched").expect("write");
    let target = outside.join("target").display().to_string();
    let layout = t.path("layout");
    let layers = [
        LayerSpec::entries([
            LayerEntry::symlink("link", &target),
            LayerEntry::symlink("dirlink", outside.display().to_string()),
        ]),
        LayerSpec::entries([
            LayerEntry::file("link", "replaced"),
            LayerEntry::dir("dirlink"),
            LayerEntry::file("dirlink/f", "in"),
        ]),
    ];
    write_layout(&layout, &layers, &ImageConfig::default(), None).expect("write");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    assert!(fs::symlink_metadata(p.rootfs.join("link"))
        .expect("link")
        .is_file());
    assert_eq!(read(p.rootfs.join("link")), "replaced");
    assert!(fs::symlink_metadata(p.rootfs.join("dirlink"))
        .expect("dirlink")
        .is_dir());
    assert_eq!(read(outside.join("target")), "untouched");
    assert!(!outside.join("f").exists());
}

#[tokio::test]
async fn second_prepare_reuses_the_cache() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    simple_image(&layout);
    let reference = oci_ref(&layout, None);
    let first = t.prepare_ok(&reference).await;
    let ino = fs::metadata(first.rootfs.join("files/1"))
        .expect("meta")
        .ino();
    // A marker the unpack would not recreate.
    fs::write(first.rootfs.join("sentinel"), "still here").expect("sentinel");
    let second = t.prepare_ok(&reference).await;
    assert_eq!(first, second);
    assert_eq!(
        fs::metadata(second.rootfs.join("files/1"))
            .expect("meta")
            .ino(),
        ino
    );
    assert_eq!(read(second.rootfs.join("sentinel")), "still here");
    let hex = first
        .digest
        .as_deref()
        .expect("digest")
        .trim_start_matches("sha256:")
        .to_owned();
    assert_eq!(
        t.cache_entries(),
        BTreeSet::from([hex.clone(), format!("{hex}.json")])
    );
}

#[tokio::test]
async fn leftovers_of_a_crashed_unpack_are_replaced() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    let img = simple_image(&layout);
    let hex = img.manifest.digest.trim_start_matches("sha256:").to_owned();
    fs::create_dir_all(t.cache().join(format!(".tmp-{hex}-999999-dead/files"))).expect("tmp");
    // A tree renamed into place whose marker was never written.
    fs::create_dir_all(t.cache().join(&hex)).expect("tree");
    fs::write(t.cache().join(&hex).join("partial"), "junk").expect("junk");
    let p = t.prepare_ok(&oci_ref(&layout, None)).await;
    assert!(!p.rootfs.join("partial").exists());
    assert_eq!(read(p.rootfs.join("files/49")), "content 49");
    assert_eq!(
        t.cache_entries(),
        BTreeSet::from([hex.clone(), format!("{hex}.json")])
    );
}

fn big_image(layout: &Path) {
    let mut entries = vec![];
    for d in 0..20 {
        entries.push(LayerEntry::dir(format!("d{d}")));
        for f in 0..50 {
            entries.push(LayerEntry::file(
                format!("d{d}/f{f}"),
                format!("{d}/{f}").repeat(100),
            ));
        }
    }
    let upper = LayerSpec::entries([
        LayerEntry::whiteout("d0/f0"),
        LayerEntry::file("last", "done"),
    ]);
    write_layout(
        layout,
        &[LayerSpec::entries(entries), upper],
        &ImageConfig::default(),
        None,
    )
    .expect("write");
}

fn assert_big_image_complete(rootfs: &Path) {
    for d in 0..20 {
        for f in 0..50 {
            let p = rootfs.join(format!("d{d}/f{f}"));
            if (d, f) == (0, 0) {
                assert!(!lexists(&p));
            } else {
                assert_eq!(read(&p), format!("{d}/{f}").repeat(100));
            }
        }
    }
    assert_eq!(read(rootfs.join("last")), "done");
}

#[test]
fn concurrent_threads_get_one_complete_rootfs() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    big_image(&layout);
    let reference = oci_ref(&layout, None);
    let barrier = Arc::new(Barrier::new(4));
    let results: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let barrier = barrier.clone();
                let (home, reference) = (t.home.clone(), reference.clone());
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    barrier.wait();
                    rt.block_on(prepare(&home, &reference))
                        .expect("prepare")
                        .rootfs
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    assert_big_image_complete(&results[0]);
    assert_eq!(t.cache_entries().len(), 2, "{:?}", t.cache_entries());
}

const CHILD_HOME: &str = "BURROW_IMAGE_OCI_TEST_HOME";
const CHILD_REF: &str = "BURROW_IMAGE_OCI_TEST_REF";

/// Not a test on its own: the body of the children of
/// `concurrent_processes_get_one_complete_rootfs`, run with `--ignored`.
#[test]
#[ignore = "child process body, run by concurrent_processes_get_one_complete_rootfs"]
fn child_prepare() {
    let (Some(home), Some(reference)) =
        (std::env::var_os(CHILD_HOME), std::env::var(CHILD_REF).ok())
    else {
        panic!(
            "child_prepare runs only as a child of concurrent_processes_get_one_complete_rootfs"
        );
    };
    let home = Home::at(PathBuf::from(home)).expect("home");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let p = rt.block_on(prepare(&home, &reference)).expect("prepare");
    println!("\nCHILD_ROOTFS={}", p.rootfs.display());
}

#[test]
fn concurrent_processes_get_one_complete_rootfs() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    big_image(&layout);
    let reference = oci_ref(&layout, None);
    let exe = std::env::current_exe().expect("current_exe");
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "child_prepare",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_HOME, t.home.root())
                .env(CHILD_REF, &reference)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut rootfs = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("CHILD_ROOTFS=").map(|(_, path)| path))
            .unwrap_or_else(|| panic!("no result in {stdout}"));
        rootfs.insert(PathBuf::from(line));
    }
    assert_eq!(rootfs.len(), 1, "{rootfs:?}");
    let only = rootfs.into_iter().next().expect("one");
    assert_big_image_complete(&only);
    assert_eq!(t.cache_entries().len(), 2, "{:?}", t.cache_entries());
}

#[test]
fn references_parse() {
    let t = TestEnv::new();
    let parse = |r: &str| parse_reference(&t.home, r);
    assert_eq!(
        parse("oci:/x/layout:v1").expect("parse"),
        ImageSource::OciLayout {
            path: "/x/layout".into(),
            tag: Some("v1".into())
        }
    );
    assert_eq!(
        parse("oci:/x/layout").expect("parse"),
        ImageSource::OciLayout {
            path: "/x/layout".into(),
            tag: None
        }
    );
    // A ':' before the last '/' is part of the path.
    assert_eq!(
        parse("oci:/x:y/layout").expect("parse"),
        ImageSource::OciLayout {
            path: "/x:y/layout".into(),
            tag: None
        }
    );
    assert_eq!(
        parse("oci:/x/layout:").expect("parse"),
        ImageSource::OciLayout {
            path: "/x/layout".into(),
            tag: None
        }
    );
    assert_eq!(
        parse("oci:").map_err(|e| e.code()),
        Err(ErrorCode::InvalidImage)
    );
    assert_eq!(
        parse("").map_err(|e| e.code()),
        Err(ErrorCode::InvalidImage)
    );

    // A directory holding `oci-layout` is a layout, others are rootfs dirs.
    let layout = t.path("layout");
    simple_image(&layout);
    assert_eq!(
        parse(&layout.display().to_string()).expect("parse"),
        ImageSource::OciLayout {
            path: layout.clone(),
            tag: None
        }
    );
    assert_eq!(
        parse(&t.path("plain").display().to_string()).expect("parse"),
        ImageSource::RootfsDir(t.path("plain"))
    );
    assert_eq!(
        parse("alpine:3.20").expect("parse"),
        ImageSource::Registry("alpine:3.20".into())
    );
}

#[tokio::test]
async fn plain_layout_path_prepares_too() {
    let t = TestEnv::new();
    let layout = t.path("layout");
    simple_image(&layout);
    let p = t.prepare_ok(&layout.display().to_string()).await;
    assert_eq!(read(p.rootfs.join("files/3")), "content 3");
}

#[test]
fn ext4_disk_image_is_built_once_without_mounting() {
    let t = TestEnv::new();
    let layout = t.path("ext4-layout");
    big_image(&layout);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let prepared = rt
        .block_on(prepare(&t.home, &oci_ref(&layout, None)))
        .unwrap();
    let disk = burrow::internal::image::ext4::disk_image(&t.home, &prepared).unwrap();
    assert!(burrow::internal::image::ext4::is_ext4(&disk));
    // The content is inside: debugfs reads it without mounting.
    let listing = std::process::Command::new("debugfs")
        .args(["-R", "ls -p /"])
        .arg(&disk)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listing.stdout);
    for entry in std::fs::read_dir(&prepared.rootfs).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            text.contains(&format!("/{name}/")),
            "{name} missing from the disk image:\n{text}"
        );
    }
    // Cached: the same file, not rebuilt.
    let mtime = std::fs::metadata(&disk).unwrap().modified().unwrap();
    let again = burrow::internal::image::ext4::disk_image(&t.home, &prepared).unwrap();
    assert_eq!(again, disk);
    assert_eq!(
        std::fs::metadata(&again).unwrap().modified().unwrap(),
        mtime
    );
}
