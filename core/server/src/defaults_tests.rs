//! Host defaults belong to the backend that runs the sandbox: a remote
//! client that leaves the driver (or demand start) to the backend gets the
//! server's defaults, whatever its own host says.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use burrow::{
    Backend, CreateRequest, DriverKind, LocalBackend, LocalConfig, RemoteBackend, SandboxConfig,
};

use crate::app::{router, AppState, Transport};
use crate::ServeConfig;

/// A server over a local backend with the host defaults `defaults`, on a
/// loopback port routed as a unix-socket connection (no token), and a
/// remote client of it.
async fn serve(defaults: LocalConfig) -> (tempfile::TempDir, Arc<dyn Backend>) {
    let dir = tempfile::tempdir().unwrap();
    let env: BTreeMap<String, String> = [
        ("BURROW_HOME", dir.path().join("home").display().to_string()),
        (
            "BURROW_SERVE_DATABASE",
            format!("sqlite://{}", dir.path().join("serve.db").display()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let config = ServeConfig::load(None, &env).unwrap();
    let store = crate::serve::open_store(&config).await.unwrap();
    let engine = LocalBackend::open_with(&config.home, defaults)
        .await
        .unwrap();
    let state = AppState::new(Arc::new(engine), store, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(state, Transport::Unix)).await });
    let client = RemoteBackend::connect(&url, None).unwrap();
    (dir, Arc::new(client))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_create_without_a_driver_gets_the_servers_defaults() {
    // The server's host: vm by default, demand start off by default. (The
    // client's own environment plays no part: the client sends no driver.)
    let (dir, remote) = serve(
        LocalConfig::new()
            .default_driver(DriverKind::Vm)
            .demand_start_default(false),
    )
    .await;
    let image = dir.path().join("rootfs");
    std::fs::create_dir(&image).unwrap();
    let image = image.to_string_lossy().into_owned();

    let mut config = SandboxConfig::new(image.clone());
    config.idle_timeout = Some(Duration::from_secs(60));
    assert_eq!(config.driver, None);
    let sent = serde_json::to_value(&config).unwrap();
    assert!(
        sent.get("driver").is_none(),
        "no driver on the wire: {sent}"
    );
    let info = remote
        .create(CreateRequest::new("left-to-server", config))
        .await
        .unwrap();
    assert_eq!(info.config.driver, Some(DriverKind::Vm));
    assert_eq!(info.config.demand_start, Some(false));
    assert!(!info.config.demand_start_enabled());
    // Recorded: every later read says the same.
    let again = remote.get_by_id(&info.id).await.unwrap();
    assert_eq!(again.config, info.config);

    // What the client names wins over the server's defaults.
    let mut config = SandboxConfig::new(image);
    config.driver = Some(DriverKind::Container);
    config.idle_timeout = Some(Duration::from_secs(60));
    config.demand_start = Some(true);
    let info = remote
        .create(CreateRequest::new("named-by-client", config))
        .await
        .unwrap();
    assert_eq!(info.config.driver, Some(DriverKind::Container));
    assert!(info.config.demand_start_enabled());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_defaults_leave_demand_start_to_the_idle_timeout() {
    let (dir, remote) = serve(LocalConfig::new()).await;
    let image = dir.path().join("rootfs");
    std::fs::create_dir(&image).unwrap();
    let info = remote
        .create(CreateRequest::new(
            "built-in",
            SandboxConfig::new(image.to_string_lossy()),
        ))
        .await
        .unwrap();
    assert_eq!(info.config.driver, Some(DriverKind::Container));
    // Unset: on as soon as an idle timeout is (a later modify) set.
    assert_eq!(info.config.demand_start, None);
}
