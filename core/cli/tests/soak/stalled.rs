//! The soak's stalled reader (issue 37): round after round, `burrow up`
//! of its own sandbox ([`NAME`]: the workers' names live too briefly for
//! a long read) and a `burrow exec NAME -- seq 1 N` whose stdout nobody
//! reads for a while (up to
//! `BURROW_SOAK_STALL_SECONDS`, default 10; a minute or more by hand),
//! among the workers' operations and the chaos's kills.
//!
//! Checked each round: while the reader stalls, the stalled `burrow`
//! process and every supervisor of the home stay under [`RSS_BOUND_KIB`]
//! of resident memory (the guest's writer waits on its pipe instead of
//! the host buffering its output); the output, once read, is a gapless
//! in-order prefix of `1..N`, all of it when the exec succeeded (a run
//! killed or stopped under it may cut it short, never reorder or drop a
//! line); the exec ends within the call bound.

use std::io::Read;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{creation_opts, secs, supervisors_of, Rng, Soak, CALL_BOUND};

/// The stalled reader's sandbox (the chaos kills its supervisor too).
pub(super) const NAME: &str = "soak-stall";

/// Lines the stalled exec prints (about 15 MB).
const LINES: u64 = 2_000_000;

/// Resident memory the stalled caller and any supervisor may have
/// (KiB): a debug build's baseline and a window, far from the output's
/// size.
const RSS_BOUND_KIB: u64 = 48 * 1024;

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Checks that `out` is a gapless prefix of `1..=LINES`: the lines it
/// holds, or where it goes wrong.
fn prefix_lines(out: &[u8]) -> Result<u64, String> {
    let mut next = 1u64;
    let mut lines = out.split(|b| *b == b'\n').peekable();
    while let Some(line) = lines.next() {
        if lines.peek().is_none() {
            // The last piece: empty after a final newline, else a line the
            // run's end cut mid-way (a prefix of the number).
            let want = next.to_string();
            return if want.as_bytes().starts_with(line) {
                Ok(next - 1)
            } else {
                Err(format!(
                    "line {next} cut as {:?}",
                    String::from_utf8_lossy(line)
                ))
            };
        }
        let want = next.to_string();
        if line != want.as_bytes() {
            return Err(format!(
                "line {next} is {:?}",
                String::from_utf8_lossy(&line[..line.len().min(40)])
            ));
        }
        next += 1;
    }
    Ok(next - 1)
}

/// Waits `d`, or less when the soak winds down.
fn pause(soak: &Soak<'_>, d: Duration, deadline: Instant) {
    let until = Instant::now() + d;
    while Instant::now() < until.min(deadline) && !soak.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The stalled reader's loop, until `deadline`.
pub(super) fn stalled_reader(soak: &Soak<'_>, mut rng: Rng, deadline: Instant) {
    let max_stall: u64 = std::env::var("BURROW_SOAK_STALL_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let (mut rounds, mut complete) = (0u64, 0u64);
    while Instant::now() < deadline && !soak.stop.load(Ordering::SeqCst) {
        let name = NAME;
        let _ = soak
            .home
            .cli()
            .args(["--json", "up", name])
            .args(creation_opts())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let mut child = soak
            .home
            .cli()
            .args(["exec", name, "--", "seq", "1", &LINES.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stall = rng.millis(1000, max_stall.max(1) * 1000);
        pause(soak, stall, deadline);
        let pid = child.id();
        if let Some(kib) = rss_kib(pid) {
            soak.check(kib <= RSS_BOUND_KIB, || {
                format!("stalled reader: the stalled `burrow exec` (pid {pid}) holds {kib} KiB")
            });
        }
        for sup in supervisors_of(&soak.home_str) {
            if let Some(kib) = rss_kib(sup) {
                soak.check(kib <= RSS_BOUND_KIB, || {
                    format!("stalled reader: supervisor {sup} holds {kib} KiB")
                });
            }
        }
        // Read it all now, within the call bound.
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            let _ = stderr.read_to_end(&mut err);
            let _ = tx.send((out, err));
        });
        let Ok((out, err)) = rx.recv_timeout(CALL_BOUND) else {
            let _ = child.kill();
            let _ = child.wait();
            soak.violation(format!(
                "stalled reader: `burrow exec {name}` hung past {CALL_BOUND:?} once read"
            ));
            return;
        };
        let status = child.wait().unwrap();
        rounds += 1;
        match prefix_lines(&out) {
            Ok(n) if status.success() => {
                soak.check(n == LINES, || {
                    format!("stalled reader: exec {name} succeeded with {n} of {LINES} lines")
                });
                complete += 1;
            }
            Ok(n) => soak.note(format!(
                "{}          stalled reader: exec {name} ended ({status}) after {n} lines: {}",
                secs(soak.now()),
                String::from_utf8_lossy(&err).trim()
            )),
            Err(why) => {
                soak.check(false, || format!("stalled reader: exec {name}: {why}"));
            }
        }
    }
    soak.stats.lock().unwrap().stalled = (rounds, complete);
    let removed = soak
        .home
        .cli()
        .args(["--json", "rm", "-f", NAME])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    soak.check(removed.success(), || {
        format!("stalled reader: rm -f {NAME} failed ({removed})")
    });
}

#[cfg(test)]
mod tests {
    use super::prefix_lines;

    #[test]
    fn prefixes_are_gapless_and_in_order() {
        assert_eq!(prefix_lines(b""), Ok(0));
        assert_eq!(prefix_lines(b"1\n2\n3\n"), Ok(3));
        assert_eq!(prefix_lines(b"1\n2\n3\n4"), Ok(3), "a cut line");
        assert!(prefix_lines(b"1\n3\n").is_err(), "a gap");
        assert!(prefix_lines(b"1\n2\n9").is_err(), "a wrong tail");
    }
}
