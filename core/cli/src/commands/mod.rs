//! User commands. Each submodule parses one command (or a small group) and
//! calls library code; this module owns the global flags, the async runtime,
//! and how results and errors reach the user (exit codes, `--json`).

mod common;
mod cp;
mod create;
mod doctor;
mod exec;
mod fork;
mod images;
mod lifecycle;
mod logs;
mod ls;
mod mcp;
mod metrics;
mod modify;
mod output;
mod ping;
mod pool;
mod rm;
mod run;
mod serve;
mod serve_tenants;
mod shell;
mod snapshot;
mod up;
mod version;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

pub(crate) use output::{Ctx, Usage};

/// burrow: run isolated sandboxes and manage their lifecycle.
#[derive(Debug, Parser)]
#[command(name = "burrow", version, after_help = output::EXIT_CODES, arg_required_else_help = true)]
struct Cli {
    /// Machine-readable JSON output; errors are then printed on stdout too.
    #[arg(long, global = true)]
    json: bool,
    /// The burrow home directory (default: $BURROW_HOME, else
    /// ~/.local/share/burrow). Keep it short: socket paths live under it.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Define a sandbox without starting it: `create [--name N] IMAGE`;
    /// prints its id.
    Create(create::CreateArgs),
    /// Run a command in a new sandbox: `run [--name N] IMAGE -- CMD...`.
    ///
    /// The sandbox is created and started, the command's output streamed,
    /// and the sandbox removed when it ends (--keep leaves it stopped);
    /// exits with the command's code. Without --name the sandbox gets a
    /// generated name.
    Run(run::RunArgs),
    /// Converge on a running sandbox by name: create it if missing, start it
    /// if stopped; it is left running detached.
    Up(up::UpArgs),
    /// Start a sandbox, detached from this command.
    Start(lifecycle::Target),
    /// Stop a sandbox gracefully (or kill it with --force).
    Stop(lifecycle::StopArgs),
    /// Stop and start a sandbox again (same id and configuration).
    Restart(lifecycle::Target),
    /// Stop a sandbox immediately.
    Kill(lifecycle::Target),
    /// Stop accepting new work; the sandbox stops once in-flight work ends.
    Drain(lifecycle::Target),
    /// Suspend every process of a running sandbox.
    Pause(lifecycle::Target),
    /// Continue a paused sandbox.
    Resume(lifecycle::Target),
    /// Check that a running sandbox answers; prints the round-trip time.
    ///
    /// A ping is not activity: it never keeps an idle sandbox alive (add
    /// --touch for that) and never starts a reclaimed one.
    Ping(ping::PingArgs),
    /// Serve burrow's sandboxes as tools of an MCP server over stdio (for
    /// an agent's MCP configuration). Work in progress.
    Mcp(mcp::McpArgs),
    /// Count as activity: keeps an idle timeout from reclaiming the sandbox.
    Touch(lifecycle::Target),
    /// Change limits, environment, labels or timeouts of a sandbox.
    ///
    /// Prints, per field, where the change applies: live, to future execs,
    /// at the next start, or immediately (labels).
    Modify(modify::ModifyArgs),
    /// CPU, memory, io and process counts of a running sandbox.
    Metrics(metrics::MetricsArgs),
    /// Run a command in a running sandbox and stream its output.
    Exec(exec::ExecArgs),
    /// Open an interactive shell in a running sandbox.
    Shell(shell::ShellArgs),
    /// List sandboxes (`ps NAME`: just that one).
    #[command(visible_alias = "ps")]
    Ls(ls::LsArgs),
    /// Show everything known about a sandbox as JSON.
    Inspect(lifecycle::Target),
    /// Print (or follow) a sandbox's guest log and supervisor events.
    Logs(logs::LogsArgs),
    /// Remove sandboxes (--force kills running ones first).
    Rm(rm::RmArgs),
    /// Copy files between the host and a running sandbox (NAME:/path).
    Cp(cp::CpArgs),
    /// Pull an image from a registry into the local store (progress per layer).
    Pull(images::PullArgs),
    /// List pulled images.
    Images,
    /// Manage pulled images (ls, rm, prune).
    Image {
        #[command(subcommand)]
        command: images::ImageCommand,
    },
    /// Copy a running sandbox into new ones, each started: a vm sandbox
    /// whole (memory, processes, files), a container by its files.
    Fork(fork::ForkArgs),
    /// Save sandboxes by name and manage the snapshots (create, ls,
    /// inspect, rm); `--image snapshot:NAME` creates sandboxes from one.
    Snapshot {
        #[command(subcommand)]
        command: snapshot::SnapshotCommand,
    },
    /// Warm pools (create, ls, inspect, scale, rm): sandboxes kept started
    /// so that a create of their configuration claims one at once.
    Pool {
        #[command(subcommand)]
        command: pool::PoolCommand,
    },
    /// Report which drivers (container, vm) work on this host, and why not;
    /// with --kubernetes, whether the Kubernetes backend's cluster runs
    /// sandboxes.
    Doctor(doctor::DoctorArgs),
    /// Run the HTTP API and demand gateway (`burrow serve token ...` manages
    /// API tokens).
    Serve(serve::ServeArgs),
    /// Print the version.
    Version,
}

