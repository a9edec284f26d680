//! The remote backend: an HTTP client of `burrow serve` with the local
//! backend's semantics and errors.
//!
//! The wire contract is [`crate::api`]. Every operation of a handle goes to
//! the id path with the name the handle captured (`?name=`), so the server
//! checks identity and acts atomically, exactly like the local backend's
//! id-addressed methods. Errors travel as [`crate::api::ErrorBody`] and
//! come back as the same [`Error`] the server saw.
//!
//! ```no_run
//! # async fn demo() -> burrow::Result<()> {
//! use std::sync::Arc;
//! use burrow::{Backend, RemoteBackend, SandboxHandle};
//!
//! let backend: Arc<dyn Backend> =
//!     Arc::new(RemoteBackend::connect("http://127.0.0.1:7070", Some("token".into()))?);
//! let handle = SandboxHandle::get_in(backend, "worker").await?;
//! # Ok(()) }
//! ```
//!
//! Attached sandboxes: the first attached start opens a session
//! (`POST /v1/sessions`), a streamed answer held open for as long as the
//! backend lives. The server stops the sandboxes started through the
//! session (reason `owner_exited`) when its connection closes: when this
//! process exits, or when the last clone of the backend is dropped.

mod http;
mod ndjson;
mod session;
mod tls;
mod url;

use std::sync::Arc;
use std::time::Duration;

use ::http::header::HeaderValue;
use ::http::{Method, StatusCode};
use async_trait::async_trait;
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use self::http::{Http, Mode, Req};
use self::ndjson::{LineSplitter, MAX_LINE};
use self::session::Session;
use self::url::{encode_segment, Endpoint};
use crate::api::{self, LogFrame, SandboxList, StartBody, StopBody, WaitBody, PREFIX};
use crate::backend::{
    Backend, Capabilities, CreateRequest, ListFilter, Metrics, RuntimeStream, StartOptions,
    StopOptions,
};
use crate::error::{Error, Result};
use crate::logs::{LogLine, LogOptions, LogStream};
use crate::model::{validate_name, Modify, ModifyPlan, RunInfo, SandboxId, SandboxInfo, Status};

pub use self::tls::ENV_CA_CERT;
pub use crate::select::{ENV_TOKEN, ENV_URL};
/// Default of [`RemoteBackend::with_retry_budget`].
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(120);

/// Lines of a log stream buffered ahead of the reader.
const LOG_BUFFER: usize = 256;

/// A backend that is an HTTP client of `burrow serve`. Cheap to clone;
/// clones share the connection pool and the session. See the
/// [module documentation](self).
#[derive(Clone)]
pub struct RemoteBackend {
    inner: Arc<Inner>,
    retry_budget: Duration,
}

struct Inner {
    http: Http,
    /// The session attached starts belong to (opened on first use).
    session: tokio::sync::Mutex<Option<Session>>,
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("url", &self.inner.http.url())
            .field("retry_budget", &self.retry_budget)
            .finish_non_exhaustive()
    }
}

impl RemoteBackend {
    /// A backend for the server at `url`: `http://host:port` (optionally
    /// with a path prefix, `http://host:port/burrow`), `https://host[:port]`
    /// (port 443 by default; the server's certificate is checked against
    /// the system's CA certificates and those of the PEM file named by
    /// `$BURROW_CA_CERT`, [`ENV_CA_CERT`], for a private CA) or
    /// `unix:/absolute/path.sock` (HTTP over a unix socket). `token` is sent
    /// as `Authorization: Bearer <token>`. No connection is made here
    /// (an `https://` URL's CA certificates are read): connections are
    /// made on first use. A server certificate the client does not trust
    /// fails the call that connects with [`Error::Io`], as a refused
    /// connection does, and is not retried.
    ///
    /// Any other URL (ftp, a relative unix path, ...) is
    /// [`Error::InvalidConfig`] for the field `url`; an unusable
    /// `$BURROW_CA_CERT` is [`Error::InvalidConfig`] for `BURROW_CA_CERT`.
    pub fn connect(url: &str, token: Option<String>) -> Result<RemoteBackend> {
        Self::build(url, token, "url", "token")
    }

    /// A backend for `$BURROW_URL`, with the token `$BURROW_TOKEN` (if set
    /// and not empty), as [`crate::BackendSelection::from_env`] reads them.
    /// A missing, empty or unusable `BURROW_URL` is
    /// [`Error::InvalidConfig`] for the field `BURROW_URL`.
    pub fn from_env() -> Result<RemoteBackend> {
        match crate::BackendSelection::from_env()? {
            crate::BackendSelection::Remote { url, token } => {
                Self::build(&url, token, ENV_URL, ENV_TOKEN)
            }
            crate::BackendSelection::Local { .. } => Err(Error::InvalidConfig {
                field: ENV_URL.into(),
                reason: "not set".into(),
            }),
        }
    }

