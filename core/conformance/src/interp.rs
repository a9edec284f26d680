//! Running the steps of one case: variables, saved values, background jobs,
//! `within` retries, `repeat`, `await`, and checking each outcome against
//! its expectation (by error code and fields, never by message text).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use burrow::{Backend, Capabilities, Process, Sandbox, SandboxHandle};
use serde_json::{Map, Value};
use tokio::task::JoinHandle;

use crate::kit::{RaceEnv, Store};
use crate::outcome::{field, Outcome, StepError, R, UNSUPPORTED};
use crate::value::{self, Values};

/// An object bound to a variable with `as`.
#[derive(Clone)]
pub(crate) enum Obj {
    Sandbox(Sandbox),
    Handle(SandboxHandle),
    /// Taken by the `wait` that collects it.
    Process(Arc<tokio::sync::Mutex<Option<Process>>>),
}

/// The state steps share: the backend, the variables and the saved values.
/// Behind an `Arc` so background jobs and race callers can use it.
pub(crate) struct Ctx {
    pub(crate) backend: Arc<dyn Backend>,
    /// The image of every create unless the step names one.
    pub(crate) image: Option<String>,
    /// Factor of the bounds (`within`, `wait_for_status` timeouts, races).
    pub(crate) scale: f64,
    /// What the backend says it can do (unknown in a caller process).
    caps: Option<Capabilities>,
    values: Mutex<Values>,
    objects: Mutex<HashMap<String, Obj>>,
}

impl Ctx {
    pub(crate) fn new(backend: Arc<dyn Backend>, image: Option<String>, scale: f64) -> Ctx {
        Ctx {
            backend,
            image,
            scale,
            caps: None,
            values: Mutex::new(Values::new()),
            objects: Mutex::new(HashMap::new()),
        }
    }

    /// The backend's capabilities, as read before the case ran.
    pub(crate) fn with_capabilities(mut self, caps: Capabilities) -> Ctx {
        self.caps = Some(caps);
        self
    }

    /// Resolves the value forms in `spec` with the saved values.
    pub(crate) fn resolve(&self, spec: &Value) -> Result<Value, String> {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        value::resolve(spec, &values)
    }

    /// Matches `actual` against `expected` with the saved values.
    pub(crate) fn check(
        &self,
        expected: &Value,
        actual: Option<&Value>,
        what: &str,
    ) -> Result<(), String> {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        value::check(expected, actual, what, &values)
    }

    pub(crate) fn save(&self, name: &str, v: Value) {
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), v);
    }

    pub(crate) fn object(&self, var: &str) -> Result<Obj, String> {
        self.objects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(var)
            .cloned()
            .ok_or_else(|| format!("no variable {var:?}"))
    }

    fn bind(&self, var: &str, obj: Obj) {
        self.objects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(var.to_owned(), obj);
    }
}

/// Why a case stopped before its end.
pub(crate) enum Stop {
    /// An expectation did not hold (or the case could not be interpreted).
    Fail {
        message: String,
        detail: Vec<String>,
    },
    /// The backend answered `unsupported` where the case needed an answer.
    Unsupported(String),
}

impl Stop {
    pub(crate) fn fail(message: impl Into<String>) -> Stop {
        Stop::Fail {
            message: message.into(),
            detail: Vec::new(),
        }
    }
}

/// One case being run.
pub(crate) struct CaseRun<'a> {
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) case_id: &'a str,
    pub(crate) env: &'a RaceEnv,
    pub(crate) store: &'a Store,
    jobs: HashMap<String, JoinHandle<Result<Outcome, String>>>,
    /// Observations for the report (how races in processes ran, ...).
    pub(crate) notes: Vec<String>,
    /// The step being run: (1-based index, op).
    pub(crate) at: Option<(usize, String)>,
}

impl<'a> CaseRun<'a> {
    pub(crate) fn new(ctx: Arc<Ctx>, case_id: &'a str, env: &'a RaceEnv, store: &'a Store) -> Self {
        CaseRun {
            ctx,
            case_id,
            env,
            store,
            jobs: HashMap::new(),
            notes: Vec::new(),
            at: None,
        }
    }

