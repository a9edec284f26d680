#![allow(clippy::unwrap_used)]
//! A gateway call in flight is never reclaimed, whatever holds up the
//! replica that serves it, and a replica that dies frees its targets at
//! once: two `burrow serve` replicas on a real Postgres, a streamed call
//! through replica A (busybox httpd's CGI printing a line a second inside
//! the sandbox), and replica B's reaper looking for idle sandboxes.
//!
//! Each window is held open on purpose, for longer than the lease lives:
//! A's heartbeats stalled at a fault point, A frozen with SIGSTOP, A's
//! database connections stalled by a proxy the test holds, and then A
//! killed with SIGKILL under a lease that has not expired.

use burrow_cli_testkit as common;

use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burrow::internal::fault::Fault;
use burrow::{SandboxId, Status};
use burrow_server::store::{now_ms, RuntimeState};
use burrow_test_support::fault::FaultWindow;
use common::gateway::{blocking, gw, setup, Setup};
use common::serve::{
    call_retrying, metric_sample, read_body, read_head, send, web_command, Server,
};

/// Short timers, so that a lease dies quickly once its heartbeats stop.
const SHORT: [(&str, &str); 4] = [
    ("LEASE_TTL", "1500ms"),
    ("HEARTBEAT_INTERVAL", "500ms"),
    ("IDLE_TIMEOUT", "2s"),
    ("SWEEP_INTERVAL", "300ms"),
];

/// What a streamed call reports as it goes.
enum Event {
    /// A line of the body.
    Line(String),
    /// The answer ended: its status.
    Done(u16),
}

/// A GET through the gateway that honours 503 + Retry-After and reports
/// each line of the final answer's body as it arrives.
fn stream(url: String, token: String) -> Receiver<Event> {
    let (tx, rx) = channel();
    std::thread::spawn(move || loop {
        let mut r = BufReader::new(send("GET", &url, Some(&token), None));
        let (status, headers) = read_head(&mut r);
        if status == 503 {
            read_body(&mut r, &headers, |_| {});
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        let mut pending = Vec::new();
        read_body(&mut r, &headers, |bytes| {
            pending.extend_from_slice(bytes);
            while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                let l: Vec<u8> = pending.drain(..=i).collect();
                let _ = tx.send(Event::Line(String::from_utf8_lossy(&l).trim().to_owned()));
            }
        });
        let _ = tx.send(Event::Done(status));
        return;
    });
    rx
}

/// Waits for the next event of a streamed call.
fn next(rx: &Receiver<Event>, within: Duration) -> Event {
    match rx.recv_timeout(within) {
        Ok(e) => e,
        Err(RecvTimeoutError::Timeout) => panic!("the call said nothing for {within:?}"),
        Err(RecvTimeoutError::Disconnected) => panic!("the call's reader died"),
    }
}

/// What this suite asks of the gateway setup beyond the shared helpers.
trait InFlight {
    async fn leases(&self, id: &SandboxId) -> i64;
    async fn started_target(&self, via: &Server, name: &str) -> SandboxId;
    async fn call_in_flight(&self, via: &Server, id: &SandboxId, secs: u32) -> Receiver<Event>;
    async fn never_reclaimed(&self, id: &SandboxId, during: impl FnOnce() + Send + 'static)
        -> bool;
    async fn rest_then_reclaimed(&self, id: &SandboxId, rx: Receiver<Event>, secs: u32);
}

impl InFlight for Setup {
    /// Live leases of `id` (none once a stalled one was swept).
    async fn leases(&self, id: &SandboxId) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE target_id = $1")
            .bind(id.as_str())
            .fetch_one(self.store.pool())
            .await
            .unwrap()
    }

