//! A scratch directory per fuzz process that proves an unpack stayed in
//! its root:
//!
//! ```text
//! <tmp>/burrow-fuzz-<target>-<pid>/
//!     root/          emptied before every input; the unpack's target
//!     sentinel/      files, a subdirectory and a symlink nothing may touch
//!     <extra>...     names the target itself uses (an image layout)
//! ```
//!
//! [`Arena::check`] panics (a crash for libFuzzer) when anything else
//! appeared next to `root`, when the sentinel tree changed in any way (an
//! entry, a mode, a size, a link count, a time, a byte), or when one of
//! the names the generator uses appeared at the top of the host's `/`.
//! Inputs reach the sentinel through `../sentinel` and through its
//! absolute path ([`crate::tarball::Token::Sentinel`]).
//!
//! `BURROW_FUZZ_TMPDIR` chooses `<tmp>` (default: `/dev/shm` when it is
//! writable, else the system temporary directory).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::tarball::NAMES;

/// See the module docs.
#[derive(Debug)]
pub struct Arena {
    base: PathBuf,
    root: PathBuf,
    sentinel: PathBuf,
    allowed: Vec<OsString>,
    snapshot: BTreeMap<PathBuf, String>,
    host: Vec<(PathBuf, bool)>,
}

impl Arena {
    /// Creates the arena of `target` in this process, with room for the
    /// extra top-level names in `extra`.
    pub fn new(target: &str, extra: &[&str]) -> Arena {
        let tmp = std::env::var_os("BURROW_FUZZ_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let shm = Path::new("/dev/shm");
                let probe = shm.join(format!(".burrow-fuzz-probe-{}", std::process::id()));
                if fs::create_dir(&probe).is_ok() {
                    let _ = fs::remove_dir(&probe);
                    shm.to_path_buf()
                } else {
                    std::env::temp_dir()
                }
            });
        let base = tmp.join(format!("burrow-fuzz-{target}-{}", std::process::id()));
        let _ = remove_tree(&base);
        fs::create_dir_all(&base).expect("creating the arena");
        let sentinel = base.join("sentinel");
        fs::create_dir_all(sentinel.join("dir")).expect("creating the sentinel");
        fs::write(sentinel.join("keep"), b"nothing may touch this").expect("sentinel file");
        fs::write(sentinel.join("dir/inner"), b"nor this").expect("sentinel file");
        std::os::unix::fs::symlink("keep", sentinel.join("link")).expect("sentinel symlink");
        let mut allowed: Vec<OsString> = vec!["root".into(), "sentinel".into()];
        allowed.extend(extra.iter().map(OsString::from));
        let host = NAMES
            .iter()
            .map(|n| {
                let p = Path::new("/").join(n);
                let exists = fs::symlink_metadata(&p).is_ok();
                (p, exists)
            })
            .collect();
        let mut arena = Arena {
            root: base.join("root"),
            sentinel,
            base,
            allowed,
            snapshot: BTreeMap::new(),
            host,
        };
        arena.snapshot = snapshot(&arena.sentinel);
        arena
    }

    /// The directory inputs are unpacked into.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The arena's own directory (for the extra names).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The sentinel directory's absolute path, as bytes.
    pub fn sentinel(&self) -> Vec<u8> {
        self.sentinel.as_os_str().as_bytes().to_vec()
    }

    /// Empties the root (and removes the extra names) for the next input.
    pub fn reset(&self) {
        for name in &self.allowed {
            if name != "sentinel" {
                remove_tree(&self.base.join(name)).expect("cleaning the arena");
            }
        }
        fs::create_dir(&self.root).expect("creating the root");
    }

    /// Panics if anything was written outside the root (see the module docs).
    pub fn check(&self) {
        for entry in fs::read_dir(&self.base).expect("listing the arena") {
            let name = entry.expect("listing the arena").file_name();
            assert!(
                self.allowed.contains(&name),
                "{:?} appeared next to the root: an unpack wrote outside it",
                self.base.join(&name)
            );
        }
        let now = snapshot(&self.sentinel);
        if now != self.snapshot {
            let changed: Vec<_> = now
                .iter()
                .filter(|(k, v)| self.snapshot.get(*k) != Some(v))
                .map(|(k, v)| format!("{k:?}: {:?} -> {v}", self.snapshot.get(k)))
                .chain(
                    self.snapshot
                        .iter()
                        .filter(|(k, _)| !now.contains_key(*k))
                        .map(|(k, v)| format!("{k:?}: {v} -> gone")),
                )
                .collect();
            panic!("the sentinel directory outside the root changed: {changed:?}");
        }
        for (p, existed) in &self.host {
            assert_eq!(
                fs::symlink_metadata(p).is_ok(),
                *existed,
                "{} appeared or disappeared on the host",
                p.display()
            );
        }
    }
}

/// Everything about a tree that a write through it would change.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(top: &Path, path: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let Ok(m) = fs::symlink_metadata(path) else {
        return;
    };
    let mut desc = format!(
        "mode={:o} uid={} gid={} nlink={} size={} mtime={}.{}",
        m.mode(),
        m.uid(),
        m.gid(),
        m.nlink(),
        m.len(),
        m.mtime(),
        m.mtime_nsec()
    );
    if m.file_type().is_symlink() {
        desc.push_str(&format!(" -> {:?}", fs::read_link(path).ok()));
    } else if m.is_file() {
        desc.push_str(&format!(" {:?}", fs::read(path).ok()));
    }
    let rel = path.strip_prefix(top).unwrap_or(path).to_path_buf();
    out.insert(rel, desc);
    if m.is_dir() {
        if let Ok(entries) = fs::read_dir(path) {
            for e in entries.flatten() {
                walk(top, &e.path(), out);
            }
        }
    }
}

/// Removes `path` and everything under it without following symlinks,
/// making directories writable first (an unpack may leave mode 000 ones).
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let m = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !m.is_dir() {
        return fs::remove_file(path);
    }
    if m.permissions().mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    for e in fs::read_dir(path)? {
        remove_tree(&e?.path())?;
    }
    fs::remove_dir(path)
}
