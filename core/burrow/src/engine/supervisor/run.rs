//! The state of one live run and the loop that decides how it ends: control
//! commands, the idle reaper, the max-duration timer, drain, the owner
//! watch, signals, and the agent channel (broken, closed under a guest that
//! lives on, or stuck in the middle of a frame: the run has crashed). What
//! it does to the guest goes through [`GuestProcess`], what it records
//! through [`RunRecord`], so the loop runs the same over a container, a VM,
//! or a plain host process under a paused test clock (see the tests). The
//! orderly end itself is in `serve`.

use std::time::Duration;

use async_trait::async_trait;
use burrow_protocol::{GuestError, GuestErrorCode, Response};
use tokio::net::UnixListener;
use tokio::signal::unix::Signal;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::{recv_signal, wait_owner, Command, Reply, DEFAULT_GRACE};
use crate::channel::client::ChannelEnd;
use crate::channel::health::StallWatch;
use crate::channel::relay::Relay;
use crate::engine::driver::{GuestExit, GuestProcess};
use crate::engine::procs::ProcIdentity;
use crate::engine::store::Store;
use crate::error::Result;
use crate::model::{ExitReason, IdleAction, SandboxConfig, SandboxId, Status};

#[cfg(test)]
mod tests;

/// Why a run's loop ended.
#[derive(Debug)]
pub(super) enum End {
    Stop {
        grace: Duration,
        reason: ExitReason,
    },
    /// Idle reclaim of a sandbox configured to hibernate.
    Hibernate,
    Kill,
    GuestExited(Result<GuestExit>),
    /// The agent channel is of no more use while the guest lives on: broken
    /// by bytes that are not the protocol, stuck in the middle of a frame,
    /// or closed without the guest exiting. The guest is killed and the run
    /// recorded as crashed (what it says): callers get that answer at once
    /// instead of waiting on a run that can serve nothing.
    AgentLost(String),
}

/// Looks at the agent channel (one a second, while the guest runs) that
/// find it in the middle of a frame without a byte more before the run is
/// ended: a frame the agent began arrives whole in far less.
const STALL_LOOKS: u32 = 10;

/// How long a guest whose agent closed the channel has to exit by itself
/// (its agent shutting down) before it is killed.
const CLOSED_GRACE: Duration = Duration::from_secs(5);

/// What the loop reads from and writes to the sandbox's record.
#[async_trait]
pub(super) trait RunRecord: Send + Sync {
    /// Moves this run's record from `from` to `to`; false when the record
    /// was not in `from` (or no longer this run's).
    async fn publish(&self, from: Status, to: Status) -> bool;
    /// Records that the sandbox no longer follows its owner.
    async fn set_detached(&self) -> Result<()>;
    /// The persisted configuration (None: the record is gone).
    async fn config(&self) -> Result<Option<SandboxConfig>>;
}

/// The [`RunRecord`] of a supervised run: its row in the store.
pub(super) struct StoreRecord<'a> {
    pub store: &'a Store,
    pub id: &'a SandboxId,
    pub generation: u64,
}

#[async_trait]
impl RunRecord for StoreRecord<'_> {
    async fn publish(&self, from: Status, to: Status) -> bool {
        self.store
            .transition(self.id, self.generation, &[from], to)
            .await
            .unwrap_or(false)
    }
    async fn set_detached(&self) -> Result<()> {
        self.store.set_detached(self.id, true).await
    }
    async fn config(&self) -> Result<Option<SandboxConfig>> {
        Ok(self.store.get_by_id(self.id).await?.map(|r| r.info.config))
    }
}

/// Where events come from besides the guest and the relay.
pub(super) struct Inputs<'a> {
    /// Client connections, each served by the relay (None: no socket).
    pub listener: Option<&'a UnixListener>,
    /// Control commands from connection handlers and the main process.
    pub commands: mpsc::UnboundedReceiver<Command>,
    /// Finishes when the owner of an attached sandbox exits.
    pub owner: Option<JoinHandle<()>>,
    pub sigterm: Option<Signal>,
    pub sigint: Option<Signal>,
}

/// Policies of the current run, re-read on reload.
struct Policy {
    idle_timeout: Option<Duration>,
    idle_action: IdleAction,
    max_deadline: Option<Instant>,
    /// "idle reaper disabled" was logged for this run.
    said_disabled: bool,
}

