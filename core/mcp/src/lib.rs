//! `burrow mcp`: burrow's sandboxes as tools of an MCP server, for any
//! agent, over stdio or streamable HTTP.
//!
//! Every tool acts through one [`Backend`] (any: `burrow mcp` gives it the
//! CLI's, the local home or a `burrow serve`), within a [`Policy`]; every
//! sandbox it creates carries the label [`LABEL`], and it acts on those
//! only (`scope`: any other, another tenant's above all, is answered as
//! one that is not there), on every transport. A burrow error is a tool
//! error whose structured content carries burrow's code.

use std::sync::Arc;

use burrow::{Backend, Error, SandboxHandle};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};

mod args;
mod policy;
mod resources;
mod scope;
mod spawned;

pub use args::*;
pub use policy::Policy;
pub use spawned::MAX_SPAWN_BUFFER;
use spawned::{Processes, Spawned};

/// The label on every sandbox the server creates.
pub const LABEL: &str = "burrow.mcp";

/// The MCP server.
#[derive(Clone)]
pub struct BurrowMcp {
    backend: Arc<dyn Backend>,
    policy: Policy,
    processes: Processes,
    next_process: Arc<std::sync::atomic::AtomicU64>,
    tool_router: ToolRouter<BurrowMcp>,
}

impl std::fmt::Debug for BurrowMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurrowMcp")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// A burrow error as a tool error: the message, and the code in the
/// structured content.
fn tool_error(e: &Error) -> CallToolResult {
    let body = burrow::api::ErrorBody::from(e);
    let mut r = CallToolResult::error(vec![ContentBlock::text(body.message.clone())]);
    r.structured_content = Some(serde_json::json!({"code": body.code, "message": body.message}));
    r
}

fn done(r: Result<CallToolResult, Error>) -> Result<CallToolResult, ErrorData> {
    Ok(r.unwrap_or_else(|e| tool_error(&e)))
}

#[tool_router]
impl BurrowMcp {
    /// A server acting through `backend` within `policy`.
    pub fn new(backend: Arc<dyn Backend>, policy: Policy) -> Self {
        Self {
            backend,
            policy,
            processes: Arc::default(),
            next_process: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Create and start a sandbox")]
    async fn create(
        &self,
        Parameters(a): Parameters<CreateArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(self.do_create(a).await)
    }

    #[tool(
        description = "Connect to a sandbox by name, creating and starting it if there is none (many callers converge on one)"
    )]
    async fn connect_or_create(
        &self,
        Parameters(a): Parameters<CreateArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(self.do_create_with(a, true).await)
    }

