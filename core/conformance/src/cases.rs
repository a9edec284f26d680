//! The cases document (`tests/conformance/cases.json`): loading, selecting
//! and a structural check of the step vocabulary this interpreter knows.
//!
//! The vocabulary is the one of `tests/conformance/README.md`, shared with
//! the Python interpreter (`sdk-python/tests/conformance_cases.py`); the
//! tables below are kept equal to that runner's, so a case using an op only
//! one interpreter knows fails the structural test of both.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::outcome::UNSUPPORTED;

/// The cases file of the repository, embedded at build time. It is the one
/// source of truth; the crate keeps no copy of it.
pub(crate) const EMBEDDED: &str = include_str!("../../../tests/conformance/cases.json");

/// The format tag of the cases document.
pub const FORMAT: &str = "burrow-conformance/1";

/// Default bound of a case, in seconds, before scaling.
const DEFAULT_CASE_TIMEOUT: f64 = 180.0;

pub(crate) const NAME_OPS: &[&str] = &[
    "create",
    "connect_or_create",
    "define",
    "get",
    "get_by_id",
    "list",
    "get_snapshot",
    "list_snapshots",
    "remove_snapshot",
    "create_pool",
    "get_pool",
    "list_pools",
    "scale_pool",
    "remove_pool",
];
pub(crate) const TARGET_OPS: &[&str] = &[
    "handle",
    "info",
    "status",
    "config",
    "start",
    "connect_or_start",
    "connect",
    "restart",
    "stop",
    "kill",
    "request_drain",
    "pause",
    "resume",
    "touch",
    "modify",
    "wait_for_status",
    "wait_until_stopped",
    "destroy",
    "detach",
    "ping",
    "exec",
    "spawn",
    "fs_write",
    "fs_read",
    "fs_exists",
    "fs_mkdir",
    "fs_list",
    "fs_write_stream",
    "fs_read_stream",
    "follow_logs",
    "snapshot",
    "fork",
];
pub(crate) const CONTROL_OPS: &[&str] = &["wait", "await", "sleep", "repeat", "race", "remove"];
/// The capability tags: a case carrying one needs that capability of the
/// backend (the field of the same name of [`burrow::Capabilities`]); on a
/// backend that does not report it the kit reports the case unsupported
/// without running it. A case must carry the tag of every capability its
/// steps use (see [`step_capability`]).
pub const CAPABILITY_TAGS: &[&str] = &[
    "pause",
    "modify_live",
    "metrics",
    "logs",
    "idle_reclaim",
    "attached",
    "persistent_layer",
    "network_policy",
    "published_ports",
    "secrets",
    "snapshots",
    "full_snapshots",
    "fork",
    "pools",
];
/// Operations allowed as the `do` of a race run in several processes.
pub(crate) const PROCESS_RACE_OPS: &[&str] = &["create", "connect_or_create", "connect_or_start"];

const COMMON_KEYS: &[&str] = &[
    "op",
    "as",
    "save",
    "expect",
    "tolerate",
    "within",
    "background",
];
const CREATE_OPTIONS: &[&str] = &[
    "image",
    "cpus",
    "memory_mb",
    "pids_limit",
    "disk_mb",
    "best_effort_limits",
    "default_limits",
    "seccomp_allow",
    "env",
    "workdir",
    "labels",
    "network",
    "ports",
    "secrets",
    "idle_timeout",
    "idle_action",
    "max_duration",
    "startup_timeout",
    "demand_start",
    "detached",
    "replace",
];
/// The changes a `modify` step may name (durations in seconds; `null`
/// clears `cpus`, `memory_mb`, `idle_timeout` and `max_duration`).
const MODIFY_CHANGES: &[&str] = &[
    "cpus",
    "memory_mb",
    "env_set",
    "env_unset",
    "labels_set",
    "labels_unset",
    "idle_timeout",
    "idle_action",
    "max_duration",
    "network",
];
const RACE_EXPECT_KEYS: &[&str] = &["outcomes", "same_id", "starts", "each"];
const CASE_KEYS: &[&str] = &[
    "id",
    "title",
    "reference",
    "steps",
    "tags",
    "timeout",
    "notes",
];

