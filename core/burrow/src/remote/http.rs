//! HTTP/1.1 over TCP, TLS over TCP (`https://`) or a unix socket with
//! hyper's connection API: a small pool of idle keep-alive connections,
//! `Retry-After` on `503`, and the decoding of answers and error bodies.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::header::{HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

use super::url::Endpoint;
use crate::api::ErrorEnvelope;
use crate::error::{Error, Result};

type Body = Full<Bytes>;
type Sender = http1::SendRequest<Body>;

/// Longest answer body read into memory.
const MAX_BODY: usize = 64 << 20;
/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;
/// An idle connection older than this is not reused (servers close idle
/// keep-alive connections; a fresh one avoids racing that close).
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on establishing a connection (the TLS handshake included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest single wait a `Retry-After` can ask for.
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);
/// Shortest wait between retries (a `Retry-After: 0` does not spin).
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);

/// One request, kept as owned bytes so it can be sent again.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) method: Method,
    /// Path and query, below the endpoint's prefix (`/v1/...`).
    pub(crate) path: String,
    /// JSON body.
    pub(crate) body: Option<Bytes>,
}

impl Req {
    pub(crate) fn new(method: Method, path: String) -> Req {
        Req {
            method,
            path,
            body: None,
        }
    }

    /// With `value` as the JSON body.
    pub(crate) fn json<T: serde::Serialize>(mut self, value: &T) -> Result<Req> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| Error::protocol(format!("cannot encode the request body: {e}")))?;
        self.body = Some(Bytes::from(bytes));
        Ok(self)
    }
}

/// How the connection of a request is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A pooled connection, returned to the pool once the answer is read.
    Pooled,
    /// A fresh connection for a streamed answer, closed when the
    /// [`TaskGuard`] of the exchange is dropped.
    Streamed,
    /// A fresh connection that may be upgraded; never pooled.
    Upgrade,
}

/// Aborts a task when dropped.
#[derive(Debug)]
pub(crate) struct TaskGuard(pub(crate) JoinHandle<()>);

