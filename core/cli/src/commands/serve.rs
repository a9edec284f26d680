//! `burrow serve`: the HTTP API, demand gateway and reaper
//! (see the `burrow-server` crate), and its API tokens.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::common::{ago, print_table};
use super::Ctx;
use burrow_server::config::{ConfigError, Flags, LogFormat};
use burrow_server::store::{StoreError, TargetKind, TargetStatus};
use burrow_server::{ServeConfig, StartupError};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Configuration file (TOML; default: $BURROW_SERVE_CONFIG). Environment
    /// variables BURROW_SERVE_* override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve HTTPS on the TCP listeners with this certificate chain (PEM;
    /// `tls.cert`, $BURROW_SERVE_TLS_CERT). Needs --tls-key; both files are
    /// read again when they change.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<String>,
    /// The private key of --tls-cert (PEM; `tls.key`, $BURROW_SERVE_TLS_KEY).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<String>,
    #[command(subcommand)]
    command: Option<ServeCommand>,
}

#[derive(Debug, Subcommand)]
enum ServeCommand {
    /// Check the configuration, the TLS certificate and key, and the
    /// database (migrating it), print the effective configuration, and
    /// exit.
    Check,
    /// Print each gateway target's runtime state (dormant, starting, ready,
    /// reaping, failed; `-` if never called), when it was last used, its
    /// live leases (calls in flight) and the replica holding a start or a
    /// reclaim, as the database has them.
    Status,
    /// Manage API tokens (stored hashed in the server's database).
    Token {
        #[command(subcommand)]
        command: super::serve_tenants::TokenCommand,
    },
    /// Manage tenants: each token belongs to one, and sees only its
    /// tenant's sandboxes, pools, snapshots, targets and sessions.
    Tenant {
        #[command(subcommand)]
        command: super::serve_tenants::TenantCommand,
    },
    /// Page through the audit log (changes asked of the API, refusals,
    /// and actions in sandboxes: execs, files, copies, tunnels, console
    /// downloads, gateway calls), oldest first.
    Audit(super::serve_tenants::AuditArgs),
}

/// A configuration the server cannot use, as the library's
/// `invalid_config` (exit code 6, `--json` code `invalid_config`).
fn config_error(field: &str, reason: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    anyhow::Error::new(burrow::Error::InvalidConfig {
        field: field.to_owned(),
        reason: burrow::error::report(reason),
    })
    .context("burrow serve cannot start")
}

fn load(args: &ServeArgs) -> anyhow::Result<ServeConfig> {
    let flags = Flags {
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
    };
    load_config(args.config.as_deref(), &flags).map_err(|e| e.context("burrow serve cannot start"))
}

/// The serve configuration of `file` (else `$BURROW_SERVE_CONFIG`), the
/// environment and `flags`; a bad one is [`burrow::Error::InvalidConfig`]
/// naming the key.
pub(crate) fn load_config(
    file: Option<&std::path::Path>,
    flags: &Flags,
) -> anyhow::Result<ServeConfig> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    ServeConfig::load_with_flags(file, &env, flags).map_err(|e| {
        let field = match &e {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::Missing { key, .. } => key.clone(),
            ConfigError::UnknownBackend { .. } => "backend".into(),
            ConfigError::UnknownEnv { name, .. } => name.clone(),
            _ => "configuration file".into(),
        };
        anyhow::Error::new(burrow::Error::InvalidConfig {
            field,
            reason: e.to_string(),
        })
    })
}

/// Startup failures: an unusable database or listen address is a
/// configuration error; anything else is reported as it is.
fn startup_error(e: StartupError) -> anyhow::Error {
    match e {
        StartupError::Store(s @ StoreError::Open { .. }) => config_error("database", &s),
        StartupError::Listen { .. } => config_error("listen", &e),
        StartupError::Kubernetes { .. } => config_error("kubernetes", &e),
        StartupError::Tls(ref t) => config_error(t.setting(), &e),
        other => anyhow::Error::new(other).context("burrow serve cannot start"),
    }
}

