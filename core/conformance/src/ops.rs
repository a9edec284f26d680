//! Each op of the vocabulary, on the public API of `burrow`: the builder,
//! [`SandboxHandle`] and [`Sandbox`] (bound to the case's backend through
//! their `*_in` constructors), and `Backend::list`. Nothing here calls a
//! lifecycle method of the `Backend` trait directly: the kit checks what a
//! user of the library gets. Snapshots and pools, which have no API of
//! their own besides the trait's, are its methods.

use std::time::Duration;

use burrow::{
    ExecOptions, ListFilter, LogOptions, LogSource, Modify, PoolSpec, Sandbox, SandboxBuilder,
    SandboxHandle, SandboxId, Status, StopOptions,
};

/// How long a `follow_logs` step waits for its stream to end, in seconds
/// (scaled), unless the step says.
const FOLLOW_TIMEOUT: f64 = 60.0;
use serde_json::{json, Map, Value};

use crate::args::{
    argv, as_f64, as_u64, config, idle_action, network, nullable, opt_bool, seconds, split_chunks,
    statuses, str_list, str_map,
};
use crate::interp::{op_of, Ctx, Obj};
use crate::outcome::{config_json, Outcome, StepError, R};

/// Why an op did not produce an outcome: an error of the backend (an
/// outcome to check), or a step the kit cannot run (a bad case).
pub(crate) enum E {
    Step(Box<StepError>),
    Kit(String),
}

impl From<burrow::Error> for E {
    fn from(e: burrow::Error) -> Self {
        E::Step(Box::new(e.into()))
    }
}

impl From<StepError> for E {
    fn from(e: StepError) -> Self {
        E::Step(Box::new(e))
    }
}

impl E {
    pub(crate) fn text(self) -> String {
        match self {
            E::Step(e) => e.describe(),
            E::Kit(m) => m,
        }
    }
}

pub(crate) fn kit<T>(message: impl Into<String>) -> Result<T, E> {
    Err(E::Kit(message.into()))
}

/// The statuses in which a sandbox has no runtime (a handle's
/// `wait_until_stopped`).
const STOPPED: [Status; 3] = [Status::Created, Status::Stopped, Status::Crashed];

impl Ctx {
    /// Runs one step's op; `Err` is a step the kit cannot run.
    pub(crate) async fn invoke(&self, step: &Map<String, Value>) -> Result<Outcome, String> {
        match self.dispatch(step).await {
            Ok(r) => Ok(Ok(r)),
            Err(E::Step(e)) => Ok(Err(*e)),
            Err(E::Kit(m)) => Err(m),
        }
    }

    /// The resolved argument `key` of `step`.
    fn arg(&self, step: &Map<String, Value>, key: &str) -> Result<Value, E> {
        match step.get(key) {
            Some(v) => self.resolve(v).map_err(E::Kit),
            None => kit(format!("{} needs {key:?}", op_of(step))),
        }
    }

    fn str_arg(&self, step: &Map<String, Value>, key: &str) -> Result<String, E> {
        match self.arg(step, key)? {
            Value::String(s) => Ok(s),
            other => kit(format!("{key:?} must be a string, not {other}")),
        }
    }

    /// A pool's `size` (one past `u32::MAX` is read as `u32::MAX`, which
    /// the backend refuses as too large all the same).
    fn size_arg(&self, step: &Map<String, Value>) -> Result<u32, E> {
        let size = as_u64("size", &self.arg(step, "size")?)?;
        Ok(u32::try_from(size).unwrap_or(u32::MAX))
    }

    /// The create options of `step`, resolved, with the kit's image unless
    /// the step names one.
    pub(crate) fn options(&self, step: &Map<String, Value>) -> Result<Map<String, Value>, E> {
        let mut opts = match step.get("options") {
            None => Map::new(),
            Some(v) => match self.resolve(v).map_err(E::Kit)? {
                Value::Object(o) => o,
                other => return kit(format!("options must be an object, not {other}")),
            },
        };
        if !opts.contains_key("image") {
            if let Some(image) = &self.image {
                opts.insert("image".into(), json!(image));
            }
        }
        Ok(opts)
    }

    /// A builder on the case's backend with the step's options; and whether
    /// the step asks to replace.
    fn builder(
        &self,
        name: String,
        step: &Map<String, Value>,
    ) -> Result<(SandboxBuilder, bool), E> {
        let opts = self.options(step)?;
        let config = config(&opts)?;
        let detached = opt_bool(&opts, "detached")?.unwrap_or(false);
        let replace = opt_bool(&opts, "replace")?.unwrap_or(false);
        let builder = Sandbox::builder(name)
            .backend(self.backend.clone())
            .config(config)
            .detached(detached);
        Ok((builder, replace))
    }

