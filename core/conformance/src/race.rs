//! `race`: several callers run one step at the same moment, as tasks of this
//! process or each in its own OS process; then the outcomes are counted and
//! the generation before and after tells how many starts happened.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::caller;
use crate::interp::{CaseRun, Ctx, Obj, Stop};
use crate::kit::Caller;
use crate::ops::owns_what_it_starts;
use crate::outcome::{field, UNSUPPORTED};
use crate::value::short;

/// What one caller of a race reports (also the wire form of a caller in
/// another process).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CallerReport {
    /// The process that ran the caller.
    #[serde(default)]
    pub pid: Option<u32>,
    pub ok: bool,
    /// The error code, when it failed with one.
    #[serde(default)]
    pub code: Option<String>,
    /// The error's message, or why the caller could not run.
    #[serde(default)]
    pub error: Option<String>,
    /// The fields the race reads of a successful result (null if absent).
    #[serde(default)]
    pub fields: Map<String, Value>,
}

/// What a caller runs: the step (its values resolved) and the fields to report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CallerRequest {
    pub step: Map<String, Value>,
    pub keys: Vec<String>,
}

/// Runs `step` once and reports its outcome with the fields `keys`.
pub(crate) async fn call(ctx: &Ctx, step: &Map<String, Value>, keys: &[String]) -> CallerReport {
    let r = match ctx.invoke(step).await {
        Err(kit) => {
            return CallerReport {
                error: Some(kit),
                ..CallerReport::default()
            }
        }
        Ok(Err(e)) => {
            return CallerReport {
                code: Some(e.code),
                error: Some(e.message),
                ..CallerReport::default()
            }
        }
        Ok(Ok(r)) => r,
    };
    let mut fields = Map::new();
    let mut cache = None;
    for key in keys {
        let v = field(&r, key, &mut cache).await.ok().flatten();
        fields.insert(key.clone(), v.unwrap_or(Value::Null));
    }
    if fields.get("id").is_some_and(Value::is_null) {
        // An exec race reports the id of the sandbox it ran in.
        if let Some(var) = step.get("sandbox").and_then(Value::as_str) {
            match ctx.object(var) {
                Ok(Obj::Sandbox(s)) => fields.insert("id".into(), json!(s.id().as_str())),
                Ok(Obj::Handle(h)) => fields.insert("id".into(), json!(h.id().as_str())),
                _ => None,
            };
        }
    }
    CallerReport {
        ok: true,
        fields,
        ..CallerReport::default()
    }
}

/// The generation of the race's target: by `do.name` (a missing name is
/// generation 0) or `do.sandbox`.
async fn generation(ctx: &Ctx, step: &Map<String, Value>, at: &str) -> Result<u64, Stop> {
    let fail = |e: burrow::Error| Stop::fail(format!("{at}: reading the generation: {e}"));
    if let Some(name) = step.get("name") {
        let name = ctx.resolve(name).map_err(Stop::fail)?;
        let name = name.as_str().unwrap_or_default();
        return match ctx.backend.get(name).await {
            Ok(info) => Ok(info.generation),
            Err(burrow::Error::NotFound { .. }) => Ok(0),
            Err(e) => Err(fail(e)),
        };
    }
    let var = step
        .get("sandbox")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let info = match ctx.object(var).map_err(Stop::fail)? {
        Obj::Sandbox(s) => s.info().await,
        Obj::Handle(h) => h.info().await,
        Obj::Process(_) => return Err(Stop::fail(format!("{at}: {var:?} is a process"))),
    };
    info.map(|i| i.generation).map_err(fail)
}

