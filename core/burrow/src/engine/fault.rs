//! Fault-injection points for crash-safety and race-window tests (debug
//! builds only).
//!
//! With `BURROW_FAULT=<point>` in the environment, a process reaching that
//! point writes its pid to `$BURROW_FAULT_MARKER` and hangs ([`point`]), so
//! a test can SIGKILL it at exactly that step, or holds until the test
//! creates `$BURROW_FAULT_MARKER.release` ([`hold`]). Release builds compile
//! this to nothing. Tests name the points by [`Fault`]`::as_str` (the
//! `FaultWindow` of `burrow-test-support` does the marker handshake).

/// The environment variable that names the fault point to trigger.
pub const FAULT_ENV: &str = "BURROW_FAULT";

/// The environment variable that names the marker file a triggered point
/// writes its pid to.
pub const MARKER_ENV: &str = "BURROW_FAULT_MARKER";

listed_enum! {
    /// Every fault point of burrow's processes, by its stable
    /// `<area>.<step>` string (the value of `BURROW_FAULT`: tests of other
    /// processes and scripts name them by it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Fault {
        /// Starter: hangs after claiming the start, before spawning the supervisor.
        StartAfterClaim = "start.after_claim",
        /// Starter: hangs right after spawning the supervisor.
        StartAfterSpawn = "start.after_spawn",
        /// Stop: holds with a hibernated row read, before discarding the saved guest.
        StopBeforeDiscard = "stop.before_discard",
        /// Remove: holds after deleting the record, before reclaiming the runtime state.
        RemoveAfterDelete = "remove.after_delete",
        /// List: holds with the rows read, before reconciling them.
        ListBeforeReconcile = "list.before_reconcile",
        /// Supervisor: hangs before taking the handoff of the run from the starter.
        SupervisorBeforeHandoff = "supervisor.before_handoff",
        /// Supervisor: hangs after taking the name's runtime lock.
        SupervisorAfterLock = "supervisor.after_lock",
        /// Container driver: hangs after creating the rootfs mount point.
        SupervisorAfterMountPoint = "supervisor.after_mount_point",
        /// Supervisor: holds with the run Starting, before launching the guest.
        SupervisorBeforeLaunch = "supervisor.before_launch",
        /// Supervisor: hangs with the guest launched (a container in its cgroups).
        SupervisorAfterLaunch = "supervisor.after_launch",
        /// Supervisor: hangs with its socket bound, before recording the run Running.
        SupervisorBeforeRunning = "supervisor.before_running",
        /// Supervisor: holds after it stopped accepting, with the socket still listening.
        SupervisorStoppedAccepting = "supervisor.stopped_accepting",
        /// Supervisor: holds with the socket gone, before recording the end of the run.
        SupervisorEnding = "supervisor.ending",
        /// Relay of a run: holds a request read off a connection, before taking it.
        RelayBeforeRequest = "relay.before_request",
        /// Vm driver: does not hang; starts QEMU with its CPUs stopped (and no template).
        VmStartPaused = "vm.start_paused",
        /// Vm driver: hangs with a guest saved, before publishing the hibernation.
        VmHibernateBeforePublish = "vm.hibernate.before_publish",
        /// Vm driver: holds with the run begun, before claiming the saved guest.
        VmHibernateBeforeClaim = "vm.hibernate.before_claim",
        /// Vm driver: hangs with the saved guest loaded, before it runs.
        VmHibernateLoaded = "vm.hibernate.loaded",
        /// Image pull: hangs mid-download of a blob, its partial temp file flushed.
        ImagePullMidDownload = "image.pull.mid_download",
        /// `burrow serve` gateway: holds a call's heartbeat, before renewing its lease.
        GatewayBeforeHeartbeat = "gateway.before_heartbeat",
        /// `burrow serve` gateway: holds a call that found its target not
        /// ready, before it claims the start.
        GatewayBeforeClaim = "gateway.before_claim",
        /// `burrow serve` gateway: holds a call that re-established an MCP
        /// session on a new server, before it maps the client's id to it.
        GatewayMcpBeforeRemap = "gateway.mcp.before_remap",
        /// `burrow serve` quotas: holds an operation that passed its
        /// tenant's quota check, in the tenant's quota turn, before it runs.
        QuotaInTurn = "quota.in_turn",
        /// Supervisor: holds with the guest frozen for a snapshot, before its
        /// layer is written.
        SnapshotFrozen = "snapshot.frozen",
        /// Supervisor: holds with the guest's agent suspended for a save of
        /// the whole guest (a fork, a full snapshot), before the save.
        SnapshotSuspended = "snapshot.suspended",
        /// Fork: hangs with the first copy recorded, before the others are
        /// made and any is started.
        ForkAfterCopy = "fork.after_copy",
        /// Snapshot: hangs with half of a stopped sandbox's layer written.
        SnapshotMidLayer = "snapshot.mid_layer",
        /// Writing a container's layer: holds with the regular file
        /// named [`LAYER_BAIT`] looked at, before it is opened (the window
        /// of a guest that swaps it for a symlink), until released.
        LayerWalkListed = "layer.walk_listed",
        /// Snapshot: hangs with its content stored, before its record is written.
        SnapshotBeforeRecord = "snapshot.before_record",
        /// Pool claim: holds with a warm sandbox reserved and told of its
        /// claim, before it takes the claimer's name.
        PoolClaimReserved = "pool.claim_reserved",
        /// Making the directory of a sandbox not recorded yet (a fork's
        /// copy, a restore): holds with it created, before its removal lock.
        MakeDirBeforeLock = "make_dir.before_lock",
        /// Opening a backend: holds in the sweep of leftover directories
        /// with one found unrecorded, before taking its removal lock.
        SweepBeforeLock = "sweep.before_lock",
        /// Binding core: does not hang; every call panics (the SDKs' tests).
        BindingPanic = "binding.panic",
    }
}

