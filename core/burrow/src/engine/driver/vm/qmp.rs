//! A minimal QMP (QEMU Machine Protocol) client: JSON lines over a unix
//! socket. Used to pause and resume the guest, to ask for its state, and to
//! save and restore the whole machine (a migration to and from a file).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::error::{Error, Result};

/// How long one QMP command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long saving or restoring a machine state may take (a hibernation
/// carries the guest's RAM: at worst gigabytes through a pipe).
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);
/// A migration bandwidth (bytes/s) that never throttles.
const UNTHROTTLED: u64 = 1 << 40;
/// The name a saved state's descriptor goes by in QEMU (`getfd`).
const STATE_FD: &str = "burrow-state";

/// A saved state for a QEMU to restore, opened here and inherited by QEMU
/// when it is spawned (pass [`StateFd::raw`] among the kept descriptors): a
/// restore reads it through that descriptor (`fd:` migration), without a
/// shell and `cat` in between.
#[derive(Debug)]
pub(super) struct StateFd(std::fs::File);

impl StateFd {
    /// Opens the state at `path` (a missing one fails here: QEMU would
    /// wait for a state that never comes).
    pub fn open(path: &Path) -> Result<StateFd> {
        std::fs::File::open(path)
            .map(StateFd)
            .map_err(|e| Error::io("opening the saved VM state", Some(path), e))
    }

    /// The descriptor's number, the same in the QEMU that inherits it.
    pub fn raw(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
}
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
        self.execute_with(command, None).await
    }

    /// Runs `command` with `arguments` and `fd` sent with it (QEMU's
    /// `getfd` takes the descriptor that came with its command), and
    /// returns its `return` value.
    async fn execute_with_fd(
        &mut self,
        command: &str,
        arguments: Value,
        fd: std::os::fd::RawFd,
    ) -> Result<Value> {
        let line = format!(
            "{}\n",
            json!({ "execute": command, "arguments": arguments })
        );
        let sock = self.stream.get_ref();
        let raw = std::os::fd::AsRawFd::as_raw_fd(sock);
        let sent = loop {
            sock.writable().await.map_err(|e| qmp_error(command, e))?;
            match sock.try_io(tokio::io::Interest::WRITABLE, || {
                burrow_net::link::send_with_fd(raw, line.as_bytes(), fd)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(qmp_error(command, e)),
            }
        };
        self.execute_line(command, &line.as_bytes()[sent..]).await
    }

    /// Runs `command` with `arguments` and returns its `return` value.
    pub(super) async fn execute_with(
        &mut self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value> {
        let line = match arguments {
            Some(a) => format!("{}\n", json!({ "execute": command, "arguments": a })),
            None => format!("{}\n", json!({ "execute": command })),
        };
        self.execute_line(command, line.as_bytes()).await
    }

    /// Sends the rest of a command's line (`rest`) and returns its
    /// `return` value.
    async fn execute_line(&mut self, command: &str, rest: &[u8]) -> Result<Value> {
        let run = async {
            self.stream
                .get_mut()
                .write_all(rest)
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

    /// Saves the whole machine state to `state` and leaves the guest
    /// stopped: CPUs stopped first (the guest never runs again in this
    /// QEMU, so it never sees its channel close), then a migration into the
    /// file. With `ignore_shared`, RAM in a shared memory file (see
    /// `MemoryFile`) stays out of it (the file is the RAM), so the state is
    /// tens of KB; without, every page of RAM is in it (zero pages as a
    /// flag).
    pub(super) async fn save_state(&mut self, state: &Path, ignore_shared: bool) -> Result<()> {
        self.execute("stop").await?;
        self.set_ignore_shared(ignore_shared).await?;
        // QEMU throttles a migration to 128 MiB/s by default: a file is
        // no network link to spare.
        self.execute_with(
            "migrate-set-parameters",
            Some(json!({ "max-bandwidth": UNTHROTTLED })),
        )
        .await?;
        // QEMU writes the state through a descriptor it is handed: it may
        // not spawn anything (`-sandbox spawn=deny`) nor, jailed, open the
        // path itself.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(state)
            .map_err(|e| Error::io("creating the VM state file", Some(state), e))?;
        self.execute_with_fd(
            "getfd",
            json!({ "fdname": STATE_FD }),
            std::os::fd::AsRawFd::as_raw_fd(&file),
        )
        .await?;
        let uri = format!("fd:{STATE_FD}");
        self.execute_with("migrate", Some(json!({ "uri": uri })))
            .await?;
        self.await_migration("saving the VM state").await?;
        file.sync_all()
            .map_err(|e| Error::io("writing the VM state file", Some(state), e))
    }

    /// Brings in a state saved by [`Qmp::save_state`] (QEMU started with
    /// `-incoming defer` and the same machine, RAM in the same file, and
    /// `state` inherited) and runs the guest.
    pub(super) async fn restore_state(&mut self, state: &StateFd) -> Result<()> {
        self.load_state(state, true).await?;
        self.execute("cont").await.map(drop)
    }

    /// Brings in a saved state (`ignore_shared` as it was saved; `state`
    /// inherited by QEMU) and leaves the guest stopped until `cont`.
    pub(super) async fn load_state(&mut self, state: &StateFd, ignore_shared: bool) -> Result<()> {
        self.set_ignore_shared(ignore_shared).await?;
        let uri = format!("fd:{}", state.raw());
        self.execute_with("migrate-incoming", Some(json!({ "uri": uri })))
            .await?;
        self.await_migration("restoring the VM state").await
    }

    async fn set_ignore_shared(&mut self, on: bool) -> Result<()> {
        let caps = json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": on }] });
        self.execute_with("migrate-set-capabilities", Some(caps))
            .await
            .map(drop)
    }

    /// Polls `query-migrate` until the migration completed or failed.
    async fn await_migration(&mut self, what: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + MIGRATION_TIMEOUT;
        loop {
            let v = self.execute("query-migrate").await?;
            match v["status"].as_str() {
                Some("completed") => return Ok(()),
                Some(s @ ("failed" | "cancelled")) => {
                    let why = v["error-desc"].as_str().unwrap_or(s);
                    return Err(qmp_error(what, why));
                }
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(qmp_error(what, "timed out"));
                }
                _ => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
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
