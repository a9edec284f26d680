//! Starting and running the server.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use axum::serve::ListenerExt;
use burrow::{Backend, LocalBackend};

use crate::app::{router, AppState, Transport};
use crate::audit::{Peer, Peered};
use crate::config::{Listen, ServeConfig};
use crate::store::{Store, StoreError};
use crate::tls::ServerTls;

/// Why the server could not start. Each thing is said once: an error of
/// the engine is the `source()` (its own chain says why), an I/O error is
/// in the text and not also a `source()`.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database is unusable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine could not open its home (the engine's error names the
    /// home and says why).
    #[error(transparent)]
    Engine(burrow::Error),
    /// The home directory could not be created.
    #[error("cannot create the burrow home {home}: {error}")]
    Home {
        /// The home.
        home: String,
        /// Why.
        error: std::io::Error,
    },
    /// The Kubernetes backend could not reach its cluster (credentials that
    /// do not load, an unknown context, an API server that does not answer).
    #[error("the kubernetes backend cannot start")]
    Kubernetes {
        /// Why (naming where the credentials came from).
        #[source]
        error: burrow::Error,
    },
    /// The TLS certificate or key of `[tls]` cannot be used (the error
    /// names the file and why).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A listener could not be bound.
    #[error("cannot listen on {what}: {error}")]
    Listen {
        /// The address.
        what: String,
        /// Why.
        error: std::io::Error,
    },
}

/// Opens the database named by the configuration (and migrates it). The
/// home is created first (0700, as the engine's): the default SQLite
/// database lives in it.
pub async fn open_store(config: &ServeConfig) -> Result<Store, StartupError> {
    create_home(&config.home).map_err(|error| StartupError::Home {
        home: config.home.display().to_string(),
        error,
    })?;
    Ok(Store::open(
        config.database.as_str(),
        &config.database.redacted(),
        config.database_pool.max_connections,
        config.database_pool.acquire_timeout,
    )
    .await?)
}

/// Creates `home` (and its parents) if missing, and restricts it to its
/// owner, as the local engine does with its homes.
fn create_home(home: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)?;
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700))
}

/// What a listener serves.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// The API, the console and `/gw/` for programs.
    Api,
    /// The gateway's own origin (`gateway.listen`).
    Gateway,
}

enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

async fn bind(
    listen: &Listen,
    reuse_port: bool,
    tls: bool,
) -> Result<(Bound, String), StartupError> {
    let what = |l: &Listen| match l {
        Listen::Tcp(a) => a.to_string(),
        Listen::Unix(p) => format!("unix:{}", p.display()),
    };
    let err = |error| StartupError::Listen {
        what: what(listen),
        error,
    };
    match listen {
        Listen::Tcp(addr) => {
            let socket = match addr {
                std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
                std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
            }
            .map_err(err)?;
            // As std's and tokio's own bind: a port in TIME_WAIT is reused.
            socket.set_reuseaddr(true).map_err(err)?;
            if reuse_port {
                socket.set_reuseport(true).map_err(err)?;
            }
            socket.bind(*addr).map_err(err)?;
            let l = socket.listen(1024).map_err(err)?;
            let local = l.local_addr().map_err(err)?;
            let scheme = if tls { "https" } else { "http" };
            Ok((Bound::Tcp(l), format!("{scheme}://{local}")))
        }
        Listen::Unix(path) => {
            // A socket file left by a server that died is replaced; anything
            // else at that path is an error.
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                use std::os::unix::fs::FileTypeExt;
                if meta.file_type().is_socket() {
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(err(std::io::Error::new(
                            std::io::ErrorKind::AddrInUse,
                            "another server listens there",
                        )));
                    }
                    let _ = std::fs::remove_file(path);
                }
            }
            let l = bind_private(path).map_err(err)?;
            Ok((
                Bound::Unix(l, path.clone()),
                format!("unix:{}", path.display()),
            ))
        }
    }
}