/// Hangs here if `BURROW_FAULT` names this point (debug builds only).
pub fn point(fault: Fault) {
    #[cfg(debug_assertions)]
    {
        if enabled(fault) {
            if let Some(marker) = std::env::var_os(MARKER_ENV) {
                let tmp = std::path::PathBuf::from(&marker).with_extension("tmp");
                let _ = std::fs::write(&tmp, std::process::id().to_string());
                let _ = std::fs::rename(&tmp, &marker);
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = fault;
}

/// Whether `BURROW_FAULT` names `fault`, for faults that change behaviour
/// instead of hanging (debug builds only; always false in release builds).
pub fn enabled(fault: Fault) -> bool {
    cfg!(debug_assertions) && std::env::var(FAULT_ENV).is_ok_and(|v| v == fault.as_str())
}

/// The name of the file the `layer.walk_listed` fault point holds at.
pub const LAYER_BAIT: &str = "burrow-fault-bait";

/// [`hold`], for a thread that may block (debug builds only).
pub fn hold_blocking(fault: Fault) {
    if let Some(release) = open_window(fault) {
        while !release.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Holds here (asynchronously) if `BURROW_FAULT` names this point, until the
/// test releases it by creating `$BURROW_FAULT_MARKER.release`; the marker
/// (holding our pid) says the window is open. For tests that must land calls
/// inside a window, then let the process go on (debug builds only).
pub async fn hold(fault: Fault) {
    if let Some(release) = open_window(fault) {
        while !release.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// If `BURROW_FAULT` names this point and a marker is given: writes the
/// marker (our pid) and returns the file whose creation releases the hold
/// (debug builds only; always `None` in release builds).
fn open_window(fault: Fault) -> Option<std::path::PathBuf> {
    if !enabled(fault) {
        return None;
    }
    let marker = std::path::PathBuf::from(std::env::var_os(MARKER_ENV)?);
    let mut release = marker.clone().into_os_string();
    release.push(".release");
    let tmp = marker.with_extension("tmp");
    let _ = std::fs::write(&tmp, std::process::id().to_string());
    let _ = std::fs::rename(&tmp, &marker);
    Some(release.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_unique_and_named_area_dot_step() {
        let mut seen = std::collections::HashSet::new();
        for f in Fault::ALL {
            let s = f.as_str();
            assert!(seen.insert(s), "{s} is named twice");
            let parts: Vec<&str> = s.split('.').collect();
            assert!(parts.len() >= 2, "{s} is not <area>.<step>");
            for part in parts {
                assert!(
                    part.starts_with(|c: char| c.is_ascii_lowercase())
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                    "{s}: {part:?} is not a lowercase word"
                );
            }
        }
    }

    #[test]
    fn the_test_support_names_the_same_variables() {
        assert_eq!(burrow_test_support::fault::FAULT_ENV, FAULT_ENV);
        assert_eq!(burrow_test_support::fault::MARKER_ENV, MARKER_ENV);
    }
}
