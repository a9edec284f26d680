#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tenants of `burrow serve` kept apart, on a real PostgreSQL with real
//! sandboxes: every operation of the OpenAPI document, driven by one
//! tenant with the other tenant's ids and names, answers exactly as for
//! ones that do not exist and changes nothing; so do the gateway's own
//! origins and preview links; names are unique per tenant; lists show the
//! tenant's own.
//!
//! The operations come from the served document itself, so a new operation
//! cannot escape the check: each one with a path parameter must answer
//! `not_found` for an absent id or name (a request body the operation
//! refuses first would show as something else, and fail the test).

#[path = "tenants/fixture.rs"]
mod fixture;

use burrow_cli_testkit::serve::{ok, request_to_host, Resp};
use fixture::{call, fixture, Fixture};
use serde_json::{json, Value};

/// What one tenant made: a running sandbox, a snapshot, a pool, a sandbox
/// target and a URL target.
struct Objects {
    id: String,
    name: String,
    snapshot: String,
    pool: String,
    url_target: String,
    webhook: String,
    /// A preview link of the sandbox target: its id and its origin's
    /// cookie (`name=value`).
    preview: String,
    preview_cookie: String,
}

fn make_objects(f: &Fixture, token: &str) -> Objects {
    let config = json!({"image": "busybox", "command": ["sleep", "3600"]});
    let created = ok(
        call(
            f,
            token,
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "worker", "config": config, "detached": true})),
        ),
        "create",
    );
    let id = created["id"].as_str().unwrap().to_owned();
    ok(
        call(
            f,
            token,
            "POST",
            &format!("/v1/sandboxes/{id}/start"),
            Some(json!({})),
        ),
        "start",
    );
    ok(
        call(
            f,
            token,
            "POST",
            &format!("/v1/sandboxes/{id}/snapshot"),
            Some(json!({"snapshot": "snap"})),
        ),
        "snapshot",
    );
    ok(
        call(
            f,
            token,
            "POST",
            "/v1/pools",
            Some(json!({"name": "pool", "size": 0, "config": config})),
        ),
        "pool",
    );
    ok(
        call(
            f,
            token,
            "PUT",
            &format!("/v1/gateway/targets/{id}"),
            Some(json!({"port": 8080})),
        ),
        "sandbox target",
    );
    let url_target = ok(
        call(
            f,
            token,
            "POST",
            "/v1/gateway/targets",
            Some(json!({"url": "http://127.0.0.1:9"})),
        ),
        "url target",
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let webhook = ok(
        call(
            f,
            token,
            "POST",
            "/v1/webhooks",
            Some(json!({"url": "http://127.0.0.1:9/", "types": ["sandbox.removed"]})),
        ),
        "webhook",
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let preview = ok(
        call(
            f,
            token,
            "POST",
            &format!("/v1/gateway/targets/{id}/previews"),
            None,
        ),
        "preview",
    );
    let link = preview["url"].as_str().unwrap();
    let traded = request_to_host(
        &gateway_addr(f),
        "GET",
        &origin_host(f, &id),
        &link[link.find("/__burrow").unwrap()..],
        &[],
    );
    assert_eq!(traded.status, 303, "{}", traded.text());
    let preview_cookie = traded
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    Objects {
        id,
        name: "worker".into(),
        snapshot: "snap".into(),
        pool: "pool".into(),
        url_target,
        webhook,
        preview: preview["id"].as_str().unwrap().to_owned(),
        preview_cookie,
    }
}

/// `127.0.0.1:PORT` of the server's gateway listener.
fn gateway_addr(f: &Fixture) -> String {
    let url = f.t.server.gateway.clone().expect("a gateway listener");
    url.strip_prefix("http://").unwrap().to_owned()
}

/// The host name of `label`'s origin on the gateway listener.
fn origin_host(f: &Fixture, label: &str) -> String {
    let addr = gateway_addr(f);
    let port = addr.rsplit_once(':').unwrap().1;
    format!("{label}.localhost:{port}")
}

/// A body each operation accepts when its object exists, so that an
/// absent one is what it answers: the least its schema in the document
/// asks for (required properties only).
fn body_for(doc: &Value, op: &Value) -> Option<Value> {
    let schema = &op["requestBody"]["content"]["application/json"]["schema"];
    (!schema.is_null()).then(|| least(doc, schema))
}

fn least(doc: &Value, schema: &Value) -> Value {
    if let Some(r) = schema["$ref"].as_str() {
        let path = r.trim_start_matches("#/");
        let target = path.split('/').fold(doc, |v, k| &v[k]);
        return least(doc, target);
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(first) = schema[key].as_array().and_then(|a| a.first()) {
            if schema["properties"].is_null() {
                return least(doc, first);
            }
            // Branches that only say which of the properties are required.
            let mut merged = schema.clone();
            let obj = merged.as_object_mut().unwrap();
            obj.remove(key);
            let mut required = schema["required"].as_array().cloned().unwrap_or_default();
            required.extend(first["required"].as_array().cloned().unwrap_or_default());
            obj.insert("required".into(), Value::Array(required));
            return least(doc, &merged);
        }
    }
    if let Some(e) = schema["enum"].as_array().and_then(|a| a.first()) {
        return e.clone();
    }
    let ty = match &schema["type"] {
        Value::Array(t) => t
            .iter()
            .find(|t| *t != "null")
            .cloned()
            .unwrap_or(Value::Null),
        t => t.clone(),
    };
    match ty.as_str() {
        Some("object") | None => {
            let mut out = serde_json::Map::new();
            for req in schema["required"].as_array().into_iter().flatten() {
                let k = req.as_str().unwrap();
                out.insert(k.to_owned(), least(doc, &schema["properties"][k]));
            }
            Value::Object(out)
        }
        Some("integer") | Some("number") => {
            json!(schema["minimum"].as_u64().unwrap_or(1).max(1))
        }
        Some("boolean") => json!(false),
        Some("array") => json!([least(doc, &schema["items"])]),
        _ => json!("x1"),
    }
}

/// The path with its parameters filled from `o` (the objects named by the
/// template: a sandbox's id or name, a snapshot's, a pool's, a target's).
fn fill(template: &str, o: &Objects) -> String {
    let id = if template.starts_with("/gw/") || template.starts_with("/v1/gateway/targets/") {
        // The URL target for the gateway's paths (the sandbox target is
        // checked through the sandbox's id below).
        if template.starts_with("/gw/") {
            &o.url_target
        } else {
            &o.id
        }
    } else if template.starts_with("/v1/webhooks/") {
        &o.webhook
    } else {
        &o.id
    };
    let name = if template.starts_with("/v1/snapshots/") {
        &o.snapshot
    } else if template.starts_with("/v1/pools/") {
        &o.pool
    } else {
        &o.name
    };
    template
        .replace("{id}", id)
        .replace("{name}", name)
        .replace("{preview}", &o.preview)
        .replace("{rest}", "x")
}

/// Objects that do not exist anywhere (fresh ids, unused names).
fn absent() -> Objects {
    let fresh = || burrow::SandboxId::new().as_str().to_owned();
    Objects {
        id: fresh(),
        name: "nobody".into(),
        snapshot: "nosnap".into(),
        pool: "nopool".into(),
        url_target: format!("tg_{}", fresh().trim_start_matches("sb_")),
        webhook: format!("wh_{}", &fresh()[3..27]),
        preview: format!("pv_{}", "0".repeat(32)),
        preview_cookie: format!("burrow_preview={}", "0".repeat(64)),
    }
}

/// An answer with `o`'s ids and names replaced by `stand_in`'s, to compare
/// with the answer for `stand_in`: in every string of a JSON answer (a
/// string that is a name, or a quoted name in a message), or in the text.
fn normalized(r: &Resp, o: &Objects, stand_in: &Objects) -> (u16, String) {
    let swap = |text: &str| {
        let mut t = text
            .replace(&o.id, &stand_in.id)
            .replace(&o.url_target, &stand_in.url_target)
            .replace(&o.webhook, &stand_in.webhook)
            .replace(&o.preview, &stand_in.preview);
        for (a, b) in [
            (&o.name, &stand_in.name),
            (&o.snapshot, &stand_in.snapshot),
            (&o.pool, &stand_in.pool),
        ] {
            if t == *a {
                t = b.clone();
            }
            t = t.replace(&format!("\"{a}\""), &format!("\"{b}\""));
        }
        t
    };
    fn walk(v: &mut Value, swap: &dyn Fn(&str) -> String) {
        match v {
            Value::String(s) => *s = swap(s),
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, swap)),
            Value::Object(m) => m.values_mut().for_each(|x| walk(x, swap)),
            _ => {}
        }
    }
    let text = match serde_json::from_slice::<Value>(&r.body) {
        Ok(mut v) => {
            walk(&mut v, &swap);
            v.to_string()
        }
        Err(_) => swap(&r.text()),
    };
    (r.status, text)
}

