//! The supervisor while the runtime lives: the relay and the main process
//! are set up, [`Run`] decides how the run ends, and the end is carried
//! out here (the guest stopped, killed or hibernated) and recorded.

use std::time::{Duration, Instant};

use burrow_protocol::{Request, Response};
use tokio::sync::mpsc;

use super::run::{End, Inputs, Run, StoreRecord};
use super::{describe_exit, owner_watch, Booted, Controls, SuperviseArgs, DEFAULT_GRACE};
use crate::channel::relay::Relay;
use crate::engine::driver::{GuestExit, GuestProcess};
use crate::engine::fault::Fault;
use crate::engine::paths::Home;
use crate::engine::store::Store;
use crate::error::Result;
use crate::model::{ExitReason, Status};

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
        ports,
    } = booted;
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let main_tx = cmd_tx.clone();
    let mut relay = Relay::builder(&args.id, args.generation)
        .control(Controls { commands: cmd_tx })
        .env(config.guest_env());
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
    let record = StoreRecord {
        store: &store,
        id: &args.id,
        generation: args.generation,
    };
    let mut run = Run::new(&args.id, &relay, &record, guest.as_mut(), &config);
    let signal = |kind| tokio::signal::unix::signal(kind).ok();
    let mut inputs = Inputs {
        listener: Some(&listener),
        commands: cmd_rx,
        owner: args.owner_pid.map(owner_watch),
        sigterm: signal(tokio::signal::unix::SignalKind::terminate()),
        sigint: signal(tokio::signal::unix::SignalKind::interrupt()),
    };
    let end = run.until_end(&mut inputs).await;
    let paused = run.paused;
    let waiters = std::mem::take(&mut run.waiters);
    drop(run);
    drop(inputs);
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
        End::AgentLost(detail) => {
            if paused {
                // A frozen guest would not die of the kill until thawed.
                let _ = guest.resume().await;
            }
            let _ = guest.kill().await;
            let exit = guest.wait().await;
            let detail = format!("{detail}; {}", describe_exit(&exit));
            (Status::Crashed, ExitReason::Crashed, detail)
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
    ports.close().await;
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
