//! Hibernation: a whole running guest saved next to its sandbox on idle
//! reclaim, and restored by the next start.
//!
//! Only a guest restored from a boot template is saved (its machine is the
//! template's, which a restore can rebuild exactly), and only without 9p
//! shares (QEMU cannot migrate a mounted one). The supervisor first has the
//! agent sync and suspend (it then waits, in the saved state, for the next
//! host); [`save`] stops the CPUs and migrates the whole machine, every RAM
//! page included, into `vm/hibernated.tmp/state`, writes the meta file and
//! renames the directory to `vm/hibernated`: a directory of that name is
//! complete. A kill at any step before the rename leaves only the
//! temporary directory, which the next launch removes (that start boots
//! afresh: the disk was synced).
//!
//! A start [`claim`]s the state by renaming it to `vm/hibernated.restoring`
//! (an explicit stop discards it by the same kind of rename, so exactly one
//! of them gets it), loads it into a QEMU of the template's machine, and
//! removes it before the guest runs: a state is restored at most once. A
//! claimed state left by a killed start was never run, so the next start
//! claims it again; a start killed after the removal boots afresh. A state whose template key is
//! not the one the sandbox's configuration gives now (memory, CPUs,
//! network, image, kernel, agent or QEMU changed) is discarded, not
//! restored.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::engine::fault::Fault;
use crate::error::{Error, Result};

/// The saved state's directory, under the sandbox's `vm/`.
const DIR: &str = "hibernated";
/// A state being written.
const WRITING: &str = "hibernated.tmp";
/// A state claimed by a start.
const RESTORING: &str = "hibernated.restoring";
/// A state claimed by a discard.
const DISCARDING: &str = "hibernated.discarding";
const META: &str = "meta.json";

/// What a saved state records besides the machine state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Meta {
    /// The template whose machine the guest runs on.
    pub template: String,
    /// When it was saved (ms since the epoch).
    pub saved_at_ms: u64,
}

/// Where a guest of a sandbox is saved to.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The sandbox's `vm/` directory.
    pub vm_dir: PathBuf,
    /// The template the guest was restored from.
    pub template: String,
}

fn vm_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("vm")
}

/// Whether `sandbox_dir` holds a complete saved state.
pub fn is_hibernated(sandbox_dir: &Path) -> bool {
    vm_dir(sandbox_dir).join(DIR).join(META).is_file()
}

/// Writes the state of a guest whose CPUs `save_state` stops into
/// `target`, then publishes it. `save_state` writes the machine state to
/// the path it is given.
pub(super) async fn save<F, Fut>(target: &Target, save_state: F) -> Result<()>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let tmp = target.vm_dir.join(WRITING);
    remove(&tmp)?;
    std::fs::create_dir_all(&tmp)
        .map_err(|e| Error::io("creating the hibernation directory", Some(&tmp), e))?;
    let result = async {
        save_state(tmp.join("state")).await?;
        write_meta(&tmp.join(META), &target.template)?;
        // The window a kill -9 test lands in: saved, not yet published.
        crate::engine::fault::point(Fault::VmHibernateBeforePublish);
        let dir = target.vm_dir.join(DIR);
        remove(&dir)?;
        std::fs::rename(&tmp, &dir)
            .map_err(|e| Error::io("publishing the hibernated state", Some(&dir), e))
    }
    .await;
    if result.is_err() {
        let _ = remove(&tmp);
    }
    result
}

/// The writable disk's file in a sandbox's `vm/` and in a saved copy.
pub(super) const DATA_DISK: &str = "data.ext4";

/// Saves a copy of a running guest into the new directory `dir` (for a
/// fork, a full snapshot): the machine state that `save_state` writes (it
/// stops the CPUs; the caller lets the guest run on after), a copy of the
/// sandbox's writable disk as it is then, and the record last. On error
/// `dir` is removed.
pub(super) async fn save_copy<F, Fut>(target: &Target, dir: &Path, save_state: F) -> Result<()>
where
    F: FnOnce(PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    std::fs::create_dir(dir)
        .map_err(|e| Error::io("creating the saved guest's directory", Some(dir), e))?;
    let result = async {
        save_state(dir.join("state")).await?;
        let disk = target.vm_dir.join(DATA_DISK);
        let copy = dir.join(DATA_DISK);
        let (from, to) = (disk.clone(), copy.clone());
        tokio::task::spawn_blocking(move || crate::engine::image::ext4::copy_sparse(&from, &to))
            .await
            .map_err(|e| Error::io("copying the writable disk", None, std::io::Error::other(e)))?
            .map_err(|e| Error::io("copying the writable disk", Some(&disk), e))?;
        write_meta(&dir.join(META), &target.template)
    }
    .await;
    if result.is_err() {
        let _ = remove(dir);
    }
    result
}

