//! Finding the static guest agent (`burrow-agent`), the one place that says
//! where it comes from.
//!
//! The supervisor needs the agent to start any sandbox: the container driver
//! bind-mounts it as the guest's PID 1, the vm driver packs it into the
//! initramfs. The lookup order is on [`locate_agent`].

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

use crate::error::{Error, Result};

/// The file name of the agent wherever it lives.
const AGENT_FILE: &str = "burrow-agent";
/// The musl target the scripts and the build tree use for the agent.
const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

/// A guest agent compiled into the running program.
#[derive(Clone, Copy)]
pub struct EmbeddedAgent {
    bytes: &'static [u8],
    sha256: &'static str,
}

impl std::fmt::Debug for EmbeddedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedAgent")
            .field("len", &self.bytes.len())
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl EmbeddedAgent {
    /// The agent's bytes and their SHA-256 in lowercase hex (computed at
    /// build time, so that finding the materialised copy reads nothing).
    pub const fn new(bytes: &'static [u8], sha256: &'static str) -> EmbeddedAgent {
        EmbeddedAgent { bytes, sha256 }
    }

    /// SHA-256 of the agent, lowercase hex.
    pub fn sha256(&self) -> &'static str {
        self.sha256
    }

    /// Size of the agent in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there are no bytes (a build without an embedded agent).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

static EMBEDDED: OnceLock<EmbeddedAgent> = OnceLock::new();

/// Registers the agent embedded in this program; call once, early in
/// `main`, before any sandbox starts. Later calls and empty agents are
/// ignored.
pub fn set_embedded_agent(agent: EmbeddedAgent) {
    if !agent.is_empty() && is_hex_sha256(agent.sha256) {
        let _ = EMBEDDED.set(agent);
    }
}

/// The agent registered with [`set_embedded_agent`], if any.
pub(crate) fn embedded_agent() -> Option<EmbeddedAgent> {
    EMBEDDED.get().copied()
}

/// Where [`locate_agent`] found the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentSource {
    /// `$BURROW_AGENT_BIN`.
    Env,
    /// Embedded in the running program, written to the cache.
    Embedded,
    /// `burrow-agent` beside the `burrow` binary.
    BesideBurrow,
    /// The cargo build tree of the `burrow` binary.
    BuildTree,
    /// `burrow-agent` on `PATH`.
    Path,
}

impl AgentSource {
    /// The snake_case name (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            AgentSource::Env => "env",
            AgentSource::Embedded => "embedded",
            AgentSource::BesideBurrow => "beside_burrow",
            AgentSource::BuildTree => "build_tree",
            AgentSource::Path => "path",
        }
    }
}

/// The agent that [`locate_agent`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AgentLocation {
    /// The executable file.
    pub path: PathBuf,
    /// Which step of the lookup found it.
    pub source: AgentSource,
}

/// Finds the guest agent. In order:
///
/// 1. `$BURROW_AGENT_BIN`, when set and not empty: the override. It must
///    exist; a wrong value is an error, never a silent fallback.
/// 2. The agent embedded in the running program. The `burrow` and
///    `burrow-supervisor` binaries carry one (built by `core/cli/build.rs`)
///    and register it with [`set_embedded_agent`]; it is written once to
///    `<cache>/agent/<sha256>/burrow-agent` (mode 0755, atomically) and
///    used from there. `<cache>` is `$BURROW_CACHE_DIR`, else
///    `$XDG_CACHE_HOME/burrow`, else `$HOME/.cache/burrow`, else the
///    user's passwd home's `.cache/burrow`.
/// 3. `burrow-agent` beside the `burrow` binary (see [`super::burrow_bin`]):
///    a packaged install that ships it as a file.
/// 4. The build tree around the `burrow` binary (`target/<profile>/burrow`):
///    `target/agent/x86_64-unknown-linux-musl/release/burrow-agent` (what
///    `scripts/build-agent.sh` builds), then
///    `target/x86_64-unknown-linux-musl/{release,<profile>}/burrow-agent`.
/// 5. `burrow-agent` on `PATH`.
///
/// When none has it: `runtime_unavailable`, naming every place it looked
/// and how to fix that.
pub fn locate_agent() -> Result<AgentLocation> {
    Lookup {
        env: std::env::var_os("BURROW_AGENT_BIN")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        embedded: embedded_agent(),
        cache: cache_dir(),
        burrow: super::burrow_bin(),
        on_path: super::find_on_path(AGENT_FILE),
    }
    .run()
}

