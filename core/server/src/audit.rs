//! The audit log: every change asked of the API (any method but `GET`,
//! `HEAD` and `OPTIONS`), every refusal of a caller (`401`, `403`,
//! `429`), and the actions taken in sandboxes: requests on the runtime
//! stream ([`stream`]: exec, shell, file reads and writes, copies,
//! tunnels), the console's downloads, uploads and terminals, and every
//! gateway call (on the API's `/gw/` and on the gateway's own origin).
//! Each entry says who (tenant, token), from which address ([`peer`]),
//! the operation and its object, the sandbox, the status, the error code
//! and the outcome, never a command's arguments, output or a file's bytes.
//!
//! The API's changes are written as they are answered. Gateway calls and
//! stream actions go through the store's queue, written in batches by one
//! task: a call never waits for the database (only, when the database has
//! fallen thousands of entries behind, for room in the queue).
//! `GET /v1/audit` pages through a tenant's entries (an admin's: any
//! tenant's, or all); `burrow serve audit` reads them from the database;
//! the reaper drops entries older than `audit.retention`.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::Json;
use burrow::Error;
use serde::{Deserialize, Serialize};

use crate::app::{ApiResult, AppState, ROUTES};
use crate::store::{AuditEntry, AuditFilter, Outcome};
use crate::tenancy::{Caller, Role};

mod peer;
mod stream;

pub use peer::{client_of, Peer, PeerAddr, Peered};
pub use stream::{action_of, StreamAudit};

/// The longest object (a path, a program's name) an entry keeps, in
/// characters; a longer one is cut, ending in `…`.
pub const MAX_OBJECT: usize = 256;

/// `s`, at most [`MAX_OBJECT`] characters of it.
pub fn short(s: &str) -> String {
    if s.chars().nth(MAX_OBJECT).is_none() {
        return s.to_owned();
    }
    let cut = s
        .char_indices()
        .nth(MAX_OBJECT - 1)
        .map_or(s.len(), |(i, _)| i);
    format!("{}…", &s[..cut])
}

/// The error code an error answer carries, for the log (set by
/// [`crate::app::ApiError`] on its response).
#[derive(Debug, Clone)]
pub struct AnsweredCode(pub String);

/// An action a handler answered (set on its response, error answers
/// included): the log names it so, rather than by its route.
#[derive(Debug, Clone)]
pub struct Action {
    /// The operation (`console.download`).
    pub operation: &'static str,
    /// The sandbox acted on.
    pub sandbox: String,
    /// What it acted on (a path), if known.
    pub object: Option<String>,
}

impl Action {
    /// `res`, naming this action.
    pub fn on(self, mut res: Response) -> Response {
        res.extensions_mut().insert(self);
        res
    }
}

/// Who asked: the caller's tenant and token, and the client's address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    /// The tenant (none: no valid token).
    pub tenant: Option<String>,
    /// The token's name.
    pub token: Option<String>,
    /// The client's address ([`Peer::client`]).
    pub client: Option<String>,
}

impl Who {
    /// `caller` (if the request had one) from `client`.
    pub fn new(caller: Option<&Caller>, client: Option<String>) -> Who {
        Who {
            tenant: caller.map(|c| c.tenant.clone()),
            token: caller.and_then(|c| c.token.clone()),
            client,
        }
    }

    fn stamp(&self, e: &mut AuditEntry) {
        e.tenant.clone_from(&self.tenant);
        e.token.clone_from(&self.token);
        e.client.clone_from(&self.client);
    }
}

/// Whether a request on the API that ended in `status` is logged by its
/// route (gateway calls and actions are logged as such, see
/// [`answered`]).
pub fn logged(method: &Method, path: &str, status: StatusCode) -> bool {
    if matches!(status.as_u16(), 401 | 403 | 429) {
        return true;
    }
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    !reads && (path.starts_with("/v1/") || path.starts_with("/ui/api/"))
}

/// The route of `method path` (`POST /v1/sandboxes/{id}/stop`) and the
/// object its parameter names, as [`ROUTES`] has them; the path itself
/// when no route has it.
pub fn operation_of(method: &Method, path: &str) -> (String, Option<String>) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (m, template) in ROUTES {
        if *m != "ANY" && *m != method.as_str() {
            continue;
        }
        let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
        let mut object = None;
        let rest = parts.last().is_some_and(|p| p.starts_with("{*"));
        let fits = if rest {
            segments.len() >= parts.len()
        } else {
            segments.len() == parts.len()
        };
        if !fits {
            continue;
        }
        let same = parts.iter().zip(&segments).all(|(p, s)| {
            if p.starts_with("{*") {
                true
            } else if p.starts_with('{') {
                object.get_or_insert_with(|| (*s).to_owned());
                true
            } else {
                p == s
            }
        });
        if same {
            return (format!("{method} {template}"), object);
        }
    }
    (format!("{method} {path}"), None)
}

