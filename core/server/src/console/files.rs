//! The console's files browser: list a directory, download a file, upload
//! one, in a running sandbox (through its runtime, as the library's `fs`
//! does). Files move whole, up to [`MAX_FILE`] each way. Downloads and
//! uploads are in the audit log (the path, never the bytes).

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use burrow::{Error, Sandbox, SandboxHandle};
use http_body_util::BodyExt;
use serde::Serialize;

use crate::app::{ApiError, ApiResult};
use crate::audit::{short, Action};
use crate::routes::parse_id;
use crate::tenancy::Engine;

/// The largest file the console moves.
pub const MAX_FILE: u64 = 64 << 20;

/// The running sandbox `id` of the caller's tenant.
pub(super) async fn running(engine: &Engine, id: &str) -> Result<Sandbox, Error> {
    let id = parse_id(id)?;
    SandboxHandle::get_by_id_in(engine.0.clone(), &id)
        .await?
        .connect()
        .await
}

/// The `path` of a query (the only parameter these routes take).
fn path_of(raw: Option<&str>) -> Result<String, Error> {
    let mut path = None;
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "path" => path = Some(v.into_owned()),
            other => {
                return Err(Error::InvalidArgument {
                    argument: other.to_owned(),
                    reason: "not a parameter (path)".into(),
                })
            }
        }
    }
    path.ok_or_else(|| Error::InvalidArgument {
        argument: "path".into(),
        reason: "required".into(),
    })
}

fn too_large(what: &str, size: u64) -> ApiError {
    ApiError::with_status(
        Error::InvalidArgument {
            argument: what.into(),
            reason: format!("{size} bytes or more; the console moves files up to {MAX_FILE} bytes"),
        },
        StatusCode::PAYLOAD_TOO_LARGE,
    )
}

#[derive(Serialize)]
pub(super) struct Listing {
    path: String,
    entries: Vec<burrow_protocol::DirEntry>,
}

/// `GET /ui/api/sandboxes/{id}/files?path=`: a directory's entries,
/// directories first, then by name.
pub async fn list(
    engine: Engine,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Listing>> {
    // The sandbox first: another tenant's is absent, whatever the query.
    let sandbox = running(&engine, &id).await?;
    let path = path_of(raw.as_deref())?;
    let mut entries = sandbox.fs().list(&path).await?;
    entries.sort_by(|a, b| {
        let dir = |e: &burrow_protocol::DirEntry| e.kind != burrow_protocol::FileKind::Dir;
        (dir(a), &a.name).cmp(&(dir(b), &b.name))
    });
    Ok(Json(Listing { path, entries }))
}

/// A `Content-Disposition` for a download named after the path's last
/// part (any byte outside printable ASCII, and quotes, percent-encoded in
/// `filename*`).
fn disposition(path: &str) -> HeaderValue {
    let name = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("file");
    let plain: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let v = format!("attachment; filename=\"{plain}\"; filename*=UTF-8''{encoded}");
    HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("attachment"))
}

/// The audit log's name of a console action on sandbox `id`, with the
/// query's path.
fn action(operation: &'static str, id: &str, raw: Option<&str>) -> Action {
    Action {
        operation,
        sandbox: id.to_owned(),
        object: path_of(raw).ok().map(|p| short(&p)),
    }
}

/// `GET /ui/api/sandboxes/{id}/files/content?path=`: a file, as a download
/// (logged as `console.download`, whatever the answer).
pub async fn download(engine: Engine, Path(id): Path<String>, RawQuery(raw): RawQuery) -> Response {
    let res = fetch(&engine, &id, raw.as_deref()).await;
    action("console.download", &id, raw.as_deref())
        .on(res.unwrap_or_else(IntoResponse::into_response))
}

async fn fetch(engine: &Engine, id: &str, raw: Option<&str>) -> ApiResult<Response> {
    // The sandbox first: another tenant's is absent, whatever the query.
    let sandbox = running(engine, id).await?;
    let path = path_of(raw)?;
    let stat = sandbox.fs().stat(&path).await?;
    if stat.kind != burrow_protocol::FileKind::File {
        return Err(Error::InvalidArgument {
            argument: "path".into(),
            reason: format!("{path} is not a regular file"),
        }
        .into());
    }
    if stat.size > MAX_FILE {
        return Err(too_large("path", stat.size));
    }
    let data = sandbox.fs().read(&path).await?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_DISPOSITION, disposition(&path)),
        ],
        data,
    )
        .into_response())
}

/// `PUT /ui/api/sandboxes/{id}/files/content?path=`: writes the body to a
/// file (created or replaced; logged as `console.upload`).
pub async fn upload(
    engine: Engine,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    req: Request,
) -> Response {
    let res = store(&engine, &id, raw.as_deref(), req).await;
    action("console.upload", &id, raw.as_deref()).on(res.into_response())
}

async fn store(
    engine: &Engine,
    id: &str,
    raw: Option<&str>,
    req: Request,
) -> ApiResult<StatusCode> {
    let sandbox = running(engine, id).await?;
    let path = path_of(raw)?;
    let limited = http_body_util::Limited::new(req.into_body(), MAX_FILE as usize);
    let data = match Body::new(limited).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                return Err(too_large("body", MAX_FILE + 1));
            }
            return Err(Error::InvalidArgument {
                argument: "body".into(),
                reason: format!("reading it failed: {e}"),
            }
            .into());
        }
    };
    sandbox.fs().write(&path, &data).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_are_named_after_the_file() {
        assert_eq!(
            disposition("/tmp/a b\"c.txt"),
            "attachment; filename=\"a_b_c.txt\"; filename*=UTF-8''a%20b%22c.txt"
        );
        assert_eq!(
            disposition("/"),
            "attachment; filename=\"file\"; filename*=UTF-8''file"
        );
    }

    #[test]
    fn the_path_is_the_only_parameter() {
        assert_eq!(path_of(Some("path=%2Ftmp")).unwrap(), "/tmp");
        let code = |r: Result<String, Error>| r.unwrap_err().code();
        assert_eq!(code(path_of(None)), burrow::ErrorCode::InvalidArgument);
        assert_eq!(
            code(path_of(Some("path=/&x=1"))),
            burrow::ErrorCode::InvalidArgument
        );
    }
}
