//! What a step produced (a result of some kind, or an error with a code) and
//! the fields expectations read from it (README, "Results and fields").

use burrow::{ExecOutput, ModifyPlan, Process, Sandbox, SandboxConfig, SandboxHandle, SandboxInfo};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The code a backend answers for what it cannot do. Compared as a string:
/// an `unsupported` [`burrow::ErrorCode`] is counted as soon as it exists.
pub(crate) const UNSUPPORTED: &str = "unsupported";

/// A step's result.
pub(crate) enum R {
    /// A live sandbox (`create`, `connect_or_create`, `start`, ...).
    Sandbox(Sandbox),
    /// A metadata handle (`define`, `get`, `handle`, ...).
    Handle(SandboxHandle),
    /// A snapshot (`info`, `stop`, `kill`, ...).
    Info(Box<SandboxInfo>),
    /// What a `modify` did: its changes, and the snapshot after it.
    Plan(Box<ModifyPlan>),
    /// A finished process (`exec`, `wait`).
    Exec(ExecResult),
    /// A plain value (`status`, `config`, `ping`, `fs_read`, `fs_exists`).
    Value(Value),
    /// Names of listed sandboxes or directory entries (`list`, `fs_list`).
    List(Vec<String>),
    /// A started process (`spawn`).
    Process(Process),
    /// Nothing (`touch`, `destroy`, `fs_write`, ...).
    None,
}

impl R {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            R::Sandbox(_) => "sandbox",
            R::Handle(_) => "handle",
            R::Info(_) => "info",
            R::Plan(_) => "plan",
            R::Exec(_) => "exec result",
            R::Value(_) => "value",
            R::List(_) => "list",
            R::Process(_) => "process",
            R::None => "nothing",
        }
    }

    /// One line describing the result, for messages.
    pub(crate) fn summary(&self) -> String {
        match self {
            R::Sandbox(s) => format!("sandbox {} generation {}", s.id(), s.generation()),
            R::Handle(h) => format!("handle {}", h.id()),
            R::Info(i) => format!(
                "info {} status {} generation {}",
                i.id, i.status, i.generation
            ),
            R::Plan(p) => format!(
                "plan {} of {} status {} generation {}",
                crate::value::short(&changes_json(p)),
                p.info.id,
                p.info.status,
                p.info.generation
            ),
            R::Exec(e) => format!(
                "exit code {:?}, stdout {:?}",
                e.exit_code,
                crate::value::short(&Value::String(e.stdout.clone()))
            ),
            R::Value(v) => format!("value {}", crate::value::short(v)),
            R::List(names) => format!("list {names:?}"),
            R::Process(_) => "a process".to_owned(),
            R::None => "nothing".to_owned(),
        }
    }
}

/// A collected process result.
#[derive(Debug, Clone)]
pub(crate) struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Output went past the step's `output_limit`.
    pub truncated: bool,
}

impl From<ExecOutput> for ExecResult {
    fn from(o: ExecOutput) -> Self {
        ExecResult {
            stdout: o.stdout_str(),
            stderr: o.stderr_str(),
            exit_code: o.status.code,
            signal: o.status.signal,
            timed_out: o.status.timed_out,
            truncated: o.truncated,
        }
    }
}

impl ExecResult {
    fn field(&self, key: &str) -> Option<Value> {
        Some(match key {
            "stdout" => json!(self.stdout),
            "stderr" => json!(self.stderr),
            "exit_code" => json!(self.exit_code),
            "signal" => json!(self.signal),
            "timed_out" => json!(self.timed_out),
            "truncated" => json!(self.truncated),
            "ok" => json!(self.exit_code == Some(0) && !self.timed_out),
            _ => return None,
        })
    }
}

/// A failed step: the error's code and the fields expectations read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepError {
    pub code: String,
    pub message: String,
    pub sandbox_id: Option<String>,
    pub name: Option<String>,
    pub status: Option<String>,
    pub guest_code: Option<String>,
}

impl From<burrow::Error> for StepError {
    fn from(e: burrow::Error) -> Self {
        let guest_code = match &e {
            burrow::Error::Guest { failure, .. } => serde_json::to_value(failure.code())
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            _ => None,
        };
        StepError {
            code: e.code().as_str().to_owned(),
            sandbox_id: e.sandbox_id().map(|id| id.to_string()),
            name: e.name().map(str::to_owned),
            status: e.status().map(|s| s.as_str().to_owned()),
            guest_code,
            message: e.to_string(),
        }
    }
}

impl StepError {
    /// An error the interpreter itself answers with (a bound it applies).
    pub(crate) fn timeout(operation: &str, after: std::time::Duration) -> Self {
        StepError {
            code: "timeout".to_owned(),
            message: format!("{operation} did not finish within {after:?}"),
            sandbox_id: None,
            name: None,
            status: None,
            guest_code: None,
        }
    }