impl Policy {
    fn apply(&mut self, config: &SandboxConfig, run_started: Instant) {
        self.idle_timeout = config.idle_timeout;
        self.idle_action = config.idle_action;
        self.max_deadline = config.max_duration.and_then(|d| run_started.checked_add(d));
        if config.idle_timeout == Some(Duration::ZERO) && !self.said_disabled {
            tracing::info!("idle reaper disabled by explicit zero timeout");
            self.said_disabled = true;
        }
    }

    /// How often the reaper looks: a tenth of the timeout, within 50 ms..1 s.
    fn tick(&self) -> Interval {
        let every = match self.idle_timeout.filter(|t| !t.is_zero()) {
            Some(t) => (t / 10).clamp(Duration::from_millis(50), Duration::from_secs(1)),
            None => Duration::from_secs(1),
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    }
}

fn reply(r: Reply, result: std::result::Result<Response, GuestError>) {
    let _ = r.send(result);
}

fn unavailable(msg: &str) -> GuestError {
    GuestError::new(GuestErrorCode::Unavailable, msg)
}

fn io(e: impl std::fmt::Display) -> GuestError {
    GuestError::new(GuestErrorCode::Io, e.to_string())
}

/// A driver's failure as an answer: what it cannot do at all is
/// `unsupported` (the operation, as the message), the rest `io`.
fn failed(what: &str, e: &crate::Error) -> GuestError {
    match e {
        crate::Error::Unsupported { operation } => {
            GuestError::new(GuestErrorCode::Unsupported, operation.clone())
        }
        _ => io(format_args!("{what} failed: {e}")),
    }
}

/// One live run: its policies, whether it drains or is paused, and who
/// waits for its end.
pub(super) struct Run<'a> {
    id: &'a SandboxId,
    relay: &'a Relay,
    record: &'a dyn RunRecord,
    guest: &'a mut dyn GuestProcess,
    started: Instant,
    policy: Policy,
    draining: bool,
    /// The guest is frozen (a stop thaws it first).
    pub paused: bool,
    /// Stop and kill callers, answered once the end is recorded.
    pub waiters: Vec<Reply>,
}

impl<'a> Run<'a> {
    /// A run that started now under `config`.
    pub fn new(
        id: &'a SandboxId,
        relay: &'a Relay,
        record: &'a dyn RunRecord,
        guest: &'a mut dyn GuestProcess,
        config: &SandboxConfig,
    ) -> Self {
        let started = Instant::now();
        let mut policy = Policy {
            idle_timeout: None,
            idle_action: IdleAction::Stop,
            max_deadline: None,
            said_disabled: false,
        };
        policy.apply(config, started);
        Run {
            id,
            relay,
            record,
            guest,
            started,
            policy,
            draining: false,
            paused: false,
            waiters: Vec::new(),
        }
    }

