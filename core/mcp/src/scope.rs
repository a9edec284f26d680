//! The sandboxes this server acts on: only its own. A backend (a burrow
//! home, a `burrow serve` tenant) holds sandboxes of others too: other
//! tenants' (scoped names, `t1/x`), the warm pools' (`pool/...`), and plain
//! ones made by the library, the CLI or another agent. Every tool and
//! resource reaches a sandbox through [`owned`] (by name) or [`list`], so
//! one that is not this server's is answered exactly as one that does not
//! exist, before anything is done to it.

use std::sync::Arc;

use burrow::{Backend, Error, ListFilter, Sandbox, SandboxBuilder, SandboxHandle, SandboxInfo};

use crate::LABEL;

/// Whether the sandbox `info` describes is this server's: it carries
/// [`LABEL`] and its name is a plain one (a scoped name is another
/// tenant's or a pool's, whatever its labels say).
pub(crate) fn owns(info: &SandboxInfo) -> bool {
    !info.name.contains('/') && info.config.labels.get(LABEL).map(String::as_str) == Some("true")
}

/// Checks a sandbox name an agent gave: a plain name, never a scoped one
/// (`invalid_name`).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    burrow::model::validate_base(name)
}

/// What the local backend answers for a name that nothing holds.
fn not_found(name: &str) -> Error {
    Error::NotFound {
        what: format!("sandbox named {name:?}"),
        name: Some(name.to_owned()),
        id: None,
    }
}

/// The one gate: a handle on the sandbox `name` (bound to its id, so that
/// a sandbox of another that takes the name afterwards is never acted on)
/// if this server owns it; `invalid_name` for a name an agent may not give,
/// `not_found` for a sandbox that is not its own, as for one that is not
/// there.
pub(crate) async fn owned(backend: &Arc<dyn Backend>, name: &str) -> Result<SandboxHandle, Error> {
    check_name(name)?;
    let info = backend.get(name).await?;
    if !owns(&info) {
        return Err(not_found(name));
    }
    Ok(SandboxHandle::from_info(backend.clone(), &info))
}

/// This server's sandboxes, and none other.
pub(crate) async fn list(backend: &Arc<dyn Backend>) -> Result<Vec<SandboxInfo>, Error> {
    let mine = ListFilter::default().label(LABEL, "true");
    let mut all = backend.list(&mine).await?;
    all.retain(owns);
    Ok(all)
}

/// Converges on this server's sandbox `name`: connects to it if it has it
/// (starting it if needed), else creates it with `builder`. A sandbox of
/// another that holds the name is never connected to: the answer is the
/// create's (`already_exists`).
pub(crate) async fn converge(
    backend: &Arc<dyn Backend>,
    name: &str,
    builder: SandboxBuilder,
) -> Result<Sandbox, Error> {
    // Bounded: each turn follows a removal or a create that raced ours.
    let mut last = None;
    for _ in 0..8 {
        match owned(backend, name).await {
            Ok(handle) => match handle.connect_or_start().await {
                // Removed (and maybe taken again) since the lookup.
                Err(e @ (Error::NotFound { .. } | Error::SandboxReplaced { .. })) => {
                    last = Some(e);
                    continue;
                }
                other => return other,
            },
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        match builder.clone().create().await {
            Err(e @ Error::AlreadyExists { .. }) => {
                // Ours, made meanwhile by a concurrent call: connect to it
                // on the next turn. Another's: the create's answer.
                match backend.get(name).await {
                    Ok(info) if !owns(&info) => return Err(e),
                    _ => last = Some(e),
                }
            }
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| not_found(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, labels: &[(&str, &str)]) -> SandboxInfo {
        let mut config = burrow::SandboxConfig::new("busybox");
        for (k, v) in labels {
            config.labels.insert((*k).into(), (*v).into());
        }
        SandboxInfo::new(burrow::SandboxId::new(), name, config)
    }

    #[test]
    fn only_a_plain_name_with_the_label_is_owned() {
        assert!(owns(&info("mine", &[(LABEL, "true")])));
        assert!(!owns(&info("plain", &[])));
        assert!(!owns(&info("other", &[(LABEL, "false")])));
        assert!(!owns(&info("other", &[("owner", "true")])));
        // A tenant may set any label: a scoped name is never this server's.
        assert!(!owns(&info("t1/x", &[(LABEL, "true")])));
        assert!(!owns(&info("pool/p/sb_1", &[(LABEL, "true")])));
    }

    #[test]
    fn an_agent_never_names_a_scoped_sandbox() {
        let code = |n: &str| check_name(n).err().map(|e| e.code());
        assert_eq!(code("mine"), None);
        for bad in ["t1/x", "pool/p/sb_1", "/x", "x/", "", ".."] {
            assert_eq!(code(bad), Some(burrow::ErrorCode::InvalidName), "{bad:?}");
        }
    }
}
