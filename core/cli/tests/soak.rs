#![allow(clippy::unwrap_used)]
//! A mixed-operation soak (issue 19): eight workers run random `burrow`
//! commands (`up`, `create`, `run CMD`, `start`, `stop`, `stop -f`,
//! `restart`, `kill`, `drain`, `rm`, `rm -f`, `exec`, `ls`, `inspect`; by name,
//! or now and then by an id seen earlier) on three names, one command at a
//! time each, while a chaos thread SIGKILLs, every 0.5 to 2 s, either a random
//! in-flight `burrow` process or a random supervisor of the home. Real
//! supervisors, runc containers over the busybox rootfs, one SQLite home.
//! Beside them a stalled reader (`stalled`) runs `burrow exec` of a big
//! output whose stdout nobody reads for seconds at a time, checking that
//! memory stays flat and the output arrives whole and in order.
//!
//! Every command must end with JSON on stdout: a result, or a typed error
//! (`not_found`, `invalid_state`, `start_failed`, ...). Never a panic, an exit
//! by a signal we did not send, an untyped or internal error (`error`,
//! `store`, `io`, `protocol`, a rejected input), or a hang (each call is
//! bounded by [`CALL_BOUND`]).
//!
//! Invariants, checked while the chaos runs (a monitor lists the store
//! through the library every ~150 ms) and afterwards:
//! 1. one id per name: no snapshot shows a name twice; an id keeps its name;
//!    an id known to be gone (removed by a `rm`, or missing from a snapshot
//!    taken after it was seen) is never seen again, so a name that comes
//!    back has a new id;
//! 2. generations never decrease: for two observations of an id where one
//!    ended before the other began, the later generation is not smaller;
//!    `created` if and only if generation 0; the run shown is the current
//!    generation's; a running sandbox has a supervisor pid, an ended run an
//!    end; nothing stays Starting or Draining for long; a removed sandbox's
//!    rootfs mount points are gone within seconds; no supervisor panics;
//! 3. settled after the chaos: every sandbox is created, running, stopped or
//!    crashed; a running one has a live supervisor of this home for its id
//!    and answers an exec; the live supervisors are exactly those of the
//!    running sandboxes; `burrow up` brings every name back;
//! 4. nothing left behind once everything is removed with `burrow rm -f`: no
//!    record, no supervisor or other process naming the home, no sandbox
//!    directory or socket, no runc container (per-sandbox `--root` under the
//!    home, nor the default root), no mount naming the home or a container of
//!    ours in any process's mountinfo, no rootfs mount point under the mount
//!    directory, no container cgroup.
//!
//! `BURROW_SOAK_SECONDS` is the length of the chaos phase (default 60, what
//! CI runs; the settling and the final checks add a few seconds). By hand,
//! a few minutes: `BURROW_SOAK_SECONDS=300 cargo test -p burrow-cli --test
//! soak -- --nocapture`. The seed is printed first; `BURROW_SOAK_SEED=<seed>`
//! replays the same choices of operations and kills (the interleaving still
//! varies). The last line sums up: operations by outcome, kills, invariant
//! checks passed. On failure, the log of every operation (exit code, JSON
//! error code, warnings on stderr) and every kill is printed with the
//! violations.

use burrow_cli_testkit as common;

#[path = "soak/stalled.rs"]
mod stalled;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use burrow::{Backend, ListFilter, SandboxInfo, Status};
use common::{busybox_rootfs, supervisors_of, TestHome};
use serde_json::Value;

/// The names the workers share.
const NAMES: [&str; 3] = ["soak-a", "soak-b", "soak-c"];
/// Concurrent `burrow` callers.
const WORKERS: usize = 8;
/// Longest a single `burrow` call may take before it counts as a hang.
const CALL_BOUND: Duration = Duration::from_secs(90);
/// Startup timeout of every sandbox (bounds a start whose caller died).
const STARTUP_TIMEOUT: &str = "15s";
/// Longest one run may stay Starting (the startup timeout, the starter's
/// margin, and slack for a loaded machine).
const STARTING_BOUND: Duration = Duration::from_secs(45);
/// Longest one run may stay Draining (only short execs are ever in flight).
const DRAINING_BOUND: Duration = Duration::from_secs(60);
/// How long the settle, supervisor and leftover checks may wait.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// Error codes a command may end with under this chaos. Not `protocol` or
/// `io`: the engine's own sockets never fail a call with those, whatever
/// boundary it lands on (see boundaries.rs).
const TYPED: [&str; 9] = [
    "not_found",
    "already_exists",
    "invalid_state",
    "starting",
    "sandbox_replaced",
    "start_failed",
    "timeout",
    "runtime_unavailable",
    "guest",
];
/// How long a removed sandbox's rootfs mount point may linger (its remove
/// reclaims it within milliseconds; slack for a loaded machine).
const STRAY_BOUND: Duration = Duration::from_secs(10);

/// SplitMix64: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Up,
    Create,
    // `run -d` (a main process) is covered by main_process.rs.
    RunCmd,
    Start,
    Stop,
    StopForce,
    Restart,
    Kill,
    Drain,
    Rm,
    RmForce,
    Exec,
    Ls,
    Inspect,
}

impl Kind {
    /// Relative frequencies.
    const WEIGHTED: [(Kind, usize); 14] = [
        (Kind::Up, 22),
        (Kind::Create, 5),
        (Kind::RunCmd, 4),
        (Kind::Start, 8),
        (Kind::Stop, 8),
        (Kind::StopForce, 3),
        (Kind::Restart, 5),
        (Kind::Kill, 5),
        (Kind::Drain, 3),
        (Kind::Rm, 4),
        (Kind::RmForce, 6),
        (Kind::Exec, 15),
        (Kind::Ls, 5),
        (Kind::Inspect, 5),
    ];

    /// Takes an existing sandbox (by name or id) rather than a new name.
    fn takes_target(self) -> bool {
        !matches!(self, Kind::Up | Kind::Create | Kind::RunCmd | Kind::Ls)
    }

