//! Tenants and roles: who a request is, and what it may see and do.
//!
//! Every token belongs to one tenant with one [`Role`]. A tenant's objects
//! (sandboxes, pools, snapshots: names in its scope, see [`Scoped`];
//! gateway targets and sessions: rows marked with it) are invisible to the
//! others, which get `not_found` for them exactly as for what does not
//! exist. The `default` tenant's sandboxes are the engine's unscoped names,
//! so a server that never defines a tenant works as before; the unix
//! socket, and a server without auth, act as its admin.

mod images;
mod limits;
mod policy;
pub mod quota;
mod scoped;
#[cfg(test)]
mod scoped_tests;
mod wake;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::Method;
use burrow::{Backend, Error};

pub use images::{normalize_image_entry, normalize_registry, ImageAllow};
pub use policy::{SandboxLimits, TenantPolicy};
pub use scoped::Scoped;

use crate::app::{ApiError, AppState};

/// The tenant every server has, whose sandboxes carry no scope.
pub const DEFAULT_TENANT: &str = "default";

/// What a token may do within its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, in its tenant, and (an admin of the default tenant)
    /// the server's own endpoints (`/metrics`).
    Admin,
    /// Everything in its tenant: sandboxes, pools, snapshots, targets.
    TenantAdmin,
    /// Sandboxes (their lifecycle, processes and files, snapshots and
    /// forks) and the gateway; not pools' definitions nor URL targets.
    Operator,
    /// Reads only: no change, no process, no file, no gateway call.
    ReadOnly,
}

impl Role {
    /// Every role, as stored.
    pub const ALL: [Role; 4] = [
        Role::Admin,
        Role::TenantAdmin,
        Role::Operator,
        Role::ReadOnly,
    ];

    /// The role as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::TenantAdmin => "tenant_admin",
            Role::Operator => "operator",
            Role::ReadOnly => "read_only",
        }
    }

    /// Parses a stored role.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether this role may make `method` on `path` (a concrete path:
    /// the routes' templates are matched segment by segment).
    pub fn allows(self, method: &Method, path: &str) -> bool {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let reads = matches!(*method, Method::GET | Method::HEAD);
        match segments.as_slice() {
            ["metrics"] => self == Role::Admin,
            ["v1", "audit"] => matches!(self, Role::Admin | Role::TenantAdmin),
            ["gw", ..] => matches!(self, Role::Admin | Role::TenantAdmin | Role::Operator),
            // The runtime stream runs processes and moves files; so do the
            // console's terminal and files browser.
            ["v1", "sandboxes", _, "runtime"] => self != Role::ReadOnly,
            // A sandbox's log holds its processes' output, execs' too:
            // only for roles that may run them.
            ["v1", "sandboxes", _, "logs"] => self != Role::ReadOnly,
            ["ui", "api", "sandboxes", _, "terminal" | "files", ..] => self != Role::ReadOnly,
            // Anybody may end their own console session.
            ["ui", "api", "logout"] => true,
            // Pool definitions and URL targets (which reach the server's
            // network): the tenant's admins.
            ["v1", "pools", ..] if !reads => matches!(self, Role::Admin | Role::TenantAdmin),
            // Webhooks post to the server's network, signed with a secret.
            ["v1", "webhooks", ..] if !reads => matches!(self, Role::Admin | Role::TenantAdmin),
            ["v1", "gateway", "targets"] if *method == Method::POST => {
                matches!(self, Role::Admin | Role::TenantAdmin)
            }
            _ => reads || self != Role::ReadOnly,
        }
    }
}

/// Who a request is: its token's name, tenant and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name (`None`: the unix socket, or auth switched off).
    pub token: Option<String>,
    /// The tenant.
    pub tenant: String,
    /// The role.
    pub role: Role,
}

impl Caller {
    /// The unix socket's, and a server's without auth: the default
    /// tenant's admin.
    pub fn local() -> Caller {
        Caller {
            token: None,
            tenant: DEFAULT_TENANT.to_owned(),
            role: Role::Admin,
        }
    }

    /// Whether this caller may make `method` on `path`: what its role
    /// allows, and the server's own endpoints (`/metrics`, which names
    /// every tenant's objects) only for the default tenant's admins.
    pub fn allows(&self, method: &Method, path: &str) -> bool {
        if path.trim_end_matches('/') == "/metrics" && self.tenant != DEFAULT_TENANT {
            return false;
        }
        self.role.allows(method, path)
    }

    /// The scope of the tenant's engine names (`None`: the default
    /// tenant's).
    pub fn scope(&self) -> Option<String> {
        (self.tenant != DEFAULT_TENANT).then(|| self.tenant.clone())
    }

