//! A throwaway, real PostgreSQL server for tests.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh temporary directory and
//! starts `postgres` on `127.0.0.1` on a free port (no other TCP address; its
//! unix socket lives in the temporary directory), tuned for tests (`fsync`,
//! `synchronous_commit` and `full_page_writes` off), and creates a database
//! `burrow` owned by the superuser `burrow` with `trust` authentication.
//! Several clusters can run at once. Dropping the cluster stops the server
//! (immediate shutdown) and removes the directory; `Drop` also runs when a
//! test panics.
//!
//! Server binaries: `$BURROW_PG_BIN` if set, else the highest
//! `/usr/lib/postgresql/<version>/bin` that has `initdb` (Debian's layout).
//!
//! PostgreSQL refuses to run as root. When the tests run as root, `initdb`
//! and `postgres` run as the `postgres` system user (created by Debian's
//! `postgresql-common`) and the temporary directory is handed to that user;
//! otherwise they run as the current user. The directory is made under
//! `std::env::temp_dir()`, which the `postgres` user must be able to reach
//! when running as root (the default `/tmp` is).
//!
//! If the test process dies without unwinding (SIGKILL, abort, a panic with
//! `panic = "abort"`), `Drop` cannot run; the postmaster is still stopped,
//! because every server process is spawned with `PR_SET_PDEATHSIG`. The
//! kernel sends that signal when the *thread* that spawned the child exits,
//! so all spawns go through one dedicated thread that lives as long as the
//! process (a test thread would end with its test and take a cluster shared
//! between tests with it). The temporary directory is left behind in that
//! case, and removed by the next `start` (in any process): each cluster holds
//! an exclusive `flock` on `owner.lock` in its directory for as long as it
//! lives, and a `burrow-pg-*` directory whose lock can be taken is stale.
//!
//! `start` blocks (it runs `initdb` and waits for the server); from an async
//! test that is fine on the test's own runtime, or use `spawn_blocking`.

use std::fs::{File, Permissions};
use std::io;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Superuser created by `initdb`.
pub const USER: &str = "burrow";
/// Database created by [`PgCluster::start`].
pub const DATABASE: &str = "burrow";

/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an immediate shutdown may take before the postmaster is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Prefix of the temporary directories.
const DIR_PREFIX: &str = "burrow-pg-";
/// Lock file held by the live owner of a directory.
const OWNER_LOCK: &str = "owner.lock";
/// Age after which a directory without a lock file (its owner died before
/// making one) is stale.
const UNLOCKED_STALE_AFTER: Duration = Duration::from_secs(600);

/// Attempts at a free port (another process may take it between our probe
/// and the server's bind).
const PORT_ATTEMPTS: usize = 5;

/// A running throwaway PostgreSQL server; stopped and deleted on drop.
#[derive(Debug)]
pub struct PgCluster {
    // Declared before `dir`: the server stops before its directory goes.
    postmaster: Postmaster,
    dir: tempfile::TempDir,
    // Released last, once the directory is gone.
    _owner: File,
    bin: PathBuf,
    port: u16,
}

impl PgCluster {
    /// Starts a fresh cluster with a database [`DATABASE`]; panics with the
    /// server's output if it cannot.
    pub fn start() -> PgCluster {
        match PgCluster::try_start() {
            Ok(cluster) => cluster,
            Err(e) => panic!("could not start a throwaway PostgreSQL server: {e}"),
        }
    }

