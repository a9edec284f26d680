//! `GET /v1/openapi.json` (`src/openapi.json`) against the server itself:
//! the routes of `burrow_server::app::ROUTES` (checked against the real
//! router by a unit test in `app.rs`), the error codes of
//! `burrow::ErrorCode::ALL`, the wire constants of `burrow::api`.

use std::collections::BTreeSet;

use burrow_server::app::ROUTES;
use serde_json::Value;

const DOC: &str = include_str!("../src/openapi.json");

/// The methods of an OpenAPI path item; `ANY` in `ROUTES` is all of them.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn doc() -> Value {
    serde_json::from_str(DOC).expect("openapi.json is valid JSON")
}

/// Follows a local `$ref` (`#/components/...`), repeatedly.
fn resolve<'a>(doc: &'a Value, mut v: &'a Value) -> &'a Value {
    while let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let pointer = r.strip_prefix('#').expect("local $ref");
        v = doc
            .pointer(pointer)
            .unwrap_or_else(|| panic!("$ref {r} resolves"));
    }
    v
}

/// Every operation: (method, path, operation, path item).
fn operations(doc: &Value) -> Vec<(&str, &str, &Value, &Value)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut out = Vec::new();
    for (path, item) in paths {
        for m in METHODS {
            if let Some(op) = item.get(m) {
                out.push((m, path.as_str(), op, item));
            }
        }
    }
    out
}

#[test]
fn is_openapi_3_1_with_the_workspace_version() {
    let doc = doc();
    let v = doc["openapi"].as_str().expect("openapi is a string");
    assert!(v.starts_with("3.1."), "openapi {v}");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(doc["info"]["title"].is_string());
}

#[test]
fn documents_exactly_the_served_routes() {
    let doc = doc();
    let documented: BTreeSet<(String, String)> = operations(&doc)
        .into_iter()
        .map(|(m, p, _, _)| (m.to_uppercase(), p.to_owned()))
        .collect();
    let mut served = BTreeSet::new();
    for (m, p) in ROUTES {
        // axum's catch-all `{*rest}` is the path parameter `{rest}`.
        let p = p.replace("{*", "{");
        let methods: Vec<String> = if *m == "ANY" {
            METHODS.iter().map(|m| m.to_uppercase()).collect()
        } else {
            vec![m.to_string()]
        };
        for m in methods {
            assert!(served.insert((m, p.clone())), "ROUTES lists {p} twice");
        }
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served, not documented: {undocumented:?}"
    );
    assert!(unserved.is_empty(), "documented, not served: {unserved:?}");
}

#[test]
fn error_codes_are_every_error_code() {
    let doc = doc();
    let body = &doc["components"]["schemas"]["ErrorBody"];
    let code = resolve(&doc, &body["properties"]["code"]);
    let documented: BTreeSet<&str> = code["enum"]
        .as_array()
        .expect("ErrorBody.code has an enum")
        .iter()
        .map(|c| c.as_str().expect("codes are strings"))
        .collect();
    let all: BTreeSet<&str> = burrow::ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(documented, all);
    let envelope = &doc["components"]["schemas"]["ErrorEnvelope"];
    assert_eq!(
        resolve(&doc, &envelope["properties"]["error"]),
        body,
        "ErrorEnvelope.error is an ErrorBody"
    );
}

#[test]
fn references_resolve_and_operations_are_complete() {
    let doc = doc();
    fn walk(doc: &Value, v: &Value) {
        match v {
            Value::Object(o) => {
                if o.contains_key("$ref") {
                    resolve(doc, v);
                }
                o.values().for_each(|v| walk(doc, v));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(doc, v)),
            _ => {}
        }
    }
    walk(&doc, &doc);
    let mut ids = BTreeSet::new();
    for (m, path, op, item) in operations(&doc) {
        let id = op["operationId"].as_str().expect("operationId");
        assert!(ids.insert(id), "operationId {id} twice");
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{m} {path} has responses"
        );
        // Every path template parameter is declared.
        let declared: BTreeSet<&str> = [&item["parameters"], &op["parameters"]]
            .into_iter()
            .filter_map(Value::as_array)
            .flatten()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().expect("parameter name"))
            .collect();
        let template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        assert_eq!(declared, template, "{m} {path} path parameters");
        // Operations by sandbox id take the handle's `name`.
        if path.starts_with("/v1/sandboxes/{id}") {
            let has_name = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| resolve(&doc, p))
                .any(|p| p["in"] == "query" && p["name"] == "name");
            assert!(has_name, "{m} {path} takes ?name=");
            let conflict = resolve(&doc, &op["responses"]["409"]);
            assert!(
                conflict["description"]
                    .as_str()
                    .is_some_and(|d| d.contains("sandbox_replaced")),
                "{m} {path} documents sandbox_replaced"
            );
        }
    }
}