    pub(crate) fn build(
        url: &str,
        token: Option<String>,
        url_field: &str,
        token_field: &str,
    ) -> Result<RemoteBackend> {
        let endpoint = Endpoint::parse(url, url_field)?;
        let auth = match token.filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    Error::InvalidConfig {
                        field: token_field.to_owned(),
                        reason: "the token contains characters not allowed in an HTTP header"
                            .into(),
                    }
                })?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        Ok(RemoteBackend {
            inner: Arc::new(Inner {
                http: Http::new(endpoint, url.trim().to_owned(), auth)?,
                session: tokio::sync::Mutex::new(None),
            }),
            retry_budget: DEFAULT_RETRY_BUDGET,
        })
    }

    /// How long a request answered `503` with `Retry-After` (the server is
    /// busy, or the sandbox is being started for this call) keeps being
    /// sent again, each time after the delay the server asked for (at most
    /// 5 s), before the `503`'s error is returned. Default
    /// [`DEFAULT_RETRY_BUDGET`]; zero turns retrying off. A strict start's
    /// `starting` error is returned at once, as from the local backend.
    pub fn with_retry_budget(mut self, budget: Duration) -> RemoteBackend {
        self.retry_budget = budget;
        self
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        self.inner.http.url()
    }

    fn http(&self) -> &Http {
        &self.inner.http
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, req: Req) -> Result<T> {
        self.http().call(&req, self.retry_budget).await
    }

    async fn call_empty(&self, req: Req) -> Result<()> {
        self.http().call_empty(&req, self.retry_budget).await
    }

    /// The id of this process's session with the server, opening one if
    /// there is none (or the last one ended, e.g. the server restarted).
    async fn session(&self) -> Result<String> {
        let mut slot = self.inner.session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| s.is_open()) {
            return Ok(s.id.clone());
        }
        *slot = None;
        let s = Session::open(self.http(), self.retry_budget).await?;
        let id = s.id.clone();
        *slot = Some(s);
        Ok(id)
    }

    async fn start_body(&self, opts: StartOptions) -> Result<StartBody> {
        // A start that is certainly detached belongs to no session.
        let session = match opts.detached {
            Some(true) => None,
            _ => Some(self.session().await?),
        };
        Ok(StartBody {
            detached: opts.detached,
            session,
        })
    }
}

/// `/v1/sandboxes/{id}[/action][?name=]`.
fn id_path(id: &SandboxId, action: Option<&str>, name: Option<&str>) -> String {
    let mut p = format!("{PREFIX}/sandboxes/{}", encode_segment(id.as_str()));
    if let Some(a) = action {
        p.push('/');
        p.push_str(a);
    }
    if let Some(n) = name {
        p.push('?');
        p.push_str(&name_query(n));
    }
    p
}

fn name_query(name: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("name", name)
        .finish()
}

fn post(id: &SandboxId, action: &str, name: &str) -> Req {
    Req::new(Method::POST, id_path(id, Some(action), Some(name)))
}

fn stop_body(opts: StopOptions) -> StopBody {
    StopBody {
        grace_ms: u64::try_from(opts.grace.as_millis()).unwrap_or(u64::MAX),
    }
}

#[async_trait]
impl Backend for RemoteBackend {
    async fn capabilities(&self) -> Result<Capabilities> {
        self.call(Req::new(Method::GET, format!("{PREFIX}/capabilities")))
            .await
    }

    async fn create(&self, req: CreateRequest) -> Result<SandboxInfo> {
        // Refused here, as the local backend refuses it: JSON cannot carry it.
        crate::SandboxConfig::check_cpus(req.config.cpus)?;
        // Secrets' values are never serialized with a configuration: the
        // create request is the one place that carries them.
        let mut body = serde_json::to_value(&req)
            .map_err(|e| Error::protocol(format!("encoding the request: {e}")))?;
        crate::model::secrets::attach_values(&mut body["config"], &req.config.secrets);
        let info: SandboxInfo = self
            .call(Req::new(Method::POST, format!("{PREFIX}/sandboxes")).json(&body)?)
            .await?;
        // Claimed from a warm pool, already running: an attached one joins
        // this process's session as an attached start does.
        if info.status == Status::Running && !req.detached {
            let body = self
                .start_body(StartOptions::default().detached(false))
                .await?;
            return self
                .call(post(&info.id, "connect-or-start", &info.name).json(&body)?)
                .await;
        }
        Ok(info)
    }