    pub(crate) fn field(&self, key: &str) -> Option<Value> {
        Some(match key {
            "code" => json!(self.code),
            "sandbox_id" => json!(self.sandbox_id),
            "name" => json!(self.name),
            "status" => json!(self.status),
            "guest_code" => json!(self.guest_code),
            _ => return None,
        })
    }

    pub(crate) fn describe(&self) -> String {
        format!("error code {}: {}", self.code, self.message)
    }
}

/// A step's outcome.
pub(crate) type Outcome = Result<R, StepError>;

/// The configuration as fields are read from: its JSON form, with
/// `idle_action`, `default_limits` and `seccomp_allow` always present (the
/// JSON leaves out their defaults: `stop`, `true`, `[]`).
pub(crate) fn config_json(config: &SandboxConfig) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or(Value::Null);
    if let Value::Object(obj) = &mut v {
        obj.insert("idle_action".into(), json!(config.idle_action.as_str()));
        obj.insert("default_limits".into(), json!(config.default_limits));
        obj.insert("seccomp_allow".into(), json!(config.seccomp_allow));
    }
    v
}

/// The changes of a plan: `[{"field", "applies", "note"?}, ...]`.
fn changes_json(plan: &ModifyPlan) -> Value {
    serde_json::to_value(&plan.changes).unwrap_or(Value::Null)
}

/// The info as the JSON object fields are read from: every field of the
/// snapshot (`config` as [`config_json`] has it), plus `exit_reason` and
/// `detail` of the last run (null if none).
pub(crate) fn info_json(info: &SandboxInfo) -> Value {
    let mut v = serde_json::to_value(info).unwrap_or(Value::Null);
    if let Value::Object(obj) = &mut v {
        obj.insert("config".into(), config_json(&info.config));
        let run = info.last_run.as_ref();
        obj.insert(
            "exit_reason".into(),
            json!(run.and_then(|r| r.exit_reason).map(|r| r.as_str())),
        );
        obj.insert("detail".into(), json!(run.and_then(|r| r.detail.clone())));
    }
    v
}

/// Reads the top-level field `key` of `r`; a sandbox or handle reads its
/// info fields from one fresh snapshot per expectation (`cache`).
pub(crate) async fn top_field(
    r: &R,
    key: &str,
    cache: &mut Option<Value>,
) -> Result<Option<Value>, StepError> {
    match r {
        R::Sandbox(s) => match key {
            "id" => Ok(Some(json!(s.id().as_str()))),
            "name" => Ok(Some(json!(s.name()))),
            "generation" => Ok(Some(json!(s.generation()))),
            _ => info_field(SandboxInfoSource::Live(s), key, cache).await,
        },
        R::Handle(h) => match key {
            "id" => Ok(Some(json!(h.id().as_str()))),
            "name" => Ok(Some(json!(h.name()))),
            _ => info_field(SandboxInfoSource::Handle(h), key, cache).await,
        },
        R::Info(i) => Ok(info_json(i).get(key).cloned()),
        R::Plan(p) => Ok(match key {
            "changes" => Some(changes_json(p)),
            _ => info_json(&p.info).get(key).cloned(),
        }),
        R::Exec(e) => Ok(e.field(key)),
        R::Value(v) => Ok((key == "value").then(|| v.clone())),
        R::List(names) => Ok(match key {
            "count" => Some(json!(names.len())),
            "names" => {
                let mut sorted = names.clone();
                sorted.sort();
                Some(json!(sorted))
            }
            _ => None,
        }),
        R::Process(_) | R::None => Ok(None),
    }
}

enum SandboxInfoSource<'a> {
    Live(&'a Sandbox),
    Handle(&'a SandboxHandle),
}

async fn info_field(
    src: SandboxInfoSource<'_>,
    key: &str,
    cache: &mut Option<Value>,
) -> Result<Option<Value>, StepError> {
    if cache.is_none() {
        let info = match src {
            SandboxInfoSource::Live(s) => s.info().await?,
            SandboxInfoSource::Handle(h) => h.info().await?,
        };
        *cache = Some(info_json(&info));
    }
    Ok(cache.as_ref().and_then(|v| v.get(key)).cloned())
}

/// Reads the dotted field `path` of `r` (`config.env.WHO`).
pub(crate) async fn field(
    r: &R,
    path: &str,
    cache: &mut Option<Value>,
) -> Result<Option<Value>, StepError> {
    let mut parts = path.split('.');
    let head = parts.next().unwrap_or_default();
    let mut value = top_field(r, head, cache).await?;
    for part in parts {
        value = match value {
            Some(Value::Object(mut obj)) => obj.remove(part),
            _ => None,
        };
    }
    Ok(value)
}
