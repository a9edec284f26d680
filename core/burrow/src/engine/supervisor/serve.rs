//! The supervisor's main loop while the runtime lives: client connections,
//! control commands, the idle reaper, the max-duration timer, the owner
//! watch, and the orderly end of the run.

use std::time::{Duration, Instant};

use burrow_protocol::{GuestError, GuestErrorCode, Request, Response};
use tokio::sync::mpsc;

use super::{
    describe_exit, owner_watch, recv_signal, wait_owner, Booted, Command, Controls, Reply,
    SuperviseArgs, DEFAULT_GRACE,
};
use crate::channel::relay::Relay;
use crate::engine::driver::{GuestExit, GuestProcess};
use crate::engine::fault::Fault;
use crate::engine::paths::Home;
use crate::engine::store::Store;
use crate::error::Result;
use crate::model::{ExitReason, IdleAction, SandboxConfig, Status};

/// Why the serve loop ended.
enum End {
    Stop {
        grace: Duration,
        reason: ExitReason,
    },
    /// Idle reclaim of a sandbox configured to hibernate.
    Hibernate,
    Kill,
    GuestExited(Result<GuestExit>),
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
    fn tick(&self) -> Duration {
        match self.idle_timeout.filter(|t| !t.is_zero()) {
            Some(t) => (t / 10).clamp(Duration::from_millis(50), Duration::from_secs(1)),
            None => Duration::from_secs(1),
        }
    }
}

fn reply(r: Reply, result: std::result::Result<Response, GuestError>) {
    let _ = r.send(result);
}

fn unavailable(msg: &str) -> GuestError {
    GuestError::new(GuestErrorCode::Unavailable, msg)
}

