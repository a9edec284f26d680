//! The Kubernetes client: the stack `kube::Client::try_from(config)`
//! builds (connect, read and write timeouts; the base URI; retries of
//! throttled and unavailable answers; authentication; extra headers), with
//! one change: its TCP connections set `TCP_NODELAY`.
//!
//! Without it, the small frames of an exec stream (the agent channel, and
//! so every tunnelled gateway call) met Nagle's algorithm on this side and
//! the API server's delayed ACK on the other: 40 ms added to one warm MCP
//! call in ten (`cargo bench -p burrow-cli --bench mcp`, p90).

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// A client of `config` whose connections set `TCP_NODELAY`.
pub(crate) fn build(config: Config) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(client.map_err(BoxError::from));
    Ok(Client::new(service, config.default_namespace))
}
