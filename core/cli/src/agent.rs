//! The guest agent built into this binary by `build.rs` (nothing when it
//! was built with `BURROW_EMBED_AGENT=none`), handed to the library, which
//! writes it once to its cache and runs sandboxes with it unless
//! `$BURROW_AGENT_BIN` says otherwise.

static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/burrow-agent"));

/// Registers the embedded agent with the library; call first in `main`.
pub(crate) fn register() {
    burrow::internal::agent::set_embedded_agent(burrow::internal::agent::EmbeddedAgent::new(
        AGENT,
        env!("BURROW_EMBEDDED_AGENT_SHA256"),
    ));
}
