//! The throwaway PostgreSQL harness (`common::pg`) works: a real server that
//! sqlx can use, several at once, nothing left behind.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::pg::PgCluster;
use sqlx::postgres::{PgPool, PgPoolOptions};

async fn connect(cluster: &PgCluster) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&cluster.url())
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e}\n{}", cluster.url(), cluster.log()))
}

/// Whether the process is gone (exited, or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn select_one() {
    let pg = PgCluster::start();
    assert_eq!(
        pg.url(),
        format!("postgres://burrow@127.0.0.1:{}/burrow", pg.port())
    );
    let pool = connect(&pg).await;
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let db: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(db, "burrow");
    // Only 127.0.0.1 over TCP.
    let listen: String = sqlx::query_scalar("show listen_addresses")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(listen, "127.0.0.1");
    pool.close().await;
}

#[tokio::test]
async fn two_clusters_at_once_then_nothing_left() {
    let a = PgCluster::start();
    let b = PgCluster::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());

    let pool_a = connect(&a).await;
    let pool_b = connect(&b).await;
    // They are separate servers: a table made in one is not in the other.
    sqlx::query("create table only_in_a (x int)")
        .execute(&pool_a)
        .await
        .unwrap();
    let in_b: Option<String> = sqlx::query_scalar("select to_regclass('only_in_a')::text")
        .fetch_one(&pool_b)
        .await
        .unwrap();
    assert_eq!(in_b, None);
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&pool_b)
        .await
        .unwrap();
    assert_eq!(one, 1);

    // Another database in the same cluster.
    let other = a.create_database("second").unwrap();
    let pool_other = PgPoolOptions::new()
        .max_connections(1)
        .connect(&other)
        .await
        .unwrap();
    let db: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&pool_other)
        .await
        .unwrap();
    assert_eq!(db, "second");
    pool_other.close().await;

    let (dir_a, pid_a, port_a) = (a.dir().to_path_buf(), a.pid(), a.port());
    assert!(dir_a.is_dir());
    assert!(!process_gone(pid_a));
    // Dropped with a connection still open: immediate shutdown does not wait.
    drop(a);
    assert!(!dir_a.exists(), "{} is left behind", dir_a.display());
    assert!(process_gone(pid_a), "postmaster {pid_a} still runs");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port_a)).is_err());
    drop(pool_a);

    // The other one is unaffected.
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&pool_b)
        .await
        .unwrap();
    assert_eq!(one, 1);
    pool_b.close().await;
    let dir_b = b.dir().to_path_buf();
    drop(b);
    assert!(!dir_b.exists());
}

#[test]
fn drop_on_panic_stops_the_server() {
    let mut seen = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let pg = PgCluster::start();
        seen = Some((pg.dir().to_path_buf(), pg.pid()));
        panic!("a failing test");
    }));
    assert!(result.is_err());
    let (dir, pid) = seen.unwrap();
    assert!(!dir.exists());
    assert!(process_gone(pid));
}

/// Set in the child process of `postmaster_dies_with_the_test_process`.
const CHILD_ENV: &str = "BURROW_PG_HARNESS_CHILD";

/// In the child process only: starts a cluster, reports it, and waits to be
/// killed. Elsewhere it does nothing.
#[test]
fn holds_a_cluster_for_the_parent() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // Started from this test's thread, which is not the thread that spawns
    // the server: the death signal must follow the process, not this thread.
    let pg = PgCluster::start();
    println!(
        "PG_CLUSTER {} {} {}",
        pg.pid(),
        pg.port(),
        pg.dir().display()
    );
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn postmaster_dies_with_the_test_process() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "holds_a_cluster_for_the_parent",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut report = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        // libtest prints `test name ... ` before the test's own output.
        if let Some((_, rest)) = line.split_once("PG_CLUSTER ") {
            let mut parts = rest.splitn(3, ' ');
            let pid: u32 = parts.next().unwrap().parse().unwrap();
            let port: u16 = parts.next().unwrap().parse().unwrap();
            let dir = PathBuf::from(parts.next().unwrap());
            report = Some((pid, port, dir));
            break;
        }
    }
    let (pid, port, dir) = report.expect("the child did not report its cluster");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());

    // SIGKILL: no unwinding, no Drop.
    child.kill().unwrap();
    child.wait().unwrap();

    wait_until(
        "the orphaned postmaster exits",
        Duration::from_secs(20),
        || process_gone(pid),
    );
    wait_until(
        "the orphaned server stops listening",
        Duration::from_secs(20),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
    );
    // Its directory was left behind (nothing ran to remove it); the next
    // start, in any process, removes it.
    let pg = PgCluster::start();
    assert!(!dir.exists(), "stale {} was not removed", dir.display());
    drop(pg);
}