    /// A command that has started the sandbox when it succeeds.
    fn starts(self) -> bool {
        matches!(self, Kind::Up | Kind::Start | Kind::Restart)
    }
}

/// One command line of a worker.
#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    /// The name or id addressed (empty for `ls`).
    target: String,
    by_id: bool,
    args: Vec<String>,
    /// The command line as logged (without the creation options).
    label: String,
}

fn creation_opts() -> Vec<String> {
    [
        "--image",
        &busybox_rootfs().to_string_lossy(),
        "--driver",
        "container",
        "--runtime",
        "runc",
        "--startup-timeout",
        STARTUP_TIMEOUT,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn choose_op(rng: &mut Rng, known_ids: &[String]) -> Op {
    let total: usize = Kind::WEIGHTED.iter().map(|(_, w)| w).sum();
    let mut roll = rng.below(total);
    let kind = Kind::WEIGHTED
        .iter()
        .find(|(_, w)| {
            if roll < *w {
                true
            } else {
                roll -= w;
                false
            }
        })
        .map(|(k, _)| *k)
        .unwrap();
    let name = NAMES[rng.below(NAMES.len())].to_string();
    let by_id = kind.takes_target() && !known_ids.is_empty() && rng.chance(25);
    let target = if by_id {
        known_ids[rng.below(known_ids.len())].clone()
    } else {
        name.clone()
    };
    let t = target.clone();
    let (shown, tail): (Vec<&str>, Vec<String>) = match kind {
        Kind::Up => (vec!["up", &name], creation_opts()),
        Kind::Create => {
            let mut opts = creation_opts();
            if rng.chance(50) {
                opts.push("--detached".into());
            }
            (vec!["create", "--name", &name], opts)
        }
        Kind::RunCmd => {
            let mut opts = creation_opts();
            opts.extend(["--", "echo", "soak"].map(String::from));
            (vec!["run", "--name", &name], opts)
        }
        Kind::Start => (vec!["start", &t], vec![]),
        Kind::Stop => (vec!["stop", "--grace", "1", &t], vec![]),
        Kind::StopForce => (vec!["stop", "-f", &t], vec![]),
        Kind::Restart => (vec!["restart", &t], vec![]),
        Kind::Kill => (vec!["kill", &t], vec![]),
        Kind::Drain => (vec!["drain", &t], vec![]),
        Kind::Rm => (vec!["rm", &t], vec![]),
        Kind::RmForce => (vec!["rm", "-f", &t], vec![]),
        Kind::Exec => {
            // Now and then a command still in flight when a stop, drain or
            // kill lands.
            let cmd = if rng.chance(30) {
                vec!["sh", "-c", "sleep 0.3; echo soak"]
            } else {
                vec!["echo", "soak"]
            };
            let mut v = vec!["exec", "--timeout", "20", &t, "--"];
            v.extend(cmd);
            (v, vec![])
        }
        Kind::Ls => (vec!["ls"], vec![]),
        Kind::Inspect => (vec!["inspect", &t], vec![]),
    };
    let mut args = vec!["--json".to_string()];
    args.extend(shown.iter().map(|s| s.to_string()));
    let label = if tail.is_empty() {
        shown.join(" ")
    } else if kind == Kind::RunCmd {
        format!("{} <opts> -- echo soak", shown.join(" "))
    } else {
        format!("{} <opts>", shown.join(" "))
    };
    args.extend(tail);
    Op {
        kind,
        target: if kind == Kind::Ls {
            String::new()
        } else {
            target
        },
        by_id,
        args,
        label,
    }
}

/// A sandbox seen (by a command or the monitor) at some moment within
/// `[t0, t1]` (times since the start of the soak).
#[derive(Debug, Clone)]
struct Obs {
    t0: Duration,
    t1: Duration,
    id: String,
    name: String,
    generation: Option<u64>,
    /// Operation number, 0 for the monitor.
    src: u64,
}

/// A whole-store listing taken within `[t0, t1]`.
#[derive(Debug)]
struct Snapshot {
    t0: Duration,
    t1: Duration,
    ids: HashSet<String>,
    src: u64,
}

struct InFlight {
    child: Child,
    seq: u64,
    killed: bool,
}

#[derive(Debug, Default)]
struct Stats {
    ops: u64,
    ok: u64,
    typed: u64,
    exec_exits: u64,
    killed: u64,
    codes: BTreeMap<String, u64>,
    kills_callers: u64,
    kills_supervisors: u64,
    snapshots: u64,
    /// Stalled-reader rounds, and those whose exec read to its end.
    stalled: (u64, u64),
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Ok(Value),
    Typed(String),
    ExecExit(i64),
    Killed,
    Violation,
}

struct Soak<'a> {
    home: &'a TestHome,
    home_str: String,
    start: Instant,
    outdir: tempfile::TempDir,
    log: Mutex<Vec<String>>,
    obs: Mutex<Vec<Obs>>,
    snaps: Mutex<Vec<Snapshot>>,
    /// (id, removed by this time, operation).
    removed: Mutex<Vec<(String, Duration, u64)>>,
    violations: Mutex<Vec<String>>,
    stats: Mutex<Stats>,
    checks: AtomicU64,
    seq: AtomicU64,
    stop: AtomicBool,
    /// One per worker (the final phase uses slot 0).
    slots: Vec<Mutex<Option<InFlight>>>,
}

fn secs(d: Duration) -> String {
    format!("{:8.3}", d.as_secs_f64())
}

fn excerpt(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim();
    let mut out: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out.replace('\n', "⏎")
}

/// The warnings and debug notes of a command's stderr, shortened.
fn notes_of(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            // Drop the timestamp; keep level, target and message.
            let l = l.trim();
            let l = l.split_once(' ').map_or(l, |(_, rest)| rest.trim());
            l.chars().take(800).collect()
        })
        .filter(|l: &String| !l.is_empty() && !l.starts_with("INFO burrow::local::lifecycle"))
        .collect();
    lines.join(" | ")
}