/// Gives a sandbox that never ran (`sandbox_dir`, of a sandbox of the same
/// machine) the guest saved in `copy`: its writable disk, then the state
/// as the sandbox's hibernated guest, which its first start restores (as
/// itself: its own identity, entropy and clock) and consumes. The state is
/// linked, not copied, where it can be (restores only read it). A kill
/// before the state is published leaves a disk, which a start boots
/// normally.
pub fn seed_from_copy(copy: &Path, sandbox_dir: &Path) -> Result<()> {
    let vm = vm_dir(sandbox_dir);
    std::fs::create_dir_all(&vm)
        .map_err(|e| Error::io("creating the sandbox's vm directory", Some(&vm), e))?;
    let disk = vm.join(DATA_DISK);
    let tmp_disk = vm.join("data.ext4.copy");
    crate::engine::image::ext4::copy_sparse(&copy.join(DATA_DISK), &tmp_disk)
        .and_then(|()| std::fs::rename(&tmp_disk, &disk))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp_disk);
            Error::io("copying the saved guest's disk", Some(&disk), e)
        })?;
    let tmp = vm.join(WRITING);
    remove(&tmp)?;
    std::fs::create_dir(&tmp)
        .map_err(|e| Error::io("creating the hibernation directory", Some(&tmp), e))?;
    let linked = std::fs::hard_link(copy.join("state"), tmp.join("state"))
        .or_else(|_| std::fs::copy(copy.join("state"), tmp.join("state")).map(drop));
    let published = linked
        .and_then(|()| std::fs::copy(copy.join(META), tmp.join(META)).map(drop))
        .and_then(|()| std::fs::rename(&tmp, vm.join(DIR)));
    published.map_err(|e| {
        let _ = remove(&tmp);
        Error::io("giving the sandbox the saved guest", Some(&vm), e)
    })
}

fn write_meta(path: &Path, template: &str) -> Result<()> {
    let meta = Meta {
        template: template.to_owned(),
        saved_at_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    };
    std::fs::write(path, serde_json::to_vec(&meta).unwrap_or_default())
        .map_err(|e| Error::io("writing the saved guest's record", Some(path), e))
}

/// A claimed saved state: the start that holds it restores it, or drops it.
#[derive(Debug)]
pub(super) struct Claimed {
    dir: PathBuf,
    pub meta: Meta,
}

impl Claimed {
    /// The machine state.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Removes it (before the guest runs: a state is restored at most once).
    pub fn consume(self) -> Result<()> {
        remove(&self.dir)
    }
}

/// Takes the sandbox's saved state for a start, if it has one (or the one
/// a killed start had claimed, and never ran); removes the leftovers of
/// killed saves and discards first. A state whose record cannot be read is
/// discarded (the error says so).
pub(super) fn claim(sandbox_dir: &Path) -> Result<Option<Claimed>> {
    let vm = vm_dir(sandbox_dir);
    for leftover in [WRITING, DISCARDING] {
        remove(&vm.join(leftover))?;
    }
    let claimed = vm.join(RESTORING);
    if vm.join(DIR).is_dir() {
        // A saved guest newer than any leftover claim: a run came after
        // that claim, so the leftover is stale.
        remove(&claimed)?;
        std::fs::rename(vm.join(DIR), &claimed)
            .map_err(|e| Error::io("claiming the hibernated state", Some(&vm), e))?;
    } else if !claimed.is_dir() {
        return Ok(None);
    }
    // Else a killed start's claim, never run: taken again.
    let meta_path = claimed.join(META);
    let meta = std::fs::read(&meta_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Meta>(&b).ok());
    match meta {
        Some(meta) => Ok(Some(Claimed { dir: claimed, meta })),
        None => {
            remove(&claimed)?;
            Err(super::qemu::unavailable(
                "the hibernated state's record is unreadable; it was discarded".into(),
            ))
        }
    }
}