/// The keys an op takes besides the common ones.
fn op_keys(op: &str) -> &'static [&'static str] {
    match op {
        "create" | "connect_or_create" | "define" => &["name", "options"],
        "get" => &["name"],
        "get_by_id" => &["id"],
        "list" => &["status", "labels"],
        "remove" => &["name", "sandbox"],
        "stop" => &["sandbox", "grace"],
        "modify" => &["sandbox", "changes"],
        "wait_for_status" => &["sandbox", "statuses", "timeout"],
        "exec" => &[
            "sandbox",
            "argv",
            "stdin",
            "env",
            "cwd",
            "timeout",
            "output_limit",
        ],
        "spawn" => &["sandbox", "argv", "env", "cwd", "timeout"],
        "fs_write" => &["sandbox", "path", "data"],
        "fs_write_stream" => &["sandbox", "path", "data", "chunks"],
        "fs_read" | "fs_exists" | "fs_list" | "fs_read_stream" => &["sandbox", "path"],
        "fs_mkdir" => &["sandbox", "path", "parents"],
        "follow_logs" => &["sandbox", "source", "timeout"],
        "snapshot" => &["sandbox", "snapshot", "kind"],
        "fork" => &["sandbox", "count", "names"],
        "get_snapshot" | "remove_snapshot" => &["snapshot"],
        "list_snapshots" => &[],
        "create_pool" => &["pool", "size", "options"],
        "scale_pool" => &["pool", "size"],
        "get_pool" | "remove_pool" => &["pool"],
        "list_pools" => &[],
        "wait" => &["process"],
        "await" => &["job"],
        "sleep" => &["seconds"],
        "repeat" => &["seconds", "interval", "do"],
        "race" => &["callers", "processes", "do"],
        "connect_or_start" => &["sandbox", "name"],
        _ => &["sandbox"],
    }
}

/// The capability (one of [`CAPABILITY_TAGS`]) a step needs by itself, if
/// any: `pause`/`resume` need `pause`; `modify` needs `modify_live`;
/// `follow_logs` needs `logs`; the snapshot ops need `snapshots` (a full
/// one `full_snapshots`), `fork` needs `fork`, the pool ops `pools`;
/// `detach`, and a race in processes whose callers own the attached sandbox
/// they start, need `attached`; an `idle_timeout`, `idle_action` or
/// `demand_start` option needs `idle_reclaim`.
pub(crate) fn step_capability(step: &Map<String, Value>) -> Option<&'static str> {
    let op = step.get("op").and_then(Value::as_str).unwrap_or_default();
    let opts = step.get("options").and_then(Value::as_object);
    match op {
        "pause" | "resume" => Some("pause"),
        "modify" => Some("modify_live"),
        "follow_logs" => Some("logs"),
        "detach" => Some("attached"),
        "snapshot" if step.get("kind").and_then(Value::as_str) == Some("full") => {
            Some("full_snapshots")
        }
        "snapshot" | "get_snapshot" | "list_snapshots" | "remove_snapshot" => Some("snapshots"),
        "fork" => Some("fork"),
        "create_pool" | "get_pool" | "list_pools" | "scale_pool" | "remove_pool" => Some("pools"),
        "race" if step.get("processes").and_then(Value::as_bool) == Some(true) => step
            .get("do")
            .and_then(Value::as_object)
            .filter(|d| crate::ops::owns_what_it_starts(d))
            .map(|_| "attached"),
        _ if opts.is_some_and(|o| o.get("network").is_some_and(Value::is_object)) => {
            Some("network_policy")
        }
        _ if opts.is_some_and(|o| o.contains_key("ports")) => Some("published_ports"),
        _ if opts.is_some_and(|o| o.contains_key("secrets")) => Some("secrets"),
        _ if opts.is_some_and(|o| {
            ["idle_timeout", "idle_action", "demand_start"]
                .iter()
                .any(|k| o.contains_key(*k))
        }) =>
        {
            Some("idle_reclaim")
        }
        _ => None,
    }
}