/// The inputs of one lookup (the environment, read once), so that the
/// order and the error can be tested without touching the process's own.
struct Lookup {
    env: Option<PathBuf>,
    embedded: Option<EmbeddedAgent>,
    cache: Option<PathBuf>,
    burrow: Option<PathBuf>,
    on_path: Option<PathBuf>,
}

impl Lookup {
    fn run(self) -> Result<AgentLocation> {
        let found = |path: PathBuf, source| Ok(AgentLocation { path, source });
        if let Some(p) = self.env {
            return if p.is_file() {
                found(p, AgentSource::Env)
            } else {
                Err(not_found(format!(
                    "BURROW_AGENT_BIN={} is not a file; point it at a static burrow-agent \
                     (bash scripts/build-agent.sh prints one) or unset it to use the agent \
                     embedded in the burrow binaries",
                    p.display()
                )))
            };
        }
        let mut looked = vec!["$BURROW_AGENT_BIN (not set)".to_string()];
        match (self.embedded, self.cache) {
            (Some(agent), Some(cache)) => match materialise(&agent, &cache) {
                Ok(path) => return found(path, AgentSource::Embedded),
                Err(e) => looked.push(format!(
                    "the agent embedded in this program (writing it under {} failed: {e}; \
                     set BURROW_CACHE_DIR to a writable directory)",
                    cache.display()
                )),
            },
            (Some(_), None) => looked.push(
                "the agent embedded in this program (no cache directory to write it to: \
                 set BURROW_CACHE_DIR, XDG_CACHE_HOME or HOME)"
                    .into(),
            ),
            (None, _) => looked.push(
                "an agent embedded in this program (none: the burrow and burrow-supervisor \
                 binaries carry one)"
                    .into(),
            ),
        }
        match &self.burrow {
            Some(burrow) => {
                for (cand, source) in beside_and_build_tree(burrow) {
                    if cand.is_file() {
                        return found(cand, source);
                    }
                    looked.push(cand.display().to_string());
                }
            }
            None => looked.push(
                "beside the burrow binary (no burrow binary: not BURROW_BIN, beside this \
                 program or on PATH)"
                    .into(),
            ),
        }
        if let Some(p) = self.on_path {
            return found(p, AgentSource::Path);
        }
        looked.push("burrow-agent on PATH".into());
        Err(not_found(format!(
            "the guest agent (burrow-agent) was not found; looked at: {}. Fix: use the burrow \
             binaries built or installed from core/cli (`cargo install --path core/cli`: they \
             embed the agent), or build it with `bash scripts/build-agent.sh` and set \
             BURROW_AGENT_BIN to the path it prints",
            looked.join(", ")
        )))
    }
}

/// Steps 3 and 4 of the lookup for a `burrow` binary at `burrow`.
fn beside_and_build_tree(burrow: &Path) -> Vec<(PathBuf, AgentSource)> {
    let Some(dir) = burrow.parent() else {
        return Vec::new();
    };
    let mut cands = vec![(dir.join(AGENT_FILE), AgentSource::BesideBurrow)];
    // target/<profile>/burrow -> target/...
    if let (Some(target), Some(profile)) = (dir.parent(), dir.file_name()) {
        let tree = |p: PathBuf| (p.join(AGENT_FILE), AgentSource::BuildTree);
        cands.push(tree(target.join("agent").join(MUSL_TARGET).join("release")));
        cands.push(tree(target.join(MUSL_TARGET).join("release")));
        if profile != "release" {
            cands.push(tree(target.join(MUSL_TARGET).join(profile)));
        }
    }
    cands
}

