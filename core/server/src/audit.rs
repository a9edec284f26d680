//! The audit log: every change asked of the API (any method but `GET`,
//! `HEAD` and `OPTIONS`) and every refusal of a caller (`401`, `403`,
//! `429`), with who asked, the operation and its object, and the status
//! and error code it ended with. Gateway calls are the targets' own
//! traffic, and are not logged unless refused. `GET /v1/audit` pages
//! through a tenant's entries (an admin's: any tenant's, or all);
//! `burrow serve audit` reads them from the database; the reaper drops
//! entries older than `audit.retention`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::Json;
use burrow::Error;
use serde::{Deserialize, Serialize};

use crate::app::{ApiResult, AppState, ROUTES};
use crate::store::{now_ms, AuditEntry};
use crate::tenancy::{Caller, Role};

/// The error code an error answer carries, for the log (set by
/// [`crate::app::ApiError`] on its response).
#[derive(Debug, Clone)]
pub struct AnsweredCode(pub String);

/// Whether a request that ended in `status` is logged.
pub fn logged(method: &Method, path: &str, status: StatusCode) -> bool {
    if matches!(status.as_u16(), 401 | 403 | 429) {
        return true;
    }
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    // A terminal opened from the console is a shell: no read.
    let terminal = path.starts_with("/ui/api/") && path.ends_with("/terminal");
    terminal || (!reads && (path.starts_with("/v1/") || path.starts_with("/ui/api/")))
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

/// Records one answered request (failures to record are logged, never
/// the caller's).
pub async fn record(
    state: &AppState,
    caller: Option<&Caller>,
    method: &Method,
    path: &str,
    status: StatusCode,
    code: Option<String>,
) {
    let (operation, object) = operation_of(method, path);
    let entry = AuditEntry {
        id: 0,
        at_ms: now_ms(),
        tenant: caller.map(|c| c.tenant.clone()),
        token: caller.and_then(|c| c.token.clone()),
        operation,
        object,
        status: status.as_u16(),
        code,
    };
    if let Err(e) = state.store.record_audit(&entry).await {
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
}

/// Parses the query; a bad or unknown parameter is `invalid_argument`.
fn parse_query(raw: &str) -> Result<AuditQuery, Error> {
    let mut tenant = None;
    let (after, limit) = crate::events::api::paging(raw, "the audit log", |k, v| {
        if k != "tenant" {
            return Ok(false);
        }
        crate::tenancy::check_tenant_filter(v)?;
        tenant = Some(v.to_owned());
        Ok(true)
    })?;
    Ok(AuditQuery {
        after,
        limit,
        tenant,
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
/// default tenant: any tenant's, or all).
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
    let entries = state
        .store
        .audit(tenant.as_deref(), q.after, q.limit)
        .await?;
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
        assert!(!logged(&Method::POST, "/gw/x/", StatusCode::OK));
        assert_eq!(
            parse_query("after=7&limit=2&tenant=a").unwrap(),
            AuditQuery {
                after: 7,
                limit: 2,
                tenant: Some("a".into())
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
        ] {
            let e = parse_query(bad).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