/// Whether `op` is part of the vocabulary.
pub(crate) fn is_known_op(op: &str) -> bool {
    NAME_OPS.contains(&op) || TARGET_OPS.contains(&op) || CONTROL_OPS.contains(&op)
}

/// One case of the document.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Case {
    /// Stable identifier, `area.what_it_checks`.
    pub id: String,
    /// One line.
    pub title: String,
    /// The Rust reference test, `path/to/file.rs::function`.
    pub reference: String,
    /// Tags (`processes`, `idle`, and the capability tags of
    /// [`CAPABILITY_TAGS`]).
    pub tags: Vec<String>,
    /// The case's own bound in seconds (before scaling), if it sets one.
    pub timeout: Option<f64>,
    /// The steps, as written in the document.
    pub steps: Vec<Value>,
}

impl Case {
    /// The bound of the whole case: its `timeout` (default 180 s) scaled.
    pub(crate) fn bound(&self, scale: f64) -> Duration {
        Duration::from_secs_f64(self.timeout.unwrap_or(DEFAULT_CASE_TIMEOUT) * scale)
    }

    /// Whether the case carries `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// The backend capabilities the case needs (its tags among
    /// [`CAPABILITY_TAGS`]).
    pub fn capabilities(&self) -> Vec<&str> {
        self.tags
            .iter()
            .map(String::as_str)
            .filter(|t| CAPABILITY_TAGS.contains(t))
            .collect()
    }
}

/// A parsed cases document.
#[derive(Debug, Clone)]
pub struct Cases {
    cases: Vec<Case>,
}

/// Why a cases document could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasesError(pub String);

impl std::fmt::Display for CasesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad conformance cases document: {}", self.0)
    }
}

impl std::error::Error for CasesError {}

impl Cases {
    /// The repository's `tests/conformance/cases.json`, embedded in the crate.
    pub fn embedded() -> Cases {
        match Cases::from_json(EMBEDDED) {
            Ok(c) => c,
            // The embedded file is checked by this crate's own tests.
            Err(e) => panic!("the embedded cases.json is unusable: {e}"),
        }
    }