fn not_found(reason: String) -> Error {
    Error::Runtime {
        runtime: "burrow-agent".into(),
        reason,
    }
}

/// The host-wide cache: `$BURROW_CACHE_DIR`, else `$XDG_CACHE_HOME/burrow`,
/// else `$HOME/.cache/burrow`, else the passwd home's `.cache/burrow`.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("BURROW_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("burrow")))
        .or_else(|| {
            var("HOME")
                .or_else(passwd_home)
                .map(|d| d.join(".cache/burrow"))
        })
}

/// The home directory of the effective user from the passwd database.
fn passwd_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; strings returned in
    // `pwd` point into `buf`, which outlives their use below.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir is a NUL-terminated string in `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
    let dir = std::ffi::OsStr::from_bytes(dir.to_bytes());
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// Writes `agent` to `<cache>/agent/<sha256>/burrow-agent` unless a good
/// copy is already there, and returns that path.
///
/// Safe against concurrent callers in any number of processes: each writes
/// its own temporary file and renames it into place, so a reader (the OCI
/// runtime bind-mounting it, the vm driver reading it) sees either no file
/// or a complete one, and every complete one has the same bytes.
fn materialise(agent: &EmbeddedAgent, cache: &Path) -> std::io::Result<PathBuf> {
    materialise_as(agent, cache, "agent", AGENT_FILE)
}

