//! A sandbox's resources: `burrow://sandbox/<name>/info` (its record, JSON)
//! and `burrow://sandbox/<name>/logs` (its last 200 log lines), for this
//! server's sandboxes only (`crate::scope`).

use std::sync::Arc;

use burrow::{Backend, Error};
use rmcp::model::{
    ListResourcesResult, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
};
use rmcp::ErrorData;

const PREFIX: &str = "burrow://sandbox/";

/// Log lines a `logs` resource holds.
const LOG_LINES: usize = 200;

/// Two resources per sandbox of this server.
pub(crate) async fn list(backend: &Arc<dyn Backend>) -> Result<ListResourcesResult, ErrorData> {
    let all = crate::scope::list(backend)
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let mut resources = Vec::new();
    for s in all {
        for (what, mime) in [("info", "application/json"), ("logs", "text/plain")] {
            let mut r = Resource::new(
                format!("{PREFIX}{}/{what}", s.name),
                format!("{} {what}", s.name),
            );
            r.mime_type = Some(mime.into());
            resources.push(r);
        }
    }
    Ok(ListResourcesResult::with_all_items(resources))
}

/// The resource at `uri`; one that is not there (no such sandbox, one
/// that is not this server's, or not a resource's name) is
/// `resource_not_found`.
pub(crate) async fn read(
    backend: &Arc<dyn Backend>,
    uri: String,
) -> Result<ReadResourceResponse, ErrorData> {
    let parsed = uri
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.rsplit_once('/'));
    let Some((name, what)) = parsed else {
        return Err(ErrorData::resource_not_found(
            format!("no resource {uri}"),
            None,
        ));
    };
    let text = text_of(backend, name, what, &uri)
        .await
        .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri.clone())]).into())
}

async fn text_of(
    backend: &Arc<dyn Backend>,
    name: &str,
    what: &str,
    uri: &str,
) -> Result<String, Error> {
    let handle = crate::scope::owned(backend, name).await?;
    match what {
        "info" => Ok(serde_json::to_string_pretty(&handle.info().await?).unwrap_or_default()),
        "logs" => {
            let opts = burrow::LogOptions::default().tail(LOG_LINES);
            let mut stream = handle.logs(&opts).await?;
            let mut text = String::new();
            while let Some(line) = stream.next().await {
                text.push_str(&line?.text);
                text.push('\n');
            }
            Ok(text)
        }
        _ => Err(Error::NotFound {
            what: format!("resource {uri}"),
            name: None,
            id: None,
        }),
    }
}