/// Entry point of every command except the internal `__supervise`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return output::usage_failure(e),
    };
    let ctx = Ctx { json: cli.json };
    if let Some(home) = &cli.home {
        // Before any thread exists and before the backend is opened: the
        // library reads BURROW_HOME when the shared backend is first used.
        std::env::set_var("BURROW_HOME", home);
    }
    if !matches!(cli.command, Command::Serve(_)) {
        init_logging();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return ctx.fail(anyhow::Error::new(e).context("starting the async runtime")),
    };
    let result = rt.block_on(dispatch(ctx, cli.command));
    // Do not wait for a blocked stdin reader or similar on the way out.
    rt.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => ctx.fail(e),
    }
}

async fn dispatch(ctx: Ctx, command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Create(a) => create::create(ctx, a).await,
        Command::Run(a) => run::run(ctx, a).await,
        Command::Up(a) => up::up(ctx, a).await,
        Command::Start(a) => lifecycle::start(ctx, a).await,
        Command::Stop(a) => lifecycle::stop(ctx, a).await,
        Command::Restart(a) => lifecycle::restart(ctx, a).await,
        Command::Kill(a) => lifecycle::kill(ctx, a).await,
        Command::Drain(a) => lifecycle::drain(ctx, a).await,
        Command::Pause(a) => lifecycle::pause(ctx, a).await,
        Command::Resume(a) => lifecycle::resume(ctx, a).await,
        Command::Ping(a) => ping::ping(ctx, a).await,
        Command::Mcp(a) => mcp::mcp(ctx, a).await,
        Command::Touch(a) => ping::touch(ctx, a).await,
        Command::Modify(a) => modify::modify(ctx, a).await,
        Command::Metrics(a) => metrics::metrics(ctx, a).await,
        Command::Exec(a) => exec::exec(ctx, a).await,
        Command::Shell(a) => shell::shell(ctx, a).await,
        Command::Ls(a) => ls::ls(ctx, a).await,
        Command::Inspect(a) => lifecycle::inspect(ctx, a).await,
        Command::Logs(a) => logs::logs(ctx, a).await,
        Command::Rm(a) => rm::rm(ctx, a).await,
        Command::Cp(a) => cp::cp(ctx, a).await,
        Command::Pull(a) => images::pull(ctx, a).await,
        Command::Images => images::images(ctx).await,
        Command::Image { command } => images::image(ctx, command).await,
        Command::Snapshot { command } => snapshot::snapshot(ctx, command).await,
        Command::Fork(args) => fork::fork(ctx, args).await,
        Command::Pool { command } => pool::pool(ctx, command).await,
        Command::Doctor(a) => doctor::doctor(ctx, a).await,
        Command::Serve(a) => serve::serve(ctx, a).await,
        Command::Version => version::version(ctx),
    }
}

/// Library logs on stderr, quiet unless `BURROW_LOG` asks for more.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BURROW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
