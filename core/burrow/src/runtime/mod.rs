//! Talking to a running guest: async framing, the multiplexed agent client
//! (used by handles through the supervisor socket, and by the supervisor
//! itself towards the agent), and the supervisor.

pub mod client;
pub mod frames;
pub mod supervisor;