    /// Like [`PgCluster::start`], returning what went wrong instead of
    /// panicking.
    pub fn try_start() -> Result<PgCluster, String> {
        let mut bin = bin_dir()?;
        let owner = server_user()?;
        remove_stale_dirs(&std::env::temp_dir());
        let mut dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .permissions(Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| format!("creating a temporary directory: {e}"))?;
        let lock_path = dir.path().join(OWNER_LOCK);
        let mut owner_lock = File::create(&lock_path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        if let Some(user) = &owner {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).map_err(|e| {
                format!("handing {} to the postgres user: {e}", dir.path().display())
            })?;
        }
        let data = dir.path().join("data");

        let mut initdb = server_command(&bin.join("initdb"), dir.path(), owner.as_ref());
        initdb.arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            USER,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        let out = run(initdb, libc::SIGKILL).map_err(|e| format!("running initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed ({}):\n{}",
                out.status,
                output_text(&out)
            ));
        }

        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let postmaster = Postmaster::spawn(&bin, dir.path(), &data, port, owner.as_ref())?;
            let mut cluster = PgCluster {
                postmaster,
                dir,
                _owner: owner_lock,
                bin,
                port,
            };
            match cluster.wait_ready() {
                Ok(()) => {
                    cluster.create_database(DATABASE)?;
                    return Ok(cluster);
                }
                Err(Exited { log }) if port_taken(&log) => {
                    last_error = log;
                    // Take the directory back for the next attempt.
                    let PgCluster {
                        dir: d,
                        _owner: o,
                        bin: b,
                        ..
                    } = cluster;
                    (dir, owner_lock, bin) = (d, o, b);
                }
                Err(Exited { log }) => return Err(log),
            }
        }
        Err(format!(
            "no free port after {PORT_ATTEMPTS} attempts; last server log:\n{last_error}"
        ))
    }

    /// `postgres://burrow@127.0.0.1:PORT/burrow`.
    pub fn url(&self) -> String {
        self.url_for(DATABASE)
    }

    /// The URL of another database of this cluster (see
    /// [`PgCluster::create_database`]).
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory (data directory, unix socket, server log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> u32 {
        self.postmaster.child.id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// Creates another database (a name of `[a-z0-9_]`) and returns its URL:
    /// cheaper than another cluster when a test only needs isolation.
    pub fn create_database(&self, name: &str) -> Result<String, String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!("database name {name:?} is not [a-z0-9_]+"));
        }
        self.psql(&format!("CREATE DATABASE {name}"))?;
        Ok(self.url_for(name))
    }

    /// Runs SQL with `psql` as the superuser on database `postgres`; returns
    /// its output.
    pub fn psql(&self, sql: &str) -> Result<String, String> {
        let mut cmd = client_command(&self.bin.join("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args([
            "-p",
            &self.port.to_string(),
            "-U",
            USER,
            "-d",
            "postgres",
            "-c",
            sql,
        ]);
        let out = run(cmd, libc::SIGKILL).map_err(|e| format!("running psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("psql -c {sql:?} failed: {}", output_text(&out)))
        }
    }

    /// Waits until the server accepts connections, or it exits.
    fn wait_ready(&mut self) -> Result<(), Exited> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.postmaster.child.try_wait() {
                return Err(Exited {
                    log: format!("postgres exited ({status}) while starting:\n{}", self.log()),
                });
            }
            let mut ready = client_command(&self.bin.join("pg_isready"));
            ready.args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()]);
            ready.args(["-U", USER, "-d", "postgres"]);
            if run(ready, libc::SIGKILL).is_ok_and(|out| out.status.success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Exited {
                    log: format!(
                        "postgres did not accept connections within {READY_TIMEOUT:?}:\n{}",
                        self.log()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The server stopped while starting; its log.
#[derive(Debug)]
struct Exited {
    log: String,
}

/// Removes `burrow-pg-*` directories left by processes that died without
/// dropping their cluster (their postmaster is gone with them).
fn remove_stale_dirs(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = entry.path();
        let stale = match File::open(path.join(OWNER_LOCK)) {
            // Taken by its live owner (in this process or another) or free.
            Ok(lock) => lock.try_lock().is_ok(),
            Err(_) => entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > UNLOCKED_STALE_AFTER),
        };
        if stale {
            // Another user's directory, or another process sweeping: fine.
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn port_taken(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("could not bind")
}

/// The postmaster process; stopped on drop.
#[derive(Debug)]
struct Postmaster {
    child: Child,
}

impl Postmaster {
    fn spawn(
        bin: &Path,
        dir: &Path,
        data: &Path,
        port: u16,
        owner: Option<&User>,
    ) -> Result<Postmaster, String> {
        let log_path = dir.join("postgres.log");
        let log =
            File::create(&log_path).map_err(|e| format!("creating {}: {e}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("duplicating the log file: {e}"))?;
        let mut cmd = server_command(&bin.join("postgres"), dir, owner);
        cmd.arg("-D").arg(data);
        for setting in [
            "listen_addresses=127.0.0.1".to_owned(),
            format!("port={port}"),
            format!("unix_socket_directories={}", dir.display()),
            "fsync=off".to_owned(),
            "synchronous_commit=off".to_owned(),
            "full_page_writes=off".to_owned(),
            "max_connections=200".to_owned(),
        ] {
            cmd.arg("-c").arg(setting);
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
        // SIGQUIT is the postmaster's immediate shutdown: it stops its
        // backends and removes its shared memory, unlike SIGKILL.
        let child = spawn(cmd, libc::SIGQUIT).map_err(|e| format!("starting postgres: {e}"))?;
        Ok(Postmaster { child })
    }

    /// Immediate shutdown, then SIGKILL if it takes too long; reaps it.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is
            // our unreaped child, so it cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGQUIT) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Postmaster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The unprivileged user the server runs as when the tests run as root.
#[derive(Debug)]
struct User {
    uid: u32,
    gid: u32,
}

/// `None` when not root; the `postgres` user when root.
fn server_user() -> Result<Option<User>, String> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(|e| format!("running id: {e}"))?;
        if !out.status.success() {
            return Err(
                "running as root and there is no `postgres` user to run PostgreSQL as \
                 (install Debian's postgresql package: scripts/install-deps.sh)"
                    .to_owned(),
            );
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("parsing `id {flag} postgres`: {e}"))
    };
    let user = User {
        uid: id("-u")?,
        gid: id("-g")?,
    };
    if user.uid == 0 {
        return Err("the postgres user has uid 0; PostgreSQL refuses to run as root".into());
    }
    Ok(Some(user))
}

/// `$BURROW_PG_BIN`, else the highest `/usr/lib/postgresql/*/bin` with `initdb`.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("BURROW_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            return Err(format!("BURROW_PG_BIN={} has no initdb", dir.display()));
        }
        return Ok(dir);
    }
    let root = Path::new("/usr/lib/postgresql");
    let entries = std::fs::read_dir(root).map_err(|e| {
        format!(
            "no PostgreSQL server found ({}: {e}); install it with scripts/install-deps.sh \
             or set BURROW_PG_BIN",
            root.display()
        )
    })?;
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(version) = name
            .split('.')
            .map(str::parse::<u32>)
            .collect::<Result<Vec<_>, _>>()
        else {
            continue;
        };
        let bin = entry.path().join("bin");
        if bin.join("initdb").is_file() && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, bin));
        }
    }
    best.map(|(_, bin)| bin).ok_or_else(|| {
        format!(
            "no {}/*/bin/initdb; install PostgreSQL with scripts/install-deps.sh or set \
             BURROW_PG_BIN",
            root.display()
        )
    })
}

