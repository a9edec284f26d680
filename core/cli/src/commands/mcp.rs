//! `burrow mcp`: an MCP server over stdio (or streamable HTTP on a
//! loopback address) whose tools are burrow's sandboxes, on the backend the
//! CLI would use (the local home, or a `burrow serve` at `BURROW_URL`, whose
//! backend may be Kubernetes). Both transports serve the same policy; the
//! tools act only on the sandboxes this server made.

use clap::Args;

use super::Ctx;

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// An image the agent may use (repeat; none given: any registry
    /// reference or named image). A host directory (a path, or oci:PATH)
    /// or a snapshot (snapshot:NAME) named here is allowed too.
    #[arg(long = "allow-image", value_name = "IMAGE")]
    allow_images: Vec<String>,
    /// Let any host directory be an image (a path, or oci:PATH); without
    /// this flag only one named by --allow-image. Never burrow's home, a
    /// directory under it, or one that holds it.
    #[arg(long)]
    allow_host_images: bool,
    /// The most sandboxes the agent may have at once.
    #[arg(long, value_name = "N")]
    max_sandboxes: Option<usize>,
    /// The most CPUs one sandbox may have (a sandbox created without a
    /// CPU limit gets this one).
    #[arg(long, value_name = "CPUS")]
    max_cpus: Option<f64>,
    /// The most memory one sandbox may have, in MiB (a sandbox created
    /// without a memory limit gets this one).
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
        allow_host_images: args.allow_host_images,
        // This host's home, whichever backend: never an image.
        home: Some(burrow::LocalBackend::default_home()?),
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
