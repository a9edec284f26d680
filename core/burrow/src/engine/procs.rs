//! Process identity (a pid plus its kernel start time, so a recycled pid is
//! never mistaken for the process that was recorded), and where burrow's
//! own programs are: the `burrow` binary, the supervisor and the guest agent
//! ([`locate_agent`] has the agent's lookup order).

use std::path::PathBuf;

mod agent;

pub use agent::{locate_agent, set_embedded_agent, AgentLocation, AgentSource, EmbeddedAgent};

/// A process recorded as the owner of some state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcIdentity {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

impl ProcIdentity {
    /// The calling process.
    pub fn current() -> ProcIdentity {
        let pid = std::process::id();
        ProcIdentity {
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    /// Identity of a live process, if it exists (and is not a zombie).
    pub fn of(pid: u32) -> Option<ProcIdentity> {
        let (state, start) = stat(pid)?;
        (state != 'Z' && state != 'X').then_some(ProcIdentity { pid, start })
    }

    /// Whether this exact process is still alive (a zombie counts as dead).
    pub fn is_alive(&self) -> bool {
        match stat(self.pid) {
            Some((state, start)) => start == self.start && state != 'Z' && state != 'X',
            None => false,
        }
    }
}

fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, s)| s)
}

/// (state, starttime) from /proc/<pid>/stat.
fn stat(pid: u32) -> Option<(char, u64)> {
    let raw = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and ')'; fields after the
    // last ')' are well-formed.
    let rest = &raw[raw.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After ')' come field 3 (state) ... field 22 (starttime): skip 18 more.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Locates the `burrow` binary that provides the internal supervisor:
/// `$BURROW_BIN`, else a `burrow` next to the current executable (or one
/// directory up, for test binaries in `target/*/deps`), else `burrow` on PATH.
pub fn burrow_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BURROW_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "burrow") {
            return Some(exe);
        }
        if let Some(dir) = exe.parent() {
            for cand in [dir.join("burrow"), dir.join("../burrow")] {
                if cand.is_file() {
                    return Some(cand);
                }
            }
        }
    }
    find_on_path("burrow")
}

static EMBEDDED_SUPERVISOR: std::sync::OnceLock<agent::EmbeddedAgent> = std::sync::OnceLock::new();

/// The program of this process when it is a supervisor.
static RUNNING_SUPERVISOR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Marks this process as a supervisor: the helper entries it runs
/// (`__link`) are its own program's, whatever else is installed.
pub(crate) fn mark_supervisor() {
    if let Ok(p) = std::env::current_exe() {
        let _ = RUNNING_SUPERVISOR.set(p);
    }
}

/// The program whose helper entries (`__link`) a supervisor runs: its own
/// (an SDK's embedded supervisor has no `burrow` beside it), else
/// [`supervisor_bin`] (a driver used outside a supervisor, as its tests do).
pub(crate) fn helper_bin() -> Option<PathBuf> {
    RUNNING_SUPERVISOR.get().cloned().or_else(supervisor_bin)
}

/// Registers a `burrow-supervisor` program compiled into the running one
/// (the SDKs' native libraries carry one, so that installing a package is
/// enough to run sandboxes); call once, before any sandbox starts. Later
/// calls and empty programs are ignored.
pub fn set_embedded_supervisor(program: agent::EmbeddedAgent) {
    let digest = program.sha256();
    if !program.is_empty() && digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        let _ = EMBEDDED_SUPERVISOR.set(program);
    }
}

/// The supervisor program: `$BURROW_SUPERVISOR_BIN`; else, when
/// `$BURROW_BIN` is set, the lean `burrow-supervisor` next to it or that
/// `burrow` itself; else the embedded one ([`set_embedded_supervisor`]),
/// written once to `<cache>/supervisor/<sha256>/burrow-supervisor`; else the
/// lean `burrow-supervisor` next to the `burrow` binary found beside this
/// program or on `PATH`, else that `burrow` (its `__supervise` entry runs
/// the same code, with more linked in). Either way it is started with
/// `__supervise` as its first argument.
pub fn supervisor_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BURROW_SUPERVISOR_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let explicit = std::env::var_os("BURROW_BIN").is_some_and(|p| !p.is_empty());
    if !explicit {
        if let Some(program) = EMBEDDED_SUPERVISOR.get() {
            match agent::cache_dir().map(|cache| {
                agent::materialise_as(program, &cache, "supervisor", "burrow-supervisor")
            }) {
                Some(Ok(path)) => return Some(path),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "could not write the embedded supervisor to the cache")
                }
                None => tracing::warn!("no cache directory for the embedded supervisor"),
            }
        }
    }
    let burrow = burrow_bin()?;
    let lean = burrow.with_file_name("burrow-supervisor");
    Some(if lean.is_file() { lean } else { burrow })
}

/// The static guest agent's path, if [`locate_agent`] finds one (its error
/// says where it looked).
pub fn agent_bin() -> Option<PathBuf> {
    locate_agent().ok().map(|a| a.path)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_a_fake_start_is_not() {
        let me = ProcIdentity::current();
        assert!(me.start > 0);
        assert!(me.is_alive());
        let other = ProcIdentity {
            pid: me.pid,
            start: me.start + 1,
        };
        assert!(!other.is_alive());
    }
}
