//! Small helpers shared by commands: finding a sandbox by name or id,
//! parsing `K=V` flags, exit codes of guest processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use burrow::{Backend, Error, ExitStatus, LocalBackend, SandboxHandle, SandboxId, SandboxInfo};

/// The sandbox `target` names: an id when it parses as one, else a name.
pub(crate) async fn resolve(
    backend: &Arc<LocalBackend>,
    target: &str,
) -> burrow::Result<SandboxHandle> {
    let backend: Arc<dyn Backend> = backend.clone();
    match target.parse::<SandboxId>() {
        Ok(id) => SandboxHandle::get_by_id_in(backend, &id).await,
        Err(_) => SandboxHandle::get_in(backend, target).await,
    }
}

/// Parses repeated `K=V` flags into a map.
pub(crate) fn parse_pairs(
    flag: &str,
    values: &[String],
) -> burrow::Result<BTreeMap<String, String>> {
    values
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(Error::InvalidArgument {
                argument: flag.into(),
                reason: format!("{kv:?} is not KEY=VALUE"),
            }),
        })
        .collect()
}

/// A duration given in (possibly fractional) seconds.
pub(crate) fn seconds(flag: &str, secs: f64) -> burrow::Result<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| Error::InvalidArgument {
        argument: flag.into(),
        reason: format!("{secs} is not a number of seconds"),
    })
}

/// The shell-style exit code of a guest process: its code, 128+signal, or
/// 124 when its timeout killed it.
pub(crate) fn exit_code_of(status: &ExitStatus) -> u8 {
    if status.timed_out {
        124
    } else if let Some(sig) = status.signal {
        (128 + sig).clamp(0, 255) as u8
    } else {
        status.code.map(|c| (c & 0xff) as u8).unwrap_or(1)
    }
}

/// `name (id) status`, the human line of lifecycle commands.
pub(crate) fn describe(info: &SandboxInfo) -> String {
    format!("{} ({}) {}", info.name, info.id, info.status)
}
