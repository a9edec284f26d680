//! The server's outbound calls for its tenants, through the outbound guard
//! ([`burrow_net::outbound`]): URL gateway targets (the gateway's client
//! is given [`GuardedConnector`]) and webhooks ([`guard`] connects each
//! delivery); the pulls of a tenant's images go through the same guard in
//! the sandbox's supervisor (its egress ceiling carries the allow list).
//!
//! Each connection resolves the name, vets every address (the host's own,
//! loopback, private, link-local, CGNAT, multicast and other non-public
//! addresses are refused, in any spelling, unless `[outbound] allow`
//! names them) and connects to those very addresses, so a name that
//! answers differently on its next lookup gains nothing. This holds for
//! every tenant, the default one too: what a server's own calls may reach
//! is the operator's to open, not a token's.
//!
//! A tenant never sees why a call failed: a refused connection and one
//! that failed give the same answer ([`Unreachable`]); the detail goes to
//! the server's log. A URL whose host is a denied address, written out or
//! resolved at that moment, is refused when the target or the webhook is
//! made ([`refuse_internal`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::Uri;
use burrow::Error;
use burrow_net::outbound::Guard;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::ServeConfig;

/// The guard of the server's outbound calls under `config`.
pub fn guard(config: &ServeConfig) -> Guard {
    Guard::new(config.outbound.allow.clone())
}

/// The one error of an outbound call that was refused or failed, as a
/// tenant sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the target could not be reached")]
pub struct Unreachable;

/// The text a webhook delivery records for any attempt that got no
/// answer (refused, failed, timed out: the same for all).
pub const NOT_REACHED: &str = "the receiver could not be reached";

/// How long a lookup made to check a URL being registered may take.
const CHECK_LOOKUP: Duration = Duration::from_secs(5);

/// Refuses `host:port` of a URL being registered (`argument`: the
/// request's field) when it is a denied address written out (in any
/// spelling) or `localhost` that `[outbound] allow` does not name: no
/// call to it could ever be made.
pub fn refuse_literal(
    config: &ServeConfig,
    host: &str,
    port: u16,
    argument: &str,
) -> Result<(), Error> {
    match guard(config).refuses_literal(host, port) {
        None => Ok(()),
        Some(e) => Err(refused(argument, &e)),
    }
}

/// [`refuse_literal`], and a name that resolves to a denied address now
/// is refused too. A name that does not resolve (yet) is accepted: every
/// call resolves it again and vets what it gets (so a name that answers
/// differently later is caught then).
pub async fn refuse_internal(
    config: &ServeConfig,
    host: &str,
    port: u16,
    argument: &str,
) -> Result<(), Error> {
    refuse_literal(config, host, port, argument)?;
    if burrow_net::ceiling::parse_ip(host).is_some() {
        return Ok(());
    }
    match tokio::time::timeout(CHECK_LOOKUP, guard(config).resolve(host, port)).await {
        Ok(Err(e)) if e.is_refused() => Err(refused(argument, &e)),
        _ => Ok(()),
    }
}

fn refused(argument: &str, e: &burrow_net::outbound::OutboundError) -> Error {
    tracing::info!("refused an outbound {argument}: {e}");
    Error::InvalidArgument {
        argument: argument.to_owned(),
        reason: "the host is an address of the server's host or of a private network, \
                 which the server does not call (an operator opens one with \
                 [outbound] allow)"
            .into(),
    }
}

/// A connector of the hyper client making each connection through the
/// guard (plain HTTP URLs only).
#[derive(Debug, Clone)]
pub struct GuardedConnector {
    guard: Arc<Guard>,
}

impl GuardedConnector {
    /// A connector guarded as `config` says.
    pub fn new(config: &ServeConfig) -> GuardedConnector {
        GuardedConnector {
            guard: Arc::new(guard(config)),
        }
    }
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = Unreachable;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Unreachable>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Unreachable>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let guard = self.guard.clone();
        Box::pin(async move {
            let (Some(host), Some("http")) = (uri.host(), uri.scheme_str()) else {
                tracing::warn!(%uri, "outbound guard: not a plain HTTP URL");
                return Err(Unreachable);
            };
            let port = uri.port_u16().unwrap_or(80);
            match guard.connect(host, port).await {
                Ok(s) => Ok(TokioIo::new(s)),
                Err(e) => {
                    tracing::warn!("outbound guard: {e}");
                    Err(Unreachable)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn config(allow: &str) -> ServeConfig {
        let env: BTreeMap<String, String> = [
            ("BURROW_HOME", "/nonexistent/home"),
            ("BURROW_SERVE_OUTBOUND_ALLOW", allow),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        ServeConfig::load(None, &env).unwrap()
    }

    #[test]
    fn literal_hosts_are_refused_unless_allowed() {
        let c = config("");
        for host in [
            "127.0.0.1",
            "2130706433",
            "[::1]",
            "169.254.169.254",
            "localhost",
            "10.1.2.3",
        ] {
            let e = refuse_literal(&c, host, 80, "url").unwrap_err();
            assert_eq!(e.code(), burrow::ErrorCode::InvalidArgument, "{host}");
        }
        refuse_literal(&c, "example.com", 80, "url").unwrap();
        refuse_literal(&c, "93.184.216.34", 80, "url").unwrap();
        let c = config("tcp:127.0.0.1:9000");
        refuse_literal(&c, "127.0.0.1", 9000, "url").unwrap();
        assert!(refuse_literal(&c, "127.0.0.1", 9001, "url").is_err());
    }

    #[tokio::test]
    async fn the_connector_refuses_and_fails_alike() {
        use tower_service::Service;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut refusing = GuardedConnector::new(&config(""));
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        assert_eq!(refusing.call(uri).await.unwrap_err(), Unreachable);
        let mut allowing = GuardedConnector::new(&config("127.0.0.1"));
        let uri: Uri = format!("http://127.0.0.1:{closed}/").parse().unwrap();
        assert_eq!(allowing.call(uri).await.unwrap_err(), Unreachable);
        let uri: Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        allowing.call(uri).await.unwrap();
        listener.accept().await.unwrap();
    }
}