pub(super) async fn serve(args: SuperviseArgs, home: Home, store: Store, booted: Booted) -> i32 {
    let Booted {
        mut guest,
        agent,
        listener,
        socket,
        _runtime_lock,
        name,
        config,
        main,
    } = booted;
    let run_started = Instant::now();
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel();
    let main_tx = cmd_tx.clone();
    let mut relay = Relay::builder(&args.id, args.generation)
        .control(Controls { commands: cmd_tx })
        .env(config.env.clone());
    if config.capture_output {
        let dir = crate::engine::logs::log_dir(&home.sandbox_dir(&args.id));
        match crate::engine::logs::output::OutputLog::open(&dir) {
            Ok(log) => relay = relay.output(log),
            Err(e) => tracing::warn!(error = %e, "program output will not be kept in the logs"),
        }
    }
    let relay = relay.with_agent(agent.clone());
    if let Some(argv) = main {
        let identity = burrow_protocol::Identity {
            sandbox_id: args.id.to_string(),
            generation: args.generation,
        };
        super::main_process::spawn(&relay, identity, argv, main_tx);
    }
    let mut idle_rx = relay.in_flight_changes();
    let mut policy = Policy {
        idle_timeout: None,
        idle_action: IdleAction::Stop,
        max_deadline: None,
        said_disabled: false,
    };
    policy.apply(&config, run_started);
    let mut owner = args.owner_pid.map(owner_watch);
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut waiters: Vec<Reply> = Vec::new();
    let mut draining = false;
    let mut paused = false;
    let mut tick = tokio::time::interval(policy.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let end = loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let relay = relay.clone();
                    tokio::spawn(async move {
                        let (rd, wr) = stream.into_split();
                        relay.serve(rd, wr).await;
                    });
                }
            }
            exit = guest.wait() => break End::GuestExited(exit),
            Some(cmd) = cmd_rx.recv() => match cmd {
                Command::Stop { grace, reason, reply } => {
                    waiters.extend(reply);
                    break End::Stop { grace, reason };
                }
                Command::Kill { reply } => {
                    waiters.extend(reply);
                    break End::Kill;
                }
                Command::Drain { reply: r } => {
                    if paused {
                        reply(r, Err(unavailable("the sandbox is paused")));
                        continue;
                    }
                    if !draining {
                        draining = true;
                        relay.set_closing(true);
                        let _ = store.transition(&args.id, args.generation, &[Status::Running], Status::Draining).await;
                    }
                    reply(r, Ok(Response::Done));
                    if relay.in_flight() == 0 {
                        break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::Drain };
                    }
                }
                Command::Detach { reply: r } => {
                    owner = None;
                    if let Err(e) = store.set_detached(&args.id, true).await {
                        tracing::warn!(sandbox = %args.id, error = %e, "recording detach failed");
                    }
                    reply(r, Ok(Response::Done));
                }
                Command::Touch { reply: r } => {
                    relay.touch();
                    reply(r, Ok(Response::Done));
                }
                Command::Pause { reply: r } => {
                    if draining {
                        reply(r, Err(unavailable("the sandbox is draining")));
                    } else if paused {
                        reply(r, Ok(Response::Done));
                    } else {
                        // Refuse new work first, then freeze, then publish:
                        // nobody is handed a frozen sandbox as Running.
                        relay.set_paused(true);
                        match guest.pause().await {
                            Ok(()) => {
                                paused = true;
                                let _ = store.transition(&args.id, args.generation, &[Status::Running], Status::Paused).await;
                                reply(r, Ok(Response::Done));
                            }
                            Err(e) => {
                                relay.set_paused(false);
                                reply(r, Err(GuestError::new(GuestErrorCode::Io, format!("pausing failed: {e}"))));
                            }
                        }
                    }
                }
                Command::Resume { reply: r } => {
                    if !paused {
                        reply(r, Ok(Response::Done));
                        continue;
                    }
                    match guest.resume().await {
                        Ok(()) => {
                            paused = false;
                            let _ = store.transition(&args.id, args.generation, &[Status::Paused], Status::Running).await;
                            // A resume is use: the idle clock restarts.
                            relay.touch();
                            relay.set_paused(false);
                            reply(r, Ok(Response::Done));
                        }
                        Err(e) => reply(r, Err(GuestError::new(GuestErrorCode::Io, format!("resuming failed: {e}")))),
                    }
                }
                Command::Reload { reply: r } => {
                    let result = reload(&store, &args, &relay, &mut policy, run_started, guest.as_mut()).await;
                    tick = tokio::time::interval(policy.tick());
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    reply(r, result);
                }
                Command::Metrics { reply: r } => {
                    let result = guest
                        .metrics()
                        .await
                        .map(|metrics| Response::Metrics { metrics })
                        .map_err(|e| GuestError::new(GuestErrorCode::Io, e.to_string()));
                    reply(r, result);
                }
            },
            _ = idle_rx.changed(), if draining => {
                if relay.in_flight() == 0 {
                    break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::Drain };
                }
            }
            _ = tick.tick() => {
                if policy.max_deadline.is_some_and(|d| Instant::now() >= d) {
                    tracing::info!(sandbox = %args.id, "maximum duration reached");
                    break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::MaxDuration };
                }
                // Never reclaimed under a running command, while paused, or
                // while draining (drain ends the run by itself).
                if let Some(t) = policy.idle_timeout.filter(|t| !t.is_zero()) {
                    if !paused && !draining && relay.in_flight() == 0 && relay.idle_for() >= t {
                        // Close first, then look again: a request that slipped
                        // in meanwhile has announced itself (see relay).
                        relay.set_closing(true);
                        if relay.in_flight() == 0 {
                            tracing::info!(sandbox = %args.id, idle_timeout = ?t, action = policy.idle_action.as_str(), "idle: reclaiming");
                            if policy.idle_action == IdleAction::Hibernate {
                                match guest.hibernation_blocker() {
                                    None => break End::Hibernate,
                                    Some(why) => tracing::warn!(sandbox = %args.id, %why, "cannot hibernate; stopping instead"),
                                }
                            }
                            break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::IdleTimeout };
                        }
                        relay.set_closing(false);
                    }
                }
            }
            _ = wait_owner(&mut owner) => {
                tracing::info!(sandbox = %args.id, "owner process exited; stopping the attached sandbox");
                break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::OwnerExited };
            }
            _ = recv_signal(&mut sigterm) => break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::Stopped },
            _ = recv_signal(&mut sigint) => break End::Stop { grace: DEFAULT_GRACE, reason: ExitReason::Stopped },
        }
    };
    relay.set_closing(true);
    // Connections made from here on wait in the listener's backlog, and are
    // reset when it closes: their hello is cut off.
    crate::engine::fault::hold(Fault::SupervisorStoppedAccepting).await;
    drop(listener);
    let _ = std::fs::remove_file(&socket);
    // The window a caller can land in: no new connections, requests on open
    // ones refused unrun, the record still says the run lives. Callers wait
    // here for the end to be recorded (see `LocalBackend::settle_run`).
    crate::engine::fault::hold(Fault::SupervisorEnding).await;

    let (status, reason, detail) = match end {
        End::GuestExited(exit) => {
            let detail = describe_exit(&exit);
            match exit {
                Ok(GuestExit { code: Some(0), .. }) => {
                    (Status::Stopped, ExitReason::Completed, detail)
                }
                _ => (Status::Crashed, ExitReason::Crashed, detail),
            }
        }
        End::Kill => {
            let _ = guest.kill().await;
            let exit = guest.wait().await;
            (Status::Stopped, ExitReason::Killed, describe_exit(&exit))
        }
        End::Stop { grace, reason } => {
            if paused {
                let _ = guest.resume().await;
            }
            let exit = stop_guest(&args, &agent, guest.as_mut(), grace).await;
            (Status::Stopped, reason, describe_exit(&exit))
        }
        End::Hibernate => match hibernate(&agent, guest.as_mut()).await {
            Ok(()) => {
                tracing::info!(sandbox = %args.id, "hibernated");
                (
                    Status::Stopped,
                    ExitReason::Hibernated,
                    "hibernated: the next start resumes the saved guest".to_owned(),
                )
            }
            Err((e, suspended)) => {
                tracing::warn!(sandbox = %args.id, error = %e, "hibernating failed; stopping instead");
                let exit = if suspended {
                    // The agent waits for a resume that will not come: its
                    // disk was synced before, so a kill loses nothing.
                    let _ = guest.kill().await;
                    guest.wait().await
                } else {
                    stop_guest(&args, &agent, guest.as_mut(), DEFAULT_GRACE).await
                };
                (
                    Status::Stopped,
                    ExitReason::IdleTimeout,
                    format!("hibernating failed ({e}); {}", describe_exit(&exit)),
                )
            }
        },
    };
    if let Err(e) = guest.cleanup().await {
        tracing::warn!(sandbox = %args.id, error = %e, "runtime cleanup failed");
    }
    // Logged before the end is recorded: a followed log ends once it sees
    // the end recorded, and then reads this line too.
    tracing::info!(sandbox = %args.id, name = %name, reason = reason.as_str(), %detail, "run ended");
    if let Err(e) = store
        .finish_run(&args.id, args.generation, status, reason, Some(&detail))
        .await
    {
        tracing::error!(sandbox = %args.id, error = %e, "recording the end of the run failed");
    }
    for w in waiters {
        let _ = w.send(Ok(Response::Done));
    }
    // Every request this run took is answered before the process exits (an
    // exit status, or `aborted` if the guest went away under it): a client
    // that loses its connection without any answer knows its request was
    // never run. The relays see the agent channel close with the guest.
    let deadline = Instant::now() + Duration::from_secs(2);
    while relay.in_flight() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Let the connection writers flush those answers.
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.close().await;
    0
}