/// Runs the callers as tasks, each with its context, released together.
async fn run_tasks(
    ctxs: Vec<Arc<Ctx>>,
    step: Map<String, Value>,
    keys: Vec<String>,
    timeout: Duration,
    at: &str,
) -> Result<Vec<CallerReport>, Stop> {
    let barrier = Arc::new(tokio::sync::Barrier::new(ctxs.len()));
    let tasks: Vec<_> = ctxs
        .into_iter()
        .map(|ctx| {
            let (step, keys, barrier) = (step.clone(), keys.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                call(&ctx, &step, &keys).await
            })
        })
        .collect();
    let abort: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    match tokio::time::timeout(timeout, futures_util::future::join_all(tasks)).await {
        Ok(results) => results
            .into_iter()
            .map(|r| r.map_err(|e| Stop::fail(format!("{at}: a caller task failed: {e}"))))
            .collect(),
        Err(_) => {
            abort.iter().for_each(|a| a.abort());
            Err(Stop::fail(format!(
                "{at}: the callers did not finish within {:.0} s",
                timeout.as_secs_f64()
            )))
        }
    }
}

pub(crate) async fn run(
    run: &mut CaseRun<'_>,
    step: &Map<String, Value>,
    at: &str,
) -> Result<(), Stop> {
    let do_ = step
        .get("do")
        .and_then(Value::as_object)
        .ok_or_else(|| Stop::fail(format!("{at}: race needs a 'do' step")))?;
    let n = step
        .get("callers")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1) as usize;
    let empty = Map::new();
    let expect = step
        .get("expect")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let save = step
        .get("save")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let each = expect
        .get("each")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let keys: Vec<String> = ["id", "generation"]
        .into_iter()
        .map(str::to_owned)
        .chain(each.keys().cloned())
        .chain(save.values().filter_map(Value::as_str).map(str::to_owned))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let ctx = run.ctx.clone();
    let timeout = Duration::from_secs_f64(120.0 * ctx.scale);
    let before = generation(&ctx, do_, at).await?;

    let reports = if step.get("processes").and_then(Value::as_bool) == Some(true) {
        let mut resolved = match ctx
            .resolve(&Value::Object(do_.clone()))
            .map_err(Stop::fail)?
        {
            Value::Object(o) => o,
            _ => return Err(Stop::fail(format!("{at}: 'do' must be an object"))),
        };
        if resolved.contains_key("options")
            || matches!(
                crate::interp::op_of(&resolved),
                "create" | "connect_or_create"
            )
        {
            let opts = ctx
                .options(&resolved)
                .map_err(|e| Stop::fail(format!("{at}: {}", e.text())))?;
            resolved.insert("options".into(), Value::Object(opts));
        }
        match &run.env.spawner {
            Some(spawner) => {
                let caller = |index| Caller {
                    case_id: run.case_id,
                    index,
                    callers: n,
                    location: run.store.location_str(),
                };
                let request = CallerRequest {
                    step: resolved,
                    keys,
                };
                let reports =
                    caller::spawn_all(spawner.as_ref(), caller, n, &request, timeout, at).await?;
                let pids: BTreeSet<_> = reports.iter().filter_map(|r| r.pid).collect();
                if pids.len() != n || pids.contains(&std::process::id()) {
                    return Err(Stop::fail(format!(
                        "{at}: the callers did not run in {n} other processes: {pids:?}"
                    )));
                }
                reports
            }
            None => {
                if owns_what_it_starts(&resolved) {
                    return Err(Stop::Unsupported(format!(
                        "{at}: its callers own the attached sandbox they start, and their exit must stop it: \
                         that needs each caller in its own process (Kit::process_spawner)"
                    )));
                }
                let mut ctxs = Vec::with_capacity(n);
                for _ in 0..n {
                    let backend = run.store.open().await.map_err(|e| {
                        Stop::fail(format!("{at}: opening a backend for a caller: {e}"))
                    })?;
                    ctxs.push(Arc::new(Ctx::new(backend, None, ctx.scale)));
                }
                run.notes.push(format!(
                    "{at}: the {n} callers ran as tasks in this process on {} (no process spawner)",
                    if run.store.separate_instances() {
                        "separate backend instances"
                    } else {
                        "one shared backend instance"
                    }
                ));
                run_tasks(ctxs, resolved, keys, timeout, at).await?
            }
        }
    } else {
        run_tasks(vec![ctx.clone(); n], do_.clone(), keys, timeout, at).await?
    };
    let after = generation(&ctx, do_, at).await?;
    check(&ctx, step, do_, n, &reports, before, after, at).await
}

