//! `burrow mcp`: burrow's sandboxes as tools of an MCP server, for any
//! agent. WORK IN PROGRESS (issue 42): the first tools, over stdio.
//!
//! Every tool acts through one [`Backend`] (local, remote or Kubernetes,
//! chosen as the CLI chooses), within a [`Policy`]; every sandbox it
//! creates carries the label [`LABEL`] so a cleanup finds them. A burrow
//! error is a tool error whose structured content carries burrow's code.

use std::sync::Arc;

use burrow::{Backend, Error, ListFilter, SandboxHandle};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;

/// The label on every sandbox the server creates.
pub const LABEL: &str = "burrow.mcp";

/// What an agent may do.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Images it may use (empty: any).
    pub allowed_images: Vec<String>,
    /// Sandboxes it may have at once (its own, by [`LABEL`]; `None`: no
    /// limit).
    pub max_sandboxes: Option<usize>,
}

/// The MCP server.
#[derive(Clone)]
pub struct BurrowMcp {
    backend: Arc<dyn Backend>,
    policy: Policy,
    tool_router: ToolRouter<BurrowMcp>,
}

impl std::fmt::Debug for BurrowMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurrowMcp")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// `create` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The sandbox's name.
    pub name: String,
    /// The image (a registry reference, or a named image).
    pub image: String,
}

/// Arguments naming a sandbox.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameArgs {
    /// The sandbox's name.
    pub name: String,
}

/// `exec` arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The sandbox's name.
    pub name: String,
    /// The command and its arguments.
    pub argv: Vec<String>,
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

    #[tool(description = "List the sandboxes")]
    async fn list(&self) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let all = self.backend.list(&ListFilter::default()).await?;
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

    #[tool(description = "Stop a sandbox")]
    async fn stop(&self, Parameters(a): Parameters<NameArgs>) -> Result<CallToolResult, ErrorData> {
        done(
            async {
                let h = SandboxHandle::get_in(self.backend.clone(), &a.name).await?;
                let info = h.stop().await?;
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
                let h = SandboxHandle::get_in(self.backend.clone(), &a.name).await?;
                h.destroy().await?;
                Ok(CallToolResult::structured(
                    serde_json::json!({"name": a.name}),
                ))
            }
            .await,
        )
    }
}

impl BurrowMcp {
    async fn do_create(&self, a: CreateArgs) -> Result<CallToolResult, Error> {
        if !self.policy.allowed_images.is_empty() && !self.policy.allowed_images.contains(&a.image)
        {
            return Err(Error::InvalidConfig {
                field: "image".into(),
                reason: format!("{:?} is not an image this server allows", a.image),
            });
        }
        if let Some(max) = self.policy.max_sandboxes {
            let mut mine = ListFilter::default();
            mine.labels.insert(LABEL.into(), "true".into());
            let have = self.backend.list(&mine).await?.len();
            if have >= max {
                return Err(Error::QuotaExceeded {
                    quota: "sandboxes".into(),
                    limit: max as u64,
                    reason: format!("this server's agent has {have} sandboxes"),
                });
            }
        }
        let sandbox = burrow::Sandbox::builder(a.name)
            .image(a.image)
            .label(LABEL, "true")
            .detached(true)
            .backend(self.backend.clone())
            .create()
            .await?;
        Ok(CallToolResult::structured(serde_json::json!({
            "name": sandbox.name(), "id": sandbox.id(), "status": "running"
        })))
    }

    async fn do_exec(
        &self,
        a: ExecArgs,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Error> {
        let h = SandboxHandle::get_in(self.backend.clone(), &a.name).await?;
        let sandbox = h.connect_or_start().await?;
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
impl ServerHandler for BurrowMcp {}

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