    /// The cases at `$BURROW_CONFORMANCE_CASES` when that is set (a copy with
    /// deliberately wrong expectations, say), else [`Cases::embedded`].
    pub fn from_env() -> Result<Cases, CasesError> {
        match std::env::var_os("BURROW_CONFORMANCE_CASES").filter(|p| !p.is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    CasesError(format!(
                        "reading {}: {e}",
                        std::path::Path::new(&path).display()
                    ))
                })?;
                Cases::from_json(&text)
            }
            None => Ok(Cases::embedded()),
        }
    }

    /// Parses a cases document (format `burrow-conformance/1`).
    pub fn from_json(text: &str) -> Result<Cases, CasesError> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| CasesError(format!("not JSON: {e}")))?;
        if doc.get("format").and_then(Value::as_str) != Some(FORMAT) {
            return Err(CasesError(format!(
                "unknown format {}",
                doc.get("format").unwrap_or(&Value::Null)
            )));
        }
        let list = doc
            .get("cases")
            .and_then(Value::as_array)
            .ok_or_else(|| CasesError("no \"cases\" list".into()))?;
        let mut cases = Vec::with_capacity(list.len());
        for (i, c) in list.iter().enumerate() {
            let str_of = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| CasesError(format!("case #{}: no string {k:?}", i + 1)))
            };
            let steps = c
                .get("steps")
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| CasesError(format!("case #{}: no steps", i + 1)))?;
            cases.push(Case {
                id: str_of("id")?,
                title: str_of("title")?,
                reference: str_of("reference")?,
                tags: c
                    .get("tags")
                    .and_then(Value::as_array)
                    .map(|t| {
                        t.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
                timeout: c.get("timeout").and_then(Value::as_f64),
                steps,
            });
        }
        Ok(Cases { cases })
    }

    /// Every case, in document order.
    pub fn all(&self) -> &[Case] {
        &self.cases
    }

    /// The case with this id.
    pub fn get(&self, id: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.id == id)
    }

    /// Structural problems (empty when the document is well formed): unknown
    /// ops, keys or options, unbound variables, duplicate ids, races in
    /// processes doing what only a name-addressed op can. The same checks
    /// as the Python runner's `validate_cases`, except for the references
    /// (those name files of the repository).
    pub fn problems(text: &str) -> Vec<String> {
        let doc: Value = match serde_json::from_str(text) {
            Ok(d) => d,
            Err(e) => return vec![format!("not JSON: {e}")],
        };
        let mut problems = Vec::new();
        if doc.get("format").and_then(Value::as_str) != Some(FORMAT) {
            problems.push(format!("unknown format {:?}", doc.get("format")));
        }
        let mut seen = BTreeSet::new();
        let empty = Vec::new();
        let cases = doc.get("cases").and_then(Value::as_array).unwrap_or(&empty);
        for (i, case) in cases.iter().enumerate() {
            let fallback = format!("case #{}", i + 1);
            let id = case.get("id").and_then(Value::as_str).unwrap_or(&fallback);
            let Some(obj) = case.as_object() else {
                problems.push(format!("{id}: not an object"));
                continue;
            };
            for key in ["id", "title", "reference", "steps"] {
                if !obj.contains_key(key) {
                    problems.push(format!("{id}: missing {key:?}"));
                }
            }
            let extra: Vec<_> = obj
                .keys()
                .filter(|k| !CASE_KEYS.contains(&k.as_str()))
                .collect();
            if !extra.is_empty() {
                problems.push(format!("{id}: unknown keys {extra:?}"));
            }
            if !seen.insert(id.to_owned()) {
                problems.push(format!("{id}: duplicate id"));
            }
            let tags: Vec<&str> = obj
                .get("tags")
                .and_then(Value::as_array)
                .map(|t| t.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut bound = BTreeSet::new();
            let steps = obj.get("steps").and_then(Value::as_array).unwrap_or(&empty);
            for (j, step) in steps.iter().enumerate() {
                let at = format!("{id} step {}", j + 1);
                validate_step(step, &at, &mut bound, true, &mut problems);
                check_capability_tags(step, &at, &tags, &mut problems);
            }
        }
        problems
    }
}

/// A step (or the `do` of a `repeat` or `race`) that needs a capability
/// its case is not tagged with. A step that tolerates `unsupported` needs
/// no tag: its case runs on a backend without the capability too.
fn check_capability_tags(step: &Value, at: &str, tags: &[&str], problems: &mut Vec<String>) {
    let Some(obj) = step.as_object() else {
        return;
    };
    let tolerates_unsupported = obj
        .get("tolerate")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|c| c.as_str() == Some(UNSUPPORTED)));
    if let Some(cap) = step_capability(obj).filter(|_| !tolerates_unsupported) {
        if !tags.contains(&cap) {
            problems.push(format!(
                "{at}: {} needs the capability tag {cap:?} on its case",
                obj.get("op").and_then(Value::as_str).unwrap_or_default()
            ));
        }
    }
    if let Some(inner) = obj.get("do") {
        check_capability_tags(inner, &format!("{at} do"), tags, problems);
    }
}