    /// A web target, started by one call through `via`.
    async fn started_target(&self, via: &Server, name: &str) -> SandboxId {
        let id = self.web_target(via, name, web_command(0)).await;
        let (url, token) = (gw(via, &id, "index.html"), self.token.clone());
        let r = blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0).await;
        assert_eq!(r.status, 200, "{}", r.text());
        id
    }

    /// Starts a call of `secs` seconds through `via`, and waits until it
    /// is in flight (its first line arrived).
    async fn call_in_flight(&self, via: &Server, id: &SandboxId, secs: u32) -> Receiver<Event> {
        let rx = stream(
            gw(via, id, &format!("cgi-bin/slow?{secs}")),
            self.token.clone(),
        );
        let rx = blocking(move || {
            match next(&rx, Duration::from_secs(120)) {
                Event::Line(l) => assert_eq!(l, format!("tick {secs}")),
                Event::Done(status) => panic!("the call ended before it began ({status})"),
            }
            rx
        })
        .await;
        assert_eq!(self.state(id).await.unwrap().state, RuntimeState::Ready);
        rx
    }

    /// While `during` runs, the target stays ready and running, checked
    /// every 100 ms; returns whether its lease was gone at some check.
    async fn never_reclaimed(
        &self,
        id: &SandboxId,
        during: impl FnOnce() + Send + 'static,
    ) -> bool {
        let job = tokio::task::spawn_blocking(during);
        let mut lease_gone = false;
        while !job.is_finished() {
            let row = self.state(id).await.unwrap();
            assert_eq!(
                row.state,
                RuntimeState::Ready,
                "reclaimed under a call in flight"
            );
            assert_eq!(self.engine_status(id).await, Status::Running);
            lease_gone |= self.leases(id).await == 0;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        job.await.unwrap();
        lease_gone
    }

    /// The rest of a call of `secs` (never reclaimed meanwhile), then the
    /// idle target reclaimed as ever.
    async fn rest_then_reclaimed(&self, id: &SandboxId, rx: Receiver<Event>, secs: u32) {
        self.never_reclaimed(id, move || rest_of_call(rx, secs))
            .await;
        self.wait_state(id, RuntimeState::Dormant, Duration::from_secs(30))
            .await;
        assert_eq!(self.engine_status(id).await, Status::Stopped);
    }
}

/// The rest of a call of `secs` seconds whose first line came: every other
/// line, in order, and the end of a 200.
fn rest_of_call(rx: Receiver<Event>, secs: u32) {
    let mut lines = Vec::new();
    loop {
        match next(&rx, Duration::from_secs(30)) {
            Event::Line(l) => lines.push(l),
            Event::Done(status) => {
                assert_eq!(status, 200, "after {lines:?}");
                break;
            }
        }
    }
    let want: Vec<String> = (1..secs).rev().map(|n| format!("tick {n}")).collect();
    assert_eq!(lines, want, "the call was cut short");
}

/// Sends SIGSTOP or SIGCONT to a replica.
fn signal(server: &Server, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &server.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// A TCP proxy to `to` on a free loopback port whose traffic the test can
/// stall in both directions (the database as a stalled network shows it
/// to a replica: connections stay open, nothing moves).
struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
}

impl Proxy {
    fn start(to: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let st = stalled.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let st = st.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            while st.load(Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if into.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = into.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, stalled }
    }

    fn stall(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
    }
}