#[test]
fn security_is_bearer_or_the_console_cookie_except_open_paths() {
    let doc = doc();
    let scheme = &doc["components"]["securitySchemes"]["bearerAuth"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    let cookie = &doc["components"]["securitySchemes"]["consoleCookie"];
    assert_eq!(cookie["in"], "cookie");
    assert_eq!(cookie["name"], burrow_server::console::auth::COOKIE);
    assert_eq!(
        doc["security"],
        serde_json::json!([{"bearerAuth": []}, {"consoleCookie": []}])
    );
    for (m, path, op, _) in operations(&doc) {
        // Health, and the console's pages and login: as the server has it.
        let open = matches!(path, "/healthz" | "/readyz") || burrow_server::console::is_open(path);
        match op.get("security") {
            Some(s) => assert!(open && s == &serde_json::json!([]), "{m} {path} security"),
            None => assert!(!open, "{m} {path} must be open"),
        }
        if !open {
            let r = resolve(&doc, &op["responses"]["401"]);
            assert!(r.is_object(), "{m} {path} documents 401");
        }
    }
}

#[test]
fn wire_details_match_the_contract() {
    let doc = doc();
    for (m, path, op, _) in operations(&doc) {
        // Every 503 says when to come back.
        if let Some(r) = op["responses"].get("503") {
            let r = resolve(&doc, r);
            assert!(r["headers"]["Retry-After"].is_object(), "{m} {path} 503");
            if path.starts_with("/gw/") {
                let h = resolve(&doc, &r["headers"][burrow::api::HEADER_SANDBOX_STATE]);
                assert_eq!(
                    h["schema"]["enum"],
                    serde_json::json!(["starting", "reaping"])
                );
            }
        }
        // Error answers are ErrorEnvelopes.
        for (status, r) in op["responses"].as_object().expect("responses") {
            let r = resolve(&doc, r);
            if let Some(schema) = r.pointer("/content/application~1json/schema") {
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        schema["$ref"], "#/components/schemas/ErrorEnvelope",
                        "{m} {path} {status}"
                    );
                }
            }
        }
    }
    // Streams are NDJSON.
    for (path, method, schema) in [
        ("/v1/sandboxes/{id}/logs", "get", "LogFrame"),
        ("/v1/sessions", "post", "SessionFrame"),
    ] {
        let ok = &doc["paths"][path][method]["responses"]["200"]["content"];
        assert_eq!(
            ok["application/x-ndjson"]["schema"]["$ref"],
            format!("#/components/schemas/{schema}"),
            "{path}"
        );
    }
    // The runtime stream is an upgrade.
    let runtime = &doc["paths"]["/v1/sandboxes/{id}/runtime"]["get"];
    let upgrade = runtime["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["in"] == "header" && p["name"] == "Upgrade")
        .expect("the Upgrade request header");
    assert_eq!(upgrade["schema"]["const"], burrow::api::UPGRADE_PROTOCOL);
    let switching = &runtime["responses"]["101"]["headers"];
    assert_eq!(
        switching["Upgrade"]["schema"]["const"],
        burrow::api::UPGRADE_PROTOCOL
    );
    assert!(resolve(&doc, &switching[burrow::api::HEADER_GENERATION]).is_object());
}

#[test]
fn bodies_use_the_wire_names() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    let keys = |name: &str| -> BTreeSet<String> {
        schemas[name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{name} has properties"))
            .keys()
            .cloned()
            .collect()
    };
    // Each schema against a JSON value the Rust types produce.
    let mut config = burrow::SandboxConfig::new("img");
    // Not serialized when it is the default.
    config.idle_action = burrow::IdleAction::Hibernate;
    let config = serde_json::to_value(config).expect("config");
    for k in config.as_object().expect("object").keys() {
        assert!(keys("SandboxConfig").contains(k), "SandboxConfig.{k}");
    }
    let modify = {
        let mut m = burrow::Modify::default();
        m.cpus = Some(Some(1.0));
        m.memory_mb = Some(None);
        m.env_set = [("A".to_string(), "1".to_string())].into();
        m.env_unset = vec!["B".into()];
        m.labels_set = [("l".to_string(), "v".to_string())].into();
        m.labels_unset = vec!["m".into()];
        m.idle_timeout = Some(None);
        m.idle_action = Some(burrow::IdleAction::Hibernate);
        m.max_duration = Some(Some(std::time::Duration::from_secs(1)));
        m.network = Some(burrow::Network::All);
        m
    };
    let modify = serde_json::to_value(modify).expect("modify");
    let modify: BTreeSet<String> = modify
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    assert_eq!(modify, keys("Modify"));
    let metrics = burrow::Metrics {
        network: Some(Default::default()),
        disk_bytes: Some(0),
        disk_limit_bytes: Some(0),
        ..Default::default()
    };
    let metrics = serde_json::to_value(metrics).expect("metrics");
    let metrics: BTreeSet<String> = metrics
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    assert_eq!(metrics, keys("Metrics"));
    let entry = burrow_server::store::AuditEntry::new("exec", None);
    let entry = serde_json::to_value(entry).expect("audit entry");
    let entry: BTreeSet<String> = entry.as_object().expect("object").keys().cloned().collect();
    assert_eq!(entry, keys("AuditEntry"));
    let outcomes = &schemas["AuditEntry"]["properties"]["outcome"]["enum"];
    for o in [
        burrow_server::store::Outcome::Ok,
        burrow_server::store::Outcome::Refused,
        burrow_server::store::Outcome::Error,
        burrow_server::store::Outcome::Pending,
        burrow_server::store::Outcome::Interrupted,
    ] {
        let o = serde_json::to_value(o).expect("outcome");
        assert!(outcomes.as_array().is_some_and(|a| a.contains(&o)), "{o}");
    }
}
