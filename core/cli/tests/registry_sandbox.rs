#![allow(clippy::unwrap_used)]
//! A sandbox created from a registry image (pulled by its supervisor from a
//! real registry on 127.0.0.1) runs with the image's environment, working
//! directory and user; explicit builder options win over the image's.

use burrow_cli_testkit as common;

use std::path::Path;

use burrow::image::ImageConfig;
use burrow::internal::image::oci::{write_layout, LayerEntry, LayerSpec};
use burrow::Sandbox;
use common::registry::TestRegistry;
use common::TestHome;

/// The busybox tree plus a layer with an `app` user (1000:1000) and its
/// working directory, pushed as `<registry>/burrow-test/busybox:app`.
fn push_app_image(reg: &TestRegistry, dir: &Path) -> String {
    let app_layer = LayerSpec::entries([
        LayerEntry::dir("etc"),
        LayerEntry::file(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/srv/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        LayerEntry::file("etc/group", "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n"),
        LayerEntry::dir("srv"),
        LayerEntry::dir("srv/app").owner(1000, 1000),
        LayerEntry::file("srv/app/marker", "from the image").owner(1000, 1000),
    ]);
    let config = ImageConfig {
        env: vec![
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "GREETING=hello-from-image".into(),
            "IMAGE_ONLY=kept".into(),
        ],
        entrypoint: vec![],
        cmd: vec!["sh".into()],
        workdir: Some("/srv/app".into()),
        user: Some("app".into()),
    };
    write_layout(
        dir,
        &[LayerSpec::dir(common::busybox_rootfs()), app_layer],
        &config,
        Some("app"),
    )
    .unwrap();
    reg.push(dir, "app", "burrow-test/busybox:app");
    reg.reference("burrow-test/busybox:app")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_image_defaults_apply_and_explicit_options_win() {
    let reg = TestRegistry::start();
    let home = TestHome::new().await;
    std::fs::write(
        home.path().join("registries.json"),
        format!(r#"{{"insecure": ["{}"]}}"#, reg.host()),
    )
    .unwrap();
    let layout = tempfile::tempdir().unwrap();
    let reference = push_app_image(&reg, layout.path());

    // Created by reference; the supervisor pulls it (if missing) on start.
    let sb = Sandbox::builder("from-registry")
        .image(&reference)
        .backend(home.dyn_backend())
        .create()
        .await
        .expect("create from a registry image");
    let out = sb
        .exec([
            "sh",
            "-c",
            "echo $GREETING $IMAGE_ONLY; pwd; id -u; id -g; cat marker",
        ])
        .await
        .unwrap();
    assert_eq!(
        out.stdout_str(),
        "hello-from-image kept\n/srv/app\n1000\n1000\nfrom the image",
        "stderr: {}",
        out.stderr_str()
    );
    // The file API acts as the image's user too: what it writes belongs to
    // that user, and what only root may write is refused.
    sb.fs().write("/tmp/by-the-api", b"x").await.unwrap();
    let owner = sb
        .exec(["stat", "-c", "%u:%g", "/tmp/by-the-api"])
        .await
        .unwrap();
    assert_eq!(owner.stdout_str(), "1000:1000\n");
    let err = sb.fs().write("/etc/not-for-app", b"x").await.unwrap_err();
    assert_eq!(err.code(), burrow::ErrorCode::Guest);

    // The stored reference is the canonical one, and the image is listed.
    let info = sb.info().await.unwrap();
    assert_eq!(info.config.image, reference);
    let listed = home.backend.list_images().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].reference, reference);

    // Explicit options win over the image's; the pulled image is reused.
    let gets_before = reg.blob_gets("burrow/");
    let sb2 = Sandbox::builder("explicit")
        .image(&reference)
        .env("GREETING", "explicit")
        .workdir("/tmp")
        .backend(home.dyn_backend())
        .create()
        .await
        .expect("create with explicit options");
    let out = sb2
        .exec(["sh", "-c", "echo $GREETING $IMAGE_ONLY; pwd; id -u"])
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "explicit kept\n/tmp\n1000\n");
    assert_eq!(
        reg.blob_gets("burrow/"),
        gets_before,
        "no blob fetched again"
    );

    sb.destroy().await.unwrap();
    sb2.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_pull_images_rm_prune() {
    let reg = TestRegistry::start();
    let home = TestHome::new().await;
    let layout = home.path().join("layout");
    let reference = push_app_image(&reg, &layout);
    let json = |args: &[&str]| {
        let out = home.cli().arg("--json").args(args).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v)
    };
    // Plain HTTP only when asked for.
    let (code, v) = json(&["pull", &reference]);
    assert_ne!(code, Some(0));
    assert_eq!(v["error"]["code"], "io");
    let (code, v) = json(&["pull", "--insecure", &reference]);
    assert_eq!(code, Some(0), "{v}");
    let digest = v["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"));
    let (_, list) = json(&["images"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["digest"].as_str(), Some(digest.as_str()));
    // Nothing uses it: rm + prune frees the content.
    let (code, _) = json(&["image", "rm", &reference]);
    assert_eq!(code, Some(0));
    let (code, _) = json(&["image", "rm", &reference]);
    assert_eq!(code, Some(3), "removing an unknown reference is not_found");
    let (code, report) = json(&["image", "prune"]);
    assert_eq!(code, Some(0));
    assert!(report["blobs_removed"].as_u64().unwrap() >= 2, "{report}");
    let (_, list) = json(&["images"]);
    assert!(list.as_array().unwrap().is_empty());
    // A bad reference is invalid input.
    let (code, v) = json(&["pull", "Not/A:Valid:Ref"]);
    assert_eq!(code, Some(6));
    assert_eq!(v["error"]["code"], "invalid_image");
}
