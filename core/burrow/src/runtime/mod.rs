//! Talking to a running guest: async framing, the multiplexed agent client
//! (used by handles over a backend's runtime stream, and by the supervisor
//! itself towards the agent), and the supervisor (local engine).
//!
//! Private: the public face of the runtime stream is
//! [`crate::RuntimeStream`]; the supervisor's entry point for the `burrow`
//! binary is [`crate::internal::supervisor`].

pub(crate) mod client;
pub(crate) mod frames;
#[cfg(feature = "local")]
pub(crate) mod supervisor;