/// A port that was free on 127.0.0.1 a moment ago.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// A client tool, without the caller's `PG*` variables (which could point
/// it elsewhere).
fn client_command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PG") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// A server program, in `dir`, as `owner` when given.
fn server_command(program: &Path, dir: &Path, owner: Option<&User>) -> Command {
    let mut cmd = client_command(program);
    cmd.current_dir(dir).env("LC_ALL", "C");
    if let Some(user) = owner {
        // std drops supplementary groups, then sets the gid and uid, before
        // running the `pre_exec` hook of `spawn` (so the death signal set
        // there survives the credential change).
        cmd.uid(user.uid).gid(user.gid);
    }
    cmd
}

/// Runs a command to completion (spawned like [`spawn`]), capturing output.
fn run(mut cmd: Command, death_signal: libc::c_int) -> io::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn(cmd, death_signal)?.wait_with_output()
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` so that the kernel sends it `death_signal` when this process
/// dies: `PR_SET_PDEATHSIG`, from a thread that lives as long as the process.
fn spawn(mut cmd: Command, death_signal: libc::c_int) -> io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let hook = move || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of the calling
        // process; it allocates nothing and is async-signal-safe, as a
        // pre_exec hook must be.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, death_signal) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook only calls prctl (async-signal-safe, see above) and
    // touches no memory shared with the parent.
    unsafe { cmd.pre_exec(hook) };
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("pg-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("starting the thread that spawns PostgreSQL processes");
        tx
    });
    let gone = || io::Error::other("the thread that spawns PostgreSQL processes is gone");
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner.send((cmd, reply_tx)).map_err(|_| gone())?;
    reply_rx.recv().map_err(|_| gone())?
}