    async fn get(&self, name: &str) -> Result<SandboxInfo> {
        validate_name(name)?;
        self.call(Req::new(
            Method::GET,
            format!("{PREFIX}/sandboxes/by-name/{}", encode_segment(name)),
        ))
        .await
    }

    async fn get_by_id(&self, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(Req::new(Method::GET, id_path(id, None, None)))
            .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>> {
        let q = api::list_query(filter);
        let path = if q.is_empty() {
            format!("{PREFIX}/sandboxes")
        } else {
            format!("{PREFIX}/sandboxes?{q}")
        };
        let list: SandboxList = self.call(Req::new(Method::GET, path)).await?;
        Ok(list.sandboxes)
    }

    async fn status(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(Req::new(Method::GET, id_path(id, None, Some(name))))
            .await
    }
    async fn start(&self, name: &str, id: &SandboxId, opts: StartOptions) -> Result<SandboxInfo> {
        let body = self.start_body(opts).await?;
        self.call(post(id, "start", name).json(&body)?).await
    }
    async fn connect_or_start(
        &self,
        name: &str,
        id: &SandboxId,
        opts: StartOptions,
    ) -> Result<SandboxInfo> {
        let body = self.start_body(opts).await?;
        self.call(post(id, "connect-or-start", name).json(&body)?)
            .await
    }
    async fn stop(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.call(post(id, "stop", name).json(&stop_body(opts))?)
            .await
    }
    async fn kill(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(post(id, "kill", name)).await
    }
    async fn request_drain(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(post(id, "drain", name)).await
    }
    /// A stop, then a `connect-or-start` carrying this process's session
    /// (exactly the local backend's restart: two steps, each bound to
    /// `id`). `POST /restart` has no session field, so an attached sandbox
    /// restarted through it would lose its owner.
    async fn restart(&self, name: &str, id: &SandboxId, opts: StopOptions) -> Result<SandboxInfo> {
        self.stop(name, id, opts).await?;
        self.connect_or_start(name, id, StartOptions::default())
            .await
    }
    async fn remove(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.call_empty(Req::new(Method::DELETE, id_path(id, None, Some(name))))
            .await
    }
    async fn destroy(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.call_empty(post(id, "destroy", name)).await
    }
    async fn wait_for_status(
        &self,
        name: &str,
        id: &SandboxId,
        statuses: &[Status],
    ) -> Result<SandboxInfo> {
        // No client-side deadline: the wait lasts as long as it must.
        let body = WaitBody {
            statuses: statuses.to_vec(),
        };
        self.call(post(id, "wait", name).json(&body)?).await
    }
    async fn detach(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(post(id, "detach", name)).await
    }
    async fn touch(&self, name: &str, id: &SandboxId) -> Result<()> {
        self.call_empty(post(id, "touch", name)).await
    }
    async fn pause(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(post(id, "pause", name)).await
    }
    async fn resume(&self, name: &str, id: &SandboxId) -> Result<SandboxInfo> {
        self.call(post(id, "resume", name)).await
    }
    async fn modify(&self, name: &str, id: &SandboxId, changes: &Modify) -> Result<ModifyPlan> {
        crate::SandboxConfig::check_cpus(changes.cpus.flatten())?;
        self.call(Req::new(Method::PATCH, id_path(id, None, Some(name))).json(changes)?)
            .await
    }
    async fn snapshot(
        &self,
        name: &str,
        id: &SandboxId,
        snapshot: &str,
        opts: &crate::SnapshotOptions,
    ) -> Result<crate::SnapshotInfo> {
        crate::validate_snapshot_name(snapshot)?;
        let body = api::SnapshotBody {
            snapshot: snapshot.to_owned(),
            kind: opts.kind,
        };
        self.call(post(id, "snapshot", name).json(&body)?).await
    }
    async fn fork(
        &self,
        name: &str,
        id: &SandboxId,
        opts: &crate::ForkOptions,
    ) -> Result<Vec<SandboxInfo>> {
        opts.validate()?;
        let list: api::SandboxList = self.call(post(id, "fork", name).json(opts)?).await?;
        Ok(list.sandboxes)
    }
    async fn list_snapshots(&self) -> Result<Vec<crate::SnapshotInfo>> {
        let list: api::SnapshotList = self
            .call(Req::new(Method::GET, format!("{PREFIX}/snapshots")))
            .await?;
        Ok(list.snapshots)
    }
    async fn get_snapshot(&self, snapshot: &str) -> Result<crate::SnapshotInfo> {
        // A checked name needs no escaping in a path.
        crate::validate_snapshot_name(snapshot)?;
        self.call(Req::new(
            Method::GET,
            format!("{PREFIX}/snapshots/{snapshot}"),
        ))
        .await
    }
    async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        crate::validate_snapshot_name(snapshot)?;
        self.call_empty(Req::new(
            Method::DELETE,
            format!("{PREFIX}/snapshots/{snapshot}"),
        ))
        .await
    }
    async fn create_pool(&self, spec: crate::PoolSpec) -> Result<crate::PoolInfo> {
        validate_name(&spec.name)?;
        self.call(Req::new(Method::POST, format!("{PREFIX}/pools")).json(&spec)?)
            .await
    }
    async fn get_pool(&self, pool: &str) -> Result<crate::PoolInfo> {
        // A checked name needs no escaping in a path.
        validate_name(pool)?;
        self.call(Req::new(Method::GET, format!("{PREFIX}/pools/{pool}")))
            .await
    }
    async fn list_pools(&self) -> Result<Vec<crate::PoolInfo>> {
        let list: api::PoolList = self
            .call(Req::new(Method::GET, format!("{PREFIX}/pools")))
            .await?;
        Ok(list.pools)
    }
    async fn scale_pool(&self, pool: &str, size: u32) -> Result<crate::PoolInfo> {
        validate_name(pool)?;
        let body = api::PoolPatch { size };
        self.call(Req::new(Method::PATCH, format!("{PREFIX}/pools/{pool}")).json(&body)?)
            .await
    }
    async fn remove_pool(&self, pool: &str) -> Result<()> {
        validate_name(pool)?;
        self.call_empty(Req::new(Method::DELETE, format!("{PREFIX}/pools/{pool}")))
            .await
    }
    async fn metrics(&self, name: &str, id: &SandboxId) -> Result<Metrics> {
        self.call(Req::new(
            Method::GET,
            id_path(id, Some("metrics"), Some(name)),
        ))
        .await
    }