    #[tool(description = "List the sandboxes of this server")]
    async fn list(&self) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let all = scope::list(&self.backend).await?;
                let out: Vec<_> = all
                    .iter()
                    .map(|s| serde_json::json!({"name": s.name, "id": s.id, "status": s.status}))
                    .collect();
                Ok(CallToolResult::structured(
                    serde_json::json!({ "sandboxes": out }),
                ))
            }
            .await,
        )
    }

    #[tool(description = "Run a command in a running sandbox; output streams as progress")]
    async fn exec(
        &self,
        Parameters(a): Parameters<ExecArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        done(self.do_exec(a, ctx).await)
    }

    #[tool(description = "Start a stopped sandbox (or connect to it if it runs)")]
    async fn start(
        &self,
        Parameters(a): Parameters<NameArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.owned(&a.name).await?.connect_or_start().await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": s.name(), "id": s.id(), "status": "running"}),
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "Read a file of a sandbox (text, or base64 when it is not UTF-8; at most 4 MiB)"
    )]
    async fn fs_read(
        &self,
        Parameters(a): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.running(&a.name).await?;
                let stat = s.fs().stat(&a.path).await?;
                if stat.size > MAX_FILE as u64 {
                    return Err(Error::InvalidArgument {
                        argument: "path".into(),
                        reason: format!(
                            "{} is {} bytes; at most {MAX_FILE} are read",
                            a.path, stat.size
                        ),
                    });
                }
                let data = s.fs().read(&a.path).await?;
                Ok(CallToolResult::structured(match String::from_utf8(data) {
                    Ok(text) => {
                        serde_json::json!({"path": a.path, "content": text, "base64": false})
                    }
                    Err(e) => {
                        use base64::Engine as _;
                        let b = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
                        serde_json::json!({"path": a.path, "content": b, "base64": true})
                    }
                }))
            }
            .await,
        )
    }

    #[tool(description = "Write a file of a sandbox (text, or base64; at most 4 MiB)")]
    async fn fs_write(
        &self,
        Parameters(a): Parameters<WriteArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let data = if a.base64 {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(&a.content)
                        .map_err(|e| Error::InvalidArgument {
                            argument: "content".into(),
                            reason: format!("not base64: {e}"),
                        })?
                } else {
                    a.content.into_bytes()
                };
                if data.len() > MAX_FILE {
                    return Err(Error::InvalidArgument {
                        argument: "content".into(),
                        reason: format!("{} bytes; at most {MAX_FILE} are written", data.len()),
                    });
                }
                let s = self.running(&a.name).await?;
                s.fs().write(&a.path, &data).await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"path": a.path, "bytes": data.len()}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "List a directory of a sandbox")]
    async fn fs_list(
        &self,
        Parameters(a): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.running(&a.name).await?;
                let entries = s.fs().list(&a.path).await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"path": a.path, "entries": entries}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "A file's metadata in a sandbox")]
    async fn fs_stat(
        &self,
        Parameters(a): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.running(&a.name).await?;
                let stat = s.fs().stat(&a.path).await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"path": a.path, "stat": stat}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "Remove a file (or, with recursive, a directory) of a sandbox")]
    async fn fs_remove(
        &self,
        Parameters(a): Parameters<RemoveArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.running(&a.name).await?;
                s.fs().remove(&a.path, a.recursive).await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"path": a.path}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "The last lines of a sandbox's logs")]
    async fn logs(&self, Parameters(a): Parameters<LogsArgs>) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let h = self.owned(&a.name).await?;
                let tail = a.tail.unwrap_or(100).min(1000);
                let opts = burrow::LogOptions::default().tail(tail);
                let mut stream = h.logs(&opts).await?;
                let mut lines = Vec::new();
                while let Some(line) = stream.next().await {
                    let line = line?;
                    lines.push(serde_json::json!({"source": line.source, "text": line.text}));
                }
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": a.name, "lines": lines}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "A running sandbox's resource usage")]
    async fn metrics(
        &self,
        Parameters(a): Parameters<NameArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let s = self.running(&a.name).await?;
                let m = s.metrics().await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": a.name, "metrics": m}),
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "Start a command in a sandbox and return at once; `read` gives its output and end"
    )]
    async fn spawn(
        &self,
        Parameters(a): Parameters<ExecArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let sandbox = self.running(&a.name).await?;
                let mut process = sandbox.spawn(burrow::ExecOptions::new(a.argv)).await?;
                let id = self
                    .next_process
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.lock().insert(id, Spawned::default());
                let processes = self.processes.clone();
                tokio::spawn(async move {
                    loop {
                        let event = process.next_event().await;
                        let mut all = processes.lock().unwrap_or_else(|p| p.into_inner());
                        let Some(p) = all.get_mut(&id) else { return };
                        match event {
                            Ok(Some(burrow::ExecEvent::Stdout(b))) => {
                                Spawned::keep(&mut p.stdout, &mut p.dropped, &b)
                            }
                            Ok(Some(burrow::ExecEvent::Stderr(b))) => {
                                Spawned::keep(&mut p.stderr, &mut p.dropped, &b)
                            }
                            Ok(Some(burrow::ExecEvent::Exit(s))) => {
                                p.exit = Some((s.code, s.signal));
                                return;
                            }
                            Ok(None) => return,
                            Err(e) => {
                                p.error = Some(e.to_string());
                                return;
                            }
                        }
                    }
                });
                Ok(CallToolResult::structured(
                    serde_json::json!({"process": id}),
                ))
            }
            .await,
        )
    }

    #[tool(
        description = "The output of a spawned process since the last read, and whether it ended"
    )]
    async fn read(&self, Parameters(a): Parameters<ReadArgs>) -> Result<CallToolResult, ErrorData> {
        let mut all = self.lock();
        let Some(p) = all.get_mut(&a.process) else {
            return done(Err(Error::NotFound {
                what: format!("process {}", a.process),
                name: None,
                id: None,
            }));
        };
        let out = serde_json::json!({
            "process": a.process,
            "stdout": String::from_utf8_lossy(&std::mem::take(&mut p.stdout)),
            "stderr": String::from_utf8_lossy(&std::mem::take(&mut p.stderr)),
            "dropped_bytes": std::mem::take(&mut p.dropped),
            "ended": p.exit.is_some() || p.error.is_some(),
            "exit_code": p.exit.and_then(|e| e.0),
            "signal": p.exit.and_then(|e| e.1),
            "error": p.error.clone(),
        });
        if p.exit.is_some() || p.error.is_some() {
            all.remove(&a.process);
        }
        Ok(CallToolResult::structured(out))
    }

    #[tool(description = "Stop a sandbox")]
    async fn stop(&self, Parameters(a): Parameters<NameArgs>) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let info = self.owned(&a.name).await?.stop().await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": info.name, "status": info.status}),
                ))
            }
            .await,
        )
    }

    #[tool(description = "Stop (if needed) and remove a sandbox")]
    async fn destroy(
        &self,
        Parameters(a): Parameters<NameArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                self.owned(&a.name).await?.destroy().await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": a.name}),
                ))
            }
            .await,
        )
    }
}