    /// Runs every step in order; the first one that fails ends the case.
    pub(crate) async fn run_steps(&mut self, steps: &[Value]) -> Result<(), Stop> {
        for (i, step) in steps.iter().enumerate() {
            let obj = step.as_object().ok_or_else(|| {
                Stop::fail(format!("{} step {}: not an object", self.case_id, i + 1))
            })?;
            let op = op_of(obj);
            self.at = Some((i + 1, op.to_owned()));
            let at = format!("{} step {} ({op})", self.case_id, i + 1);
            self.run_step(obj, &at).await.map_err(|stop| match stop {
                Stop::Fail {
                    message,
                    mut detail,
                } => {
                    detail.insert(0, format!("the step: {}", value::short(step)));
                    Stop::Fail { message, detail }
                }
                other => other,
            })?;
        }
        Ok(())
    }

    /// Stops every background job still running.
    pub(crate) fn abort_jobs(&mut self) {
        for (_, job) in self.jobs.drain() {
            job.abort();
        }
    }

    pub(crate) async fn run_step(
        &mut self,
        step: &Map<String, Value>,
        at: &str,
    ) -> Result<(), Stop> {
        let op = op_of(step);
        if let Some(job) = step.get("background").and_then(Value::as_str) {
            if self.jobs.contains_key(job) {
                return Err(Stop::fail(format!("{at}: job {job:?} already running")));
            }
            let ctx = self.ctx.clone();
            let step = step.clone();
            self.jobs.insert(
                job.to_owned(),
                tokio::spawn(async move { ctx.invoke(&step).await }),
            );
            return Ok(());
        }
        match op {
            "sleep" => {
                let secs = num(step, "seconds").map_err(|e| Stop::fail(format!("{at}: {e}")))?;
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                Ok(())
            }
            "repeat" => self.repeat(step, at).await,
            "race" => crate::race::run(self, step, at).await,
            "await" => {
                let job = step.get("job").and_then(Value::as_str).unwrap_or_default();
                let handle = self
                    .jobs
                    .remove(job)
                    .ok_or_else(|| Stop::fail(format!("{at}: no background job {job:?}")))?;
                let outcome = match handle.await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(e)) => return Err(Stop::fail(format!("{at}: {e}"))),
                    Err(e) => return Err(Stop::fail(format!("{at}: the job {job:?} failed: {e}"))),
                };
                self.conclude(step, outcome, at).await
            }
            _ => {
                let deadline = match step.get("within").and_then(Value::as_f64) {
                    Some(w) => Some(Instant::now() + Duration::from_secs_f64(w * self.ctx.scale)),
                    None => None,
                };
                loop {
                    let outcome = self
                        .ctx
                        .invoke(step)
                        .await
                        .map_err(|e| Stop::fail(format!("{at}: {e}")))?;
                    match self.conclude(step, outcome, at).await {
                        Err(Stop::Fail { .. }) if deadline.is_some_and(|d| Instant::now() < d) => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        other => return other,
                    }
                }
            }
        }
    }

    async fn repeat(&mut self, step: &Map<String, Value>, at: &str) -> Result<(), Stop> {
        let secs = num(step, "seconds").map_err(|e| Stop::fail(format!("{at}: {e}")))?;
        let interval = step.get("interval").and_then(Value::as_f64).unwrap_or(0.5);
        let inner = step
            .get("do")
            .and_then(Value::as_object)
            .ok_or_else(|| Stop::fail(format!("{at}: repeat needs a 'do' step")))?;
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut n = 0;
        while Instant::now() < end {
            n += 1;
            Box::pin(self.run_step(inner, &format!("{at} run {n}"))).await?;
            tokio::time::sleep(Duration::from_secs_f64(interval)).await;
        }
        Ok(())
    }

    /// Checks the outcome against the step's expectation, then binds (`as`)
    /// and saves (`save`).
    pub(crate) async fn conclude(
        &mut self,
        step: &Map<String, Value>,
        outcome: Outcome,
        at: &str,
    ) -> Result<(), Stop> {
        if let Err(e) = &outcome {
            let tolerated = step
                .get("tolerate")
                .and_then(Value::as_array)
                .is_some_and(|t| t.iter().any(|c| c.as_str() == Some(e.code.as_str())));
            if tolerated {
                return Ok(());
            }
        }
        let empty = Map::new();
        let expect = step
            .get("expect")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let failed = outcome.is_err();
        // The capability the step needs, when the backend claims it: then an
        // `unsupported` answer contradicts its own capabilities.
        let claimed = crate::cases::step_capability(step).filter(|cap| {
            self.ctx
                .caps
                .as_ref()
                .is_some_and(|caps| crate::kit::claims(caps, cap))
        });
        let result = self.check(expect, outcome, at, claimed).await?;
        if failed {
            // An expected error binds and saves nothing.
            return Ok(());
        }
        let result = match step.get("as").and_then(Value::as_str) {
            None => result,
            Some(var) => match result {
                R::Sandbox(s) => {
                    self.ctx.bind(var, Obj::Sandbox(s.clone()));
                    R::Sandbox(s)
                }
                R::Handle(h) => {
                    self.ctx.bind(var, Obj::Handle(h.clone()));
                    R::Handle(h)
                }
                R::Process(p) => {
                    self.ctx.bind(
                        var,
                        Obj::Process(Arc::new(tokio::sync::Mutex::new(Some(p)))),
                    );
                    R::None
                }
                other => {
                    return Err(Stop::fail(format!(
                        "{at}: cannot bind a {} to {var:?}",
                        other.kind()
                    )))
                }
            },
        };
        self.save_fields(step, &result, at).await
    }

    async fn save_fields(
        &mut self,
        step: &Map<String, Value>,
        result: &R,
        at: &str,
    ) -> Result<(), Stop> {
        let Some(save) = step.get("save").and_then(Value::as_object) else {
            return Ok(());
        };
        let mut cache = None;
        for (var, path) in save {
            let path = path.as_str().unwrap_or_default();
            let v = field(result, path, &mut cache).await.map_err(|e| {
                Stop::fail(format!(
                    "{at}: reading {path:?} to save {var:?}: {}",
                    e.describe()
                ))
            })?;
            let v = v.ok_or_else(|| {
                Stop::fail(format!("{at}: cannot save {var:?}: no field {path:?}"))
            })?;
            self.ctx.save(var, v);
        }
        Ok(())
    }

    /// Checks `outcome` against `expect`; returns the result on success.
    async fn check(
        &self,
        expect: &Map<String, Value>,
        outcome: Outcome,
        at: &str,
        claimed: Option<&str>,
    ) -> Result<R, Stop> {
        if let Some(want) = expect.get("error") {
            let want = want.as_str().unwrap_or_default();
            let e = match outcome {
                Ok(r) => {
                    return Err(Stop::Fail {
                        message: format!("{at}: expected error code {want}, got ok"),
                        detail: vec![format!("the result: {}", r.summary())],
                    })
                }
                Err(e) => e,
            };
            if e.code != want {
                return Err(unexpected(
                    at,
                    &e,
                    &format!("expected error code {want}, got error code {}", e.code),
                    claimed,
                ));
            }
            for (key, expected) in expect.iter().filter(|(k, _)| *k != "error") {
                self.ctx
                    .check(
                        expected,
                        e.field(key).as_ref(),
                        &format!("error field {key}"),
                    )
                    .map_err(|m| Stop::Fail {
                        message: format!("{at}: {m}"),
                        detail: vec![format!("the error: {}", e.describe())],
                    })?;
            }
            return Ok(R::None);
        }
        let r = match outcome {
            Ok(r) => r,
            Err(e) => {
                return Err(unexpected(
                    at,
                    &e,
                    &format!("expected ok, got error code {}", e.code),
                    claimed,
                ))
            }
        };
        let mut cache = None;
        for (key, expected) in expect {
            let actual = field(&r, key, &mut cache).await.map_err(|e| Stop::Fail {
                message: format!("{at}: reading field {key}: {}", e.describe()),
                detail: vec![],
            })?;
            self.ctx
                .check(expected, actual.as_ref(), &format!("field {key}"))
                .map_err(|m| Stop::Fail {
                    message: format!("{at}: {m}"),
                    detail: vec![format!("the result: {}", r.summary())],
                })?;
        }
        Ok(r)
    }
}

/// A failure for an error the step did not expect; `unsupported` makes the
/// case unsupported instead, unless the backend claims the capability the
/// step needs (`claimed`): then it contradicts itself, a failure.
fn unexpected(at: &str, e: &StepError, message: &str, claimed: Option<&str>) -> Stop {
    if e.code == UNSUPPORTED && claimed.is_none() {
        return Stop::Unsupported(format!(
            "{at}: the backend answered unsupported: {}",
            e.message
        ));
    }
    let message = match claimed {
        Some(cap) if e.code == UNSUPPORTED => {
            format!("{message}, though Backend::capabilities reports the capability {cap}")
        }
        _ => message.to_owned(),
    };
    Stop::Fail {
        message: format!("{at}: {message}"),
        detail: vec![format!("the error: {}", e.describe())],
    }
}

pub(crate) fn op_of(step: &Map<String, Value>) -> &str {
    step.get("op").and_then(Value::as_str).unwrap_or_default()
}

fn num(step: &Map<String, Value>, key: &str) -> Result<f64, String> {
    step.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("{key:?} must be a number"))
}
