#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The attack suite of the security review (issue 56, and the defence in
//! depth of issue 57): one module per class of hole, each test an attack that succeeded on the reviewed build
//! and must fail on this one. They run as root and, in the rootless lane,
//! as an unprivileged user (`cargo xtask test --rootless --test attacks`).
//! docs/security.md names the test that proves each boundary.

#[path = "attacks/audit.rs"]
mod audit;
#[path = "attacks/copy_out.rs"]
mod copy_out;
#[path = "attacks/egress.rs"]
mod egress;
#[path = "attacks/gateway_origin.rs"]
mod gateway_origin;
#[path = "attacks/guest.rs"]
mod guest;
#[path = "attacks/mcp_scope.rs"]
mod mcp_scope;
#[path = "attacks/mounts.rs"]
mod mounts;
#[path = "attacks/quotas.rs"]
mod quotas;
#[path = "attacks/seccomp.rs"]
mod seccomp;
#[path = "attacks/secrets.rs"]
mod secrets;
#[path = "attacks/ssrf.rs"]
mod ssrf;
#[path = "attacks/tenant_policy.rs"]
mod tenant_policy;
#[path = "attacks/unauthenticated.rs"]
mod unauthenticated;
