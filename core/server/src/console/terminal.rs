//! The console's terminal: a shell on a pty in a running sandbox, over a
//! WebSocket.
//!
//! Binary messages both ways are the terminal's bytes (the browser's keys
//! to the shell's input, the pty's output back). A text message from the
//! browser is a control, `{"resize": {"rows": R, "cols": C}}`; one that is
//! not gets a text `{"error": {"code", "message"}}` back and changes
//! nothing. When the shell ends the server sends `{"exit": CODE}` (`null`
//! for a signal) and closes; when the browser goes, the shell gets SIGHUP,
//! as a closed terminal gives it.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use burrow::api::ErrorBody;
use burrow::{Error, ExecEvent, Process, Sandbox};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;

use super::files::running;
use crate::app::{ApiError, ApiResult};
use crate::audit::Action;
use crate::tenancy::Engine;

/// A terminal's rows and columns: 1..=this.
const MAX_SIDE: u16 = 1000;

fn bad(argument: &str, reason: String) -> Error {
    Error::InvalidArgument {
        argument: argument.to_owned(),
        reason,
    }
}

/// `rows` and `cols` of the query (24 x 80 when absent).
fn size_of(raw: Option<&str>) -> Result<(u16, u16), Error> {
    let (mut rows, mut cols) = (24, 80);
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        let side = || {
            v.parse::<u16>()
                .ok()
                .filter(|n| (1..=MAX_SIDE).contains(n))
                .ok_or_else(|| bad(&k, format!("{v:?} is not 1..={MAX_SIDE}")))
        };
        match k.as_ref() {
            "rows" => rows = side()?,
            "cols" => cols = side()?,
            other => return Err(bad(other, "not a parameter (rows, cols)".into())),
        }
    }
    Ok((rows, cols))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Size {
    rows: u16,
    cols: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum Control {
    #[serde(rename = "resize")]
    Resize(Size),
}

fn parse_control(text: &str) -> Result<Size, Error> {
    let Control::Resize(size) =
        serde_json::from_str(text).map_err(|e| bad("message", e.to_string()))?;
    for (name, n) in [("rows", size.rows), ("cols", size.cols)] {
        if !(1..=MAX_SIDE).contains(&n) {
            return Err(bad(name, format!("{n} is not 1..={MAX_SIDE}")));
        }
    }
    Ok(size)
}

fn error_message(e: &Error) -> Message {
    let body = serde_json::json!({ "error": ErrorBody::from(e) });
    Message::Text(body.to_string().into())
}

/// `GET /ui/api/sandboxes/{id}/terminal?rows=&cols=` (a WebSocket; logged
/// as `console.terminal`, whatever the answer).
pub async fn open(
    engine: Engine,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let res = upgraded(&engine, &id, raw, upgrade).await;
    let action = Action {
        operation: "console.terminal",
        sandbox: id,
        object: None,
    };
    action.on(res.unwrap_or_else(IntoResponse::into_response))
}

async fn upgraded(
    engine: &Engine,
    id: &str,
    raw: Option<String>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    // The sandbox first: another tenant's is absent, whatever the request.
    let sandbox = running(engine, id).await?;
    let (rows, cols) = size_of(raw.as_deref())?;
    let Ok(upgrade) = upgrade else {
        return Err(ApiError::with_status(
            bad("upgrade", "the terminal is a WebSocket".into()),
            StatusCode::UPGRADE_REQUIRED,
        ));
    };
    Ok(upgrade.on_upgrade(move |socket| serve(socket, sandbox, rows, cols)))
}

async fn serve(mut socket: WebSocket, sandbox: Sandbox, rows: u16, cols: u16) {
    match sandbox.shell(None, rows, cols).await {
        Ok(process) => bridge(socket, process).await,
        Err(e) => {
            let _ = socket.send(error_message(&e)).await;
            let _ = socket
                .send(Message::Close(Some(CloseFrame {
                    code: 1011,
                    reason: "the shell did not start".into(),
                })))
                .await;
        }
    }
}

async fn bridge(socket: WebSocket, mut process: Process) {
    let stdin = process.stdin();
    let (mut to_browser, mut from_browser) = socket.split();
    let (answers, mut answered) = tokio::sync::mpsc::channel::<Message>(4);
    let output = async {
        loop {
            let msg = tokio::select! {
                a = answered.recv() => match a {
                    Some(a) => a,
                    None => continue,
                },
                e = process.next_event() => match e {
                    Ok(Some(ExecEvent::Stdout(d) | ExecEvent::Stderr(d))) => Message::Binary(d.into()),
                    Ok(Some(ExecEvent::Exit(status))) => {
                        let exit = serde_json::json!({ "exit": status.code });
                        let _ = to_browser.send(Message::Text(exit.to_string().into())).await;
                        let _ = to_browser.send(Message::Close(None)).await;
                        return;
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = to_browser.send(error_message(&e)).await;
                        let _ = to_browser.send(Message::Close(None)).await;
                        return;
                    }
                },
            };
            if to_browser.send(msg).await.is_err() {
                return;
            }
        }
    };
    let input = async {
        while let Some(Ok(msg)) = from_browser.next().await {
            let sent = match msg {
                Message::Binary(b) => stdin.write(&b).await,
                Message::Text(t) => match parse_control(t.as_str()) {
                    Ok(size) => stdin.resize(size.rows, size.cols).await,
                    Err(e) => {
                        let _ = answers.send(error_message(&e)).await;
                        Ok(())
                    }
                },
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => Ok(()),
            };
            if sent.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = output => {}
        () = input => {}
    }
    // Gone or ended: a closed terminal hangs its shell up.
    let _ = process.signal(libc::SIGHUP);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(size_of(None).unwrap(), (24, 80));
        assert_eq!(size_of(Some("rows=10&cols=200")).unwrap(), (10, 200));
        for bad in ["rows=0", "cols=1001", "rows=x", "tty=1"] {
            assert_eq!(
                size_of(Some(bad)).unwrap_err().code(),
                burrow::ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
    }

    #[test]
    fn controls_are_resizes_only() {
        let s = parse_control(r#"{"resize": {"rows": 5, "cols": 7}}"#).unwrap();
        assert_eq!((s.rows, s.cols), (5, 7));
        for bad in [
            r#"{"resize": {"rows": 0, "cols": 7}}"#,
            r#"{"resize": {"rows": 5}}"#,
            r#"{"kill": 9}"#,
            "not json",
        ] {
            assert_eq!(
                parse_control(bad).unwrap_err().code(),
                burrow::ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
    }
}