    /// Runs until something ends the run, and says what.
    pub async fn until_end(&mut self, inputs: &mut Inputs<'_>) -> End {
        let mut in_flight = self.relay.in_flight_changes();
        let mut tick = self.policy.tick();
        let agent = self.relay.agent().clone();
        let mut stall = StallWatch::new(STALL_LOOKS);
        let mut looks = tokio::time::interval(Duration::from_secs(1));
        looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The agent closed the channel: the guest's deadline to exit.
        let mut closed: Option<(Instant, String)> = None;
        loop {
            let exit_by = closed.as_ref().map_or_else(Instant::now, |(at, _)| *at);
            tokio::select! {
                end = agent.ended(), if closed.is_none() => match end {
                    ChannelEnd::Corrupt(why) => {
                        tracing::warn!(sandbox = %self.id, %why, "the agent channel is corrupt: ending the run");
                        return End::AgentLost(format!("the agent channel broke: {why}"));
                    }
                    ChannelEnd::Closed(why) => {
                        tracing::info!(sandbox = %self.id, %why, "the agent channel closed");
                        closed = Some((Instant::now() + CLOSED_GRACE, why));
                    }
                },
                _ = tokio::time::sleep_until(exit_by), if closed.is_some() => {
                    let why = closed.take().map(|(_, why)| why).unwrap_or_default();
                    tracing::warn!(sandbox = %self.id, %why, "the agent channel closed and the guest lives on: ending the run");
                    return End::AgentLost(format!(
                        "the agent channel closed ({why}) and the guest did not exit"
                    ));
                }
                _ = looks.tick() => {
                    if self.paused {
                        stall.reset();
                    } else if stall.look(agent.read_progress()) {
                        tracing::warn!(sandbox = %self.id, "the agent channel is stuck in the middle of a frame: ending the run");
                        return End::AgentLost(format!(
                            "the agent channel stopped in the middle of a frame for {STALL_LOOKS} s"
                        ));
                    }
                }
                accepted = accept(inputs.listener) => {
                    if let Ok((stream, _)) = accepted {
                        let relay = self.relay.clone();
                        tokio::spawn(async move {
                            let (rd, wr) = stream.into_split();
                            relay.serve(rd, wr).await;
                        });
                    }
                }
                exit = self.guest.wait() => return End::GuestExited(exit),
                Some(cmd) = inputs.commands.recv() => {
                    let reload = matches!(cmd, Command::Reload { .. } | Command::Claim { .. });
                    if matches!(cmd, Command::Detach { .. }) {
                        // The owner's exit no longer ends the run.
                        inputs.owner = None;
                    }
                    if let Command::Claim { owner: Some(owner), .. } = &cmd {
                        inputs.owner = Some(super::adopted_owner_watch(*owner));
                    }
                    if let Some(end) = self.on_command(cmd).await {
                        return end;
                    }
                    // A command may have frozen the guest meanwhile (a
                    // snapshot): its channel gets its full time again.
                    stall.reset();
                    if reload {
                        tick = self.policy.tick();
                    }
                }
                _ = in_flight.changed(), if self.draining => {
                    if self.relay.in_flight() == 0 {
                        return drained();
                    }
                }
                _ = tick.tick() => {
                    if let Some(end) = self.on_tick() {
                        return end;
                    }
                }
                _ = wait_owner(&mut inputs.owner) => {
                    tracing::info!(sandbox = %self.id, "owner process exited; stopping the attached sandbox");
                    return stop(ExitReason::OwnerExited);
                }
                _ = recv_signal(&mut inputs.sigterm) => return stop(ExitReason::Stopped),
                _ = recv_signal(&mut inputs.sigint) => return stop(ExitReason::Stopped),
            }
        }
    }

    /// Acts on one command; returns the end it asks for.
    async fn on_command(&mut self, cmd: Command) -> Option<End> {
        match cmd {
            Command::Stop {
                grace,
                reason,
                reply,
            } => {
                self.waiters.extend(reply);
                return Some(End::Stop { grace, reason });
            }
            Command::Kill { reply } => {
                self.waiters.extend(reply);
                return Some(End::Kill);
            }
            Command::Drain { reply: r } => {
                if self.paused {
                    reply(r, Err(unavailable("the sandbox is paused")));
                    return None;
                }
                if !self.draining {
                    self.draining = true;
                    self.relay.set_closing(true);
                    self.record.publish(Status::Running, Status::Draining).await;
                }
                reply(r, Ok(Response::Done));
                if self.relay.in_flight() == 0 {
                    return Some(drained());
                }
            }
            Command::Detach { reply: r } => {
                if let Err(e) = self.record.set_detached().await {
                    tracing::warn!(sandbox = %self.id, error = %e, "recording detach failed");
                }
                reply(r, Ok(Response::Done));
            }
            Command::Claim {
                name,
                owner,
                reply: r,
            } => reply(r, self.claimed(&name, owner).await),
            Command::Touch { reply: r } => {
                self.relay.touch();
                reply(r, Ok(Response::Done));
            }
            Command::Pause { reply: r } => reply(r, self.pause().await),
            Command::Resume { reply: r } => reply(r, self.resume().await),
            Command::Reload { reply: r } => reply(r, self.reload().await),
            Command::Snapshot { layer, reply: r } => reply(r, self.snapshot(&layer).await),
            Command::SaveGuest { dir, reply: r } => reply(r, self.save_guest(&dir).await),
            Command::Metrics { reply: r } => {
                let result = self.guest.metrics().await;
                reply(
                    r,
                    result
                        .map(|metrics| Response::Metrics { metrics })
                        .map_err(io),
                );
            }
        }
        None
    }