    async fn runs(&self, name: &str, id: &SandboxId, limit: usize) -> Result<Vec<RunInfo>> {
        let limit = limit.clamp(1, api::MAX_RUNS);
        let path = format!("{}&limit={limit}", id_path(id, Some("runs"), Some(name)));
        let list: api::RunList = self.call(Req::new(Method::GET, path)).await?;
        Ok(list.runs)
    }

    async fn logs(&self, name: &str, id: &SandboxId, opts: &LogOptions) -> Result<LogStream> {
        let mut path = id_path(id, Some("logs"), Some(name));
        let q = api::logs_query(opts);
        if !q.is_empty() {
            path.push('&');
            path.push_str(&q);
        }
        let http = self.http();
        let ex = http
            .send(
                &Req::new(Method::GET, path),
                Mode::Streamed,
                self.retry_budget,
            )
            .await?;
        if !ex.response.status().is_success() {
            let (status, _, body) = http.read_body(ex).await?;
            return Err(http.error_from(status, &body));
        }
        let conn = ex.guard;
        let body = ex.response.into_body();
        let url = http.url().to_owned();
        let (tx, rx) = mpsc::channel(LOG_BUFFER);
        tokio::spawn(async move {
            // Dropping the connection task (when this task returns, e.g.
            // because the reader went away) closes the connection.
            let _conn = conn;
            pump_logs(body, tx, &url).await;
        });
        Ok(LogStream::from_channel(rx))
    }

    async fn open_runtime(&self, name: &str, id: &SandboxId, wake: bool) -> Result<RuntimeStream> {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("name", name)
            .append_pair("wake", if wake { "true" } else { "false" })
            .finish();
        let path = format!("{}?{query}", id_path(id, Some("runtime"), None));
        let http = self.http();
        let ex = http
            .send(
                &Req::new(Method::GET, path),
                Mode::Upgrade,
                self.retry_budget,
            )
            .await?;
        let status = ex.response.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let (status, _, body) = http.read_body(ex).await?;
            return Err(if status.is_success() {
                Error::protocol(format!(
                    "the burrow server at {} answered HTTP {status} instead of upgrading to {}",
                    http.url(),
                    api::UPGRADE_PROTOCOL
                ))
            } else {
                http.error_from(status, &body)
            });
        }
        let generation = ex
            .response
            .headers()
            .get(api::HEADER_GENERATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Error::protocol(format!(
                    "the burrow server at {} upgraded without a valid {} header",
                    http.url(),
                    api::HEADER_GENERATION
                ))
            })?;
        let upgraded = hyper::upgrade::on(ex.response)
            .await
            .map_err(|e| http.io_error("upgrading the connection to", std::io::Error::other(e)))?;
        let (reader, writer) = tokio::io::split(hyper_util::rt::TokioIo::new(upgraded));
        Ok(RuntimeStream {
            reader: Box::new(reader),
            writer: Box::new(writer),
            generation,
        })
    }
}