/// Binds a unix socket at `path` that only its owner can connect to from
/// the first instant: bound in a new directory of mode 0700 beside it,
/// made 0600, then renamed into place (a listening socket keeps working
/// under its new name). A chmod after binding at `path` would leave a
/// moment in which anybody could connect.
fn bind_private(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = path.parent().unwrap_or(std::path::Path::new("/"));
    let stage = parent.join(format!(".burrow-serve-{}.sock.d", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::DirBuilder::new().mode(0o700).create(&stage)?;
    let staged = stage.join("s");
    let bound = (|| {
        let l = tokio::net::UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(l)
    })();
    let _ = std::fs::remove_dir_all(&stage);
    bound
}

/// Runs the server over the configured backend (the local backend of the
/// configured home, or the Kubernetes cluster of `[kubernetes]`) until
/// SIGINT/SIGTERM. See [`run_with`].
pub async fn run(config: ServeConfig) -> Result<(), StartupError> {
    let engine: Arc<dyn Backend> = match config.backend {
        crate::config::BackendKind::Kubernetes => {
            let backend = burrow_kube::KubeBackend::connect(config.kubernetes.clone())
                .await
                .map_err(|error| StartupError::Kubernetes { error })?;
            // Which credentials won (an execution cluster's kubeconfig, the
            // pod's service account, ...): the one line an operator needs
            // when sandboxes land on the wrong cluster.
            tracing::info!(
                credentials = backend.source().kind(),
                namespace = %config.kubernetes.namespace,
                "the kubernetes backend reaches its cluster through {}",
                backend.source()
            );
            backend
        }
        _ => Arc::new(
            LocalBackend::open_at(&config.home)
                .await
                .map_err(StartupError::Engine)?,
        ),
    };
    run_with(config, engine).await
}

/// Runs the server over any backend until SIGINT/SIGTERM: the API, the
/// gateway, sessions and the reaper all act through `engine`, and an
/// operation it does not support answers `501 unsupported`. The server's
/// own tables live in the configured database (and `home` holds the
/// default SQLite one). Prints one `listening on <url>` line per listener
/// on stdout once every listener is bound (`https://` for TCP listeners
/// with `[tls]`, whose certificate is read again when its files change).
/// Every listener tells the handlers its peer's address ([`Peer`], for
/// the audit log).
pub async fn run_with(config: ServeConfig, engine: Arc<dyn Backend>) -> Result<(), StartupError> {
    // The certificate first: a pair that cannot be used stops the server
    // before it listens.
    let tls = config.tls.as_ref().map(ServerTls::load).transpose()?;
    let store = open_store(&config).await?;
    let mut bound = Vec::new();
    for l in &config.listen {
        let (b, url) = bind(l, config.reuse_port, tls.is_some()).await?;
        bound.push((b, url, Role::Api));
    }
    let mut gateway_port = None;
    for l in &config.gateway.listen {
        let (b, url) = bind(l, config.reuse_port, tls.is_some()).await?;
        if let (Bound::Tcp(t), None) = (&b, gateway_port) {
            gateway_port = t.local_addr().ok().map(|a| a.port());
        }
        bound.push((b, url, Role::Gateway));
    }
    // The default domain names the first gateway listener's port: the one
    // it got when it was configured as port 0.
    let mut config = config;
    if let Some(d) = config.gateway.domain.as_mut().filter(|d| d.port == Some(0)) {
        d.port = gateway_port;
    }
    tracing::info!("{}", config.describe());
    let state = AppState::new(engine, store, config);
    for (_, url, role) in &bound {
        match role {
            Role::Api => println!("listening on {url}"),
            Role::Gateway => println!("gateway listening on {url}"),
        }
    }
    tokio::spawn(crate::reaper::run(state.clone()));
    tokio::spawn(crate::events::pump::run(state.clone()));
    tokio::spawn(crate::events::deliver::run(state.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(tls) = &tls {
        let mut rx = stop_rx.clone();
        tls.watch(async move {
            let _ = rx.wait_for(|s| *s).await;
        });
    }
    let mut servers = Vec::new();
    let mut sockets = Vec::new();
    for (b, _, role) in bound {
        let mut rx = stop_rx.clone();
        let shutdown = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        servers.push(match b {
            Bound::Tcp(l) => {
                let app = match role {
                    Role::Api => router(state.clone(), Transport::Tcp),
                    Role::Gateway => crate::gateway::host::router(state.clone()),
                };
                match &tls {
                    // Handshakes in tasks of their own; nodelay set there.
                    Some(tls) => {
                        let l = Peered(tls.listener(l));
                        let app = app.into_make_service_with_connect_info::<Peer>();
                        tokio::spawn(async move {
                            axum::serve(l, app).with_graceful_shutdown(shutdown).await
                        })
                    }
                    None => {
                        // Small request/answer exchanges: no Nagle delay.
                        let l = Peered(l.tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        }));
                        let app = app.into_make_service_with_connect_info::<Peer>();
                        tokio::spawn(async move {
                            axum::serve(l, app).with_graceful_shutdown(shutdown).await
                        })
                    }
                }
            }
            Bound::Unix(l, path) => {
                sockets.push(path);
                let app = match role {
                    Role::Api => router(state.clone(), Transport::Unix),
                    Role::Gateway => crate::gateway::host::router(state.clone()),
                };
                let (l, app) = (Peered(l), app.into_make_service_with_connect_info::<Peer>());
                tokio::spawn(
                    async move { axum::serve(l, app).with_graceful_shutdown(shutdown).await },
                )
            }
        });
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = state.shutdown.send(true);
    // Streams (sessions, followed logs, proxied responses) may stay open:
    // give them a moment, then go.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        for s in servers {
            let _ = s.await;
        }
    })
    .await;
    for p in sockets {
        let _ = std::fs::remove_file(p);
    }
    // What the audit log's queue holds is written before the process goes.
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(5), state.store.flush_audit()).await;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