    /// The changes of a `modify` step (durations in seconds; `null` clears
    /// a limit or timeout).
    fn modify_changes(&self, step: &Map<String, Value>) -> Result<Modify, E> {
        let changes = match self.arg(step, "changes")? {
            Value::Object(o) => o,
            other => return kit(format!("changes must be an object, not {other}")),
        };
        let mut m = Modify::default();
        for (key, v) in &changes {
            match key.as_str() {
                "cpus" => m.cpus = Some(nullable(v, |v| as_f64("cpus", v))?),
                "memory_mb" => m.memory_mb = Some(nullable(v, |v| as_u64("memory_mb", v))?),
                "env_set" => m.env_set = str_map("env_set", v)?,
                "env_unset" => m.env_unset = str_list("env_unset", v)?,
                "labels_set" => m.labels_set = str_map("labels_set", v)?,
                "labels_unset" => m.labels_unset = str_list("labels_unset", v)?,
                "idle_timeout" => {
                    m.idle_timeout = Some(nullable(v, |v| seconds("idle_timeout", v))?);
                }
                "idle_action" => m.idle_action = Some(idle_action(v)?),
                "max_duration" => {
                    m.max_duration = Some(nullable(v, |v| seconds("max_duration", v))?);
                }
                "network" => m.network = Some(network(v)?),
                other => return kit(format!("unknown change {other:?}")),
            }
        }
        Ok(m)
    }

    fn target(&self, step: &Map<String, Value>) -> Result<Obj, E> {
        let var = self.str_arg(step, "sandbox")?;
        self.object(&var).map_err(E::Kit)
    }

    fn handle_of(obj: &Obj) -> Result<SandboxHandle, E> {
        match obj {
            Obj::Sandbox(s) => Ok(s.handle()),
            Obj::Handle(h) => Ok(h.clone()),
            Obj::Process(_) => kit("a process is not a sandbox"),
        }
    }