/// The exit code `burrow` documents for an error code.
fn exit_code_of(code: &str) -> i32 {
    match code {
        "not_found" => 3,
        "already_exists" => 4,
        "invalid_state" | "starting" | "sandbox_replaced" => 5,
        "invalid_name" | "invalid_config" | "invalid_image" | "invalid_argument" => 6,
        "start_failed" | "runtime_unavailable" | "timeout" => 7,
        "unauthorized" | "forbidden" | "quota_exceeded" | "rate_limited" => 8,
        "usage" => 2,
        _ => 1,
    }
}

/// The part of runc container ids shared by every generation of `id`.
fn container_prefix(id: &str) -> String {
    format!("burrow-{}-", id.strip_prefix("sb_").unwrap_or(id)).to_ascii_lowercase()
}

impl<'a> Soak<'a> {
    /// Every sandbox id observed so far.
    fn seen_ids(&self) -> BTreeSet<String> {
        self.obs
            .lock()
            .unwrap()
            .iter()
            .map(|o| o.id.clone())
            .collect()
    }

    fn new(home: &'a TestHome) -> Soak<'a> {
        Soak {
            home,
            home_str: home.path().to_string_lossy().into_owned(),
            start: Instant::now(),
            outdir: tempfile::Builder::new()
                .prefix("soak-out")
                .tempdir()
                .unwrap(),
            log: Mutex::new(Vec::new()),
            obs: Mutex::new(Vec::new()),
            snaps: Mutex::new(Vec::new()),
            removed: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            stats: Mutex::new(Stats::default()),
            checks: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            slots: (0..WORKERS).map(|_| Mutex::new(None)).collect(),
        }
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    fn violation(&self, what: String) {
        let line = format!("{} VIOLATION {what}", secs(self.now()));
        self.note(line.clone());
        self.violations.lock().unwrap().push(line);
        // Wind down at once: the log up to here explains it.
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Counts one invariant check; records a violation if it failed.
    fn check(&self, ok: bool, what: impl FnOnce() -> String) -> bool {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.violation(what());
        }
        ok
    }

    fn failed(&self) -> bool {
        !self.violations.lock().unwrap().is_empty()
    }

    /// Runs one `burrow` command in `slot`, killable by the chaos thread
    /// while it runs, bounded by [`CALL_BOUND`].
    fn run_cli(&self, slot: usize, op: &Op) -> Outcome {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let out_path = self.outdir.path().join(format!("w{slot}.out"));
        let err_path = self.outdir.path().join(format!("w{slot}.err"));
        let mut cmd = self.home.cli();
        // Warnings, why a removal could not reclaim runtime state, and what
        // the driver cleared go to the log line of the operation (the
        // supervisors it spawns keep their usual info log).
        cmd.env(
            "BURROW_LOG",
            "warn,burrow::local::lifecycle=debug,burrow::driver=info,burrow::runtime=info",
        )
        .env("NO_COLOR", "1")
        .args(&op.args)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap());
        let t0 = self.now();
        {
            let mut s = self.slots[slot].lock().unwrap();
            let child = cmd.spawn().expect("spawn burrow");
            *s = Some(InFlight {
                child,
                seq,
                killed: false,
            });
        }
        // Reaping happens under the slot's lock, so the chaos thread never
        // signals a pid that was already reaped (and maybe reused).
        let (status, killed, hung) = loop {
            {
                let mut s = self.slots[slot].lock().unwrap();
                let f = s.as_mut().unwrap();
                if let Some(st) = f.child.try_wait().unwrap() {
                    let killed = f.killed;
                    *s = None;
                    break (st, killed, false);
                }
                if self.now() - t0 > CALL_BOUND {
                    let _ = f.child.kill();
                    let st = f.child.wait().unwrap();
                    *s = None;
                    break (st, false, true);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let t1 = self.now();
        let stdout = std::fs::read(&out_path).unwrap_or_default();
        let stderr = std::fs::read(&err_path).unwrap_or_default();
        self.judge(
            slot, op, seq, t0, t1, status, killed, hung, &stdout, &stderr,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        slot: usize,
        op: &Op,
        seq: u64,
        t0: Duration,
        t1: Duration,
        status: ExitStatus,
        killed: bool,
        hung: bool,
        stdout: &[u8],
        stderr: &[u8],
    ) -> Outcome {
        let head = format!("{}-{} #{seq:05} w{slot} {}", secs(t0), secs(t1), op.label);
        self.stats.lock().unwrap().ops += 1;
        let fail = |why: String| {
            self.note(format!("{head} -> {why}"));
            self.violation(format!(
                "#{seq:05} {}: {why}; stdout: {}; stderr: {}",
                op.label,
                excerpt(stdout),
                excerpt(stderr)
            ));
            Outcome::Violation
        };
        self.checks.fetch_add(1, Ordering::Relaxed);
        if hung {
            return fail(format!("still running after {CALL_BOUND:?} (hang)"));
        }
        if String::from_utf8_lossy(stderr).contains("panicked at") {
            return fail("panicked".into());
        }
        let code = match (status.code(), status.signal()) {
            (Some(c), _) => c,
            (None, Some(libc::SIGKILL)) if killed => {
                self.note(format!("{head} -> killed by chaos"));
                self.stats.lock().unwrap().killed += 1;
                return Outcome::Killed;
            }
            (_, sig) => return fail(format!("ended by signal {sig:?} we did not send")),
        };
        let v: Value = match serde_json::from_slice(stdout) {
            Ok(v) => v,
            Err(e) => return fail(format!("exit {code} without JSON on stdout ({e})")),
        };
        let mut problems = Vec::new();
        let outcome = if let Some(err) = v.get("error") {
            let ecode = err["code"].as_str().unwrap_or("<none>").to_string();
            if !TYPED.contains(&ecode.as_str()) {
                problems.push(format!(
                    "error code {ecode:?} is not a typed outcome of chaos"
                ));
            }
            if code != exit_code_of(&ecode) {
                problems.push(format!(
                    "exit {code} for {ecode} (expected {})",
                    exit_code_of(&ecode)
                ));
            }
            if let (Some(id), Some(name)) = (err["sandbox_id"].as_str(), err["name"].as_str()) {
                self.observe(t0, t1, id, name, None, seq);
            }
            if op.by_id {
                if let Some(id) = err["sandbox_id"].as_str() {
                    if id != op.target {
                        problems.push(format!(
                            "addressed {} but the error is about {id}",
                            op.target
                        ));
                    }
                }
            }
            // `rm` goes on after a failure: what it removed still counts.
            self.removed_of(&v, t0, t1, seq);
            let mut st = self.stats.lock().unwrap();
            st.typed += 1;
            *st.codes.entry(ecode.clone()).or_default() += 1;
            Outcome::Typed(ecode)
        } else if code != 0 {
            match v["exit_code"].as_i64() {
                Some(c) if matches!(op.kind, Kind::Exec | Kind::RunCmd) && c == i64::from(code) => {
                    self.stats.lock().unwrap().exec_exits += 1;
                    Outcome::ExecExit(c)
                }
                _ => return fail(format!("exit {code} without an error object")),
            }
        } else {
            self.success(op, &v, t0, t1, seq, &mut problems);
            self.stats.lock().unwrap().ok += 1;
            Outcome::Ok(v.clone())
        };
        let shown = match &outcome {
            Outcome::Ok(v) => match op.kind {
                Kind::Ls => format!("ok ({} sandboxes)", v.as_array().map_or(0, Vec::len)),
                Kind::Rm | Kind::RmForce => format!("ok removed {}", v["removed"]),
                Kind::Exec | Kind::RunCmd => format!("ok {}", v["sandbox_id"]),
                _ => format!("ok {} gen {} {}", v["id"], v["generation"], v["status"]),
            },
            Outcome::Typed(c) => format!(
                "exit {code} {c}: {}",
                excerpt(v["error"]["message"].to_string().as_bytes())
            ),
            Outcome::ExecExit(c) => format!("command exit {c}"),
            _ => unreachable!(),
        };
        let notes = notes_of(stderr);
        if notes.is_empty() {
            self.note(format!("{head} -> {shown}"));
        } else {
            self.note(format!("{head} -> {shown} [stderr: {notes}]"));
        }
        for p in problems {
            self.check(false, || format!("#{seq:05} {}: {p}", op.label));
        }
        outcome
    }

    /// What a successful command says about the sandboxes it saw.
    fn success(
        &self,
        op: &Op,
        v: &Value,
        t0: Duration,
        t1: Duration,
        seq: u64,
        problems: &mut Vec<String>,
    ) {
        match op.kind {
            Kind::Ls => {
                let Some(list) = v.as_array() else {
                    problems.push("ls did not print an array".into());
                    return;
                };
                let mut ids = HashSet::new();
                let mut names = HashSet::new();
                for info in list {
                    self.info_obs(info, t0, t1, seq, problems);
                    let id = info["id"].as_str().unwrap_or_default().to_string();
                    let name = info["name"].as_str().unwrap_or_default().to_string();
                    if !names.insert(name.clone()) {
                        problems.push(format!("ls shows the name {name} twice"));
                    }
                    ids.insert(id);
                }
                self.snaps.lock().unwrap().push(Snapshot {
                    t0,
                    t1,
                    ids,
                    src: seq,
                });
                self.stats.lock().unwrap().snapshots += 1;
            }
            Kind::Exec | Kind::RunCmd => {
                let (Some(id), Some(name)) = (v["sandbox_id"].as_str(), v["name"].as_str()) else {
                    problems.push("exec result without sandbox_id and name".into());
                    return;
                };
                self.observe(t0, t1, id, name, None, seq);
                if op.by_id && id != op.target {
                    problems.push(format!("addressed {} but ran in {id}", op.target));
                }
                if !op.by_id && name != op.target {
                    problems.push(format!("addressed {} but ran in {name}", op.target));
                }
                if v["stdout"].as_str() != Some("soak\n") {
                    problems.push(format!("exit 0 with stdout {}", v["stdout"]));
                }
            }
            Kind::Rm | Kind::RmForce => {
                if v["removed"].as_array().map_or(0, Vec::len) != 1 {
                    problems.push(format!("exit 0 but removed {}", v["removed"]));
                }
                for r in v["removed"].as_array().into_iter().flatten() {
                    let (id, name) = (
                        r["id"].as_str().unwrap_or_default(),
                        r["name"].as_str().unwrap_or_default(),
                    );
                    let addressed = if op.by_id { id } else { name };
                    if addressed != op.target {
                        problems.push(format!("addressed {} but removed {r}", op.target));
                    }
                }
                self.removed_of(v, t0, t1, seq);
            }
            _ => {
                let Some((id, name, generation)) = self.info_obs(v, t0, t1, seq, problems) else {
                    return;
                };
                let addressed = if op.by_id { &id } else { &name };
                if *addressed != op.target {
                    problems.push(format!("addressed {} but got {name} ({id})", op.target));
                }
                if op.kind.starts() && generation == 0 {
                    problems.push("started, yet generation 0".into());
                }
            }
        }
    }

    /// `rm`'s `removed` list: each id is gone by `t1`.
    fn removed_of(&self, v: &Value, t0: Duration, t1: Duration, seq: u64) {
        for r in v["removed"].as_array().into_iter().flatten() {
            if let (Some(id), Some(name)) = (r["id"].as_str(), r["name"].as_str()) {
                self.observe(t0, t1, id, name, None, seq);
                self.removed.lock().unwrap().push((id.to_string(), t1, seq));
            }
        }
    }

    fn observe(
        &self,
        t0: Duration,
        t1: Duration,
        id: &str,
        name: &str,
        generation: Option<u64>,
        src: u64,
    ) {
        self.obs.lock().unwrap().push(Obs {
            t0,
            t1,
            id: id.to_string(),
            name: name.to_string(),
            generation,
            src,
        });
    }

    /// A sandbox snapshot printed by a command: recorded, and checked on
    /// its own. Returns (id, name, generation).
    fn info_obs(
        &self,
        info: &Value,
        t0: Duration,
        t1: Duration,
        seq: u64,
        problems: &mut Vec<String>,
    ) -> Option<(String, String, u64)> {
        let (Some(id), Some(name), Some(generation), Some(status)) = (
            info["id"].as_str(),
            info["name"].as_str(),
            info["generation"].as_u64(),
            info["status"].as_str(),
        ) else {
            problems.push(format!(
                "not a sandbox snapshot: {}",
                excerpt(info.to_string().as_bytes())
            ));
            return None;
        };
        self.observe(t0, t1, id, name, Some(generation), seq);
        match serde_json::from_value::<SandboxInfo>(info.clone()) {
            Ok(parsed) => problems.extend(consistency(&parsed)),
            Err(e) => problems.push(format!("{name} ({id}) {status}: not a SandboxInfo: {e}")),
        }
        Some((id.to_string(), name.to_string(), generation))
    }

    /// Lists the store through the library, checks and records it.
    async fn snapshot(&self, since: &mut Tracker) -> Option<Vec<SandboxInfo>> {
        let t0 = self.now();
        let listed = self.home.backend.list(&ListFilter::default()).await;
        let t1 = self.now();
        let list = match listed {
            Ok(l) => l,
            Err(e) => {
                self.violation(format!("the monitor's list failed: {e} ({})", e.code()));
                return None;
            }
        };
        let mut names = HashSet::new();
        let mut ids = HashSet::new();
        for info in &list {
            let (id, name) = (info.id.to_string(), info.name.clone());
            self.check(names.insert(name.clone()), || {
                format!("monitor: two records named {name}")
            });
            self.observe(t0, t1, &id, &name, Some(info.generation), 0);
            for p in consistency(info) {
                self.check(false, || format!("monitor: {p}"));
            }
            self.checks.fetch_add(1, Ordering::Relaxed);
            since.see(self, info, t1);
            ids.insert(id);
        }
        since.forget(&ids);
        self.snaps.lock().unwrap().push(Snapshot {
            t0,
            t1,
            ids,
            src: 0,
        });
        self.stats.lock().unwrap().snapshots += 1;
        Some(list)
    }

    /// Supervisors write panics to `logs/supervisor.stderr`.
    fn scan_supervisor_panics(&self, seen: &mut HashSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(self.home.path().join("sandboxes")) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path().join("logs/supervisor.stderr");
            if seen.contains(&p) {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&p) {
                self.checks.fetch_add(1, Ordering::Relaxed);
                if text.contains("panicked at") {
                    seen.insert(p.clone());
                    self.violation(format!(
                        "a supervisor panicked ({}): {}",
                        p.display(),
                        excerpt(text.as_bytes())
                    ));
                }
            }
        }
    }
}

/// The directory the container driver mounts root filesystems under.
fn mount_dir() -> PathBuf {
    std::env::var_os("BURROW_MOUNT_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/burrow"))
}

/// Rootfs mount points of sandboxes that are gone, and since when.
#[derive(Default)]
struct Strays {
    since: HashMap<String, Instant>,
}

impl Strays {
    /// A removed sandbox keeps no mount point (left for [`STRAY_BOUND`]: a
    /// violation).
    fn scan(&mut self, soak: &Soak<'_>, live: &HashSet<String>) {
        let known = soak.seen_ids();
        let gone: Vec<(String, String)> = known
            .iter()
            .filter(|id| !live.contains(*id))
            .map(|id| (container_prefix(id), id.clone()))
            .collect();
        let mut present = HashSet::new();
        for e in std::fs::read_dir(mount_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let entry = e.file_name().to_string_lossy().into_owned();
            let Some((_, id)) = gone.iter().find(|(p, _)| entry.starts_with(p.as_str())) else {
                continue;
            };
            present.insert(entry.clone());
            let first = *self.since.entry(entry.clone()).or_insert_with(Instant::now);
            soak.check(first.elapsed() < STRAY_BOUND, || {
                let holders = common::processes_with(|a| a.iter().any(|x| x.contains(&entry)));
                format!(
                    "{} of removed sandbox {id} still there after {:?} (processes naming it: {holders:?})",
                    e.path().display(),
                    first.elapsed()
                )
            });
        }
        self.since.retain(|k, _| present.contains(k));
    }
}

/// How long each run has been Starting or Draining, per (id, generation).
#[derive(Default)]
struct Tracker {
    since: HashMap<(String, u64, Status), Duration>,
}

impl Tracker {
    fn see(&mut self, soak: &Soak<'_>, info: &SandboxInfo, now: Duration) {
        let bound = match info.status {
            Status::Starting => STARTING_BOUND,
            Status::Draining => DRAINING_BOUND,
            _ => return,
        };
        let key = (info.id.to_string(), info.generation, info.status);
        let first = *self.since.entry(key).or_insert(now);
        soak.check(now - first <= bound, || {
            format!(
                "monitor: {} ({}) generation {} has been {} for {:?}",
                info.name,
                info.id,
                info.generation,
                info.status,
                now - first
            )
        });
    }
    fn forget(&mut self, present: &HashSet<String>) {
        self.since.retain(|(id, _, _), _| present.contains(id));
    }
}

/// What must hold of any one snapshot of a sandbox.
fn consistency(info: &SandboxInfo) -> Vec<String> {
    let mut p = Vec::new();
    let who = format!(
        "{} ({}) {} gen {}",
        info.name, info.id, info.status, info.generation
    );
    if !NAMES.contains(&info.name.as_str()) && info.name != stalled::NAME {
        p.push(format!("{who}: a name no worker uses"));
    }
    if (info.status == Status::Created) != (info.generation == 0) {
        p.push(format!("{who}: created if and only if never started"));
    }
    match &info.last_run {
        None if info.generation > 0 => p.push(format!("{who}: no run")),
        None => {}
        Some(r) => {
            if r.generation != info.generation {
                p.push(format!("{who}: shows run {}", r.generation));
            }
            match info.status {
                Status::Running => {
                    if r.supervisor_pid.is_none() || r.running_at_ms.is_none() {
                        p.push(format!(
                            "{who}: running without a supervisor or running_at: {r:?}"
                        ));
                    }
                    if r.ended_at_ms.is_some() {
                        p.push(format!("{who}: running, yet its run ended: {r:?}"));
                    }
                }
                Status::Starting | Status::Draining | Status::Paused if r.ended_at_ms.is_some() => {
                    p.push(format!("{who}: its run ended: {r:?}"));
                }
                Status::Stopped | Status::Crashed
                    if r.ended_at_ms.is_none() || r.exit_reason.is_none() =>
                {
                    p.push(format!("{who}: its run has no end: {r:?}"));
                }
                _ => {}
            }
        }
    }
    p
}

/// The invariants that compare observations over time (1 and 2).
fn history_checks(soak: &Soak<'_>) {
    let obs = soak.obs.lock().unwrap().clone();
    let snaps = std::mem::take(&mut *soak.snaps.lock().unwrap());
    let removed = soak.removed.lock().unwrap().clone();
    let mut by_id: BTreeMap<&str, Vec<&Obs>> = BTreeMap::new();
    for o in &obs {
        by_id.entry(&o.id).or_default().push(o);
    }
    for (id, list) in &by_id {
        // An id keeps its name.
        let first = list[0];
        for o in list {
            soak.check(o.name == first.name, || {
                format!(
                    "{id} was {} (#{}) and {} (#{})",
                    first.name, first.src, o.name, o.src
                )
            });
        }
        // Gone by when: a `rm` that removed it, or a snapshot without it
        // that began after it had been seen.
        let seen_by = list.iter().map(|o| o.t1).min().unwrap();
        let mut gone: Option<(Duration, String)> = removed
            .iter()
            .filter(|(r, _, _)| r == id)
            .map(|(_, t, s)| (*t, format!("removed by #{s:05}")))
            .min_by_key(|(t, _)| *t);
        for s in &snaps {
            if s.t0 > seen_by
                && !s.ids.contains(*id)
                && gone.as_ref().is_none_or(|(t, _)| s.t1 < *t)
            {
                gone = Some((
                    s.t1,
                    format!("missing from the listing #{:05} at {}", s.src, secs(s.t0)),
                ));
            }
        }
        if let Some((t, why)) = &gone {
            for o in list {
                soak.check(o.t0 <= *t, || {
                    format!(
                        "{id} ({}) was {why}, yet seen again by #{:05} at {}",
                        o.name,
                        o.src,
                        secs(o.t0)
                    )
                });
            }
        }
        // Generations never decrease: sorted by end, the largest generation
        // seen by observations that ended before this one began.
        let mut ended: Vec<(Duration, u64, u64)> = list
            .iter()
            .filter_map(|o| o.generation.map(|g| (o.t1, g, o.src)))
            .collect();
        ended.sort();
        let mut prefix_max: Vec<(u64, u64)> = Vec::with_capacity(ended.len());
        for &(_, g, src) in &ended {
            let best = match prefix_max.last() {
                Some(&(m, s)) if m >= g => (m, s),
                _ => (g, src),
            };
            prefix_max.push(best);
        }
        for o in list {
            let Some(g) = o.generation else { continue };
            let before = ended.partition_point(|(t1, _, _)| *t1 < o.t0);
            if before == 0 {
                continue;
            }
            let (max, src) = prefix_max[before - 1];
            soak.check(g >= max, || {
                format!(
                    "{id} ({}): generation {g} seen by #{:05} at {}, after generation {max} seen by #{src:05}",
                    o.name,
                    o.src,
                    secs(o.t0)
                )
            });
        }
    }
}

/// Whether `pid` is a live supervisor of `home` for sandbox `id`.
fn is_supervisor_of(pid: u32, home: &str, id: &str) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    !common::has_exited(pid)
        && args.iter().any(|a| a == "__supervise")
        && args.windows(2).any(|w| w[0] == "--home" && w[1] == home)
        && args.windows(2).any(|w| w[0] == "--id" && w[1] == id)
}

/// `<id> generation <n>` of a supervisor process, for the log.
fn supervised_id(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let arg = |flag: &str| {
        args.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .unwrap_or_default()
    };
    format!("{} generation {}", arg("--id"), arg("--generation"))
}

fn worker(soak: &Soak<'_>, slot: usize, mut rng: Rng, deadline: Instant) {
    let mut known: Vec<String> = Vec::new();
    while Instant::now() < deadline && !soak.stop.load(Ordering::SeqCst) {
        let op = choose_op(&mut rng, &known);
        if let Outcome::Ok(v) = soak.run_cli(slot, &op) {
            let id = v["id"].as_str().or(v["sandbox_id"].as_str());
            if let Some(id) = id {
                if !known.iter().any(|k| k == id) {
                    known.push(id.to_string());
                    if known.len() > 6 {
                        known.remove(0);
                    }
                }
            }
        }
        std::thread::sleep(rng.millis(0, 80));
    }
}

fn chaos(soak: &Soak<'_>, mut rng: Rng, deadline: Instant) {
    loop {
        let pause = rng.millis(500, 2000);
        let wake = Instant::now() + pause;
        while Instant::now() < wake {
            if soak.stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let want_supervisor = rng.chance(50);
        let sups = supervisors_of(&soak.home_str);
        if want_supervisor && !sups.is_empty() {
            let pid = sups[rng.below(sups.len())];
            let id = supervised_id(pid);
            // SAFETY: kill(2) on a supervisor of this test's home, just
            // read from /proc.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            soak.stats.lock().unwrap().kills_supervisors += 1;
            soak.note(format!(
                "{}          chaos: SIGKILL supervisor {pid} of {id}",
                secs(soak.now())
            ));
            continue;
        }
        // A caller: a random busy slot.
        let start = rng.below(WORKERS);
        for i in 0..WORKERS {
            let slot = (start + i) % WORKERS;
            let mut s = soak.slots[slot].lock().unwrap();
            if let Some(f) = s.as_mut().filter(|f| !f.killed) {
                // Not reaped yet (reaping takes this lock): the pid is the
                // child's, alive or a zombie.
                let _ = f.child.kill();
                f.killed = true;
                let (pid, seq) = (f.child.id(), f.seq);
                drop(s);
                soak.stats.lock().unwrap().kills_callers += 1;
                soak.note(format!(
                    "{}          chaos: SIGKILL caller w{slot} #{seq:05} (pid {pid})",
                    secs(soak.now())
                ));
                break;
            }
        }
    }
}

/// Everything of `ids` or the home still on the host (invariant 4).
fn leftovers(soak: &Soak<'_>, ids: &BTreeSet<String>) -> Vec<String> {
    let home = &soak.home_str;
    let prefixes: Vec<String> = ids.iter().map(|i| container_prefix(i)).collect();
    let ours = |s: &str| s.contains(home.as_str()) || prefixes.iter().any(|p| s.contains(p));
    let mut found = Vec::new();
    for pid in supervisors_of(home) {
        found.push(format!("supervisor {pid} of {}", supervised_id(pid)));
    }
    let me = std::process::id();
    for pid in common::processes_with(|args| args.iter().any(|a| a.contains(home.as_str()))) {
        if pid != me && !common::has_exited(pid) {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push(format!("process {pid}: {}", excerpt(&cmd)));
        }
    }
    for dir in ["sandboxes", "run"] {
        for e in std::fs::read_dir(soak.home.path().join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            found.push(format!("{}", e.path().display()));
        }
    }
    // runc: per-sandbox roots live in the sandbox directories (checked
    // above); the default root must not know our containers either.
    if let Ok(out) = std::process::Command::new("runc")
        .args(["list", "-q"])
        .output()
    {
        for c in String::from_utf8_lossy(&out.stdout).lines() {
            if prefixes.iter().any(|p| c.starts_with(p.as_str())) {
                found.push(format!("runc container {c} (default root)"));
            }
        }
    }
    for id in ids {
        let root = soak
            .home
            .path()
            .join("sandboxes")
            .join(id)
            .join("runtime/state");
        if root.exists() {
            let out = std::process::Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["list", "-q"])
                .output();
            if let Ok(out) = out {
                for c in String::from_utf8_lossy(&out.stdout).lines() {
                    found.push(format!("runc container {c} under {}", root.display()));
                }
            }
        }
    }
    // Mounts of any process (the supervisors mount in private namespaces).
    let mut mounts = BTreeSet::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
            continue;
        };
        for line in text.lines().filter(|l| ours(l)) {
            mounts.insert(format!("mount in the namespace of {pid}: {line}"));
        }
    }
    found.extend(mounts);
    for e in std::fs::read_dir(mount_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if ours(&e.file_name().to_string_lossy()) {
            found.push(format!("mount point {}", e.path().display()));
        }
    }
    found.extend(container_cgroups(&prefixes));
    found
}

