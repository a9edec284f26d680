//! One tenant policy (issue 56, "one tenant policy, enforced in one
//! place"): an operator could not say which images a tenant's sandboxes
//! may use, nor how much one of them may have — a tenant could run any
//! image and ask any sandbox for all the memory its quota allowed.
//!
//! Now `burrow serve tenant set NAME --allow-image ... --sandbox-max-memory
//! ...` holds at once on the running server: a tenant limited to one image
//! cannot create, pool, claim or restore another, by any spelling (a tag,
//! a digest, the registry written out, a snapshot of another image:
//! `invalid_config`, subject `image`); a tenant limited to 256 MiB per
//! sandbox cannot ask for 512 (create, PATCH, pool: subject `memory_mb`)
//! and gets 256 when it names none; the default tenant is unaffected. A
//! real `burrow serve` on SQLite, real sandboxes.

use burrow_cli_testkit as common;
use common::serve::{ok, Resp, TenantServer};
use serde_json::{json, Value};

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

struct Fixture {
    // Field order is drop order: the server before its database.
    t: TenantServer,
    /// The tenant `p`'s admin, then the default tenant's.
    tokens: Vec<String>,
    _db: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/serve.db", db.path().display());
    let tokens = [
        ("p-admin", "p", "tenant_admin"),
        ("root", "default", "admin"),
    ];
    let mut t = TenantServer::start(&url, &["p"], &tokens);
    let tokens = std::mem::take(&mut t.tokens);
    Fixture { t, tokens, _db: db }
}

impl Fixture {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.t.call(&self.tokens[0], method, path, body)
    }

    fn default_call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.t.call(&self.tokens[1], method, path, body)
    }

    fn create(&self, name: &str, config: Value) -> Resp {
        let body = json!({"name": name, "config": config, "detached": true});
        self.call("POST", "/v1/sandboxes", Some(body))
    }
}

/// Asserts an `invalid_config` refusal naming `subject`.
fn refused(r: &Resp, subject: &str, what: &str) {
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (422, "invalid_config"),
        "{what}: {}",
        r.text()
    );
    assert_eq!(
        r.json()["error"]["subject"],
        subject,
        "{what}: {}",
        r.text()
    );
}

fn sleeper(image: &str) -> Value {
    json!({"image": image, "command": ["sleep", "3600"]})
}