impl TaskGuard {
    /// Whether the task has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An answer and what keeps its connection.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) response: Response<Incoming>,
    /// [`Mode::Pooled`]: the connection, to return once the body is read.
    sender: Option<Sender>,
    /// [`Mode::Streamed`]: the task driving the connection.
    pub(crate) guard: Option<TaskGuard>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// The HTTP side of a remote backend.
pub(crate) struct Http {
    endpoint: Endpoint,
    url: String,
    auth: Option<HeaderValue>,
    /// The TLS client configuration of an `https://` endpoint.
    tls: Option<Arc<rustls::ClientConfig>>,
    idle: Mutex<Vec<Idle>>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("url", &self.url)
            .field("token", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Http {
    /// The client of `endpoint`; an `https://` one reads its trusted
    /// roots here (the system's and `$BURROW_CA_CERT`'s: a file there that
    /// cannot be used is [`Error::InvalidConfig`]).
    pub(crate) fn new(endpoint: Endpoint, url: String, auth: Option<HeaderValue>) -> Result<Http> {
        let tls = if endpoint.is_tls() {
            Some(super::tls::client_config()?)
        } else {
            None
        };
        Ok(Http {
            endpoint,
            url,
            auth,
            tls,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The server URL as configured.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An I/O error naming the server.
    pub(crate) fn io_error(&self, what: &str, source: io::Error) -> Error {
        Error::Io {
            context: format!("{what} the burrow server at {}", self.url),
            path: None,
            source,
        }
    }

    fn hyper_error(&self, what: &str, e: hyper::Error) -> Error {
        self.io_error(what, io::Error::other(e))
    }

    async fn dial(&self) -> Result<Stream> {
        let connect = async {
            match &self.endpoint {
                Endpoint::Tcp { host, port, .. } => {
                    let s = TcpStream::connect((host.as_str(), *port))
                        .await
                        .map_err(Dial::Connect)?;
                    s.set_nodelay(true).map_err(Dial::Connect)?;
                    let Some(tls) = &self.tls else {
                        return Ok(Stream::Tcp(s));
                    };
                    // Checked when the URL was parsed.
                    let name = super::tls::server_name(host).ok_or_else(|| {
                        Dial::Connect(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("{host:?} is not a host name a certificate can hold"),
                        ))
                    })?;
                    let s = tokio_rustls::TlsConnector::from(tls.clone())
                        .connect(name, s)
                        .await
                        .map_err(Dial::Handshake)?;
                    Ok(Stream::Tls(Box::new(s)))
                }
                Endpoint::Unix { path } => Ok(Stream::Unix(
                    UnixStream::connect(path).await.map_err(Dial::Connect)?,
                )),
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(Dial::Connect(e))) => Err(self.io_error("cannot connect to", e)),
            // Not retried (nothing is, but a 503): a certificate the
            // client does not trust stays untrusted.
            Ok(Err(Dial::Handshake(e))) => Err(super::tls::handshake_error(&self.url, e)),
            Err(_) => Err(self.io_error(
                "cannot connect to",
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection after {CONNECT_TIMEOUT:?}"),
                ),
            )),
        }
    }

    /// A fresh connection; its driver runs in a spawned task.
    async fn open(&self, mode: Mode) -> Result<(Sender, JoinHandle<()>)> {
        let io = TokioIo::new(self.dial().await?);
        let (sender, conn) = http1::handshake(io)
            .await
            .map_err(|e| self.hyper_error("cannot talk to", e))?;
        let task = if mode == Mode::Upgrade {
            tokio::spawn(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!(error = %e, "burrow server connection ended");
                }
            })
        } else {
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "burrow server connection ended");
                }
            })
        };
        Ok((sender, task))
    }

    /// An idle pooled connection that is still usable.
    async fn checkout(&self) -> Option<Sender> {
        loop {
            let mut idle = {
                let mut pool = self.idle();
                loop {
                    let i = pool.pop()?;
                    if i.since.elapsed() < IDLE_TIMEOUT && !i.sender.is_closed() {
                        break i;
                    }
                }
            };
            // The previous answer was read to its end: the connection is
            // ready at once unless it is closing.
            if let Ok(Ok(())) =
                tokio::time::timeout(Duration::from_secs(1), idle.sender.ready()).await
            {
                return Some(idle.sender);
            }
        }
    }

    fn checkin(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut pool = self.idle();
        if pool.len() >= MAX_IDLE {
            pool.remove(0);
        }
        pool.push(Idle {
            sender,
            since: Instant::now(),
        });
    }

    fn build(&self, req: &Req, mode: Mode) -> Result<Request<Body>> {
        let uri = format!("{}{}", self.endpoint.prefix(), req.path);
        let mut b = Request::builder()
            .method(req.method.clone())
            .uri(&uri)
            .header(http::header::HOST, self.endpoint.host_header())
            .header(
                http::header::USER_AGENT,
                concat!("burrow/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = &self.auth {
            b = b.header(http::header::AUTHORIZATION, auth.clone());
        }
        if mode == Mode::Upgrade {
            b = b
                .header(http::header::CONNECTION, "upgrade")
                .header(http::header::UPGRADE, crate::api::UPGRADE_PROTOCOL);
        }
        let body = match &req.body {
            Some(bytes) => {
                b = b.header(http::header::CONTENT_TYPE, "application/json");
                Full::new(bytes.clone())
            }
            None => Full::new(Bytes::new()),
        };
        b.body(body)
            .map_err(|e| Error::protocol(format!("cannot build the request for {uri:?}: {e}")))
    }

    /// Sends `req` once, on a pooled connection when one is idle (and on a
    /// fresh one when the pooled one turns out closed before the request
    /// went out).
    async fn send_once(&self, req: &Req, mode: Mode) -> Result<Exchange> {
        if mode == Mode::Pooled {
            while let Some(mut sender) = self.checkout().await {
                match sender.try_send_request(self.build(req, mode)?).await {
                    Ok(response) => {
                        return Ok(Exchange {
                            response,
                            sender: Some(sender),
                            guard: None,
                        })
                    }
                    Err(mut e) => {
                        // Not sent at all, or a reused connection the server
                        // had closed under an idempotent request: try anew.
                        let unsent = e.take_message().is_some();
                        if unsent
                            || (req.method == Method::GET && e.error().is_incomplete_message())
                        {
                            continue;
                        }
                        return Err(self.hyper_error("request failed to", e.into_error()));
                    }
                }
            }
        }
        let (mut sender, task) = self.open(mode).await?;
        let response = match sender.send_request(self.build(req, mode)?).await {
            Ok(r) => r,
            Err(e) => {
                task.abort();
                return Err(self.hyper_error("request failed to", e));
            }
        };
        Ok(match mode {
            Mode::Pooled => Exchange {
                response,
                sender: Some(sender),
                guard: None,
            },
            Mode::Streamed => Exchange {
                response,
                sender: None,
                guard: Some(TaskGuard(task)),
            },
            // The connection task ends by itself: after handing the
            // connection to the upgrade, or when the answer was not one.
            Mode::Upgrade => Exchange {
                response,
                sender: None,
                guard: None,
            },
        })
    }

    /// Sends `req`; a `503` with `Retry-After` is sent again after that
    /// delay (at most [`MAX_RETRY_WAIT`] each time) while `budget` lasts.
    /// A `503` that is not retried (any more) is returned as the error it
    /// carries, so a returned exchange is never a `503`.
    pub(crate) async fn send(&self, req: &Req, mode: Mode, budget: Duration) -> Result<Exchange> {
        let deadline = Instant::now() + budget;
        loop {
            let ex = self.send_once(req, mode).await?;
            if ex.response.status() != StatusCode::SERVICE_UNAVAILABLE {
                return Ok(ex);
            }
            // Read the answer off the connection (so it can be reused).
            let (status, headers, body) = self.read_body(ex).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            match retry_delay(&headers, &body) {
                Some(wait) if !left.is_zero() => {
                    let wait = wait.min(left);
                    tracing::debug!(
                        path = %req.path,
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "burrow server busy (503), retrying"
                    );
                    tokio::time::sleep(wait).await;
                }
                _ => return Err(self.error_from(status, &body)),
            }
        }
    }

    /// Reads the whole body of `ex` (bounded), returning a pooled
    /// connection to the pool afterwards.
    pub(crate) async fn read_body(&self, ex: Exchange) -> Result<(StatusCode, HeaderMap, Bytes)> {
        let (parts, body) = ex.response.into_parts();
        let collected = Limited::new(body, MAX_BODY).collect().await;
        let bytes = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                return Err(match e.downcast::<hyper::Error>() {
                    Ok(e) => self.hyper_error("reading the answer of", *e),
                    Err(e) => Error::protocol(format!(
                        "the answer of the burrow server at {} is too large: {e}",
                        self.url
                    )),
                })
            }
        };
        if let Some(sender) = ex.sender {
            self.checkin(sender);
        }
        drop(ex.guard);
        Ok((parts.status, parts.headers, bytes))
    }

    /// Sends `req` and decodes a JSON answer.
    pub(crate) async fn call<T: DeserializeOwned>(&self, req: &Req, budget: Duration) -> Result<T> {
        let ex = self.send(req, Mode::Pooled, budget).await?;
        let (status, _, body) = self.read_body(ex).await?;
        if !status.is_success() {
            return Err(self.error_from(status, &body));
        }
        serde_json::from_slice(&body).map_err(|e| {
            Error::protocol(format!(
                "unexpected answer of the burrow server at {} to {} {}: {e}",
                self.url, req.method, req.path
            ))
        })
    }

    /// Sends `req`, expecting an answer without a body (`204`).
    pub(crate) async fn call_empty(&self, req: &Req, budget: Duration) -> Result<()> {
        let ex = self.send(req, Mode::Pooled, budget).await?;
        let (status, _, body) = self.read_body(ex).await?;
        if !status.is_success() {
            return Err(self.error_from(status, &body));
        }
        Ok(())
    }

    /// The error an unsuccessful answer carries.
    pub(crate) fn error_from(&self, status: StatusCode, body: &[u8]) -> Error {
        decode_error(&self.url, status, body)
    }
}

