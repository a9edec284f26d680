//! `burrow-net`: what a sandbox's network is allowed to do, and the
//! host-side pieces that enforce it.
//!
//! - [`policy`]: the network setting of a sandbox (`none`, `all`, or allow
//!   and deny rules of domains, IPs, CIDRs, ports and protocols), its text
//!   form and the verdict on each connection and each name.
//! - [`ceiling`]: the addresses a tenant's sandbox and the server's
//!   outbound calls never reach (the one classification of them, every
//!   spelling read), and the ceiling a sandbox's configuration carries.
//! - [`outbound`] (feature `stack`): the guard of the connections a
//!   server makes for its tenants (resolve, then vet every address just
//!   before connecting), and a guarding proxy for clients that take one.
//! - [`dns`]: DNS messages as the host-side resolver reads and writes them
//!   (bounded, never trusting a length or a pointer it was sent).
//! - [`secrets`]: secrets the guest only holds a placeholder of, put into
//!   its HTTP requests to the hosts they are for by the stack.
//! - [`stack`] (feature `stack`): the per-sandbox network stack that
//!   enforces a policy, and [`link`], the link it is given into a
//!   container's network namespace.

pub mod addrs;
pub mod ceiling;
pub mod dns;
#[cfg(feature = "stack")]
pub mod link;
#[cfg(feature = "stack")]
mod netlink;
#[cfg(feature = "stack")]
pub mod outbound;
pub mod policy;
pub mod secrets;
#[cfg(feature = "stack")]
pub mod stack;

pub use ceiling::Ceiling;
pub use policy::{Network, Policy, Proto, Rule, RuleError, Verdict, Why};
