//! The MCP example as a test workload: its server runs in sandboxes of the
//! image of [`super::mcp_image`], and its client (the official TypeScript
//! SDK, `examples/mcp/client.mjs` as installed in that image) runs on the
//! host's node against the gateway.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// The port the server listens on inside its sandbox.
pub const PORT: u16 = 8000;

/// The target command that starts the server in its sandbox: in the
/// background, its output to a file (a target's command must return).
pub fn server_command() -> Vec<String> {
    slow_server_command(0)
}

/// The local backend's image: the image's root filesystem directory.
pub fn rootfs() -> String {
    super::mcp_image().join("rootfs").display().to_string()
}

/// The image's OCI layout tar and the name it is imported as.
pub fn oci() -> (PathBuf, String) {
    let dir = super::mcp_image();
    let name = std::fs::read_to_string(dir.join("ref")).expect("the image's ref");
    (dir.join("mcp.tar"), name.trim().to_owned())
}

/// `node client.mjs URL ARGS...` with the API token, not waited for.
/// `max_retry_wait_ms` caps each wait on a 503 (none: the full
/// Retry-After).
pub fn spawn_client(
    url: &str,
    token: &str,
    args: &[&str],
    max_retry_wait_ms: Option<u64>,
) -> Child {
    let mut c = Command::new("node");
    c.arg(super::mcp_image().join("rootfs/app/client.mjs"))
        .arg(url)
        .args(args)
        .env("BURROW_TOKEN", token)
        .env_remove("NODE_EXTRA_CA_CERTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ms) = max_retry_wait_ms {
        c.env("MCP_MAX_RETRY_WAIT_MS", ms.to_string());
    }
    c.spawn().expect("spawning node (is Node.js installed?)")
}

/// The JSON line a finished client printed; panics with its stderr if it
/// failed.
pub fn client_output(out: Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Runs the client to the end: its JSON line.
pub fn client(url: &str, token: &str, args: &[&str]) -> Value {
    client_output(
        spawn_client(url, token, args, None)
            .wait_with_output()
            .expect("the MCP client"),
    )
}

/// The target command of the round trip: the server after `delay_s`
/// seconds, so that every start holds its window open (a second client
/// arriving while it runs is answered 503 + Retry-After, deterministically).
pub fn slow_server_command(delay_s: u32) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "(sleep {delay_s}; exec /usr/bin/node /app/server.mjs) >/tmp/mcp-server.log 2>&1 &"
        ),
    ]
}

/// The target command of the stateful server (`MCP_STATEFUL=1`: sessions,
/// and the tool `count`).
pub fn stateful_server_command() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "MCP_STATEFUL=1 /usr/bin/node /app/server.mjs >/tmp/mcp-server.log 2>&1 &".into(),
    ]
}

/// One MCP session of the example's client (`client.mjs URL session`),
/// driven a JSON line at a time: it initializes once, then every call
/// carries its session id.
pub struct SessionClient {
    child: Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl SessionClient {
    /// Starts the client on the endpoint `url` (it initializes there).
    pub fn spawn(url: &str, token: &str) -> SessionClient {
        let mut child = Command::new("node")
            .arg(super::mcp_image().join("rootfs/app/client.mjs"))
            .args([url, "session"])
            .env("BURROW_TOKEN", token)
            .env_remove("NODE_EXTRA_CA_CERTS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning node (is Node.js installed?)");
        let out = child.stdout.take().expect("stdout");
        SessionClient {
            child,
            lines: std::io::BufRead::lines(std::io::BufReader::new(out)),
        }
    }

    /// Sends one command line without waiting for its answer.
    pub fn send(&mut self, command: &Value) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{command}").expect("writing to the MCP client");
    }