fn validate_step(
    step: &Value,
    at: &str,
    bound: &mut BTreeSet<String>,
    top: bool,
    problems: &mut Vec<String>,
) {
    let Some(step) = step.as_object() else {
        problems.push(format!("{at}: a step is an object"));
        return;
    };
    let op = step.get("op").and_then(Value::as_str).unwrap_or("");
    if !is_known_op(op) {
        problems.push(format!("{at}: unknown op {op:?}"));
        return;
    }
    let allowed = |k: &str| COMMON_KEYS.contains(&k) || op_keys(op).contains(&k);
    let extra: Vec<_> = step.keys().filter(|k| !allowed(k)).collect();
    if !extra.is_empty() {
        problems.push(format!("{at}: {op}: unknown keys {extra:?}"));
    }
    if TARGET_OPS.contains(&op) && op != "connect_or_start" && !step.contains_key("sandbox") {
        problems.push(format!("{at}: {op} needs 'sandbox'"));
    }
    if op == "connect_or_start" && step.contains_key("sandbox") == step.contains_key("name") {
        problems.push(format!(
            "{at}: connect_or_start needs exactly one of 'sandbox', 'name'"
        ));
    }
    if let Some(var) = step.get("sandbox").and_then(Value::as_str) {
        if top && !bound.contains(var) {
            problems.push(format!(
                "{at}: variable {var:?} is not bound by an earlier step"
            ));
        }
    }
    if let Some(opts) = step.get("options").and_then(Value::as_object) {
        let bad: Vec<_> = opts
            .keys()
            .filter(|k| !CREATE_OPTIONS.contains(&k.as_str()))
            .collect();
        if !bad.is_empty() {
            problems.push(format!("{at}: unknown options {bad:?}"));
        }
    }
    if let Some(changes) = step.get("changes") {
        match changes.as_object() {
            Some(c) => {
                let bad: Vec<_> = c
                    .keys()
                    .filter(|k| !MODIFY_CHANGES.contains(&k.as_str()))
                    .collect();
                if !bad.is_empty() {
                    problems.push(format!("{at}: unknown changes {bad:?}"));
                }
            }
            None => problems.push(format!("{at}: changes must be an object")),
        }
    }
    if step.contains_key("within") && step.contains_key("background") {
        problems.push(format!("{at}: 'within' and 'background' do not combine"));
    }
    if op == "repeat" || op == "race" {
        match step.get("do") {
            Some(d @ Value::Object(inner)) => {
                validate_step(d, &format!("{at} do"), bound, false, problems);
                if inner.contains_key("as") {
                    problems.push(format!("{at}: the 'do' of a {op} cannot bind with 'as'"));
                }
            }
            _ => problems.push(format!("{at}: {op} needs a 'do' step")),
        }
    }
    if op == "race" {
        let empty = Map::new();
        let expect = step
            .get("expect")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let bad: Vec<_> = expect
            .keys()
            .filter(|k| !RACE_EXPECT_KEYS.contains(&k.as_str()))
            .collect();
        if !bad.is_empty() {
            problems.push(format!("{at}: race: unknown expect keys {bad:?}"));
        }
        if step.get("processes").and_then(Value::as_bool) == Some(true) {
            let d = step.get("do").unwrap_or(&Value::Null);
            let dop = d.get("op").and_then(Value::as_str).unwrap_or("");
            if !PROCESS_RACE_OPS.contains(&dop) || d.get("name").is_none() {
                problems.push(format!(
                    "{at}: a race in processes runs only {PROCESS_RACE_OPS:?} by name"
                ));
            }
        }
    }
    if let Some(var) = step.get("as").and_then(Value::as_str) {
        bound.insert(var.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_document_is_well_formed() {
        let problems = Cases::problems(EMBEDDED);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        let cases = Cases::embedded();
        assert!(!cases.all().is_empty());
        let ids: BTreeSet<_> = cases.all().iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), cases.all().len());
    }

    #[test]
    fn unknown_ops_and_unbound_variables_are_reported() {
        let doc = r#"{"format": "burrow-conformance/1", "cases": [
            {"id": "a.b", "title": "t", "reference": "r::f", "steps": [
                {"op": "teleport", "sandbox": "x"},
                {"op": "info", "sandbox": "nobody"},
                {"op": "race", "callers": 2, "processes": true, "do": {"op": "exec", "sandbox": "s"}}
            ]}]}"#;
        let problems = Cases::problems(doc);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("unknown op \"teleport\"")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("\"nobody\" is not bound")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("a race in processes")),
            "{problems:?}"
        );
    }

    #[test]
    fn a_case_bound_is_scaled() {
        let cases = Cases::from_json(
            r#"{"format": "burrow-conformance/1", "cases": [
                {"id": "a", "title": "t", "reference": "r", "steps": []},
                {"id": "b", "title": "t", "reference": "r", "timeout": 10, "steps": []}]}"#,
        )
        .expect("parses");
        assert_eq!(cases.all()[0].bound(1.0), Duration::from_secs(180));
        assert_eq!(cases.all()[1].bound(3.0), Duration::from_secs(30));
    }
}