/// Writes an embedded program to `<cache>/<kind>/<sha256>/<file>` unless a
/// good copy is already there (see [`materialise`]), and returns that path.
pub(crate) fn materialise_as(
    agent: &EmbeddedAgent,
    cache: &Path,
    kind: &str,
    file: &str,
) -> std::io::Result<PathBuf> {
    let dir = cache.join(kind).join(agent.sha256);
    let path = dir.join(file);
    if is_good_copy(&path, agent.bytes.len() as u64) {
        return Ok(path);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dir)?;
    let tmp = dir.join(format!(
        ".{file}.{}.{:x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(agent.bytes)?;
        // The umask may have narrowed the mode; the container's root is an
        // unprivileged host uid and needs o+rx.
        f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// A copy is trusted when it is a regular file (not a symlink) of the right
/// size, owned by us, executable by everyone and writable by no one else.
/// The path is named by the content's hash; the bytes are not re-read.
fn is_good_copy(path: &Path, len: u64) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let mode = meta.mode();
    meta.file_type().is_file()
        && meta.len() == len
        && meta.uid() == euid
        && mode & 0o555 == 0o555
        && mode & 0o022 == 0
}

fn is_hex_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn concurrent_writers_leave_one_complete_executable_copy() {
        let cache = tempfile::tempdir().unwrap();
        let bytes: &'static [u8] = Box::leak(vec![7u8; 3 << 20].into_boxed_slice());
        let agent = EmbeddedAgent::new(bytes, SHA);
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| materialise(&agent, cache.path()).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let want = cache.path().join("agent").join(SHA).join(AGENT_FILE);
        assert!(paths.iter().all(|p| *p == want), "{paths:?}");
        assert_eq!(std::fs::read(&want).unwrap(), bytes);
        let mode = std::fs::metadata(&want).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        let names: Vec<_> = std::fs::read_dir(want.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [AGENT_FILE], "no temporary file is left behind");
    }

    #[test]
    fn a_bad_copy_is_replaced_and_a_good_one_kept() {
        let cache = tempfile::tempdir().unwrap();
        let agent = EmbeddedAgent::new(b"agent bytes", SHA);
        let path = materialise(&agent, cache.path()).unwrap();
        // Truncated, or writable by others: written again.
        std::fs::write(&path, b"agent").unwrap();
        assert_eq!(materialise(&agent, cache.path()).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), b"agent bytes");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        materialise(&agent, cache.path()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o755);
        // A good copy is not rewritten (same inode).
        let ino = std::fs::metadata(&path).unwrap().ino();
        materialise(&agent, cache.path()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
    }

    #[test]
    fn build_tree_candidates_cover_the_script_and_cargo_layouts() {
        let c = beside_and_build_tree(Path::new("/w/target/debug/burrow"));
        let paths: Vec<_> = c.iter().map(|(p, s)| (p.to_str().unwrap(), *s)).collect();
        assert_eq!(
            paths,
            [
                ("/w/target/debug/burrow-agent", AgentSource::BesideBurrow),
                (
                    "/w/target/agent/x86_64-unknown-linux-musl/release/burrow-agent",
                    AgentSource::BuildTree
                ),
                (
                    "/w/target/x86_64-unknown-linux-musl/release/burrow-agent",
                    AgentSource::BuildTree
                ),
                (
                    "/w/target/x86_64-unknown-linux-musl/debug/burrow-agent",
                    AgentSource::BuildTree
                ),
            ]
        );
    }

    fn lookup(dir: &Path) -> Lookup {
        Lookup {
            env: None,
            embedded: None,
            cache: Some(dir.join("cache")),
            burrow: Some(dir.join("target/debug/burrow")),
            on_path: None,
        }
    }

    #[test]
    fn the_override_wins_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("my-agent");
        std::fs::write(&agent, b"x").unwrap();
        let mut l = lookup(dir.path());
        l.env = Some(agent.clone());
        l.embedded = Some(EmbeddedAgent::new(b"embedded", SHA));
        assert_eq!(
            l.run().unwrap(),
            AgentLocation {
                path: agent,
                source: AgentSource::Env
            }
        );
        let mut l = lookup(dir.path());
        l.env = Some(dir.path().join("missing"));
        l.embedded = Some(EmbeddedAgent::new(b"embedded", SHA));
        let e = l.run().unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::RuntimeUnavailable);
        assert!(e.to_string().contains("BURROW_AGENT_BIN="), "{e}");
    }

    #[test]
    fn the_embedded_agent_comes_before_the_build_tree() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir
            .path()
            .join("target/agent/x86_64-unknown-linux-musl/release");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join(AGENT_FILE), b"built").unwrap();
        let mut l = lookup(dir.path());
        l.embedded = Some(EmbeddedAgent::new(b"embedded", SHA));
        let got = l.run().unwrap();
        assert_eq!(got.source, AgentSource::Embedded);
        assert!(got.path.starts_with(dir.path().join("cache/agent")));
        // Without an embedded agent: the scripts/build-agent.sh output.
        let got = lookup(dir.path()).run().unwrap();
        assert_eq!(
            got,
            AgentLocation {
                path: tree.join(AGENT_FILE),
                source: AgentSource::BuildTree
            }
        );
    }

    #[test]
    fn not_found_names_every_place_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let e = lookup(dir.path()).run().unwrap_err().to_string();
        for place in [
            "$BURROW_AGENT_BIN (not set)",
            "an agent embedded in this program",
            "target/debug/burrow-agent",
            "target/agent/x86_64-unknown-linux-musl/release/burrow-agent",
            "target/x86_64-unknown-linux-musl/release/burrow-agent",
            "target/x86_64-unknown-linux-musl/debug/burrow-agent",
            "burrow-agent on PATH",
            "cargo install --path core/cli",
            "scripts/build-agent.sh",
        ] {
            assert!(e.contains(place), "{place} missing from: {e}");
        }
        // An unwritable cache is reported, and the lookup goes on.
        let mut l = lookup(dir.path());
        l.embedded = Some(EmbeddedAgent::new(b"embedded", SHA));
        l.cache = Some(PathBuf::from("/proc/burrow-cache"));
        let e = l.run().unwrap_err().to_string();
        assert!(
            e.contains("writing it under /proc/burrow-cache failed"),
            "{e}"
        );
    }

    #[test]
    fn only_a_real_digest_registers() {
        assert!(is_hex_sha256(SHA));
        assert!(!is_hex_sha256(""));
        assert!(!is_hex_sha256(&SHA.to_uppercase()));
    }
}