    /// The engine as this caller sees it, within its tenant's limits and
    /// policy. The operator's rules for the tenant are read from the
    /// database here, for each request (never cached: a change holds at
    /// once on every replica); a database that does not answer refuses.
    pub async fn engine(&self, state: &AppState) -> Result<Arc<dyn Backend>, Error> {
        let ctx = quota::QuotaCtx {
            store: state.store.clone(),
            tenant: self.tenant.clone(),
        };
        let mut policy =
            TenantPolicy::for_scope(self.scope().as_deref(), &state.config.outbound.allow);
        if self.scope().is_some() {
            let rules = state
                .store
                .tenant_rules(&self.tenant)
                .await
                .map_err(|e| Error::Store {
                    reason: e.to_string(),
                    source: None,
                })?;
            if let Some(rules) = rules {
                policy = policy.with_rules(&rules);
            }
        }
        Ok(Arc::new(
            Scoped::new(state.engine.clone(), self.scope())
                .with_quota(ctx)
                .with_policy(policy),
        ))
    }
}

/// Checks a tenant's name: the scope rule of engine names (lowercase
/// letters, digits and `-`, 1..=32), `default` included.
pub fn validate_tenant(name: &str) -> Result<(), Error> {
    burrow::model::validate_scope(name).map_err(|e| Error::InvalidArgument {
        argument: "tenant".into(),
        reason: burrow::api::ErrorBody::from(&e).message,
    })
}

/// Checks a tenant named by a read's filter (`?tenant=`): the shape of a
/// tenant's name (one that cannot exist is not refused: it has nothing).
pub fn check_tenant_filter(name: &str) -> Result<(), Error> {
    let fits = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if fits {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            argument: "tenant".into(),
            reason: format!("{name:?} is not a tenant's name (1..=32 of a-z, 0-9, -)"),
        })
    }
}

/// The caller's view of the engine, as a handler's argument.
#[derive(Debug, Clone)]
pub struct Engine(pub Arc<dyn Backend>);

impl std::ops::Deref for Engine {
    type Target = Arc<dyn Backend>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl FromRequestParts<Arc<AppState>> for Engine {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let caller = caller_of(parts);
        Ok(Engine(caller.engine(state).await?))
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(caller_of(parts))
    }
}

/// The caller `authenticate` put in the request (the local admin when it
/// did not: the unix socket, auth off).
fn caller_of(parts: &Parts) -> Caller {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_allow_what_they_say() {
        let get = Method::GET;
        let post = Method::POST;
        let sb = "/v1/sandboxes/sb_x";
        for role in Role::ALL {
            assert!(role.allows(&get, "/v1/sandboxes"), "{role:?}");
            assert!(role.allows(&get, "/v1/pools/p"), "{role:?}");
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert!(!Role::ReadOnly.allows(&post, "/v1/sandboxes"));
        assert!(!Role::ReadOnly.allows(&get, &format!("{sb}/runtime")));
        assert!(!Role::ReadOnly.allows(&get, "/gw/sb_x/"));
        assert!(Role::Operator.allows(&post, &format!("{sb}/stop")));
        assert!(Role::Operator.allows(&get, &format!("{sb}/runtime")));
        assert!(Role::Operator.allows(&Method::PUT, "/v1/gateway/targets/sb_x"));
        assert!(!Role::Operator.allows(&post, "/v1/gateway/targets"));
        assert!(!Role::Operator.allows(&post, "/v1/pools"));
        assert!(!Role::Operator.allows(&Method::DELETE, "/v1/pools/p"));
        assert!(Role::TenantAdmin.allows(&post, "/v1/pools"));
        assert!(!Role::TenantAdmin.allows(&get, "/metrics"));
        assert!(Role::Admin.allows(&get, "/metrics"));
        assert!(!Role::ReadOnly.allows(&get, &format!("{sb}/logs")));
        assert!(Role::Operator.allows(&get, &format!("{sb}/logs")));
        // /metrics names every tenant's pools: the default tenant's admins
        // only, not another tenant's admin.
        let caller = |tenant: &str| Caller {
            token: Some("t".into()),
            tenant: tenant.into(),
            role: Role::Admin,
        };
        assert!(caller(DEFAULT_TENANT).allows(&get, "/metrics"));
        assert!(!caller("team").allows(&get, "/metrics"));
        assert!(caller("team").allows(&get, "/v1/sandboxes"));
        assert!(Role::TenantAdmin.allows(&get, "/v1/audit"));
        assert!(!Role::Operator.allows(&get, "/v1/audit"));
        assert_eq!(Role::parse("root"), None);
        // The console's terminal and files run processes and move files.
        let ui = "/ui/api/sandboxes/sb_x";
        for path in [
            format!("{ui}/terminal"),
            format!("{ui}/files"),
            format!("{ui}/files/content"),
        ] {
            assert!(!Role::ReadOnly.allows(&get, &path), "{path}");
            assert!(Role::Operator.allows(&get, &path), "{path}");
        }
        assert!(!Role::ReadOnly.allows(&Method::PUT, &format!("{ui}/files/content")));
        assert!(Role::ReadOnly.allows(&get, "/ui/api/session"));
        assert!(Role::ReadOnly.allows(&post, "/ui/api/logout"));
    }

    #[test]
    fn tenant_names_are_scopes() {
        for ok in ["default", "team-a", "t1"] {
            assert!(validate_tenant(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Team", "a/b", "-a", "pool", &"t".repeat(33)] {
            let e = validate_tenant(bad).unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{bad:?}");
        }
    }
}
