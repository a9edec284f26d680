//! `burrow-net`: what a sandbox's network is allowed to do, and the
//! host-side pieces that enforce it.
//!
//! - [`policy`]: the network setting of a sandbox (`none`, `all`, or allow
//!   and deny rules of domains, IPs, CIDRs, ports and protocols), its text
//!   form and the verdict on each connection and each name.
//! - [`dns`]: DNS messages as the host-side resolver reads and writes them
//!   (bounded, never trusting a length or a pointer it was sent).

pub mod addrs;
pub mod dns;
pub mod link;
mod netlink;
pub mod policy;
pub mod stack;

pub use policy::{Network, Policy, Proto, Rule, RuleError, Verdict, Why};
