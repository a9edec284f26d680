//! The run loop over a plain host process (the guest) and an in-process
//! agent, under tokio's paused clock: hours of policy in milliseconds, and
//! each end checked to the tick. The record is a fake; the guest is a
//! real process, frozen and thawed by real signals.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use burrow_protocol::{GuestMsg, HostMsg, Metrics, Request, PROTOCOL_VERSION};
use tokio::io::{duplex, split, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::oneshot;
use tokio::time::sleep;

use super::*;
use crate::channel::client::{AgentClient, Handshake, RequestHandle};
use crate::channel::frames::{read_frame, write_frame};

/// CPU and memory limits a guest was updated to.
type Limits = (Option<f64>, Option<u64>);

/// A guest that is a host process.
#[derive(Debug)]
struct HostProcess {
    child: tokio::process::Child,
    exit: Option<GuestExit>,
    hibernatable: bool,
    updates: std::sync::Arc<Mutex<Vec<Limits>>>,
}

impl HostProcess {
    fn spawn(script: &str) -> Self {
        let child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .kill_on_drop(true)
            .spawn()
            .expect("sh runs");
        HostProcess {
            child,
            exit: None,
            hibernatable: false,
            updates: Default::default(),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    fn signal(&self, sig: i32) -> Result<()> {
        // SAFETY: a signal to our own child, which is not reaped yet.
        match unsafe { libc::kill(self.pid(), sig) } {
            0 => Ok(()),
            _ => Err(crate::Error::io(
                "signalling the host process",
                None,
                std::io::Error::last_os_error(),
            )),
        }
    }
}

/// Whether a process is stopped by a signal, once the kernel has
/// delivered the last one sent (a signal is delivered asynchronously; this
/// looks for up to five seconds of real time for the state to be `frozen`).
fn frozen_becomes(pid: i32, frozen: bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // The state follows the command name, which is in parentheses.
        let state = stat[stat.rfind(')').unwrap() + 2..].chars().next();
        if (state == Some('T')) == frozen || std::time::Instant::now() >= deadline {
            return state == Some('T');
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[async_trait]
impl GuestProcess for HostProcess {
    async fn wait(&mut self) -> Result<GuestExit> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| crate::Error::io("waiting", None, e))?;
        let exit = GuestExit {
            code: status.code(),
            signal: status.signal(),
            detail: None,
        };
        self.exit = Some(exit);
        Ok(exit)
    }
    async fn kill(&mut self) -> Result<()> {
        let _ = self.child.start_kill();
        Ok(())
    }
    async fn pause(&mut self) -> Result<()> {
        self.signal(libc::SIGSTOP)
    }
    async fn resume(&mut self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }
    async fn cleanup(&mut self) -> Result<()> {
        Ok(())
    }
    async fn update(&mut self, cpus: Option<f64>, memory_mb: Option<u64>) -> Result<Vec<String>> {
        self.updates.lock().unwrap().push((cpus, memory_mb));
        Ok(Vec::new())
    }
    async fn metrics(&mut self) -> Result<Metrics> {
        Ok(Metrics {
            pids: Some(1),
            ..Metrics::default()
        })
    }
    fn hibernation_blocker(&self) -> Option<String> {
        (!self.hibernatable).then(|| "a host process cannot be saved".into())
    }
}

#[derive(Default)]
struct FakeRecord {
    published: Mutex<Vec<(Status, Status)>>,
    detached: AtomicBool,
    config: Mutex<Option<SandboxConfig>>,
}

#[async_trait]
impl RunRecord for FakeRecord {
    async fn publish(&self, from: Status, to: Status) -> bool {
        self.published.lock().unwrap().push((from, to));
        true
    }
    async fn set_detached(&self) -> Result<()> {
        self.detached.store(true, Ordering::SeqCst);
        Ok(())
    }
    async fn config(&self) -> Result<Option<SandboxConfig>> {
        Ok(self.config.lock().unwrap().clone())
    }
}

/// An agent that says hello, answers pings, reports each other request's
/// id, and answers one when told to; it writes raw bytes when told to (a
/// guest process scribbling on the channel), and closes the channel when
/// told `None`.
struct Agent {
    requests: mpsc::UnboundedReceiver<u64>,
    answer: mpsc::UnboundedSender<u64>,
    raw: mpsc::UnboundedSender<Option<Vec<u8>>>,
}

fn fake_agent(mut rd: ReadHalf<DuplexStream>, mut wr: WriteHalf<DuplexStream>) -> Agent {
    let (req_tx, requests) = mpsc::unbounded_channel();
    let (answer, mut answer_rx) = mpsc::unbounded_channel::<u64>();
    let (raw, mut raw_rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    tokio::spawn(async move {
        // An agent says hello first; the host answers.
        let hello = GuestMsg::Hello {
            version: PROTOCOL_VERSION,
            agent_version: "test".into(),
            identity: None,
        };
        write_frame(&mut wr, &hello).await.unwrap();
        loop {
            tokio::select! {
                frame = read_frame::<_, HostMsg>(&mut rd) => match frame {
                    Ok(Some(HostMsg::Hello { .. })) => {}
                    Ok(Some(HostMsg::Request { id, body: Request::Ping, .. })) => {
                        let pong = GuestMsg::Response { id, result: Ok(Response::Done) };
                        write_frame(&mut wr, &pong).await.unwrap();
                    }
                    Ok(Some(HostMsg::Request { id, .. })) => {
                        let _ = req_tx.send(id);
                    }
                    Ok(Some(_)) => {}
                    _ => return,
                },
                Some(id) = answer_rx.recv() => {
                    let done = GuestMsg::Response { id, result: Ok(Response::Done) };
                    write_frame(&mut wr, &done).await.unwrap();
                }
                Some(raw) = raw_rx.recv() => match raw {
                    Some(bytes) => {
                        use tokio::io::AsyncWriteExt;
                        let _ = wr.write_all(&bytes).await;
                    }
                    None => return,
                },
            }
        }
    });
    Agent {
        requests,
        answer,
        raw,
    }
}

struct Fixture {
    id: SandboxId,
    relay: Relay,
    agent: Agent,
    record: std::sync::Arc<FakeRecord>,
    guest: HostProcess,
    commands: mpsc::UnboundedSender<Command>,
    inputs: Option<Inputs<'static>>,
    /// Finishing it is the owner's exit.
    owner: Option<oneshot::Sender<()>>,
}

impl Fixture {
    async fn new() -> Fixture {
        let id = SandboxId::new();
        let (relay_end, agent_end) = duplex(64 * 1024);
        let (rd, wr) = split(agent_end);
        let agent = fake_agent(rd, wr);
        let (rd, wr) = split(relay_end);
        let relay = Relay::builder(&id, 1).connect(rd, wr).await.unwrap();
        let (commands, rx) = mpsc::unbounded_channel();
        let (owner, gone) = oneshot::channel::<()>();
        let inputs = Inputs {
            listener: None,
            commands: rx,
            owner: Some(tokio::spawn(async move {
                let _ = gone.await;
            })),
            sigterm: None,
            sigint: None,
        };
        Fixture {
            id,
            relay,
            agent,
            record: Default::default(),
            guest: HostProcess::spawn("exec sleep 100000"),
            commands,
            inputs: Some(inputs),
            owner: Some(owner),
        }
    }

    /// A client connection over the relay, as the SDKs make one.
    async fn client(&self) -> AgentClient {
        let (client_end, relay_end) = duplex(64 * 1024);
        let (rd, wr) = split(relay_end);
        let relay = self.relay.clone();
        tokio::spawn(async move { relay.serve(rd, wr).await });
        let (rd, wr) = split(client_end);
        AgentClient::connect(rd, wr, Handshake::client(None), Duration::from_secs(10))
            .await
            .unwrap()
    }

    /// Runs the loop beside `script`; returns the end and when it came
    /// (since the run started).
    async fn run(
        &mut self,
        config: &SandboxConfig,
        script: impl std::future::Future<Output = ()>,
    ) -> (End, Duration, bool, usize) {
        let mut inputs = self.inputs.take().unwrap();
        let mut run = Run::new(
            &self.id,
            &self.relay,
            &*self.record,
            &mut self.guest,
            config,
        );
        let t0 = Instant::now();
        let (end, ()) = tokio::join!(
            async {
                let end = run.until_end(&mut inputs).await;
                // Commands after the end are refused: a script that still
                // asks fails instead of waiting for ever.
                drop(inputs);
                (end, t0.elapsed())
            },
            script
        );
        let (end, at) = end;
        (end, at, run.paused, run.waiters.len())
    }
}

/// Sends a command and returns its answer's receiver.
fn ask(
    tx: &mpsc::UnboundedSender<Command>,
    make: impl FnOnce(Reply) -> Command,
) -> oneshot::Receiver<std::result::Result<Response, GuestError>> {
    let (reply, answer) = oneshot::channel();
    tx.send(make(reply)).unwrap();
    answer
}

fn config() -> SandboxConfig {
    SandboxConfig::new("host")
}

fn with_idle(idle: u64) -> SandboxConfig {
    let mut c = config();
    c.idle_timeout = Some(Duration::from_secs(idle));
    c
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `at` lies in `[from, from + within]`.
fn came(at: Duration, from: u64, within: Duration) {
    assert!(
        at >= secs(from) && at <= secs(from) + within,
        "ended at {at:?}, expected {from} s (+{within:?})"
    );
}

fn reason(end: &End) -> Option<ExitReason> {
    match end {
        End::Stop { reason, .. } => Some(*reason),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn idle_reclaim_comes_at_the_timeout() {
    let mut f = Fixture::new().await;
    let (end, at, ..) = f.run(&with_idle(300), async {}).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    // The reaper looks every second for a timeout this long.
    came(at, 300, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_touch_restarts_the_idle_clock() {
    let mut f = Fixture::new().await;
    let tx = f.commands.clone();
    let script = async move {
        sleep(secs(200)).await;
        let answer = ask(&tx, |reply| Command::Touch { reply });
        assert!(matches!(answer.await.unwrap(), Ok(Response::Done)));
    };
    let (end, at, ..) = f.run(&with_idle(300), script).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    came(at, 500, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_ping_is_not_activity() {
    let mut f = Fixture::new().await;
    let client = f.client().await;
    let script = async move {
        // Pings every ten seconds, well past the timeout.
        for _ in 0..100 {
            match client.call(Request::Ping).await {
                Ok(Ok(_)) => sleep(secs(10)).await,
                // Refused once the reclaim has closed the relay.
                _ => return,
            }
        }
    };
    let (end, at, ..) = f.run(&with_idle(300), script).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    came(at, 300, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_request_in_flight_holds_off_the_reclaim() {
    let mut f = Fixture::new().await;
    let client = f.client().await;
    let answer = f.agent.answer.clone();
    let requests = &mut f.agent.requests;
    let pending: RequestHandle = client.request(Request::Sync).unwrap();
    let id = requests.recv().await.unwrap();
    let script = async move {
        sleep(secs(1000)).await;
        answer.send(id).unwrap();
        assert!(matches!(
            pending.response().await.unwrap(),
            Ok(Response::Done)
        ));
    };
    let (end, at, ..) = f.run(&with_idle(300), script).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    // Idle from the answer on.
    came(at, 1300, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_paused_guest_is_frozen_and_never_reclaimed() {
    let mut f = Fixture::new().await;
    let pid = f.guest.pid();
    let tx = f.commands.clone();
    let record = f.record.clone();
    let script = async move {
        let answer = ask(&tx, |reply| Command::Pause { reply });
        assert!(matches!(answer.await.unwrap(), Ok(Response::Done)));
        assert!(frozen_becomes(pid, true));
        // Pausing twice is fine.
        let answer = ask(&tx, |reply| Command::Pause { reply });
        assert!(matches!(answer.await.unwrap(), Ok(Response::Done)));
        // Draining a frozen guest is refused.
        let answer = ask(&tx, |reply| Command::Drain { reply });
        let refused = answer.await.unwrap().unwrap_err();
        assert_eq!(refused.code, GuestErrorCode::Unavailable);
        sleep(secs(1000)).await;
        assert!(frozen_becomes(pid, true), "still frozen after 1000 s");
        let answer = ask(&tx, |reply| Command::Resume { reply });
        assert!(matches!(answer.await.unwrap(), Ok(Response::Done)));
        assert!(!frozen_becomes(pid, false));
    };
    let (end, at, paused, _) = f.run(&with_idle(10), script).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    // The resume is use: ten idle seconds after it (the reaper looks
    // each second for a ten-second timeout).
    came(at, 1010, secs(1));
    assert!(!paused);
    assert_eq!(
        *record.published.lock().unwrap(),
        [
            (Status::Running, Status::Paused),
            (Status::Paused, Status::Running)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_max_duration_ends_the_run() {
    let mut f = Fixture::new().await;
    let mut c = config();
    c.max_duration = Some(secs(60));
    let (end, at, ..) = f.run(&c, async {}).await;
    assert_eq!(reason(&end), Some(ExitReason::MaxDuration));
    came(at, 60, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_zero_idle_timeout_disables_the_reaper() {
    let mut f = Fixture::new().await;
    let mut c = with_idle(0);
    c.max_duration = Some(secs(3600));
    let (end, at, ..) = f.run(&c, async {}).await;
    assert_eq!(reason(&end), Some(ExitReason::MaxDuration));
    came(at, 3600, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_the_run_when_its_last_request_does() {
    let mut f = Fixture::new().await;
    let client = f.client().await;
    let answer = f.agent.answer.clone();
    let pending = client.request(Request::Sync).unwrap();
    let id = f.agent.requests.recv().await.unwrap();
    let tx = f.commands.clone();
    let script = async move {
        sleep(secs(5)).await;
        let drained = ask(&tx, |reply| Command::Drain { reply });
        assert!(matches!(drained.await.unwrap(), Ok(Response::Done)));
        // Draining refuses a pause, and new requests.
        let refused = ask(&tx, |reply| Command::Pause { reply });
        assert_eq!(
            refused.await.unwrap().unwrap_err().code,
            GuestErrorCode::Unavailable
        );
        let late = client.request(Request::Sync).unwrap();
        let refused = late.response().await.unwrap().unwrap_err();
        assert_eq!(refused.code, GuestErrorCode::Unavailable);
        sleep(secs(95)).await;
        answer.send(id).unwrap();
        assert!(matches!(
            pending.response().await.unwrap(),
            Ok(Response::Done)
        ));
    };
    // An idle timeout shorter than the wait: draining is never reclaimed.
    let (end, at, ..) = f.run(&with_idle(30), script).await;
    assert_eq!(reason(&end), Some(ExitReason::Drain));
    came(at, 100, Duration::ZERO);
    assert_eq!(
        *f.record.published.lock().unwrap(),
        [(Status::Running, Status::Draining)]
    );
}

#[tokio::test(start_paused = true)]
async fn the_owner_exit_stops_an_attached_run() {
    let mut f = Fixture::new().await;
    let owner = f.owner.take().unwrap();
    let script = async move {
        sleep(secs(30)).await;
        drop(owner);
    };
    let (end, at, ..) = f.run(&config(), script).await;
    assert_eq!(reason(&end), Some(ExitReason::OwnerExited));
    came(at, 30, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_detached_run_outlives_its_owner() {
    let mut f = Fixture::new().await;
    let owner = f.owner.take().unwrap();
    let tx = f.commands.clone();
    let script = async move {
        sleep(secs(10)).await;
        let detached = ask(&tx, |reply| Command::Detach { reply });
        assert!(matches!(detached.await.unwrap(), Ok(Response::Done)));
        sleep(secs(20)).await;
        drop(owner);
    };
    let mut c = config();
    c.max_duration = Some(secs(100));
    let (end, at, ..) = f.run(&c, script).await;
    assert_eq!(reason(&end), Some(ExitReason::MaxDuration));
    came(at, 100, secs(1));
    assert!(f.record.detached.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn the_guest_exit_ends_the_run_with_its_status() {
    let mut f = Fixture::new().await;
    f.guest = HostProcess::spawn("exit 3");
    // No timer ends this run: the paused clock races ahead while the
    // process takes its real time to exit.
    let (end, ..) = f.run(&config(), async {}).await;
    let End::GuestExited(Ok(exit)) = end else {
        panic!("{end:?}")
    };
    assert_eq!((exit.code, exit.signal), (Some(3), None));
}

#[tokio::test(start_paused = true)]
async fn a_reload_applies_the_persisted_configuration() {
    let mut f = Fixture::new().await;
    let mut reloaded = with_idle(20);
    reloaded.cpus = Some(2.0);
    reloaded.env = BTreeMap::from([("K".to_owned(), "v".to_owned())]);
    *f.record.config.lock().unwrap() = Some(reloaded);
    let updates = f.guest.updates.clone();
    let tx = f.commands.clone();
    let script = async move {
        sleep(secs(50)).await;
        let answer = ask(&tx, |reply| Command::Reload { reply });
        assert!(matches!(answer.await.unwrap(), Ok(Response::Done)));
    };
    // No idle timeout until the reload; then twenty seconds, long since
    // passed: the next look (every two seconds now) reclaims.
    let (end, at, ..) = f.run(&config(), script).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
    came(at, 50, secs(2));
    assert_eq!(*updates.lock().unwrap(), [(Some(2.0), None)]);
}

#[tokio::test(start_paused = true)]
async fn a_reload_of_a_gone_record_is_not_found() {
    let mut f = Fixture::new().await;
    let tx = f.commands.clone();
    let script = async move {
        let answer = ask(&tx, |reply| Command::Reload { reply });
        assert_eq!(
            answer.await.unwrap().unwrap_err().code,
            GuestErrorCode::NotFound
        );
        let stop = |reply| Command::Kill { reply: Some(reply) };
        drop(ask(&tx, stop));
    };
    let (end, _, _, waiters) = f.run(&config(), script).await;
    assert!(matches!(end, End::Kill));
    assert_eq!(waiters, 1);
}

#[tokio::test(start_paused = true)]
async fn an_idle_hibernating_sandbox_hibernates_when_its_guest_can() {
    let mut c = with_idle(60);
    c.idle_action = IdleAction::Hibernate;
    let mut f = Fixture::new().await;
    f.guest.hibernatable = true;
    let (end, at, ..) = f.run(&c, async {}).await;
    assert!(matches!(end, End::Hibernate), "{end:?}");
    came(at, 60, secs(1));
    // A guest that cannot be saved is stopped instead.
    let mut f = Fixture::new().await;
    let (end, ..) = f.run(&c, async {}).await;
    assert_eq!(reason(&end), Some(ExitReason::IdleTimeout));
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_the_run_with_its_grace_and_reason() {
    let mut f = Fixture::new().await;
    let tx = f.commands.clone();
    let script = async move {
        let metrics = ask(&tx, |reply| Command::Metrics { reply });
        assert!(matches!(
            metrics.await.unwrap(),
            Ok(Response::Metrics { metrics }) if metrics.pids == Some(1)
        ));
        drop(ask(&tx, |reply| Command::Stop {
            grace: secs(7),
            reason: ExitReason::Stopped,
            reply: Some(reply),
        }));
    };
    let (end, _, _, waiters) = f.run(&with_idle(300), script).await;
    let End::Stop { grace, reason } = end else {
        panic!("{end:?}")
    };
    assert_eq!((grace, reason), (secs(7), ExitReason::Stopped));
    assert_eq!(waiters, 1);
}

/// What a guest process wrote into the agent's channel ends the run at
/// once: nothing after it can be read, so nothing could be served.
#[tokio::test(start_paused = true)]
async fn garbage_on_the_agent_channel_ends_the_run() {
    let mut f = Fixture::new().await;
    let raw = f.agent.raw.clone();
    let client = f.client().await;
    let (end, at, ..) = f
        .run(&config(), async {
            sleep(secs(30)).await;
            raw.send(Some(b"garbage, not a frame\n".to_vec())).unwrap();
            sleep(secs(1)).await;
            // A request after it is answered, not left waiting.
            let answer = client.call(Request::Ping).await.unwrap();
            assert!(answer.is_err(), "{answer:?}");
        })
        .await;
    let End::AgentLost(why) = &end else {
        panic!("{end:?}")
    };
    assert!(why.contains("broke"), "{why}");
    came(at, 30, secs(1));
}

/// A length word that promises a body which never comes: the run ends
/// after the stall limit, counted only while the guest runs.
#[tokio::test(start_paused = true)]
async fn a_frame_stuck_half_way_ends_the_run_but_not_while_paused() {
    let mut f = Fixture::new().await;
    let raw = f.agent.raw.clone();
    let commands = f.commands.clone();
    let (end, at, ..) = f
        .run(&config(), async {
            sleep(secs(5)).await;
            assert!(ask(&commands, |r| Command::Pause { reply: r })
                .await
                .unwrap()
                .is_ok());
            raw.send(Some(vec![0, 0x3f, 0xff, 0xff])).unwrap();
            // Frozen for a minute: no verdict.
            sleep(secs(60)).await;
            assert!(ask(&commands, |r| Command::Resume { reply: r })
                .await
                .unwrap()
                .is_ok());
        })
        .await;
    assert!(matches!(end, End::AgentLost(_)), "{end:?}");
    came(at, 65 + u64::from(STALL_LOOKS), secs(2));
}

/// The agent closed its channel and the guest lives on: after a grace,
/// the run ends instead of refusing every call until someone kills it.
#[tokio::test(start_paused = true)]
async fn a_closed_channel_under_a_living_guest_ends_the_run() {
    let mut f = Fixture::new().await;
    let raw = f.agent.raw.clone();
    let (end, at, ..) = f
        .run(&config(), async {
            sleep(secs(10)).await;
            raw.send(None).unwrap();
        })
        .await;
    let End::AgentLost(why) = &end else {
        panic!("{end:?}")
    };
    assert!(why.contains("closed"), "{why}");
    came(at, 10 + CLOSED_GRACE.as_secs(), secs(1));
}
