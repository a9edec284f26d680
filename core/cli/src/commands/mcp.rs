//! `burrow mcp`: an MCP server over stdio (or streamable HTTP on a
//! loopback address) whose tools are burrow's sandboxes, on the backend the
//! CLI would use (the local home, or a `burrow serve` at `BURROW_URL`, whose
//! backend may be Kubernetes).

use clap::Args;

use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// An image the agent may use (repeat; none given: any image).
    #[arg(long = "allow-image", value_name = "IMAGE")]
    allow_images: Vec<String>,
    /// The most sandboxes the agent may have at once.
    #[arg(long, value_name = "N")]
    max_sandboxes: Option<usize>,
    /// The most CPUs one sandbox may ask for.
    #[arg(long, value_name = "CPUS")]
    max_cpus: Option<f64>,
    /// The most memory one sandbox may ask for, in MiB.
    #[arg(long, value_name = "MIB")]
    max_memory_mb: Option<u64>,
    /// Let sandboxes have a network (the rules an agent gives; without
    /// this flag a sandbox has none).
    #[arg(long)]
    allow_network: bool,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (a
    /// loopback address: there is no authentication).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
}

pub(crate) async fn mcp(ctx: Ctx, args: McpArgs) -> anyhow::Result<u8> {
    let backend = ctx.backend().await?;
    let policy = burrow_mcp::Policy {
        allowed_images: args.allow_images,
        max_sandboxes: args.max_sandboxes,
        max_cpus: args.max_cpus,
        max_memory_mb: args.max_memory_mb,
        allow_network: args.allow_network,
    };
    match args.listen {
        Some(addr) => {
            if !addr.ip().is_loopback() {
                return Err(burrow::Error::InvalidArgument {
                    argument: "--listen".into(),
                    reason: format!(
                        "{addr} is not a loopback address (there is no authentication)"
                    ),
                }
                .into());
            }
            let listener = tokio::net::TcpListener::bind(addr).await?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            burrow_mcp::serve_http(backend, policy, listener).await?;
        }
        None => burrow_mcp::serve_stdio(backend, policy).await?,
    }
    Ok(0)
}