#[allow(clippy::too_many_arguments)]
async fn check(
    ctx: &Ctx,
    step: &Map<String, Value>,
    do_: &Map<String, Value>,
    n: usize,
    reports: &[CallerReport],
    before: u64,
    after: u64,
    at: &str,
) -> Result<(), Stop> {
    let shown = || vec![format!("the callers: {}", short(&json!(reports)))];
    let fail = |message: String| Stop::Fail {
        message: format!("{at}: {message}"),
        detail: shown(),
    };
    let empty = Map::new();
    let expect = step
        .get("expect")
        .and_then(Value::as_object)
        .unwrap_or(&empty);

    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in reports {
        let key = match (&r.ok, &r.code) {
            (true, _) => "ok".to_owned(),
            (false, Some(code)) => code.clone(),
            (false, None) => "no_code".to_owned(),
        };
        *counts.entry(key).or_default() += 1;
    }
    let want: BTreeMap<String, u64> = match expect.get("outcomes").and_then(Value::as_object) {
        Some(o) => o
            .iter()
            .filter_map(|(k, v)| v.as_u64().map(|v| (k.clone(), v)))
            .filter(|(_, v)| *v > 0)
            .collect(),
        None => BTreeMap::from([("ok".to_owned(), n as u64)]),
    };
    if counts != want {
        if counts.contains_key(UNSUPPORTED) && !want.contains_key(UNSUPPORTED) {
            return Err(Stop::Unsupported(format!(
                "{at}: a caller got unsupported from the backend"
            )));
        }
        let show = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(fail(format!(
            "expected outcomes {{{}}}, got {{{}}}",
            show(&want),
            show(&counts)
        )));
    }
    let oks: Vec<&Map<String, Value>> =
        reports.iter().filter(|r| r.ok).map(|r| &r.fields).collect();
    if expect.get("same_id").and_then(Value::as_bool) == Some(true) {
        let ids: BTreeSet<String> = oks
            .iter()
            .map(|f| {
                f.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("<none>")
                    .to_owned()
            })
            .collect();
        if ids.len() != 1 {
            return Err(fail(format!(
                "expected one id for every caller, got {ids:?}"
            )));
        }
        if let Some(name) = do_.get("name") {
            let name = ctx.resolve(name).map_err(Stop::fail)?;
            let holder = ctx
                .backend
                .get(name.as_str().unwrap_or_default())
                .await
                .map_err(|e| fail(format!("looking up who holds the name: {e}")))?;
            if !ids.contains(holder.id.as_str()) {
                return Err(fail(format!(
                    "the callers got {ids:?}, but the name is held by {}",
                    holder.id
                )));
            }
        }
    }
    if let Some(starts) = expect.get("starts").and_then(Value::as_i64) {
        let happened = after as i64 - before as i64;
        if happened != starts {
            return Err(fail(format!(
                "expected {starts} starts, got {happened} (generation {before} -> {after})"
            )));
        }
    }
    if let Some(each) = expect.get("each").and_then(Value::as_object) {
        for (i, fields) in oks.iter().enumerate() {
            for (key, expected) in each {
                ctx.check(
                    expected,
                    fields.get(key),
                    &format!("caller {i} field {key}"),
                )
                .map_err(fail)?;
            }
        }
    }
    if let Some(save) = step.get("save").and_then(Value::as_object) {
        for (var, path) in save {
            let first = oks.first().ok_or_else(|| {
                fail(format!("nothing to save {var:?} from: no caller succeeded"))
            })?;
            let v = first
                .get(path.as_str().unwrap_or_default())
                .cloned()
                .unwrap_or(Value::Null);
            ctx.save(var, v);
        }
    }
    Ok(())
}
