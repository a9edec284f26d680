//! The test side of burrow's fault points (debug builds of burrow only).
//!
//! A process started with `BURROW_FAULT=<point>` and
//! `BURROW_FAULT_MARKER=<marker>` in its environment, on reaching that point,
//! writes its pid to the marker (atomically: a marker that exists is
//! complete) and either hangs for good (a crash point: the test kills it
//! there) or holds until `<marker>.release` exists (a window: the test lands
//! calls in it, then lets the process go on). [`FaultWindow`] is that
//! handshake. The points are burrow's `burrow::internal::fault::Fault`
//! variants; this crate does not depend on burrow, so tests pass
//! `Fault::X.as_str()`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that names the fault point to trigger.
pub const FAULT_ENV: &str = "BURROW_FAULT";

/// The environment variable that names the marker file a triggered point
/// writes its pid to.
pub const MARKER_ENV: &str = "BURROW_FAULT_MARKER";

/// How often [`FaultWindow::wait_open`] looks for the marker.
const POLL: Duration = Duration::from_millis(20);

/// One fault point armed in processes a test starts, with its marker file:
/// the marker's existence says the point was reached (the window is open),
/// its content is the pid of the process that reached it, and
/// [`release`](FaultWindow::release) lets a held process go on.
///
/// ```no_run
/// # async fn f(dir: &std::path::Path) {
/// use burrow_test_support::fault::FaultWindow;
/// let w = FaultWindow::new(dir, "supervisor.ending"); // Fault::SupervisorEnding.as_str()
/// let mut child = w.arm(&mut std::process::Command::new("burrow")).spawn().unwrap();
/// assert!(w.wait_open(std::time::Duration::from_secs(60)).await);
/// // ... land calls in the window ...
/// w.release();
/// child.wait().unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct FaultWindow {
    point: String,
    marker: PathBuf,
}

impl FaultWindow {
    /// The window of `point` with its marker in `dir`
    /// (`dir/fault-<point>.marker`). A marker or release file left there by
    /// an earlier window of the same point is removed, so it cannot open or
    /// release this one at once.
    pub fn new(dir: &Path, point: &str) -> FaultWindow {
        let w = FaultWindow {
            point: point.to_owned(),
            marker: dir.join(format!("fault-{point}.marker")),
        };
        let _ = std::fs::remove_file(&w.marker);
        let _ = std::fs::remove_file(w.release_path());
        w
    }

    /// The fault point (the value of `BURROW_FAULT`).
    pub fn point(&self) -> &str {
        &self.point
    }

    /// The marker file (the value of `BURROW_FAULT_MARKER`).
    pub fn marker(&self) -> &Path {
        &self.marker
    }

    /// The file whose creation releases a held process: `<marker>.release`.
    pub fn release_path(&self) -> PathBuf {
        let mut p = self.marker.clone().into_os_string();
        p.push(".release");
        p.into()
    }

    /// Arms `cmd`: sets `BURROW_FAULT` and `BURROW_FAULT_MARKER` (the
    /// processes it starts inherit them).
    pub fn arm<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.env())
    }

    /// The two variables [`arm`](FaultWindow::arm) sets, for code that
    /// builds an environment itself.
    pub fn env(&self) -> [(&'static str, OsString); 2] {
        [
            (FAULT_ENV, OsString::from(&self.point)),
            (MARKER_ENV, self.marker.clone().into_os_string()),
        ]
    }

    /// Whether the point was reached (the marker exists).
    pub fn is_open(&self) -> bool {
        self.marker.exists()
    }

    /// Waits until the point is reached, polling every 20 ms for at most
    /// `limit` (and once more at its end); returns whether it was.
    pub async fn wait_open(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.is_open() {
                return true;
            }
            tokio::time::sleep(POLL).await;
        }
        self.is_open()
    }

    /// The pid of the process that reached the point (`None`: not reached).
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.marker)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Lets a process held at the point go on (creates the release file).
    /// Panics if it cannot be written.
    pub fn release(&self) {
        let path = self.release_path();
        std::fs::write(&path, b"").unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_handshake_of_a_held_point() {
        let dir = tempfile::tempdir().unwrap();
        // Stale files of an earlier window are gone.
        let old = FaultWindow::new(dir.path(), "area.step");
        std::fs::write(old.marker(), b"1").unwrap();
        old.release();
        let w = FaultWindow::new(dir.path(), "area.step");
        assert_eq!(w.marker(), old.marker());
        assert!(!w.is_open());
        assert!(!w.release_path().exists());
        assert_eq!(w.pid(), None);

        let mut cmd = Command::new("true");
        w.arm(&mut cmd);
        let envs: Vec<_> = cmd.get_envs().collect();
        assert_eq!(
            envs,
            [
                (FAULT_ENV.as_ref(), Some("area.step".as_ref())),
                (MARKER_ENV.as_ref(), Some(w.marker().as_os_str())),
            ]
        );
        assert_eq!(w.env()[0], (FAULT_ENV, "area.step".into()));

        assert!(!w.wait_open(Duration::from_millis(50)).await);
        // The process at the point: marker with its pid, then the release.
        let (marker, release) = (w.marker().to_owned(), w.release_path());
        let held = std::thread::spawn(move || {
            let tmp = marker.with_extension("tmp");
            std::fs::write(&tmp, b"4242\n").unwrap();
            std::fs::rename(&tmp, &marker).unwrap();
            while !release.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        assert!(w.wait_open(Duration::from_secs(10)).await);
        assert_eq!(w.pid(), Some(4242));
        w.release();
        held.join().unwrap();
        assert!(w.release_path().exists());
    }
}
