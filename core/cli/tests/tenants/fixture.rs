//! The setting of the tenant suites (serve_tenants.rs, serve_isolation.rs):
//! a `burrow serve` replica on its own PostgreSQL database with tenants
//! `alpha` and `beta`, each with a tenant admin token, a gateway listener,
//! and the outbound guard open to 127.0.0.1's discard port only.

use std::sync::OnceLock;

use burrow_cli_testkit::serve::pg::PgCluster;
use burrow_cli_testkit::serve::{Resp, TenantServer};
use serde_json::Value;

pub fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

/// A server with tenants `alpha` and `beta`, each with a tenant admin token.
pub struct Fixture {
    pub t: TenantServer,
    pub alpha: String,
    pub beta: String,
}

impl std::ops::Deref for Fixture {
    type Target = TenantServer;
    fn deref(&self) -> &TenantServer {
        &self.t
    }
}

pub fn fixture(db: &str) -> Fixture {
    let url = cluster().create_database(db).unwrap();
    let tokens = [
        ("alpha-admin", "alpha", "tenant_admin"),
        ("beta-admin", "beta", "tenant_admin"),
    ];
    // The URL target and the webhook point at 127.0.0.1's discard port,
    // which the server's outbound calls reach only where the operator
    // allows.
    let mut t = TenantServer::start_with(
        &url,
        &["alpha", "beta"],
        &tokens,
        &[
            ("OUTBOUND_ALLOW", "tcp:127.0.0.1:9"),
            ("GATEWAY_LISTEN", "127.0.0.1:0"),
        ],
    );
    let beta = t.tokens.pop().unwrap();
    let alpha = t.tokens.pop().unwrap();
    Fixture { t, alpha, beta }
}

pub fn call(f: &Fixture, token: &str, method: &str, path: &str, body: Option<Value>) -> Resp {
    f.t.call(token, method, path, body)
}
