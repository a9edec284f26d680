//! A sandbox's main process (`SandboxConfig::command`): started by the
//! supervisor once the run is Running, through its own relay (so it counts
//! as a request in flight, its output goes to the logs like any exec's,
//! and a drain waits for it), and when it ends the run ends: a graceful
//! stop, reason `completed`, its exit in the supervisor's log.

use std::time::Duration;

use burrow_protocol::{ExecRequest, GuestMsg, Identity, Request, Response};
use tokio::sync::mpsc;

use super::{Command, DEFAULT_GRACE};
use crate::channel::client::AgentClient;
use crate::channel::relay::Relay;
use crate::engine::image::ImageConfig;
use crate::model::{ExitReason, SandboxConfig};

/// What the main process runs: the configured command, or (an empty one)
/// the image's Entrypoint then Cmd. `None` when there is no main process;
/// `Err` when the image has nothing to run.
pub(super) fn argv(
    config: &SandboxConfig,
    image: &ImageConfig,
) -> crate::Result<Option<Vec<String>>> {
    match &config.command {
        None => Ok(None),
        Some(argv) if !argv.is_empty() => Ok(Some(argv.clone())),
        Some(_) => {
            let argv: Vec<String> = image
                .entrypoint
                .iter()
                .chain(image.cmd.iter())
                .cloned()
                .collect();
            if argv.is_empty() {
                return Err(crate::Error::InvalidConfig {
                    field: "command".into(),
                    reason: format!(
                        "the image {:?} has no Entrypoint or Cmd to run; give a command",
                        config.image
                    ),
                });
            }
            Ok(Some(argv))
        }
    }
}

/// Runs `argv` in the run `relay` serves; when it ends, asks the main loop
/// to stop the run.
pub(super) fn spawn(
    relay: &Relay,
    identity: Identity,
    argv: Vec<String>,
    commands: mpsc::UnboundedSender<Command>,
) {
    let stream = relay.connect();
    tokio::spawn(async move {
        let outcome = run(stream, identity, argv.clone()).await;
        match &outcome {
            Ok(Some(status)) => tracing::info!(
                argv = ?argv,
                code = ?status.code,
                signal = ?status.signal,
                "main process exited"
            ),
            Ok(None) => tracing::info!(argv = ?argv, "main process ended with the run"),
            Err(e) => tracing::warn!(argv = ?argv, error = %e, "main process failed"),
        }
        let _ = commands.send(Command::Stop {
            grace: DEFAULT_GRACE,
            reason: ExitReason::Completed,
            reply: None,
        });
    });
}

/// The main process's exit status (`None`: the run ended first).
async fn run(
    stream: crate::backend::RuntimeStream,
    identity: Identity,
    argv: Vec<String>,
) -> crate::Result<Option<burrow_protocol::ExitStatus>> {
    let client = AgentClient::connect(
        stream.reader,
        stream.writer,
        crate::channel::client::Handshake::client(Some(identity)),
        Duration::from_secs(10),
    )
    .await
    .map_err(|e| match e {
        crate::channel::client::ConnectError::Refused(g) => crate::Error::protocol(g.to_string()),
        crate::channel::client::ConnectError::Other(e) => e,
    })?;
    let mut handle = client.request(Request::Exec(ExecRequest {
        argv,
        env: Default::default(),
        cwd: None,
        stdin: false,
        timeout_ms: None,
        tty: None,
    }))?;
    while let Some(m) = handle.next().await {
        if let GuestMsg::Response { result, .. } = m {
            return match result {
                Ok(Response::Exit(status)) => Ok(Some(status)),
                Ok(other) => Err(crate::Error::protocol(format!(
                    "the main process was answered {other:?}"
                ))),
                Err(g) => Err(crate::Error::protocol(format!(
                    "the main process could not run: {g}"
                ))),
            };
        }
    }
    Ok(None)
}