/// The orderly stop of a guest: sync, the agent's shutdown within `grace`,
/// a kill if it does not go.
async fn stop_guest(
    args: &SuperviseArgs,
    agent: &crate::channel::client::AgentClient,
    guest: &mut dyn GuestProcess,
    grace: Duration,
) -> Result<GuestExit> {
    // Ask the guest to flush before it goes, then to shut down.
    let _ = tokio::time::timeout(Duration::from_secs(5), agent.call(Request::Sync)).await;
    let shutdown = agent.call(Request::Shutdown {
        grace_ms: grace.as_millis() as u64,
    });
    let _ = tokio::time::timeout(grace + Duration::from_secs(2), shutdown).await;
    match tokio::time::timeout(Duration::from_secs(5), guest.wait()).await {
        Ok(exit) => exit,
        Err(_) => {
            tracing::warn!(sandbox = %args.id, "guest did not exit after shutdown; killing it");
            let _ = guest.kill().await;
            guest.wait().await
        }
    }
}

/// Hibernates the guest: the agent syncs and suspends, then the driver
/// saves the guest and ends it. On error, says whether the agent was
/// suspended already (then only a kill ends it).
async fn hibernate(
    agent: &crate::channel::client::AgentClient,
    guest: &mut dyn GuestProcess,
) -> std::result::Result<(), (String, bool)> {
    let asked = tokio::time::timeout(Duration::from_secs(30), agent.call(Request::Suspend)).await;
    match asked {
        Ok(Ok(Ok(Response::Done))) => {}
        Ok(Ok(Ok(other))) => return Err((format!("the agent answered {other:?}"), false)),
        Ok(Ok(Err(e))) => return Err((format!("the agent refused to suspend: {e}"), false)),
        Ok(Err(e)) => return Err((e.to_string(), false)),
        Err(_) => return Err(("the agent did not suspend within 30 s".into(), true)),
    }
    guest.hibernate().await.map_err(|e| (e.to_string(), true))
}

/// Applies the persisted configuration to the live run.
async fn reload(
    store: &Store,
    args: &SuperviseArgs,
    relay: &Relay,
    policy: &mut Policy,
    run_started: Instant,
    guest: &mut dyn GuestProcess,
) -> std::result::Result<Response, GuestError> {
    let io = |e: crate::Error| GuestError::new(GuestErrorCode::Io, e.to_string());
    let rec = store
        .get_by_id(&args.id)
        .await
        .map_err(io)?
        .ok_or_else(|| GuestError::new(GuestErrorCode::NotFound, "the sandbox record is gone"))?;
    let config = rec.info.config;
    policy.apply(&config, run_started);
    relay.set_env(config.env.clone());
    let notes = guest
        .update(config.cpus, config.memory_mb)
        .await
        .map_err(io)?;
    for n in notes {
        tracing::warn!(sandbox = %args.id, "{n}");
    }
    Ok(Response::Done)
}
