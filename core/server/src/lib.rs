//! `burrow serve`: the burrow engine behind a versioned HTTP API, with a
//! demand gateway (`/gw/{id}/...`), request leases, and an idle reaper that
//! any number of replicas can run against one Postgres database.
//!
//! - [`routes`]: the lifecycle API (the contract is [`burrow::api`]).
//! - [`runtime_relay`]: the runtime stream, which carries runtime requests
//!   only (lifecycle control frames are refused).
//! - [`gateway`]: demand start, leases, proxying; [`targets`]: what it
//!   proxies to.
//! - [`outbound`]: the guard of the server's own calls for its tenants (URL
//!   targets, webhooks): no host, loopback or private address unless the
//!   operator allows it.
//! - [`reaper`]: idle reclaim across replicas (advisory try-locks).
//! - [`sessions`]: attached sandboxes of remote clients.
//! - [`store`]: the server's tables (SQLite or Postgres, migrations for each).
//! - [`config`]: file + environment, validated at startup.
//! - [`tls`]: TLS on the TCP listeners, the certificate reloaded when its
//!   files change.

pub mod app;
pub mod audit;
pub mod config;
pub mod console;
#[cfg(test)]
mod defaults_tests;
pub mod events;
pub mod gateway;
mod loopback;
pub mod metrics;
pub mod outbound;
mod pools;
pub mod ratelimit;
pub mod reaper;
pub mod routes;
pub mod runtime_relay;
pub mod serve;
pub mod sessions;
pub mod store;
pub mod targets;
pub mod tenancy;
pub mod tls;

pub use config::ServeConfig;
pub use serve::{run, run_with, StartupError};
