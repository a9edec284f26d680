//! The agent channel seen from the host: framing, the multiplexed client
//! an application's handles (and the supervisor itself) use to talk to a
//! guest agent over a backend's runtime stream, and the relay a run uses to
//! serve many client connections over its one agent channel (public as
//! [`crate::channel::relay`], for backends that host runs themselves).
//!
//! The public face of the runtime stream is [`crate::RuntimeStream`].

pub(crate) mod client;
pub(crate) mod frames;
pub(crate) mod health;
pub mod relay;
pub(crate) mod request;

#[cfg(test)]
mod tests;