    /// The answer line of the command sent before.
    pub fn read(&mut self) -> Value {
        let line = self
            .lines
            .next()
            .expect("the MCP client ended")
            .expect("reading the MCP client");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Sends a command and reads its answer.
    pub fn call(&mut self, command: Value) -> Value {
        self.send(&command);
        self.read()
    }
}

impl Drop for SessionClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of a sample in the `/metrics` of the replica at `url` (0 if
/// absent).
pub fn metric(url: &str, token: &str, sample: &str) -> u64 {
    super::serve::metric_sample(url, token, sample).unwrap_or(0)
}

/// `burrow serve status --json`: the target's entry.
pub fn serve_status(env: &super::serve::ServeEnv, id: &str) -> Value {
    let out = env
        .command()
        .args(["status", "--json"])
        .output()
        .expect("burrow serve status");
    assert!(
        out.status.success(),
        "burrow serve status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    all["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not in {all:#}"))
}

/// What the round trip needs of its setting: the server's URL (one
/// replica, or a port-forward), the target `id` (the MCP server's sandbox,
/// registered with [`slow_server_command`]), an environment of `burrow
/// serve` on the same database (for `burrow serve status`) and a token,
/// the database, and whether the workload is gone (for Kubernetes: no pod).
pub struct RoundTrip<'a> {
    pub url: String,
    /// The server's log so far (every replica's).
    pub log: &'a (dyn Fn() -> String + Sync),
    /// Whether `url` reaches one replica, so that its `/metrics` count
    /// every call.
    pub one_replica: bool,
    pub env: &'a super::serve::ServeEnv,
    pub token: &'a str,
    pub id: &'a str,
    pub store: &'a burrow_server::store::Store,
    /// Seconds of the long tool call (more than the idle timeout).
    pub long_call_s: u32,
    pub workload_gone: &'a (dyn Fn() -> bool + Sync),
    /// The one replica's process, to freeze (SIGSTOP) for twice the lease's
    /// life in the middle of the long call: its heartbeats stop, its lease
    /// expires and is swept, and the call must go on unreclaimed.
    pub freeze_pid: Option<u32>,
}

/// Seconds a replica is frozen mid-call (twice the round trip's lease ttl).
const FREEZE_S: u32 = 3;

/// Sends `sig` (`-STOP`, `-CONT`) to `pid`.
fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

impl RoundTrip<'_> {
    fn endpoint(&self) -> String {
        format!("{}/gw/{}/mcp", self.url, self.id)
    }

    async fn state(&self) -> Option<burrow_server::store::RuntimeState> {
        self.store.runtime(self.id).await.unwrap().map(|r| r.state)
    }

    async fn wait_state(
        &self,
        want: burrow_server::store::RuntimeState,
        within: std::time::Duration,
    ) {
        let end = std::time::Instant::now() + within;
        while self.state().await != Some(want) {
            assert!(
                std::time::Instant::now() < end,
                "state never became {want:?}: {:?}",
                self.state().await
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    fn engine_status(&self) -> String {
        let r = super::serve::http(
            "GET",
            &format!("{}/v1/sandboxes/{}", self.url, self.id),
            Some(self.token),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["status"].as_str().unwrap().to_owned()
    }

    /// A cold start met by two clients: the first (`first`) wins the start
    /// and waits for it; the second (`second`), sent while the start runs,
    /// is answered 503 + Retry-After, waits it out (in full) and succeeds.
    /// A third, `pin`, sent during the start too and retrying at once, is
    /// in flight from the moment the start ends: until it ends, nothing is
    /// idle, however long the machine takes between two steps. Returns the
    /// first two outputs and the pin.
    async fn cold(&self, first: &[&str], second: &[&str], pin: &[&str]) -> (Value, Value, Child) {
        use burrow_server::store::RuntimeState;
        let a = spawn_client(&self.endpoint(), self.token, first, None);
        self.wait_state(RuntimeState::Starting, std::time::Duration::from_secs(30))
            .await;
        let b = spawn_client(&self.endpoint(), self.token, second, None);
        let pin = spawn_client(&self.endpoint(), self.token, pin, Some(50));
        let (a, b) = blocking(move || {
            (
                client_output(a.wait_with_output().unwrap()),
                client_output(b.wait_with_output().unwrap()),
            )
        })
        .await;
        assert_eq!(
            a["retries"], 0,
            "the starting call waits for its start: {a}"
        );
        assert!(
            b["retries"].as_u64().unwrap() >= 1,
            "a call during the start is answered 503 + Retry-After: {b}"
        );
        (a, b, pin)
    }

    /// The whole round trip: cold start (503 + Retry-After for the second
    /// caller), warm calls, a streamed call longer than the idle timeout
    /// that its lease keeps alive, reclaim to dormant with the target's
    /// record untouched, and the wake of the next call.
    pub async fn run(&self) {
        use burrow_server::store::RuntimeState;
        use std::time::Duration;
        let (url, token) = (self.endpoint(), self.token.to_owned());
        let record = self.store.get_target_versioned(self.id).await.unwrap();
        assert_eq!(
            serve_status(self.env, self.id)["state"],
            Value::Null,
            "never called"
        );

        // Cold: initialize + tools/list, and a tool call arriving mid-start;
        // and a long tool call, streaming progress, in flight from the end
        // of the start: it keeps the sandbox from the reaper for longer
        // than the idle timeout (and `burrow serve status` shows its lease).
        let secs = self.long_call_s;
        let args = format!(r#"{{"seconds":{secs}}}"#);
        let (tools, who1, long) = self
            .cold(
                &["tools"],
                &["call", "whoami"],
                &["call", "countdown", &args],
            )
            .await;
        assert_eq!(
            tools["tools"],
            serde_json::json!(["add", "whoami", "countdown"])
        );
        let who1: Value = serde_json::from_str(who1["result"].as_str().unwrap()).unwrap();
        assert_eq!(self.state().await, Some(RuntimeState::Ready));
        let st = serve_status(self.env, self.id);
        assert_eq!(
            (st["state"].as_str(), st["generation"].as_i64()),
            (Some("ready"), Some(1))
        );
        assert_eq!(self.engine_status(), "running");

        // The long call to its end: never reclaimed meanwhile. Once its
        // lease has shown, its replica (if it is one process here) is frozen
        // for twice the lease's life; then a warm call, while it still
        // runs, sees no 503.
        let mut long = long;
        let mut leased = false;
        let mut frozen = self.freeze_pid;
        let mut warm = None;
        while long.try_wait().unwrap().is_none() {
            assert_eq!(
                self.state().await,
                Some(RuntimeState::Ready),
                "reclaimed under a call in flight"
            );
            if !leased {
                let st = serve_status(self.env, self.id);
                leased = st["live_leases"].as_i64() >= Some(1) && st["state"] == "ready";
            } else if let Some(pid) = frozen.take() {
                signal(pid, "-STOP");
                tokio::time::sleep(Duration::from_secs(u64::from(FREEZE_S))).await;
                assert_eq!(self.state().await, Some(RuntimeState::Ready));
                signal(pid, "-CONT");
            } else if warm.is_none() {
                let (url, token) = (url.clone(), token.clone());
                warm = Some(
                    blocking(move || client(&url, &token, &["call", "add", r#"{"a":2,"b":3}"#]))
                        .await,
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let add = warm.expect("the long call ended before a warm call could be made");
        assert_eq!(
            (add["result"].as_str(), add["retries"].as_u64()),
            (Some("5"), Some(0))
        );
        assert!(
            frozen.is_none(),
            "the long call ended before its replica could be frozen"
        );
        let long = blocking(move || client_output(long.wait_with_output().unwrap())).await;
        assert!(
            leased,
            "the long call's lease never showed in burrow serve status"
        );
        assert_eq!(long["result"], "done", "{long}");
        let progress = long["progress"].as_array().unwrap();
        assert_eq!(progress.len(), secs as usize, "{long}");
        // The first progress came long before the result (less the
        // freeze, whose progress arrived at once after it).
        let first_at = progress[0]["atMs"].as_f64().unwrap();
        let held = if self.freeze_pid.is_some() {
            FREEZE_S
        } else {
            0
        };
        assert!(
            long["firstMs"].as_f64().unwrap() - first_at >= f64::from(secs - 2 - held) * 1000.0,
            "progress was not streamed as it happened: {long}"
        );
        assert_eq!(self.engine_status(), "running");
        assert_eq!(
            self.store
                .runtime(self.id)
                .await
                .unwrap()
                .unwrap()
                .generation,
            1
        );

        // Idle: reclaimed to dormant, the workload gone, the target's
        // record (configuration, headers, metadata, version) untouched.
        self.wait_state(RuntimeState::Dormant, Duration::from_secs(30))
            .await;
        assert_eq!(self.engine_status(), "stopped");
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while !(self.workload_gone)() {
            assert!(
                std::time::Instant::now() < end,
                "the workload outlived its reclaim"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            self.store.get_target_versioned(self.id).await.unwrap(),
            record
        );
        let st = serve_status(self.env, self.id);
        assert_eq!(
            (st["state"].as_str(), st["live_leases"].as_i64()),
            (Some("dormant"), Some(0))
        );

        // The next call wakes it: a new process (generation 2), pinned by a
        // short call while the checks run.
        let (who2, add, pin) = self
            .cold(
                &["call", "whoami"],
                &["call", "add", r#"{"a":40,"b":2}"#],
                &["call", "countdown", r#"{"seconds":3}"#],
            )
            .await;
        assert_eq!(add["result"], "42");
        let who2: Value = serde_json::from_str(who2["result"].as_str().unwrap()).unwrap();
        assert_ne!(
            who1["startedAt"], who2["startedAt"],
            "the same process answered after a reclaim"
        );
        assert_eq!(self.state().await, Some(RuntimeState::Ready));
        assert_eq!(
            self.store
                .runtime(self.id)
                .await
                .unwrap()
                .unwrap()
                .generation,
            2
        );
        let pin = blocking(move || client_output(pin.wait_with_output().unwrap())).await;
        assert_eq!(pin["result"], "done", "{pin}");

        // The metrics count the starts and the reclaim; a reaper that
        // works logs nothing.
        if self.one_replica {
            let m = |s: &str| metric(&self.url, self.token, s);
            assert_eq!(m("burrow_gateway_starts_total{result=\"ok\"}"), 2);
            assert_eq!(m("burrow_gateway_calls_total{outcome=\"cold\"}"), 2);
            assert_eq!(m("burrow_reaper_reclaims_total{result=\"ok\"}"), 1);
            assert_eq!(m("burrow_reaper_reclaims_total{result=\"failed\"}"), 0);
        }
        let log = (self.log)();
        assert!(!log.contains("burrow_server::reaper"), "{log}");
    }
}

/// `burrow mcp`'s CPU ceiling in these tests (`--max-cpus 2`) where this
/// host enforces CPU limits for the tests' user: a ceiling is also the
/// limit of a sandbox created without one, and a limit the host cannot
/// enforce (a rootless container without a delegated cgroup) is refused.
pub fn cpu_ceiling() -> &'static [&'static str] {
    if super::enforceable().cpus {
        &["--max-cpus", "2"]
    } else {
        &[]
    }
}

/// Runs `tests/mcp/client.py` (the official Python SDK) with `transport`
/// (`stdio`, or `http:URL`) against `burrow mcp` on the home `home`, with
/// `image` (the one image its policy allows) and more environment for
/// `burrow mcp` (`BURROW_URL`, `BURROW_TOKEN`: its backend is a server's);
/// returns what it saw (see [`check`]).
pub async fn python_client(
    home: &std::path::Path,
    transport: &str,
    image: &str,
    env: &[(&str, &str)],
) -> Value {
    let python = tokio::task::spawn_blocking(super::mcp_client_python)
        .await
        .unwrap();
    let out = tokio::process::Command::new(python)
        .arg(super::workspace_root().join("tests/mcp/client.py"))
        .arg(transport)
        .arg(super::burrow_bin())
        .arg(image)
        .args(["--allow-image", image, "--max-sandboxes", "2"])
        .args(cpu_ceiling())
        .env("BURROW_HOME", home)
        .env("BURROW_BIN", super::burrow_bin())
        .env("BURROW_AGENT_BIN", super::agent_bin())
        .env_remove("BURROW_URL")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "client ({transport}) failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What `burrow mcp` must have shown [`python_client`], whatever its
/// transport and backend.
pub fn check(r: &Value) {
    assert_eq!(r["tools_capability"], true);
    for tool in ["create", "exec", "fs_read", "fs_write", "destroy", "list"] {
        assert!(
            r["tools"].as_array().unwrap().iter().any(|t| t == tool),
            "{tool}: {}",
            r["tools"]
        );
    }
    // The input schema is the contract: exact, no other keys.
    assert_eq!(r["create_schema"]["additionalProperties"], false);
    assert_eq!(
        r["create_schema"]["required"],
        serde_json::json!(["name", "image"])
    );
    assert_eq!(r["refused"]["is_error"], true);
    assert_eq!(r["refused"]["structured"]["code"], "invalid_config");
    assert_eq!(r["created"]["is_error"], false, "{}", r["created"]);
    assert_eq!(r["converged_same_id"], true);
    assert_eq!(r["too_many_cpus"]["structured"]["code"], "invalid_config");
    assert_eq!(r["no_network"]["structured"]["code"], "invalid_config");
    assert_eq!(r["exec"]["structured"]["exit_code"], 0, "{}", r["exec"]);
    assert_eq!(r["exec"]["structured"]["stdout"], "one\ntwo\n");
    let progress: String = r["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap_or(""))
        .collect();
    assert_eq!(progress, "one\ntwo\n", "output streamed as progress");
    let ps = r["after_cancel_ps"].as_str().unwrap();
    assert!(
        !ps.contains("sleep 30"),
        "a cancelled exec's process lives on:\n{ps}"
    );
    assert!(ps.contains("ps"), "{ps}");
    assert_eq!(r["spawned"]["stdout"], "a\nb\n", "{}", r["spawned"]);
    assert_eq!(r["spawned"]["exit_code"], 0);
    assert_eq!(r["read_unknown"]["structured"]["code"], "not_found");
    assert_eq!(r["resources_capability"], true);
    let resources = r["resources"].as_array().unwrap();
    for want in ["burrow://sandbox/agent/info", "burrow://sandbox/agent/logs"] {
        assert!(resources.iter().any(|u| u == want), "{want}: {resources:?}");
    }
    assert_eq!(r["info_resource"]["name"], "agent");
    assert_eq!(r["info_resource"]["status"], "running");
    assert_ne!(r["missing_resource"], "answered");
    assert_eq!(r["read"]["structured"]["content"], "hello");
    assert_eq!(r["destroy"]["is_error"], false, "{}", r["destroy"]);
    assert_eq!(r["gone"]["structured"]["code"], "not_found");
}