impl BurrowMcp {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Spawned>> {
        self.processes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This server's sandbox `name`: the one gate of every tool and
    /// resource that names a sandbox (see `scope`). Another's is
    /// `not_found`, a scoped name `invalid_name`, before anything is done.
    async fn owned(&self, name: &str) -> Result<SandboxHandle, Error> {
        scope::owned(&self.backend, name).await
    }

    /// This server's running sandbox `name` (started if it was not: a call
    /// is activity).
    async fn running(&self, name: &str) -> Result<burrow::Sandbox, Error> {
        self.owned(name).await?.connect_or_start().await
    }

    async fn do_create(&self, a: CreateArgs) -> Result<CallToolResult, Error> {
        self.do_create_with(a, false).await
    }

    async fn do_create_with(&self, a: CreateArgs, converge: bool) -> Result<CallToolResult, Error> {
        let a = self.policy.admit(a)?;
        // Converging on a sandbox of this server's adds nothing.
        let exists = converge && self.owned(&a.name).await.is_ok();
        if let (Some(max), false) = (self.policy.max_sandboxes, exists) {
            let have = scope::list(&self.backend).await?.len();
            if have >= max {
                return Err(Error::QuotaExceeded {
                    quota: "sandboxes".into(),
                    limit: max as u64,
                    reason: format!("this server's agent has {have} sandboxes"),
                });
            }
        }
        let mut b = burrow::Sandbox::builder(&a.name)
            .image(a.image)
            .label(LABEL, "true")
            .detached(true)
            .backend(self.backend.clone());
        if let Some(c) = a.cpus {
            b = b.cpus(c);
        }
        if let Some(m) = a.memory_mb {
            b = b.memory_mb(m);
        }
        if let Some(s) = a.idle_timeout_s {
            b = b.idle_timeout(std::time::Duration::from_secs(s));
        }
        if let Some(rules) = a.network_allow {
            let policy = burrow::NetworkPolicy::allow(rules).map_err(|e| Error::InvalidConfig {
                field: "network_allow".into(),
                reason: e.to_string(),
            })?;
            b = b.network(burrow::Network::Policy(policy));
        }
        let sandbox = if converge {
            scope::converge(&self.backend, &a.name, b).await?
        } else {
            b.create().await?
        };
        Ok(CallToolResult::structured(serde_json::json!({
            "name": sandbox.name(), "id": sandbox.id(), "status": "running"
        })))
    }

    async fn do_exec(
        &self,
        a: ExecArgs,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Error> {
        let sandbox = self.running(&a.name).await?;
        let mut process = sandbox.spawn(burrow::ExecOptions::new(a.argv)).await?;
        let token = ctx.meta.get_progress_token();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut chunks = 0u32;
        loop {
            let event = tokio::select! {
                e = process.next_event() => e?,
                _ = ctx.ct.cancelled() => {
                    let _ = process.signal(9);
                    return Err(Error::InvalidArgument {
                        argument: "exec".into(),
                        reason: "cancelled by the client".into(),
                    });
                }
            };
            let (chunk, status) = match event {
                Some(burrow::ExecEvent::Stdout(b)) => {
                    stdout.extend_from_slice(&b);
                    (Some(b), None)
                }
                Some(burrow::ExecEvent::Stderr(b)) => {
                    stderr.extend_from_slice(&b);
                    (Some(b), None)
                }
                Some(burrow::ExecEvent::Exit(s)) => (None, Some(s)),
                None => (None, None),
            };
            if let (Some(b), Some(token)) = (chunk, token.clone()) {
                chunks += 1;
                let mut p = ProgressNotificationParam::new(token, f64::from(chunks));
                p.message = Some(String::from_utf8_lossy(&b).into_owned());
                let _ = ctx.peer.notify_progress(p).await;
            }
            if let Some(s) = status {
                return Ok(CallToolResult::structured(serde_json::json!({
                    "exit_code": s.code,
                    "signal": s.signal,
                    "stdout": String::from_utf8_lossy(&stdout),
                    "stderr": String::from_utf8_lossy(&stderr),
                })));
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BurrowMcp {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        let mut info = rmcp::model::ServerConfig::default();
        info.capabilities = rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        info
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        resources::list(&self.backend).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        resources::read(&self.backend, request.uri).await
    }
}

/// Serves `backend` over stdin/stdout until the client goes away.
pub async fn serve_stdio(backend: Arc<dyn Backend>, policy: Policy) -> std::io::Result<()> {
    use rmcp::ServiceExt;
    let running = BurrowMcp::new(backend, policy)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// Serves `backend` over streamable HTTP at `http://<listener>/mcp` until
/// the process ends. No authentication: `listener` must be a loopback
/// address (the caller checks; see `burrow mcp --listen`).
pub async fn serve_http(
    backend: Arc<dyn Backend>,
    policy: Policy,
    listener: tokio::net::TcpListener,
) -> std::io::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(BurrowMcp::new(backend.clone(), policy.clone())),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, app).await
}
