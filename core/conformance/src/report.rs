//! What a kit run found: every case passed, failed (with the step, the op
//! and what was expected against what happened) or unsupported.

use std::fmt;
use std::time::Duration;

/// How the races "in processes" of a run were run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessRaces {
    /// Each caller in its own OS process (the kit's process spawner).
    Spawned,
    /// As concurrent tasks of this process, each on its own backend
    /// instance where the store can open several (no process spawner).
    InProcess,
}

/// The result of one case.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CaseOutcome {
    /// Every step met its expectation.
    Passed,
    /// A step did not.
    Failed(Failure),
    /// The case needs something the backend says it cannot do (it answered
    /// `unsupported`), or the kit cannot do as configured. Never a pass.
    Unsupported {
        /// What was unsupported, where.
        reason: String,
    },
}

/// Where and how a case failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Failure {
    /// The step (1-based), when the failure is one step's.
    pub step: Option<usize>,
    /// That step's op.
    pub op: Option<String>,
    /// One line: case id, step, op, expected against actual
    /// (`identity.x step 4 (exec): expected error code sandbox_replaced, got ok`).
    pub message: String,
    /// Context: the step as written, the result or error (with its message),
    /// the race callers' reports, the store's diagnostics.
    pub detail: Vec<String>,
}

impl Failure {
    pub(crate) fn new(step: Option<usize>, op: Option<String>, message: String) -> Failure {
        Failure {
            step,
            op,
            message,
            detail: Vec::new(),
        }
    }
}

/// One case in the report.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CaseReport {
    /// The case id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// What happened.
    pub outcome: CaseOutcome,
    /// How long it took (its clean-up included).
    pub duration: Duration,
    /// Observations (how races in processes ran, clean-up problems).
    pub notes: Vec<String>,
    /// The case's tags.
    pub tags: Vec<String>,
}

impl CaseReport {
    pub(crate) fn new(id: String, title: String, outcome: CaseOutcome) -> CaseReport {
        CaseReport {
            id,
            title,
            outcome,
            duration: Duration::ZERO,
            notes: Vec::new(),
            tags: Vec::new(),
        }
    }

    /// Whether the case carries `tag` (a capability it needs, say).
    pub fn tagged(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.outcome == CaseOutcome::Passed
    }
}

/// The result of [`crate::Kit::run`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// Every case run, in document order (then ids that named no case).
    pub cases: Vec<CaseReport>,
    /// How races in processes ran.
    pub process_races: ProcessRaces,
    /// The factor the bounds were scaled by.
    pub time_scale: f64,
}

impl Report {
    pub(crate) fn new(
        cases: Vec<CaseReport>,
        process_races: ProcessRaces,
        time_scale: f64,
    ) -> Report {
        Report {
            cases,
            process_races,
            time_scale,
        }
    }

    /// The cases that passed.
    pub fn passed(&self) -> Vec<&CaseReport> {
        self.cases.iter().filter(|c| c.passed()).collect()
    }

    /// The cases that failed, with their failure.
    pub fn failed(&self) -> Vec<(&CaseReport, &Failure)> {
        self.cases
            .iter()
            .filter_map(|c| match &c.outcome {
                CaseOutcome::Failed(f) => Some((c, f)),
                _ => None,
            })
            .collect()
    }

    /// The cases that were unsupported, with the reason.
    pub fn unsupported(&self) -> Vec<(&CaseReport, &str)> {
        self.cases
            .iter()
            .filter_map(|c| match &c.outcome {
                CaseOutcome::Unsupported { reason } => Some((c, reason.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The case with this id.
    pub fn case(&self, id: &str) -> Option<&CaseReport> {
        self.cases.iter().find(|c| c.id == id)
    }

    /// The one-line message of every failure.
    pub fn failure_messages(&self) -> Vec<&str> {
        self.failed()
            .into_iter()
            .map(|(_, f)| f.message.as_str())
            .collect()
    }

    /// Panics, with every failure (message and context), if any case
    /// failed. Unsupported cases do not fail it (they are listed in the
    /// report, never counted as passed).
    #[track_caller]
    pub fn assert_all_passed(&self) {
        let failed = self.failed();
        if failed.is_empty() {
            return;
        }
        let mut text = format!(
            "{} of {} conformance cases failed:\n",
            failed.len(),
            self.cases.len()
        );
        for (_, f) in &failed {
            text.push_str(&format!("- {}\n", f.message));
        }
        text.push_str("\nDetails:\n");
        for (c, f) in &failed {
            text.push_str(&format!("== {}\n{}\n", c.id, f.message));
            for d in &f.detail {
                text.push_str(&indent(d));
            }
        }
        panic!("{text}");
    }
}

fn indent(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "burrow conformance: {} passed, {} failed, {} unsupported of {} cases (races in processes: {}; time scale {})",
            self.passed().len(),
            self.failed().len(),
            self.unsupported().len(),
            self.cases.len(),
            match self.process_races {
                ProcessRaces::Spawned => "each caller its own process",
                ProcessRaces::InProcess => "tasks in this process",
            },
            self.time_scale,
        )?;
        for c in &self.cases {
            let secs = c.duration.as_secs_f64();
            match &c.outcome {
                CaseOutcome::Passed => writeln!(f, "  ok           {} ({secs:.1} s)", c.id)?,
                CaseOutcome::Failed(fail) => {
                    writeln!(f, "  FAILED       {} ({secs:.1} s)", fail.message)?;
                    for d in &fail.detail {
                        f.write_str(&indent(&indent(d)))?;
                    }
                }
                CaseOutcome::Unsupported { reason } => {
                    writeln!(f, "  unsupported  {} ({secs:.1} s): {reason}", c.id)?
                }
            }
            for n in &c.notes {
                writeln!(f, "                 note: {n}")?;
            }
        }
        Ok(())
    }
}