/// Discards the sandbox's saved state (an explicit stop). Returns whether
/// there was one; a start that claimed it first keeps it.
pub fn discard(sandbox_dir: &Path) -> Result<bool> {
    let vm = vm_dir(sandbox_dir);
    let doomed = vm.join(DISCARDING);
    match std::fs::rename(vm.join(DIR), &doomed) {
        Ok(()) => {
            // Discarded by the rename: a start removes whatever of it a
            // failed removal leaves (and may be removing it right now).
            if let Err(e) = remove(&doomed) {
                tracing::warn!(error = %e, "removing a discarded hibernated state");
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("discarding the hibernated state", Some(&vm), e)),
    }
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io("removing a hibernated state", Some(path), e))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn target(sandbox: &Path) -> Target {
        Target {
            vm_dir: vm_dir(sandbox),
            template: "k1".into(),
        }
    }

    async fn save_ok(sandbox: &Path) {
        save(&target(sandbox), |state| async move {
            std::fs::write(&state, b"machine").unwrap();
            Ok(())
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn saved_claimed_consumed() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = tmp.path();
        assert!(claim(sb).unwrap().is_none());
        save_ok(sb).await;
        assert!(is_hibernated(sb));
        let claimed = claim(sb).unwrap().unwrap();
        assert_eq!(claimed.meta.template, "k1");
        assert_eq!(std::fs::read(claimed.state()).unwrap(), b"machine");
        // Claimed: a discard does not get it.
        assert!(!is_hibernated(sb));
        assert!(!discard(sb).unwrap());
        claimed.consume().unwrap();
        assert!(!vm_dir(sb).join(RESTORING).exists());
    }

    #[tokio::test]
    async fn a_failed_save_leaves_nothing_and_a_discard_wins_over_a_start() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = tmp.path();
        let err = save(&target(sb), |state| async move {
            std::fs::write(&state, b"half").unwrap();
            Err(super::super::qemu::unavailable("migration failed".into()))
        })
        .await
        .unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::RuntimeUnavailable);
        assert!(!is_hibernated(sb));
        assert!(!vm_dir(sb).join(WRITING).exists());

        save_ok(sb).await;
        assert!(discard(sb).unwrap());
        assert!(!is_hibernated(sb));
        assert!(claim(sb).unwrap().is_none());
    }

    #[tokio::test]
    async fn leftovers_are_cleared_a_killed_claim_is_claimed_again_bad_records_discarded() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = tmp.path();
        for leftover in [WRITING, DISCARDING] {
            std::fs::create_dir_all(vm_dir(sb).join(leftover)).unwrap();
        }
        assert!(claim(sb).unwrap().is_none());
        for leftover in [WRITING, DISCARDING] {
            assert!(!vm_dir(sb).join(leftover).exists());
        }
        // A start claims it and is killed before it consumed it: the next
        // start gets the same state.
        save_ok(sb).await;
        let first = claim(sb).unwrap().unwrap();
        drop(first);
        let again = claim(sb).unwrap().unwrap();
        assert_eq!(std::fs::read(again.state()).unwrap(), b"machine");
        again.consume().unwrap();
        assert!(claim(sb).unwrap().is_none());

        // A leftover claim older than a saved guest is stale: the saved
        // guest is the one taken.
        std::fs::create_dir_all(vm_dir(sb).join(RESTORING)).unwrap();
        std::fs::write(vm_dir(sb).join(RESTORING).join("state"), b"old").unwrap();
        save_ok(sb).await;
        let newest = claim(sb).unwrap().unwrap();
        assert_eq!(std::fs::read(newest.state()).unwrap(), b"machine");
        newest.consume().unwrap();

        save_ok(sb).await;
        std::fs::write(vm_dir(sb).join(DIR).join(META), b"{").unwrap();
        let err = claim(sb).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::RuntimeUnavailable);
        assert!(!vm_dir(sb).join(RESTORING).exists());
        assert!(claim(sb).unwrap().is_none());
    }
}
