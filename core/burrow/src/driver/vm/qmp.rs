//! A minimal QMP (QEMU Machine Protocol) client: JSON lines over a unix
//! socket. Used to pause and resume the guest and to ask for its state.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::error::{Error, Result};

/// How long one QMP command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected QMP monitor, in command mode.
#[derive(Debug)]
pub(super) struct Qmp {
    stream: BufReader<UnixStream>,
}

fn qmp_error(what: &str, reason: impl std::fmt::Display) -> Error {
    Error::Runtime {
        runtime: "qemu".into(),
        reason: format!("QMP {what}: {reason}"),
    }
}

impl Qmp {
    /// Takes the greeting and enters command mode.
    pub(super) async fn handshake(stream: UnixStream) -> Result<Qmp> {
        let mut qmp = Qmp {
            stream: BufReader::new(stream),
        };
        let greeting = tokio::time::timeout(COMMAND_TIMEOUT, qmp.next_message())
            .await
            .map_err(|_| qmp_error("greeting", "timed out"))??;
        if greeting.get("QMP").is_none() {
            return Err(qmp_error("greeting", format!("unexpected {greeting}")));
        }
        qmp.execute("qmp_capabilities").await?;
        Ok(qmp)
    }

    /// Runs `command` (no arguments) and returns its `return` value.
    pub(super) async fn execute(&mut self, command: &str) -> Result<Value> {
        let line = format!("{}\n", json!({ "execute": command }));
        let run = async {
            self.stream
                .get_mut()
                .write_all(line.as_bytes())
                .await
                .map_err(|e| qmp_error(command, e))?;
            loop {
                let msg = self.next_message().await?;
                if let Some(ret) = msg.get("return") {
                    return Ok(ret.clone());
                }
                if let Some(err) = msg.get("error") {
                    return Err(qmp_error(command, err));
                }
                // Asynchronous events (STOP, RESUME, ...) are skipped.
            }
        };
        tokio::time::timeout(COMMAND_TIMEOUT, run)
            .await
            .map_err(|_| qmp_error(command, "timed out"))?
    }

    async fn next_message(&mut self) -> Result<Value> {
        let mut line = String::new();
        let n = self
            .stream
            .read_line(&mut line)
            .await
            .map_err(|e| qmp_error("read", e))?;
        if n == 0 {
            return Err(qmp_error("read", "the monitor closed (QEMU exited)"));
        }
        serde_json::from_str(&line).map_err(|e| qmp_error("read", format!("{e}: {line:?}")))
    }

    /// The run state (`running`, `paused`, `internal-error`, ...).
    pub(super) async fn status(&mut self) -> Result<String> {
        let v = self.execute("query-status").await?;
        Ok(v["status"].as_str().unwrap_or("unknown").to_owned())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A scripted monitor: greeting, then answers per command, with an
    /// event in between.
    #[tokio::test]
    async fn handshake_and_commands_skip_events() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = tokio::spawn(async move {
            let mut s = BufReader::new(theirs);
            s.get_mut()
                .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
                .await
                .unwrap();
            let mut seen = Vec::new();
            for reply in [
                "{\"return\": {}}\n",
                "{\"event\": \"STOP\"}\n{\"return\": {}}\n",
                "{\"return\": {\"status\": \"paused\", \"running\": false}}\n",
                "{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}}\n",
            ] {
                let mut line = String::new();
                s.read_line(&mut line).await.unwrap();
                seen.push(serde_json::from_str::<Value>(&line).unwrap()["execute"].clone());
                s.get_mut().write_all(reply.as_bytes()).await.unwrap();
            }
            seen
        });
        let mut qmp = Qmp::handshake(ours).await.unwrap();
        qmp.execute("stop").await.unwrap();
        assert_eq!(qmp.status().await.unwrap(), "paused");
        let err = qmp.execute("cont").await.unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::RuntimeUnavailable);
        let seen = server.await.unwrap();
        assert_eq!(seen, ["qmp_capabilities", "stop", "query-status", "cont"]);
    }
}