#[test]
fn another_tenants_objects_are_as_absent_in_every_operation() {
    let f = fixture("tenants_isolation");
    let mine = make_objects(&f, &f.alpha);
    let before = ok(
        call(
            &f,
            &f.alpha,
            "GET",
            &format!("/v1/sandboxes/{}", mine.id),
            None,
        ),
        "get",
    );

    let doc = ok(
        call(&f, &f.beta, "GET", "/v1/openapi.json", None),
        "openapi.json",
    );
    let mut checked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        // The console's pages and files name no object (any path is the
        // app's page).
        if !template.contains('{') || template == "/ui/{path}" {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            let method = method.to_ascii_uppercase();
            if !matches!(
                method.as_str(),
                "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS" | "TRACE"
            ) {
                continue;
            }
            let body = body_for(&doc, &item[method.to_ascii_lowercase()]);
            let nobody = absent();
            let theirs = call(&f, &f.beta, &method, &fill(template, &mine), body.clone());
            let missing = call(&f, &f.beta, &method, &fill(template, &nobody), body);
            if method != "HEAD" {
                assert_eq!(
                    missing.error_code(),
                    "not_found",
                    "{method} {template} for an absent object: {} {}",
                    missing.status,
                    missing.text()
                );
            }
            assert_eq!(
                missing.status,
                404,
                "{method} {template}: {}",
                missing.text()
            );
            assert_eq!(
                normalized(&theirs, &mine, &nobody),
                normalized(&missing, &nobody, &nobody),
                "{method} {template}: another tenant's object answers otherwise than an absent one"
            );
            checked += 1;
        }
    }
    // Every sandbox operation, snapshots, pools, targets and the gateway.
    assert!(checked >= 40, "only {checked} operations were checked");

    // The gateway's own origin: another tenant's token, or this tenant's
    // preview cookie carried to another tenant's... nothing: alpha's
    // targets answer beta exactly as targets that do not exist.
    let gw = gateway_addr(&f);
    let beta = format!("Bearer {}", f.beta);
    for (label, absent_label) in [
        (mine.id.clone(), absent().id),
        (format!("8080-{}", mine.id), format!("8080-{}", absent().id)),
        (mine.url_target.clone(), absent().url_target),
    ] {
        for method in ["GET", "POST", "DELETE"] {
            let theirs = request_to_host(
                &gw,
                method,
                &origin_host(&f, &label),
                "/",
                &[("Authorization", &beta)],
            );
            let missing = request_to_host(
                &gw,
                method,
                &origin_host(&f, &absent_label),
                "/",
                &[("Authorization", &beta)],
            );
            assert_eq!(
                (missing.status, missing.error_code()),
                (404, "not_found".into()),
                "{method} {absent_label}: {}",
                missing.text()
            );
            // The id in the answer (a label is `[PORT-]ID`; ids have no `-`).
            let strip = |r: &Resp, l: &str| {
                let id = l.rsplit_once('-').map_or(l, |(_, id)| id);
                (r.status, r.text().replace(id, "ID"))
            };
            assert_eq!(
                strip(&theirs, &label),
                strip(&missing, &absent_label),
                "{method} on {label}: another tenant's target answers otherwise than an absent one"
            );
        }
    }
    // A preview cookie opens its own origin only: not another target's,
    // not a port of its target the link did not name.
    for label in [mine.url_target.clone(), format!("8080-{}", mine.id)] {
        let r = request_to_host(
            &gw,
            "GET",
            &origin_host(&f, &label),
            "/",
            &[("Cookie", &mine.preview_cookie)],
        );
        assert_eq!(
            (r.status, r.error_code()),
            (401, "unauthorized".into()),
            "the preview cookie opened {label}"
        );
    }

    // Nothing of alpha's changed.
    let after = ok(
        call(
            &f,
            &f.alpha,
            "GET",
            &format!("/v1/sandboxes/{}", mine.id),
            None,
        ),
        "get",
    );
    assert_eq!(after["status"], "running");
    assert_eq!(after["generation"], before["generation"]);
    ok(
        call(&f, &f.alpha, "GET", "/v1/snapshots/snap", None),
        "snapshot",
    );
    ok(call(&f, &f.alpha, "GET", "/v1/pools/pool", None), "pool");
    ok(
        call(
            &f,
            &f.alpha,
            "GET",
            &format!("/v1/gateway/targets/{}", mine.id),
            None,
        ),
        "target",
    );
    ok(
        call(
            &f,
            &f.alpha,
            "GET",
            &format!("/v1/gateway/targets/{}", mine.url_target),
            None,
        ),
        "url target",
    );

    // Lists show each tenant its own; names are unique per tenant.
    for path in [
        "/v1/sandboxes",
        "/v1/snapshots",
        "/v1/pools",
        "/v1/gateway/targets",
        "/v1/webhooks",
        "/v1/events",
    ] {
        let list = call(&f, &f.beta, "GET", path, None);
        let text = list.text();
        assert_eq!(list.status, 200, "{path}: {text}");
        assert!(
            !text.contains(&mine.id)
                && !text.contains(&mine.url_target)
                && !text.contains(&mine.webhook),
            "{path}: {text}"
        );
        // (Text: the event stream is NDJSON.)
        let own = call(&f, &f.alpha, "GET", path, None);
        assert_eq!(own.status, 200, "{path}: {}", own.text());
        let own = own.text();
        assert!(!own.contains("alpha/"), "{path} shows the scope: {own}");
    }
    let theirs = make_objects(&f, &f.beta);
    assert_ne!(theirs.id, mine.id, "beta's own 'worker'");
    let listed = ok(call(&f, &f.alpha, "GET", "/v1/sandboxes", None), "list");
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine.id.as_str()]);
    let by_name = ok(
        call(&f, &f.beta, "GET", "/v1/sandboxes/by-name/worker", None),
        "by name",
    );
    assert_eq!(by_name["id"], theirs.id.as_str());
    assert_eq!(by_name["name"], "worker");
    for o in [&mine, &theirs] {
        ok(
            call(
                &f,
                if o.id == mine.id { &f.alpha } else { &f.beta },
                "POST",
                &format!("/v1/sandboxes/{}/destroy", o.id),
                Some(json!({})),
            ),
            "destroy",
        );
    }
}