/// Cgroup directories of our containers, in every hierarchy.
fn container_cgroups(prefixes: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![PathBuf::from("/sys/fs/cgroup")];
    let mut visited = 0;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
                found.push(format!("cgroup {}", e.path().display()));
            } else if visited < 20_000 {
                visited += 1;
                stack.push(e.path());
            }
        }
    }
    found
}

fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    f()
}

/// Invariants 3 and 4, once the chaos is over. Returns early on the first
/// violation (the log says what happened).
fn finale(soak: &Soak<'_>, rt: &tokio::runtime::Runtime) {
    let mut tracker = Tracker::default();
    // 3. Everything settles: reads repair dead owners (Starting or Running
    // whose owner died reads as Crashed), live supervisors finish.
    let mut list = Vec::new();
    let settled = wait_for(SETTLE_BOUND, || {
        match rt.block_on(soak.snapshot(&mut tracker)) {
            Some(l) => {
                let done = l.iter().all(|i| i.status.is_settled());
                list = l;
                done
            }
            None => true,
        }
    });
    if soak.failed() {
        return;
    }
    let unsettled: Vec<String> = list
        .iter()
        .filter(|i| !i.status.is_settled())
        .map(|i| format!("{} ({}) {}", i.name, i.id, i.status))
        .collect();
    if !soak.check(settled, || {
        format!("not settled after {SETTLE_BOUND:?}: {unsettled:?}")
    }) {
        return;
    }
    soak.note(format!(
        "{}          settled: {}",
        secs(soak.now()),
        list.iter()
            .map(|i| format!("{} {} gen {}", i.name, i.status, i.generation))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for i in &list {
        soak.check(i.status != Status::Paused, || {
            format!("{} is paused, nobody paused it", i.name)
        });
        if i.status == Status::Running {
            let pid = i
                .last_run
                .as_ref()
                .and_then(|r| r.supervisor_pid)
                .unwrap_or(0);
            soak.check(is_supervisor_of(pid, &soak.home_str, i.id.as_str()), || {
                format!(
                    "{} ({}) is running, but its supervisor {pid} is not alive",
                    i.name, i.id
                )
            });
        }
    }
    // The live supervisors are exactly the running sandboxes' (one that
    // recorded the end of its run may take a moment to exit).
    let running: BTreeSet<u32> = list
        .iter()
        .filter(|i| i.status == Status::Running)
        .filter_map(|i| i.last_run.as_ref().and_then(|r| r.supervisor_pid))
        .collect();
    let mut live = BTreeSet::new();
    let exact = wait_for(SETTLE_BOUND, || {
        live = supervisors_of(&soak.home_str).into_iter().collect();
        live == running
    });
    if !soak.check(exact, || {
        format!("live supervisors {live:?}, running sandboxes' supervisors {running:?}")
    }) {
        return;
    }
    let exec = |name: &str| Op {
        kind: Kind::Exec,
        target: name.to_string(),
        by_id: false,
        args: [
            "--json",
            "exec",
            "--timeout",
            "20",
            name,
            "--",
            "echo",
            "soak",
        ]
        .map(String::from)
        .to_vec(),
        label: format!("exec {name} -- echo soak (final)"),
    };
    for i in list.iter().filter(|i| i.status == Status::Running) {
        let out = soak.run_cli(0, &exec(&i.name));
        if !soak.check(matches!(out, Outcome::Ok(_)), || {
            format!("running {} does not answer an exec: {out:?}", i.name)
        }) {
            return;
        }
    }
    // Every name comes back with `up`, and answers.
    for name in NAMES {
        let mut args = vec!["--json".to_string(), "up".into(), name.into()];
        args.extend(creation_opts());
        let up = Op {
            kind: Kind::Up,
            target: name.to_string(),
            by_id: false,
            args,
            label: format!("up {name} <opts> (final)"),
        };
        let out = soak.run_cli(0, &up);
        let running = matches!(&out, Outcome::Ok(v) if v["status"] == "running");
        if !soak.check(running, || format!("final up {name}: {out:?}")) {
            return;
        }
        let out = soak.run_cli(0, &exec(name));
        if !soak.check(matches!(out, Outcome::Ok(_)), || {
            format!("final exec {name}: {out:?}")
        }) {
            return;
        }
    }
    // 4. Remove everything; nothing may be left.
    for name in NAMES {
        let rm = Op {
            kind: Kind::RmForce,
            target: name.to_string(),
            by_id: false,
            args: ["--json", "rm", "-f", name].map(String::from).to_vec(),
            label: format!("rm -f {name} (final)"),
        };
        let out = soak.run_cli(0, &rm);
        if !soak.check(matches!(out, Outcome::Ok(_)), || {
            format!("final rm -f {name}: {out:?}")
        }) {
            return;
        }
    }
    let ls = Op {
        kind: Kind::Ls,
        target: String::new(),
        by_id: false,
        args: ["--json", "ls"].map(String::from).to_vec(),
        label: "ls (final)".into(),
    };
    let out = soak.run_cli(0, &ls);
    soak.check(
        matches!(&out, Outcome::Ok(Value::Array(a)) if a.is_empty()),
        || format!("records left after removing everything: {out:?}"),
    );
    let left = rt.block_on(soak.snapshot(&mut tracker)).unwrap_or_default();
    soak.check(left.is_empty(), || format!("records left: {left:?}"));
    let ids = soak.seen_ids();
    let mut found = Vec::new();
    let clean = wait_for(SETTLE_BOUND, || {
        found = leftovers(soak, &ids);
        found.is_empty()
    });
    soak.check(clean, || format!("left behind: {found:#?}"));
}

#[test]
fn mixed_operations_under_kill_9() {
    let seconds: u64 = std::env::var("BURROW_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("BURROW_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            (t.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
        });
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    println!(
        "soak: seed={seed} seconds={seconds} (BURROW_SOAK_SEED={seed} replays the choices); log times are seconds after {epoch:.3} (unix)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = rt.block_on(TestHome::new());
    // Built before the clock starts.
    busybox_rootfs();
    let soak = Soak::new(&home);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut seeds = Rng(seed);
    std::thread::scope(|s| {
        for slot in 0..WORKERS {
            let rng = Rng(seeds.next());
            let soak = &soak;
            s.spawn(move || worker(soak, slot, rng, deadline));
        }
        let rng = Rng(seeds.next());
        let soak_ref = &soak;
        s.spawn(move || chaos(soak_ref, rng, deadline));
        let rng = Rng(seeds.next());
        s.spawn(move || stalled::stalled_reader(soak_ref, rng, deadline));
        // The monitor, on this thread.
        let mut tracker = Tracker::default();
        let mut panics = HashSet::new();
        let mut strays = Strays::default();
        let mut last_scan = Instant::now();
        while Instant::now() < deadline && !soak.stop.load(Ordering::SeqCst) {
            let listed = rt.block_on(soak.snapshot(&mut tracker));
            if last_scan.elapsed() > Duration::from_secs(1) {
                soak.scan_supervisor_panics(&mut panics);
                if let Some(list) = &listed {
                    let live = list.iter().map(|i| i.id.to_string()).collect();
                    strays.scan(&soak, &live);
                }
                last_scan = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        soak.note(format!(
            "{}          chaos over; workers finish their calls",
            secs(soak.now())
        ));
    });
    soak.scan_supervisor_panics(&mut HashSet::new());
    if !soak.failed() {
        finale(&soak, &rt);
    }
    history_checks(&soak);

    let st = soak.stats.lock().unwrap();
    let codes: Vec<String> = st.codes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let summary = format!(
        "soak: seed={seed} seconds={seconds} ops={} (ok {} / typed errors {} [{}] / command exits {} / killed {}) kills: callers {} supervisors {} ; snapshots {} ; stalled reads {} ({} whole) ; invariant checks passed: {} ; wall {:.0} s",
        st.ops,
        st.ok,
        st.typed,
        codes.join(", "),
        st.exec_exits,
        st.killed,
        st.kills_callers,
        st.kills_supervisors,
        st.snapshots,
        st.stalled.0,
        st.stalled.1,
        soak.checks.load(Ordering::Relaxed) - soak.violations.lock().unwrap().len() as u64,
        soak.now().as_secs_f64()
    );
    drop(st);
    let violations = soak.violations.lock().unwrap().clone();
    if !violations.is_empty() {
        eprintln!("----- soak log (seed {seed}) -----");
        for line in soak.log.lock().unwrap().iter() {
            eprintln!("{line}");
        }
        eprintln!("----- {summary}");
        panic!(
            "{} invariant violation(s) (seed {seed}):\n{}",
            violations.len(),
            violations.join("\n")
        );
    }
    println!("{summary}");
}