/// Feeds the NDJSON [`LogFrame`]s of `body` to `tx` until the body ends,
/// fails, sends an error frame, or the receiver goes away.
async fn pump_logs(mut body: hyper::body::Incoming, tx: mpsc::Sender<Result<LogLine>>, url: &str) {
    let mut split = LineSplitter::new(MAX_LINE);
    loop {
        let frame = tokio::select! {
            _ = tx.closed() => return,
            frame = body.frame() => frame,
        };
        match frame {
            None => {
                if let Some(last) = split.finish() {
                    deliver(&tx, vec![last], url).await;
                }
                return;
            }
            Some(Err(e)) => {
                let _ = tx
                    .send(Err(Error::Io {
                        context: format!("reading logs from the burrow server at {url}"),
                        path: None,
                        source: std::io::Error::other(e),
                    }))
                    .await;
                return;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let more = match split.push(&data) {
                    Ok(lines) => deliver(&tx, lines, url).await,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        false
                    }
                };
                if !more {
                    return;
                }
            }
        }
    }
}

/// Sends the frames of `lines`; `false` once the stream is over (an error
/// frame, a bad frame, or the receiver went away).
async fn deliver(tx: &mpsc::Sender<Result<LogLine>>, lines: Vec<Vec<u8>>, url: &str) -> bool {
    for line in lines {
        let item = match serde_json::from_slice::<LogFrame>(&line) {
            Ok(LogFrame::Line(l)) => Ok(l),
            Ok(LogFrame::Error(b)) => Err(b.into_error()),
            Err(e) => Err(Error::protocol(format!(
                "bad log frame from the burrow server at {url}: {e}"
            ))),
        };
        let stop = item.is_err();
        if tx.send(item).await.is_err() || stop {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn connect_validates_without_io() {
        let b = RemoteBackend::connect("http://127.0.0.1:1/prefix", Some("s3cret".into())).unwrap();
        assert_eq!(b.url(), "http://127.0.0.1:1/prefix");
        let dbg = format!("{b:?}");
        assert!(dbg.contains("http://127.0.0.1:1/prefix"), "{dbg}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
        assert!(RemoteBackend::connect("unix:/tmp/b.sock", None).is_ok());
        assert!(RemoteBackend::connect("http://h:1", Some(String::new())).is_ok());
        assert!(RemoteBackend::connect("https://h", None).is_ok());
        for bad in ["https://", "unix:rel.sock", "nonsense", ""] {
            match RemoteBackend::connect(bad, None).unwrap_err() {
                Error::InvalidConfig { field, .. } => assert_eq!(field, "url", "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let err = RemoteBackend::connect("http://h:1", Some("a\nb".into())).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidConfig);
        let b = b.with_retry_budget(Duration::from_secs(3));
        assert_eq!(b.retry_budget, Duration::from_secs(3));
    }

    #[test]
    fn id_paths_encode_names() {
        let id: SandboxId = "sb_0123456789abcdefghjkmnpqrs".parse().unwrap();
        assert_eq!(
            id_path(&id, None, None),
            "/v1/sandboxes/sb_0123456789abcdefghjkmnpqrs"
        );
        assert_eq!(
            id_path(&id, Some("start"), Some("a b&c=d/é")),
            "/v1/sandboxes/sb_0123456789abcdefghjkmnpqrs/start?name=a+b%26c%3Dd%2F%C3%A9"
        );
        let q: Vec<_> = form_urlencoded::parse(name_query("x+y %").as_bytes())
            .into_owned()
            .collect();
        assert_eq!(q, vec![("name".to_owned(), "x+y %".to_owned())]);
    }

    #[tokio::test]
    async fn unreachable_server_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("nobody.sock");
        let url = format!("unix:{}", sock.display());
        let b = RemoteBackend::connect(&url, None).unwrap();
        let err = b.get("worker").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Io);
        assert!(err.to_string().contains(&url), "{err}");
        // Names are checked before anything is sent.
        let err = b.get("a/b/c").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidName);
    }
}