/// Whether a route's object is a sandbox's id.
fn names_a_sandbox(template: &str) -> bool {
    let t = template.split_once(' ').map_or(template, |(_, t)| t);
    t.starts_with("/v1/sandboxes/{id}") || t.starts_with("/ui/api/sandboxes/{id}")
}

/// `/gw/{id}{rest}`: the target and the rest of the path (`/` at least).
fn gateway_path(path: &str) -> Option<(&str, &str)> {
    let tail = path.strip_prefix("/gw/")?;
    let (id, rest) = match tail.find('/') {
        Some(i) => tail.split_at(i),
        None => (tail, "/"),
    };
    (!id.is_empty()).then_some((id, rest))
}

/// The entry of a gateway call `method path` on target `id` (through
/// `port`, on the gateway's own origin, if the call named one).
fn gateway_entry(id: &str, port: Option<u16>, method: &Method, path: &str) -> AuditEntry {
    let port = port.map(|p| format!(":{p}")).unwrap_or_default();
    let mut e = AuditEntry::new(
        "gateway.call",
        Some(short(&format!("{method} {port}{path}"))),
    );
    e.sandbox = Some(short(id));
    e
}

/// `e` as answered by `res`, for `who`.
fn finish(mut e: AuditEntry, who: &Who, res: &Response) -> AuditEntry {
    who.stamp(&mut e);
    let status = res.status().as_u16();
    e.code = res.extensions().get::<AnsweredCode>().map(|c| c.0.clone());
    e.status = Some(status);
    e.outcome = Outcome::of_answer(status, e.code.as_deref());
    e
}

/// Logs the answer `res` to `method path` on an API listener, if it is
/// logged: a gateway call (queued), an action a handler named
/// ([`Action`]), a change or a refusal (written before the answer goes).
/// The entry is made at once: the future holds nothing of `res`.
pub fn answered<'a>(
    state: &'a AppState,
    caller: Option<&Caller>,
    client: Option<String>,
    method: &Method,
    path: &str,
    res: &Response,
) -> impl Future<Output = ()> + Send + 'a {
    let entry = if let Some((id, rest)) = gateway_path(path) {
        Some((gateway_entry(id, None, method, rest), true))
    } else if let Some(a) = res.extensions().get::<Action>() {
        let mut e = AuditEntry::new(a.operation, a.object.clone());
        e.sandbox = Some(short(&a.sandbox));
        Some((e, false))
    } else if logged(method, path, res.status()) {
        let (operation, object) = operation_of(method, path);
        let mut e = AuditEntry::new(operation, object.as_deref().map(short));
        if names_a_sandbox(&e.operation) {
            e.sandbox.clone_from(&e.object);
        }
        Some((e, false))
    } else {
        None
    };
    // Who asked: only for what is logged.
    let entry = entry.map(|(e, queued)| (finish(e, &Who::new(caller, client), res), queued));
    async move {
        match entry {
            Some((e, true)) => state.store.queue_audit(e).await,
            Some((e, false)) => record(state, &e).await,
            None => {}
        }
    }
}

/// Logs a call on the gateway's own origin (target `id`, `port` if the
/// origin names one), answered `res` (queued, as every gateway call).
pub fn gateway_call<'a>(
    state: &'a AppState,
    who: &Who,
    id: &str,
    port: Option<u16>,
    method: &Method,
    path: &str,
    res: &Response,
) -> impl Future<Output = ()> + Send + 'a {
    let e = finish(gateway_entry(id, port, method, path), who, res);
    state.store.queue_audit(e)
}

/// Records one entry now (failures to record are logged, never the
/// caller's).
pub async fn record(state: &AppState, entry: &AuditEntry) {
    if let Err(e) = state.store.record_audit(entry).await {
        tracing::warn!(error = %e, operation = %entry.operation, "recording an audit entry failed");
    }
}

/// `GET /v1/audit` query.
#[derive(Debug, PartialEq)]
struct AuditQuery {
    /// Entries after this id (default 0: from the oldest kept).
    after: i64,
    /// At most this many (1..=1000, default 100).
    limit: u32,
    /// An admin's choice of tenant (default: every tenant's).
    tenant: Option<String>,
    /// Only this sandbox's entries.
    sandbox: Option<String>,
}

