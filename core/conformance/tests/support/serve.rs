//! A `burrow serve` per case, for the kit against the remote backend: its
//! own burrow home, its SQLite database in that home, one API token, and a
//! TCP listener on a free loopback port (tokens are required on TCP).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use burrow::{Backend, RemoteBackend};
use burrow_conformance::{BoxError, Store};

use super::{burrow_bin, diagnostics_of, init_env, new_home_dir, Home};

/// The token of each server started, by its URL (what a caller process
/// needs besides the store's location, the URL).
static TOKENS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// The token of the server at `url`.
pub fn token_of(url: &str) -> Option<String> {
    TOKENS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|t| t.get(url).cloned())
}

/// A running `burrow serve`; SIGTERM, then SIGKILL, on drop.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// An API token.
    pub token: String,
    log: PathBuf,
}

impl Server {
    fn command(home: &Path) -> Command {
        let mut c = Command::new(burrow_bin());
        c.arg("serve")
            .env("BURROW_HOME", home)
            .env(
                "BURROW_SERVE_DATABASE",
                format!("sqlite://{}/serve.db", home.display()),
            )
            .env("BURROW_SERVE_LISTEN", "127.0.0.1:0")
            .env_remove("BURROW_URL")
            .env_remove("BURROW_TOKEN")
            .stdin(Stdio::null());
        c
    }

    /// Creates a token and starts the server on `home` (blocking).
    pub fn start(home: &Path) -> Result<Server, BoxError> {
        let out = Self::command(home)
            .args(["token", "create", "conformance", "--role", "admin"])
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "burrow serve token create failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        let token = String::from_utf8(out.stdout)?.trim().to_owned();
        let log = home.join("serve.log");
        let mut child = Self::command(home)
            .env("BURROW_LOG", "warn,burrow_server=info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Drains stdout for as long as the server lives.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut server = Server {
            child: Some(child),
            url: String::new(),
            token,
            log,
        };
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| format!("burrow serve did not start: {}", server.log()))?;
        server.url = line
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("unexpected first line of burrow serve: {line:?}"))?
            .to_owned();
        Ok(server)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on the pid of our own child, not yet waited for.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A fresh store for one case: a new home with its own `burrow serve`;
/// each `open` is a new `RemoteBackend` (its own connections and session)
/// on it. The location is the server's URL ([`token_of`] has its token).
pub async fn remote_store() -> Result<Store, BoxError> {
    init_env();
    let dir = new_home_dir()?;
    let path = dir.path().to_owned();
    let server = tokio::task::spawn_blocking({
        let path = path.clone();
        move || Server::start(&path)
    })
    .await??;
    let (url, token) = (server.url.clone(), server.token.clone());
    TOKENS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(url.clone(), token.clone());
    let sandbox_logs = diagnostics_of(&path);
    let log_path = path.join("serve.log");
    let open_url = url.clone();
    Ok(Store::new(move || {
        let (url, token) = (open_url.clone(), token.clone());
        async move { Ok(Arc::new(RemoteBackend::connect(&url, Some(token))?) as Arc<dyn Backend>) }
    })
    .location(url)
    .diagnostics(move || {
        let serve = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = serve.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "----- burrow serve (last 40 lines) -----\n{}\n{}",
            tail.join("\n"),
            sandbox_logs()
        )
    })
    // Dropped in this order: the server first, then the home (which kills
    // any supervisor still running there).
    .keep(server)
    .keep(Home::new(dir)))
}