/// Logging for a long-running server: info from the server by default,
/// text or JSON as configured; `BURROW_LOG` overrides the filter.
pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BURROW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,burrow_server=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

pub(crate) async fn serve(ctx: Ctx, args: ServeArgs) -> anyhow::Result<u8> {
    let config = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            init_logging(LogFormat::Text);
            return Err(e);
        }
    };
    init_logging(config.log.format);
    match &args.command {
        None => {
            burrow_server::run(config).await.map_err(startup_error)?;
            Ok(0)
        }
        Some(ServeCommand::Check) => {
            if let Some(tls) = &config.tls {
                burrow_server::tls::ServerTls::load(tls)
                    .map_err(|e| startup_error(StartupError::Tls(e)))?;
            }
            burrow_server::serve::open_store(&config)
                .await
                .map_err(startup_error)?;
            let text = config.describe();
            ctx.print(&json!({"ok": true, "config": text}), format_args!("{text}"))?;
            Ok(0)
        }
        Some(ServeCommand::Status) => {
            let store = burrow_server::serve::open_store(&config)
                .await
                .map_err(startup_error)?;
            print_status(&ctx, &store.status(burrow_server::store::now_ms()).await?)?;
            Ok(0)
        }
        Some(ServeCommand::Token { command }) => {
            let store = burrow_server::serve::open_store(&config)
                .await
                .map_err(startup_error)?;
            super::serve_tenants::token(&ctx, &store, command).await?;
            Ok(0)
        }
        Some(ServeCommand::Audit(args)) => {
            let store = burrow_server::serve::open_store(&config)
                .await
                .map_err(startup_error)?;
            super::serve_tenants::audit(&ctx, &store, args).await?;
            Ok(0)
        }
        Some(ServeCommand::Tenant { command }) => {
            let store = burrow_server::serve::open_store(&config)
                .await
                .map_err(startup_error)?;
            super::serve_tenants::tenant(&ctx, &store, command).await?;
            Ok(0)
        }
    }
}

fn print_status(ctx: &Ctx, targets: &[TargetStatus]) -> anyhow::Result<()> {
    let now = burrow_server::store::now_ms();
    if ctx.json {
        let list: Vec<_> = targets
            .iter()
            .map(|t| {
                let (kind, port, url) = match &t.target.kind {
                    TargetKind::Sandbox { port, .. } => ("sandbox", Some(*port), None),
                    TargetKind::Url { url } => ("url", None, Some(url.as_str())),
                };
                let r = t.runtime.as_ref();
                json!({
                    "id": t.target.id,
                    "kind": kind,
                    "port": port,
                    "url": url,
                    "state": r.map(|r| r.state),
                    "generation": r.map(|r| r.generation),
                    "last_used_at_ms": r.map(|r| r.last_used_at),
                    "updated_at_ms": r.map(|r| r.updated_at),
                    "owner": r.and_then(|r| r.owner.clone()),
                    "last_error": r.and_then(|r| r.last_error.clone()),
                    "live_leases": t.live_leases,
                })
            })
            .collect();
        return ctx.print_json(&json!({ "targets": list }));
    }
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            let kind = match &t.target.kind {
                TargetKind::Sandbox { port, .. } => format!("sandbox :{port}"),
                TargetKind::Url { url } => format!("url {url}"),
            };
            let dash = || "-".to_owned();
            let r = t.runtime.as_ref();
            vec![
                t.target.id.clone(),
                kind,
                r.map_or_else(dash, |r| r.state.as_str().to_owned()),
                r.map_or_else(dash, |r| r.generation.to_string()),
                r.map_or_else(|| "never called".into(), |r| ago(now - r.last_used_at)),
                t.live_leases.to_string(),
                r.and_then(|r| r.owner.clone()).unwrap_or_else(dash),
                r.and_then(|r| r.last_error.clone()).unwrap_or_else(dash),
            ]
        })
        .collect();
    print_table(
        &[
            "TARGET",
            "KIND",
            "STATE",
            "GENERATION",
            "LAST USED",
            "LEASES",
            "OWNER",
            "LAST ERROR",
        ],
        &rows,
    );
    Ok(())
}