/// Parses the query; a bad or unknown parameter is `invalid_argument`.
fn parse_query(raw: &str) -> Result<AuditQuery, Error> {
    let (mut tenant, mut sandbox) = (None, None);
    let (after, limit) = crate::events::api::paging(raw, "the audit log", |k, v| {
        match k {
            "tenant" => {
                crate::tenancy::check_tenant_filter(v)?;
                tenant = Some(v.to_owned());
            }
            "sandbox" => {
                crate::targets::check_target_id(v).map_err(|_| Error::InvalidArgument {
                    argument: "sandbox".into(),
                    reason: format!("{v:?} is not a sandbox or target id"),
                })?;
                sandbox = Some(v.to_owned());
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(AuditQuery {
        after,
        limit,
        tenant,
        sandbox,
    })
}

/// A page of the audit log.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuditPage {
    /// The entries, oldest first.
    pub entries: Vec<AuditEntry>,
    /// The `after` of the next page (`None`: this page was the last one
    /// so far).
    pub next: Option<i64>,
}

/// `GET /v1/audit`: the caller's tenant's entries (an admin of the
/// default tenant: any tenant's, or all), of one sandbox if asked.
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<AuditPage>> {
    let q = parse_query(raw.as_deref().unwrap_or(""))?;
    let server_admin =
        caller.role == Role::Admin && caller.tenant == crate::tenancy::DEFAULT_TENANT;
    let tenant = match (server_admin, q.tenant) {
        (true, t) => t,
        (false, Some(t)) if t != caller.tenant => {
            return Err(Error::Forbidden {
                operation: "GET /v1/audit".into(),
                reason: "only the server's admins read other tenants' entries".into(),
            }
            .into())
        }
        (false, _) => Some(caller.tenant.clone()),
    };
    let filter = AuditFilter {
        tenant,
        sandbox: q.sandbox,
    };
    let entries = state.store.audit(&filter, q.after, q.limit).await?;
    let next = (entries.len() == q.limit as usize)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    Ok(Json(AuditPage { entries, next }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_their_routes() {
        let id = "sb_01h2x3y4z5a6b7c8d9e0f1g2h3";
        assert_eq!(
            operation_of(&Method::POST, &format!("/v1/sandboxes/{id}/stop")),
            ("POST /v1/sandboxes/{id}/stop".into(), Some(id.into()))
        );
        assert_eq!(
            operation_of(&Method::DELETE, "/v1/pools/web"),
            ("DELETE /v1/pools/{name}".into(), Some("web".into()))
        );
        assert_eq!(
            operation_of(&Method::POST, "/v1/sandboxes"),
            ("POST /v1/sandboxes".into(), None)
        );
        assert_eq!(
            operation_of(&Method::PUT, &format!("/gw/{id}/a/b")),
            ("PUT /gw/{id}/{*rest}".into(), Some(id.into()))
        );
        assert_eq!(
            operation_of(&Method::POST, "/v1/nowhere"),
            ("POST /v1/nowhere".into(), None)
        );
        assert!(logged(&Method::POST, "/v1/sandboxes", StatusCode::CREATED));
        assert!(!logged(&Method::GET, "/v1/sandboxes", StatusCode::OK));
        assert!(logged(&Method::GET, "/v1/sandboxes", StatusCode::FORBIDDEN));
        assert_eq!(
            parse_query(&format!("after=7&limit=2&tenant=a&sandbox={id}")).unwrap(),
            AuditQuery {
                after: 7,
                limit: 2,
                tenant: Some("a".into()),
                sandbox: Some(id.into()),
            }
        );
        for bad in [
            "after=-1",
            "limit=0",
            "limit=1001",
            "after=x",
            "other=1",
            "tenant=%00",
            "tenant=A",
            "sandbox=x",
        ] {
            let e = parse_query(bad).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn gateway_calls_and_objects_are_short() {
        let id = "sb_01h2x3y4z5a6b7c8d9e0f1g2h3";
        assert_eq!(gateway_path(&format!("/gw/{id}/a/b")), Some((id, "/a/b")));
        assert_eq!(gateway_path(&format!("/gw/{id}")), Some((id, "/")));
        assert_eq!(gateway_path("/gw/"), None);
        assert_eq!(gateway_path("/v1/gw/x"), None);
        let e = gateway_entry(id, Some(9090), &Method::POST, "/api");
        assert_eq!(
            (
                e.operation.as_str(),
                e.object.as_deref(),
                e.sandbox.as_deref()
            ),
            ("gateway.call", Some("POST :9090/api"), Some(id))
        );
        assert!(names_a_sandbox("POST /v1/sandboxes/{id}/stop"));
        assert!(names_a_sandbox("PUT /ui/api/sandboxes/{id}/files/content"));
        assert!(!names_a_sandbox("DELETE /v1/pools/{name}"));
        assert!(!names_a_sandbox("GET /v1/sandboxes/by-name/{name}"));
        assert_eq!(short("abc"), "abc");
        let long = "x".repeat(MAX_OBJECT * 2);
        assert_eq!(short(&long).chars().count(), MAX_OBJECT);
        assert!(short(&long).ends_with('…'));
        assert_eq!(short(&"y".repeat(MAX_OBJECT)), "y".repeat(MAX_OBJECT));
    }
}