    async fn dispatch(&self, step: &Map<String, Value>) -> Result<R, E> {
        let op = op_of(step);
        match op {
            "create" | "connect_or_create" | "define" => {
                let name = self.str_arg(step, "name")?;
                let (builder, replace) = self.builder(name, step)?;
                return Ok(match op {
                    "define" => R::Handle(builder.define().await?),
                    "connect_or_create" => R::Sandbox(builder.connect_or_create().await?),
                    _ if replace => R::Sandbox(builder.replace().create().await?),
                    _ => R::Sandbox(builder.create().await?),
                });
            }
            "get" => {
                let name = self.str_arg(step, "name")?;
                return Ok(R::Handle(
                    SandboxHandle::get_in(self.backend.clone(), &name).await?,
                ));
            }
            "get_by_id" => {
                let id: SandboxId = self.str_arg(step, "id")?.parse()?;
                return Ok(R::Handle(
                    SandboxHandle::get_by_id_in(self.backend.clone(), &id).await?,
                ));
            }
            "list" => {
                let mut filter = ListFilter::default();
                if step.contains_key("status") {
                    filter.statuses = statuses(&self.arg(step, "status")?)?;
                }
                if step.contains_key("labels") {
                    filter.labels = str_map("labels", &self.arg(step, "labels")?)?;
                }
                let infos = self.backend.list(&filter).await?;
                return Ok(R::List(infos.into_iter().map(|i| i.name).collect()));
            }
            "remove" if step.contains_key("name") => {
                let name = self.str_arg(step, "name")?;
                SandboxHandle::get_in(self.backend.clone(), &name)
                    .await?
                    .remove()
                    .await?;
                return Ok(R::None);
            }
            "get_snapshot" => {
                let snap = self.str_arg(step, "snapshot")?;
                return Ok(R::Value(snapshot_json(
                    &self.backend.get_snapshot(&snap).await?,
                )));
            }
            "list_snapshots" => {
                let all = self.backend.list_snapshots().await?;
                return Ok(R::Value(json!(all
                    .iter()
                    .map(|s| s.name.clone())
                    .collect::<Vec<_>>())));
            }
            "remove_snapshot" => {
                let snap = self.str_arg(step, "snapshot")?;
                self.backend.remove_snapshot(&snap).await?;
                return Ok(R::None);
            }
            "create_pool" => {
                let pool = self.str_arg(step, "pool")?;
                let size = self.size_arg(step)?;
                let config = config(&self.options(step)?)?;
                let info = self
                    .backend
                    .create_pool(PoolSpec::new(pool, config, size))
                    .await?;
                return Ok(R::Value(pool_json(&info)));
            }
            "get_pool" => {
                let pool = self.str_arg(step, "pool")?;
                return Ok(R::Value(pool_json(&self.backend.get_pool(&pool).await?)));
            }
            "list_pools" => {
                let all = self.backend.list_pools().await?;
                return Ok(R::Value(json!(all
                    .iter()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>())));
            }
            "scale_pool" => {
                let pool = self.str_arg(step, "pool")?;
                let size = self.size_arg(step)?;
                let info = self.backend.scale_pool(&pool, size).await?;
                return Ok(R::Value(pool_json(&info)));
            }
            "remove_pool" => {
                let pool = self.str_arg(step, "pool")?;
                self.backend.remove_pool(&pool).await?;
                return Ok(R::None);
            }
            "connect_or_start" if step.contains_key("name") => {
                let name = self.str_arg(step, "name")?;
                let handle = SandboxHandle::get_in(self.backend.clone(), &name).await?;
                return Ok(R::Sandbox(handle.connect_or_start().await?));
            }
            "wait" => {
                let var = self.str_arg(step, "process")?;
                let Obj::Process(slot) = self.object(&var).map_err(E::Kit)? else {
                    return kit(format!("{var:?} is not a process"));
                };
                let Some(process) = slot.lock().await.take() else {
                    return kit(format!("the process {var:?} was already waited for"));
                };
                return Ok(R::Exec(process.wait().await?.into()));
            }
            _ => {}
        }

        let target = self.target(step)?;
        match (op, &target) {
            ("handle", _) => return Ok(R::Handle(Self::handle_of(&target)?)),
            ("info", Obj::Sandbox(s)) => return Ok(R::Info(Box::new(s.info().await?))),
            ("info", _) => return Ok(R::Info(Box::new(Self::handle_of(&target)?.info().await?))),
            ("status", Obj::Sandbox(s)) => return Ok(R::Value(json!(s.status().await?.as_str()))),
            ("status", _) => {
                return Ok(R::Value(json!(Self::handle_of(&target)?
                    .status()
                    .await?
                    .as_str())))
            }
            ("config", _) => {
                let config = Self::handle_of(&target)?.config().await?;
                return Ok(R::Value(config_json(&config)));
            }
            ("start", _) => return Ok(R::Sandbox(Self::handle_of(&target)?.start().await?)),
            ("connect_or_start", _) => {
                return Ok(R::Sandbox(
                    Self::handle_of(&target)?.connect_or_start().await?,
                ))
            }
            ("connect", _) => return Ok(R::Sandbox(Self::handle_of(&target)?.connect().await?)),
            ("restart", Obj::Sandbox(s)) => return Ok(R::Info(Box::new(s.restart().await?))),
            ("restart", _) => return Ok(R::Sandbox(Self::handle_of(&target)?.restart().await?)),
            ("stop", _) => {
                let opts = match step.get("grace") {
                    Some(g) => StopOptions::with_grace(seconds(
                        "grace",
                        &self.resolve(g).map_err(E::Kit)?,
                    )?),
                    None => StopOptions::default(),
                };
                let info = match &target {
                    Obj::Sandbox(s) => s.stop_with(opts).await?,
                    _ => Self::handle_of(&target)?.stop_with(opts).await?,
                };
                return Ok(R::Info(Box::new(info)));
            }
            ("kill" | "request_drain" | "pause" | "resume", Obj::Sandbox(s)) => {
                let info = match op {
                    "kill" => s.kill().await?,
                    "request_drain" => s.request_drain().await?,
                    "pause" => s.pause().await?,
                    _ => s.resume().await?,
                };
                return Ok(R::Info(Box::new(info)));
            }
            ("kill" | "request_drain" | "pause" | "resume", _) => {
                let h = Self::handle_of(&target)?;
                let info = match op {
                    "kill" => h.kill().await?,
                    "request_drain" => h.request_drain().await?,
                    "pause" => h.pause().await?,
                    _ => h.resume().await?,
                };
                return Ok(R::Info(Box::new(info)));
            }
            ("modify", _) => {
                let changes = self.modify_changes(step)?;
                let plan = match &target {
                    Obj::Sandbox(s) => s.modify_with(&changes).await?,
                    _ => Self::handle_of(&target)?.modify_with(&changes).await?,
                };
                return Ok(R::Plan(Box::new(plan)));
            }
            ("touch", Obj::Sandbox(s)) => {
                s.touch().await?;
                return Ok(R::None);
            }
            ("touch", _) => {
                Self::handle_of(&target)?.touch().await?;
                return Ok(R::None);
            }
            ("wait_for_status", _) => {
                let wanted = statuses(&self.arg(step, "statuses")?)?;
                let h = Self::handle_of(&target)?;
                let info = match step.get("timeout") {
                    None => h.wait_for_status(&wanted).await?,
                    Some(t) => {
                        let after = Duration::from_secs_f64(
                            t.as_f64().unwrap_or_default().max(0.0) * self.scale,
                        );
                        match tokio::time::timeout(after, h.wait_for_status(&wanted)).await {
                            Ok(r) => r?,
                            Err(_) => {
                                return Err(StepError::timeout("wait_for_status", after).into())
                            }
                        }
                    }
                };
                return Ok(R::Info(Box::new(info)));
            }
            ("wait_until_stopped", Obj::Sandbox(s)) => {
                return Ok(R::Info(Box::new(s.wait_until_stopped().await?)))
            }
            ("wait_until_stopped", _) => {
                let info = Self::handle_of(&target)?.wait_for_status(&STOPPED).await?;
                return Ok(R::Info(Box::new(info)));
            }
            ("follow_logs", _) => {
                let mut opts = LogOptions::default().follow(true);
                if step.contains_key("source") {
                    opts = opts.sources([self.str_arg(step, "source")?.parse::<LogSource>()?]);
                }
                let after = Duration::from_secs_f64(
                    step.get("timeout")
                        .and_then(Value::as_f64)
                        .unwrap_or(FOLLOW_TIMEOUT)
                        .max(0.0)
                        * self.scale,
                );
                let stream = match &target {
                    Obj::Sandbox(s) => s.logs(&opts).await?,
                    _ => Self::handle_of(&target)?.logs(&opts).await?,
                };
                // The stream ends by itself when the followed run ends.
                let lines = match tokio::time::timeout(after, stream.collect()).await {
                    Ok(lines) => lines?,
                    Err(_) => return Err(StepError::timeout("follow_logs", after).into()),
                };
                let texts: Vec<String> = lines.into_iter().map(|l| l.text).collect();
                return Ok(R::Value(json!(texts)));
            }
            ("snapshot", _) => {
                let snap = self.str_arg(step, "snapshot")?;
                let opts = match step.get("kind").and_then(Value::as_str) {
                    None | Some("filesystem") => burrow::SnapshotOptions::filesystem(),
                    Some("full") => burrow::SnapshotOptions::full(),
                    Some(other) => return kit(format!("unknown snapshot kind {other:?}")),
                };
                let info = match &target {
                    Obj::Sandbox(s) => s.snapshot_with(&snap, &opts).await?,
                    _ => {
                        Self::handle_of(&target)?
                            .snapshot_with(&snap, &opts)
                            .await?
                    }
                };
                return Ok(R::Value(snapshot_json(&info)));
            }
            ("fork", _) => {
                // `count`, or as many as `names`; the result is the copies'
                // names, in order (bind them with `connect_or_start` by name).
                let names: Vec<String> = match step.get("names") {
                    Some(v) => serde_json::from_value(v.clone())
                        .map_err(|e| E::Kit(format!("fork names: {e}")))?,
                    None => Vec::new(),
                };
                let mut opts = if names.is_empty() {
                    burrow::ForkOptions::count(0)
                } else {
                    burrow::ForkOptions::named(names)
                };
                if let Some(count) = step.get("count").and_then(Value::as_u64) {
                    opts.count = u32::try_from(count).unwrap_or(u32::MAX);
                }
                let copies = Self::handle_of(&target)?.fork(&opts).await?;
                return Ok(R::Value(json!(copies
                    .iter()
                    .map(|c| c.name().to_owned())
                    .collect::<Vec<_>>())));
            }
            ("remove", _) => {
                Self::handle_of(&target)?.remove().await?;
                return Ok(R::None);
            }
            ("destroy", Obj::Sandbox(s)) => {
                s.destroy().await?;
                return Ok(R::None);
            }
            ("destroy", _) => {
                Self::handle_of(&target)?.destroy().await?;
                return Ok(R::None);
            }
            _ => {}
        }

        let Obj::Sandbox(sb) = target else {
            return kit(format!(
                "{op} needs a live sandbox, {:?} is a handle",
                step.get("sandbox")
            ));
        };
        match op {
            "detach" => Ok(R::Info(Box::new(sb.detach().await?))),
            "ping" => Ok(R::Value(json!(sb.ping().await?.latency.as_secs_f64()))),
            "exec" | "spawn" => {
                let mut opts = ExecOptions::new(argv(&self.arg(step, "argv")?)?);
                if step.contains_key("env") {
                    opts.env = str_map("env", &self.arg(step, "env")?)?;
                }
                if step.contains_key("cwd") {
                    opts.cwd = Some(self.str_arg(step, "cwd")?);
                }
                if step.contains_key("timeout") {
                    opts.timeout = Some(seconds("timeout", &self.arg(step, "timeout")?)?);
                }
                if op == "exec" {
                    if step.contains_key("output_limit") {
                        let limit = as_u64("output_limit", &self.arg(step, "output_limit")?)?;
                        opts.output_limit = Some(usize::try_from(limit).unwrap_or(usize::MAX));
                    }
                    if step.contains_key("stdin") {
                        opts.stdin = Some(self.str_arg(step, "stdin")?.into_bytes());
                    }
                    return Ok(R::Exec(sb.exec_with(opts).await?.into()));
                }
                // Spawned with an empty stdin, as every interpreter does.
                let process = sb.spawn(opts).await?;
                process.close_stdin().await?;
                Ok(R::Process(process))
            }
            "fs_write" => {
                let (path, data) = (self.str_arg(step, "path")?, self.str_arg(step, "data")?);
                sb.fs().write(&path, data.as_bytes()).await?;
                Ok(R::None)
            }
            "fs_read" => {
                let data = sb.fs().read(&self.str_arg(step, "path")?).await?;
                Ok(R::Value(json!(String::from_utf8_lossy(&data))))
            }
            "fs_write_stream" => {
                let (path, data) = (self.str_arg(step, "path")?, self.str_arg(step, "data")?);
                let chunks = match step.get("chunks") {
                    None => 1,
                    Some(v) => as_u64("chunks", &self.resolve(v).map_err(E::Kit)?)?.max(1),
                };
                let mut file = sb.fs().open_write(&path, None, false).await?;
                for piece in split_chunks(data.as_bytes(), chunks) {
                    file.write(piece).await?;
                }
                Ok(R::Value(json!(file.finish().await?)))
            }
            "fs_read_stream" => {
                let mut file = sb.fs().open_read(&self.str_arg(step, "path")?).await?;
                let mut data = Vec::new();
                while let Some(chunk) = file.next_chunk().await? {
                    data.extend_from_slice(&chunk);
                }
                Ok(R::Value(json!(String::from_utf8_lossy(&data))))
            }
            "fs_exists" => Ok(R::Value(json!(
                sb.fs().exists(&self.str_arg(step, "path")?).await?
            ))),
            "fs_mkdir" => {
                let parents = match step.get("parents") {
                    None => false,
                    Some(v) => v
                        .as_bool()
                        .ok_or(E::Kit("\"parents\" must be a boolean".into()))?,
                };
                sb.fs().mkdir(&self.str_arg(step, "path")?, parents).await?;
                Ok(R::None)
            }
            "fs_list" => {
                let entries = sb.fs().list(&self.str_arg(step, "path")?).await?;
                Ok(R::List(entries.into_iter().map(|e| e.name).collect()))
            }
            other => kit(format!("unknown op {other:?}")),
        }
    }
}

/// Whether a caller of a race in processes would own the sandbox it starts
/// (a create or connect_or_create that is not detached): its exit then
/// stops the sandbox, which no task in this process can stand in for.
pub(crate) fn owns_what_it_starts(step: &Map<String, Value>) -> bool {
    let detached = step
        .get("options")
        .and_then(|o| o.get("detached"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    matches!(op_of(step), "create" | "connect_or_create") && !detached
}

/// A snapshot as the cases see it: the API's fields, in JSON.
fn snapshot_json(s: &burrow::SnapshotInfo) -> Value {
    serde_json::to_value(s).unwrap_or(Value::Null)
}

/// A pool as the cases see it: the API's fields, in JSON (its `config` as
/// an info's).
fn pool_json(p: &burrow::PoolInfo) -> Value {
    let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
    if let Value::Object(obj) = &mut v {
        obj.insert("config".into(), config_json(&p.config));
    }
    v
}