/// Replica A with `fault`'s point held (debug builds: `BURROW_FAULT`); and
/// replica B.
fn replicas(s: &Setup, fault: Option<&FaultWindow>) -> (Server, Server) {
    let mut env = s.env.clone();
    if let Some(w) = fault {
        env.vars.extend(
            w.env()
                .map(|(k, v)| (k.to_owned(), v.into_string().expect("UTF-8"))),
        );
    }
    (env.start("a"), s.env.start("b"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_whose_heartbeats_stall_past_its_lease_is_never_reclaimed() {
    let s = setup("inflight_heartbeat", &SHORT).await;
    let dir = tempfile::tempdir().unwrap();
    let w = FaultWindow::new(dir.path(), Fault::GatewayBeforeHeartbeat.as_str());
    let (a, _b) = replicas(&s, Some(&w));
    let id = s.started_target(&a, "hb").await;
    // Every heartbeat of A is held: the call's lease expires 1.5 s after it
    // opened and a reaper sweeps it, while the call goes on for 10 s.
    let rx = s.call_in_flight(&a, &id, 10).await;
    let lease_gone = s.never_reclaimed(&id, move || rest_of_call(rx, 10)).await;
    assert!(
        lease_gone,
        "the window never opened: the call's lease was never swept"
    );
    w.release();
    // Once the call has ended, idle is reclaimed as ever.
    s.wait_state(&id, RuntimeState::Dormant, Duration::from_secs(30))
        .await;
    assert_eq!(s.engine_status(&id).await, Status::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_frozen_mid_call_for_twice_its_lease_keeps_the_call() {
    let s = setup("inflight_sigstop", &SHORT).await;
    let (a, _b) = replicas(&s, None);
    let id = s.started_target(&a, "frozen").await;
    let rx = s.call_in_flight(&a, &id, 8).await;
    // A frozen for 3 s (the lease lives 1.5 s): B sweeps the lease, finds
    // the sandbox idle by its stamp, and must leave it alone.
    signal(&a, "-STOP");
    let lease_gone = s
        .never_reclaimed(&id, || std::thread::sleep(Duration::from_secs(3)))
        .await;
    signal(&a, "-CONT");
    assert!(
        lease_gone,
        "the window never opened: the lease outlived the freeze"
    );
    s.rest_then_reclaimed(&id, rx, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_database_stalls_mid_call_keeps_the_call() {
    let s = setup("inflight_dbstall", &SHORT).await;
    // A reaches the database through a proxy the test stalls: its pool and
    // its lock session alike; B directly.
    let port = s.env.database.rsplit_once(':').unwrap().1;
    let port: u16 = port.split('/').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(port);
    let mut env_a = s.env.clone();
    env_a.database = s
        .env
        .database
        .replace(&format!(":{port}/"), &format!(":{}/", proxy.port));
    let (a, _b) = (env_a.start("a"), s.env.start("b"));
    let id = s.started_target(&a, "stalled").await;
    let rx = s.call_in_flight(&a, &id, 8).await;
    proxy.stall(true);
    let lease_gone = s
        .never_reclaimed(&id, || std::thread::sleep(Duration::from_secs(3)))
        .await;
    proxy.stall(false);
    assert!(
        lease_gone,
        "the window never opened: the lease outlived the stall"
    );
    s.rest_then_reclaimed(&id, rx, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_call_frees_its_target_at_once_under_a_live_lease() {
    // The default lease ttl (30 s): the reclaim must not wait for it.
    let s = setup(
        "inflight_kill",
        &[("IDLE_TIMEOUT", "2s"), ("SWEEP_INTERVAL", "300ms")],
    )
    .await;
    let (mut a, _b) = replicas(&s, None);
    let id = s.started_target(&a, "killed").await;
    let rx = s.call_in_flight(&a, &id, 60).await;
    // In flight for longer than the idle timeout: idle by its stamp.
    s.never_reclaimed(&id, || std::thread::sleep(Duration::from_secs(3)))
        .await;
    a.kill9();
    let killed = Instant::now();
    s.wait_state(&id, RuntimeState::Dormant, Duration::from_secs(15))
        .await;
    let after = killed.elapsed();
    // The dead replica's lease is still there, unexpired: it guarded nothing.
    let live: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE target_id = $1 AND expires_at > $2")
            .bind(id.as_str())
            .bind(now_ms())
            .fetch_one(s.store.pool())
            .await
            .unwrap();
    assert_eq!(live, 1, "reclaimed {after:?} after the kill");
    assert_eq!(s.engine_status(&id).await, Status::Stopped);
    // The caller saw its call end (its replica died), never a wrong answer.
    blocking(move || loop {
        match next(&rx, Duration::from_secs(30)) {
            Event::Line(l) => assert!(l.starts_with("tick "), "{l}"),
            Event::Done(status) => break status,
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_landing_as_the_target_turns_idle_are_never_cut_by_either_replicas_reaper() {
    // Idle after 1 s, swept every 100 ms by both replicas; round after
    // round, a streamed 2 s call lands through A or B within 150 ms either
    // side of the moment the target turns idle: it either keeps the target
    // or meets a reclaim (503, then a start), and is never cut.
    let s = setup(
        "inflight_race",
        &[("IDLE_TIMEOUT", "1s"), ("SWEEP_INTERVAL", "100ms")],
    )
    .await;
    let (a, b) = replicas(&s, None);
    let id = s.started_target(&a, "race").await;
    let rounds = 30;
    let mut woken = 0;
    for round in 0..rounds {
        let via = if round % 2 == 0 { &a } else { &b };
        let row = s.state(&id).await.unwrap();
        let offset = (round % 7) as i64 * 50 - 150;
        let due = row.last_used_at + 1000 + offset;
        let wait = due - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let rx = stream(gw(via, &id, "cgi-bin/slow?2"), s.token.clone());
        blocking(move || {
            match next(&rx, Duration::from_secs(120)) {
                Event::Line(l) => assert_eq!(l, "tick 2", "round {round}"),
                Event::Done(status) => panic!("round {round}: ended before it began ({status})"),
            }
            rest_of_call(rx, 2);
        })
        .await;
        woken += usize::from(s.state(&id).await.unwrap().generation > row.generation);
    }
    eprintln!("{woken} of {rounds} calls met a reclaim and woke the target");
}

/// A call that finds its target dormant, and meets a start another replica
/// finished while it was on its way to its own claim, paid no start: it is
/// a warm call, not a cold one (counted cold before, which made the MCP
/// round trip's count of cold calls flaky under load). The window is held
/// open: replica A's call waits before its claim while B's call starts the
/// target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_that_meets_a_start_finished_meanwhile_is_warm() {
    let s = setup("inflight_converge", &[("IDLE_TIMEOUT", "60s")]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = FaultWindow::new(dir.path(), Fault::GatewayBeforeClaim.as_str());
    let (a, b) = replicas(&s, Some(&w));
    let id = s.web_target(&b, "converge", web_command(0)).await;
    let (url, token) = (gw(&a, &id, "index.html"), s.token.clone());
    let held = std::thread::spawn(move || call_retrying(&url, &token, Duration::from_secs(60)).0);
    assert!(
        w.wait_open(Duration::from_secs(30)).await,
        "A's call never reached its claim"
    );
    // Meanwhile B's call starts the target.
    let (url, token) = (gw(&b, &id, "index.html"), s.token.clone());
    let r = blocking(move || call_retrying(&url, &token, Duration::from_secs(60)).0).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.state(&id).await.unwrap().state, RuntimeState::Ready);
    w.release();
    let r = blocking(move || held.join().unwrap()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = |server: &Server, sample: &str| {
        let (url, token) = (server.url.clone(), s.token.clone());
        let sample = sample.to_owned();
        move || metric_sample(&url, &token, &sample).unwrap_or(0)
    };
    let cold = r#"burrow_gateway_calls_total{outcome="cold"}"#;
    let warm = r#"burrow_gateway_calls_total{outcome="warm"}"#;
    let starts = r#"burrow_gateway_starts_total{result="ok"}"#;
    let counts = blocking({
        let (ac, aw, asx, bc, bs) = (
            m(&a, cold),
            m(&a, warm),
            m(&a, starts),
            m(&b, cold),
            m(&b, starts),
        );
        move || (ac(), aw(), asx(), bc(), bs())
    })
    .await;
    // A: no start, one warm call; B: the one start and the one cold call.
    assert_eq!(counts, (0, 1, 0, 1, 1));
}
