//! The client session: one held-open `POST /v1/sessions` per backend. The
//! server stops the sandboxes started attached through a session (reason
//! `owner_exited`) when its connection closes, i.e. when this process
//! exits or drops the backend.

use std::time::Duration;

use http::Method;
use http_body_util::BodyExt;

use super::http::{Http, Mode, Req, TaskGuard};
use super::ndjson::{LineSplitter, MAX_LINE};
use crate::api::{SessionFrame, PREFIX};
use crate::error::{Error, Result};

/// How long the server may take to name a new session.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// An open session: its id and the task holding its connection.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    /// Reads the heartbeats; dropping it closes the connection.
    reader: TaskGuard,
}

impl Session {
    /// Whether the session's stream is still open.
    pub(crate) fn is_open(&self) -> bool {
        !self.reader.is_finished()
    }

    /// Opens a session and keeps its stream read in a background task.
    pub(crate) async fn open(http: &Http, budget: Duration) -> Result<Session> {
        let req = Req::new(Method::POST, format!("{PREFIX}/sessions"));
        let ex = http.send(&req, Mode::Streamed, budget).await?;
        if !ex.response.status().is_success() {
            let (status, _, body) = http.read_body(ex).await?;
            return Err(http.error_from(status, &body));
        }
        let conn = ex.guard;
        let mut body = ex.response.into_body();
        let mut split = LineSplitter::new(MAX_LINE);
        let first = async {
            loop {
                match body.frame().await {
                    None => {
                        return Err(Error::protocol(format!(
                            "the burrow server at {} closed the session before naming it",
                            http.url()
                        )))
                    }
                    Some(Err(e)) => {
                        return Err(
                            http.io_error("reading the session from", std::io::Error::other(e))
                        )
                    }
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else {
                            continue;
                        };
                        if let Some(line) = split.push(&data)?.into_iter().next() {
                            return Ok(line);
                        }
                    }
                }
            }
        };
        let line = tokio::time::timeout(OPEN_TIMEOUT, first)
            .await
            .map_err(|_| Error::Timeout {
                operation: format!("opening a session with the burrow server at {}", http.url()),
                after: OPEN_TIMEOUT,
            })??;
        let id = match serde_json::from_slice::<SessionFrame>(&line) {
            Ok(SessionFrame::Opened { session }) => session,
            _ => {
                return Err(Error::protocol(format!(
                    "the burrow server at {} did not open the session with an `opened` line",
                    http.url()
                )))
            }
        };
        tracing::debug!(session = %id, "burrow session opened");
        let session = id.clone();
        let reader = tokio::spawn(async move {
            // Holding the connection task: it ends (and the socket closes)
            // with this task.
            let _conn = conn;
            loop {
                match body.frame().await {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!(session = %session, error = %e, "burrow session lost");
                        return;
                    }
                    None => {
                        tracing::debug!(session = %session, "burrow session ended by the server");
                        return;
                    }
                }
            }
        });
        Ok(Session {
            id,
            reader: TaskGuard(reader),
        })
    }
}