/// Rebuilds the error of an error answer; a body that is not an
/// [`ErrorEnvelope`] is [`Error::Protocol`] naming the status.
pub(crate) fn decode_error(url: &str, status: StatusCode, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(env) => env.error.into_error(),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let snippet: String = text.chars().take(200).collect();
            Error::protocol(format!(
                "the burrow server at {url} answered HTTP {status}{}",
                if snippet.is_empty() {
                    String::new()
                } else {
                    format!(": {snippet}")
                }
            ))
        }
    }
}

/// How long to wait before sending again a request answered `503` with
/// these headers and body, or `None` when it must not be sent again.
///
/// A `starting` error of the API itself (a strict `start` while another
/// start is in progress) is the local backend's immediate answer, not a
/// request to come back: it is returned as is, even though the server
/// marks every `503` with `Retry-After`. A `503` saying what the sandbox is
/// doing ([`crate::api::HEADER_SANDBOX_STATE`], the gateway's "a start is
/// in progress") is always safe to send again.
pub(crate) fn retry_delay(headers: &HeaderMap, body: &[u8]) -> Option<Duration> {
    let wait = retry_after(headers)?;
    if headers.contains_key(crate::api::HEADER_SANDBOX_STATE) {
        return Some(wait);
    }
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(env) if env.error.code == crate::ErrorCode::Starting.as_str() => None,
        _ => Some(wait),
    }
}