    async fn pause(&mut self) -> std::result::Result<Response, GuestError> {
        if self.draining {
            return Err(unavailable("the sandbox is draining"));
        }
        if self.paused {
            return Ok(Response::Done);
        }
        // Refuse new work first, then freeze, then publish: nobody is
        // handed a frozen sandbox as Running.
        self.relay.set_paused(true);
        match self.guest.pause().await {
            Ok(()) => {
                self.paused = true;
                self.record.publish(Status::Running, Status::Paused).await;
                Ok(Response::Done)
            }
            Err(e) => {
                self.relay.set_paused(false);
                Err(failed("pausing", &e))
            }
        }
    }

    async fn resume(&mut self) -> std::result::Result<Response, GuestError> {
        if !self.paused {
            return Ok(Response::Done);
        }
        self.guest
            .resume()
            .await
            .map_err(|e| failed("resuming", &e))?;
        self.paused = false;
        self.record.publish(Status::Paused, Status::Running).await;
        // A resume is use: the idle clock restarts.
        self.relay.touch();
        self.relay.set_paused(false);
        Ok(Response::Done)
    }

    /// Writes the writable layer to `layer`, the guest frozen for the copy
    /// (unless it is paused already, or cannot be frozen on this host: a
    /// rootless sandbox without a delegated freezer is copied as it goes,
    /// each file as it is when read).
    async fn snapshot(
        &mut self,
        layer: &std::path::Path,
    ) -> std::result::Result<Response, GuestError> {
        if self.guest.layer_from_agent() {
            return self.layer_from_agent(layer).await;
        }
        // What the guest wrote and closed but keeps in a cache of its own
        // (gVisor's, a VM's page cache) reaches the writable layer first; a
        // paused guest cannot answer, and its writes are where they are.
        if !self.paused {
            let sync = self.relay.agent().call(burrow_protocol::Request::Sync);
            if tokio::time::timeout(Duration::from_secs(5), sync)
                .await
                .is_err()
            {
                tracing::warn!(sandbox = %self.id, "the guest did not sync within 5 s; copying its layer as it is");
            }
        }
        let frozen = !self.paused
            && match self.guest.pause().await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(sandbox = %self.id, error = %e, "cannot freeze the guest for the snapshot; copying it as it runs");
                    false
                }
            };
        crate::engine::fault::hold(crate::engine::fault::Fault::SnapshotFrozen).await;
        let written = self.guest.write_layer(layer).await;
        if frozen {
            self.guest
                .resume()
                .await
                .map_err(|e| failed("resuming after the snapshot", &e))?;
        }
        written
            .map(|(digest, size)| Response::Layer { digest, size })
            .map_err(|e| failed("writing the snapshot", &e))
    }

    /// The writable layer a guest's agent writes (a VM's): streamed into
    /// `layer`, hashed as it comes, synced. The guest runs meanwhile (the
    /// agent reads its files), each file as it is when read.
    async fn layer_from_agent(
        &mut self,
        layer: &std::path::Path,
    ) -> std::result::Result<Response, GuestError> {
        if self.paused {
            return Err(unavailable("the sandbox is paused: resume it first"));
        }
        let agent = self.relay.agent().clone();
        let (digest, size) = crate::engine::driver::vm::receive_layer(&agent, layer).await?;
        Ok(Response::Layer {
            digest: digest.to_string(),
            size,
        })
    }

    /// Saves the whole guest into `dir` and lets it run on (see
    /// [`burrow_protocol::Control::SaveGuest`]): the agent syncs and
    /// suspends, and nothing more is written to it until the save is done
    /// (a frame the saved guest had read would be read by every copy); then
    /// the session's next frame lets it go on.
    async fn save_guest(
        &mut self,
        dir: &std::path::Path,
    ) -> std::result::Result<Response, GuestError> {
        if self.paused {
            return Err(unavailable("the sandbox is paused: resume it first"));
        }
        if self.draining {
            return Err(unavailable("the sandbox is draining"));
        }
        if let Some(why) = self.guest.hibernation_blocker() {
            return Err(GuestError::new(
                GuestErrorCode::Unsupported,
                format!("saving this running sandbox ({why})"),
            ));
        }
        let agent = self.relay.agent().clone();
        let suspend = agent.call_then_hold(burrow_protocol::Request::Suspend);
        let (answer, hold) = match tokio::time::timeout(Duration::from_secs(30), suspend).await {
            Ok(Ok(asked)) => asked,
            Ok(Err(e)) => return Err(io(e)),
            Err(_) => return Err(unavailable("the guest did not suspend within 30 s")),
        };
        match answer {
            Ok(Response::Done) => {}
            Ok(other) => return Err(io(format_args!("the agent answered {other:?} to suspend"))),
            Err(e) => return Err(e),
        }
        crate::engine::fault::hold(crate::engine::fault::Fault::SnapshotSuspended).await;
        let saved = self.guest.save_copy(dir).await;
        drop(hold);
        // The suspended agent reads this as the session going on.
        let ping = agent.call(burrow_protocol::Request::Ping);
        if !matches!(
            tokio::time::timeout(Duration::from_secs(10), ping).await,
            Ok(Ok(Ok(Response::Pong)))
        ) {
            tracing::warn!(sandbox = %self.id, "the guest did not answer after it was saved");
        }
        saved
            .map(|()| Response::Done)
            .map_err(|e| failed("saving the guest", &e))
    }

    /// Applies the persisted configuration to the live run.
    /// The record's configuration, its policies and environment applied.
    async fn apply_record(&mut self) -> std::result::Result<SandboxConfig, GuestError> {
        let config = self.record.config().await.map_err(io)?.ok_or_else(|| {
            GuestError::new(GuestErrorCode::NotFound, "the sandbox record is gone")
        })?;
        self.policy.apply(&config, self.started);
        self.relay.set_env(config.guest_env());
        Ok(config)
    }

    async fn reload(&mut self) -> std::result::Result<Response, GuestError> {
        let config = self.apply_record().await?;
        let notes = self
            .guest
            .update(config.cpus, config.memory_mb)
            .await
            .map_err(|e| failed("updating the limits", &e))?;
        let network = self.guest.set_network(&config.network);
        for n in notes.into_iter().chain(network) {
            tracing::warn!(sandbox = %self.id, "{n}");
        }
        Ok(Response::Done)
    }

    /// A warm sandbox handed to a claim: its run starts now, under the
    /// claimer's configuration and name (the owner watch is the loop's).
    async fn claimed(
        &mut self,
        name: &str,
        owner: Option<ProcIdentity>,
    ) -> std::result::Result<Response, GuestError> {
        self.started = Instant::now();
        self.relay.touch();
        // What a claim may change: the policies and the environment (the
        // limits and the network are the pool's, as the claim matched).
        self.apply_record().await?;
        if let Err(e) = self.guest.set_hostname(name).await {
            tracing::warn!(sandbox = %self.id, error = %e, "the claimed sandbox keeps its hostname");
        }
        tracing::info!(sandbox = %self.id, name, owner = owner.map(|o| o.pid), "claimed");
        Ok(Response::Done)
    }

    /// The reaper's look: the max duration, then idleness.
    fn on_tick(&mut self) -> Option<End> {
        if self
            .policy
            .max_deadline
            .is_some_and(|d| Instant::now() >= d)
        {
            tracing::info!(sandbox = %self.id, "maximum duration reached");
            return Some(stop(ExitReason::MaxDuration));
        }
        // Never reclaimed under a running command, while paused, or while
        // draining (drain ends the run by itself).
        let t = self.policy.idle_timeout.filter(|t| !t.is_zero())?;
        if self.paused || self.draining || self.relay.in_flight() > 0 || self.relay.idle_for() < t {
            return None;
        }
        // Close first, then look again: a request that slipped in meanwhile
        // has announced itself (see relay).
        self.relay.set_closing(true);
        if self.relay.in_flight() > 0 {
            self.relay.set_closing(false);
            return None;
        }
        let action = self.policy.idle_action;
        tracing::info!(sandbox = %self.id, idle_timeout = ?t, action = action.as_str(), "idle: reclaiming");
        if action == IdleAction::Hibernate {
            match self.guest.hibernation_blocker() {
                None => return Some(End::Hibernate),
                Some(why) => {
                    tracing::warn!(sandbox = %self.id, %why, "cannot hibernate; stopping instead")
                }
            }
        }
        Some(stop(ExitReason::IdleTimeout))
    }
}

fn stop(reason: ExitReason) -> End {
    End::Stop {
        grace: DEFAULT_GRACE,
        reason,
    }
}

fn drained() -> End {
    stop(ExitReason::Drain)
}

async fn accept(
    listener: Option<&UnixListener>,
) -> std::io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}