#[test]
fn a_tenant_limited_to_one_image_uses_no_other_by_any_spelling() {
    let f = fixture();
    // Before any rule: a snapshot of busybox, the tenant's own.
    let src = ok(f.create("src", sleeper("busybox")), "create src");
    let src = src["id"].as_str().unwrap().to_owned();
    ok(
        f.call(
            "POST",
            &format!("/v1/sandboxes/{src}/start"),
            Some(json!({})),
        ),
        "start",
    );
    let snap = f.call(
        "POST",
        &format!("/v1/sandboxes/{src}/snapshot"),
        Some(json!({"snapshot": "s"})),
    );
    assert_eq!(snap.status, 201, "{}", snap.text());

    // Limited to alpine (any tag or digest of it): busybox is another image.
    f.t.env
        .admin(&["tenant", "set", "p", "--allow-image", "alpine"]);
    for image in [
        "busybox",
        "busybox:latest",
        "library/busybox",
        "docker.io/library/busybox",
        "index.docker.io/library/busybox:1.36",
        &format!("busybox@{DIGEST}"),
        "ghcr.io/library/alpine",
        "snapshot:s",
    ] {
        refused(&f.create("x", sleeper(image)), "image", image);
        let pool = json!({"name": "warm", "size": 0, "config": sleeper(image)});
        refused(&f.call("POST", "/v1/pools", Some(pool)), "image", image);
        let claim = json!({"name": "c", "config": sleeper(image), "detached": true, "claim": true});
        refused(
            &f.call("POST", "/v1/sandboxes", Some(claim)),
            "image",
            image,
        );
    }
    // A tag allows that tag, never a digest (which could be anything).
    f.t.env
        .admin(&["tenant", "set", "p", "--allow-image", "alpine:3.20"]);
    refused(
        &f.create("x", sleeper(&format!("alpine@{DIGEST}"))),
        "image",
        "digest",
    );
    refused(
        &f.create("x", sleeper(&format!("alpine:3.20@{DIGEST}"))),
        "image",
        "both",
    );
    // A PATCH has no image to change: the sandbox keeps its own.
    let path = format!("/v1/sandboxes/{src}");
    let _ = f.call("PATCH", &path, Some(json!({"image": "alpine"})));
    let info = ok(f.call("GET", &path, None), "get");
    assert_eq!(info["config"]["image"], "busybox", "{info}");

    // Allowed (every spelling of it): busybox and its snapshot.
    f.t.env.admin(&[
        "tenant",
        "set",
        "p",
        "--allow-image",
        "docker.io/library/busybox",
    ]);
    ok(f.create("plain", sleeper("busybox")), "busybox allowed");
    ok(
        f.create("restored", json!({"image": "snapshot:s"})),
        "its snapshot",
    );
    let pool = json!({"name": "warm", "size": 0, "config": sleeper("busybox")});
    assert_eq!(f.call("POST", "/v1/pools", Some(pool)).status, 201);
    // And a registry rule: busybox's registry is docker.io, not ghcr.io.
    f.t.env.admin(&["tenant", "set", "p", "--allow-any-image"]);
    f.t.env
        .admin(&["tenant", "set", "p", "--allow-registry", "ghcr.io"]);
    refused(&f.create("y", sleeper("busybox")), "image", "registry");
    f.t.env.admin(&["tenant", "set", "p", "--allow-any-image"]);
    ok(f.create("y", sleeper("busybox")), "any image again");

    // The default tenant is unaffected, and its rules cannot be set.
    f.t.env
        .admin(&["tenant", "set", "p", "--allow-image", "alpine"]);
    ok(
        f.default_call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "mine", "config": sleeper("busybox"), "detached": true})),
        ),
        "default tenant",
    );
    let out =
        f.t.env
            .command()
            .args(["tenant", "set", "default", "--allow-image", "alpine"])
            .output()
            .unwrap();
    assert!(
        !out.status.success(),
        "the default tenant keeps its freedom"
    );
}

#[test]
fn a_tenant_with_a_maximum_per_sandbox_gets_no_more() {
    let f = fixture();
    f.t.env
        .admin(&["tenant", "set", "p", "--sandbox-max-memory", "256"]);
    let mut big = sleeper("busybox");
    big["memory_mb"] = json!(512);
    refused(&f.create("big", big.clone()), "memory_mb", "create");
    let pool = json!({"name": "warm", "size": 0, "config": big});
    refused(
        &f.call("POST", "/v1/pools", Some(pool)),
        "memory_mb",
        "pool",
    );
    // One that names none gets the maximum, not the 512 MiB default.
    let small = ok(f.create("small", sleeper("busybox")), "create");
    assert_eq!(small["config"]["memory_mb"], 256, "{small}");
    let pool = json!({"name": "warm", "size": 0, "config": sleeper("busybox")});
    let pool = ok(f.call("POST", "/v1/pools", Some(pool)), "pool");
    assert_eq!(pool["config"]["memory_mb"], 256, "{pool}");
    let path = format!("/v1/sandboxes/{}", small["id"].as_str().unwrap());
    let r = f.call("PATCH", &path, Some(json!({"memory_mb": 512})));
    refused(&r, "memory_mb", "PATCH");
    let plan = ok(
        f.call("PATCH", &path, Some(json!({"memory_mb": null}))),
        "unset",
    );
    assert_eq!(plan["info"]["config"]["memory_mb"], 256, "{plan}");
    f.t.env
        .admin(&["tenant", "set", "p", "--sandbox-max-cpus", "0.5"]);
    let mut cpus = sleeper("busybox");
    cpus["cpus"] = json!(1.0);
    refused(&f.create("cpus", cpus), "cpus", "cpus");
    // The default tenant is unaffected (best effort: a rootless host may
    // not enforce the limit, which is not what this asks).
    let mut big = sleeper("busybox");
    big["memory_mb"] = json!(512);
    big["best_effort_limits"] = json!(true);
    let body = json!({"name": "big", "config": big, "detached": true});
    let r = ok(
        f.default_call("POST", "/v1/sandboxes", Some(body)),
        "default",
    );
    assert_eq!(r["config"]["memory_mb"], 512, "{r}");
}