/// The delay of a `Retry-After` header in seconds (the HTTP-date form is
/// not used by `burrow serve` and counts as absent), clamped to
/// `[MIN_RETRY_WAIT, MAX_RETRY_WAIT]`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = v.parse::<u64>().unwrap_or(u64::MAX);
    Some(
        Duration::from_secs(secs.min(MAX_RETRY_WAIT.as_secs()))
            .clamp(MIN_RETRY_WAIT, MAX_RETRY_WAIT),
    )
}

/// Why a connection could not be made.
enum Dial {
    /// Connecting (TCP or the unix socket).
    Connect(io::Error),
    /// The TLS handshake.
    Handshake(io::Error),
}

/// A TCP, TLS or unix stream.
#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after(&HeaderMap::new()), None);
        assert_eq!(retry_after(&with("1")), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(&with(" 3 ")), Some(Duration::from_secs(3)));
        // Capped at 5 s, floored so 0 does not spin.
        assert_eq!(retry_after(&with("5")), Some(MAX_RETRY_WAIT));
        assert_eq!(retry_after(&with("120")), Some(MAX_RETRY_WAIT));
        assert_eq!(
            retry_after(&with("99999999999999999999999")),
            Some(MAX_RETRY_WAIT)
        );
        assert_eq!(retry_after(&with("0")), Some(MIN_RETRY_WAIT));
        // Not seconds: absent.
        for bad in [
            "",
            "-1",
            "1.5",
            "soon",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "+2",
        ] {
            assert_eq!(retry_after(&with(bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn which_503s_are_sent_again() {
        let starting = serde_json::to_vec(&ErrorEnvelope {
            error: crate::api::ErrorBody::from(&Error::Starting {
                name: "w".into(),
                id: crate::SandboxId::new(),
            }),
        })
        .unwrap();
        let store = serde_json::to_vec(&ErrorEnvelope {
            error: crate::api::ErrorBody::from(&Error::Store {
                reason: "pool timed out".into(),
                source: None,
            }),
        })
        .unwrap();
        let one = Some(Duration::from_secs(1));
        // Without Retry-After: never.
        assert_eq!(retry_delay(&HeaderMap::new(), &store), None);
        // A busy store, a proxy's page: yes.
        assert_eq!(retry_delay(&with("1"), &store), one);
        assert_eq!(retry_delay(&with("1"), b"<html>busy</html>"), one);
        // A strict start's `starting` is an answer, not a "come back".
        assert_eq!(retry_delay(&with("1"), &starting), None);
        // ...unless the server says the sandbox is starting for this call.
        let mut h = with("1");
        h.insert(
            crate::api::HEADER_SANDBOX_STATE,
            HeaderValue::from_static("starting"),
        );
        assert_eq!(retry_delay(&h, &starting), one);
    }

    #[test]
    fn error_answers() {
        let id = crate::SandboxId::new();
        let e = Error::Starting {
            name: "w".into(),
            id: id.clone(),
        };
        let body = serde_json::to_vec(&ErrorEnvelope {
            error: crate::api::ErrorBody::from(&e),
        })
        .unwrap();
        let back = decode_error("http://h:1", StatusCode::SERVICE_UNAVAILABLE, &body);
        assert_eq!(back.code(), ErrorCode::Starting);
        assert_eq!(back.sandbox_id(), Some(&id));

        let e = decode_error(
            "http://h:1",
            StatusCode::BAD_GATEWAY,
            b"<html>bad gateway</html>",
        );
        assert_eq!(e.code(), ErrorCode::Protocol);
        let text = e.to_string();
        assert!(text.contains("502"), "{text}");
        assert!(text.contains("http://h:1"), "{text}");
        let e = decode_error("unix:/x.sock", StatusCode::UNAUTHORIZED, b"");
        assert_eq!(e.code(), ErrorCode::Protocol);
        assert!(e.to_string().contains("401"));
    }

    #[test]
    fn requests_carry_auth_host_and_prefix() {
        let ep = Endpoint::parse("http://h:8080/base", "url").unwrap();
        let mut auth = HeaderValue::from_static("Bearer s3cret");
        auth.set_sensitive(true);
        let http = Http::new(ep, "http://h:8080/base".into(), Some(auth)).unwrap();
        let req = Req::new(Method::POST, "/v1/sandboxes/x/start?name=a".into())
            .json(&crate::api::StartBody::default())
            .unwrap();
        let built = http.build(&req, Mode::Pooled).unwrap();
        assert_eq!(built.uri(), "/base/v1/sandboxes/x/start?name=a");
        assert_eq!(built.headers()[http::header::HOST], "h:8080");
        assert_eq!(
            built.headers()[http::header::AUTHORIZATION],
            "Bearer s3cret"
        );
        assert_eq!(
            built.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
        assert!(built.headers().get(http::header::UPGRADE).is_none());
        let up = http
            .build(&Req::new(Method::GET, "/v1/x".into()), Mode::Upgrade)
            .unwrap();
        assert_eq!(up.headers()[http::header::UPGRADE], "burrow-protocol");
        assert_eq!(up.headers()[http::header::CONNECTION], "upgrade");
        assert!(!format!("{http:?}").contains("s3cret"));

        let ep = Endpoint::parse("unix:/run/b.sock", "url").unwrap();
        let http = Http::new(ep, "unix:/run/b.sock".into(), None).unwrap();
        let built = http
            .build(&Req::new(Method::GET, "/v1/sandboxes".into()), Mode::Pooled)
            .unwrap();
        assert_eq!(built.uri(), "/v1/sandboxes");
        assert_eq!(built.headers()[http::header::HOST], "localhost");
        assert!(built.headers().get(http::header::AUTHORIZATION).is_none());
    }
}
