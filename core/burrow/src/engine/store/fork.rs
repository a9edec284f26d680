//! SQLite across `fork()`: a child inherits no SQLite lock held by another
//! thread, and no connection of its parent.
//!
//! Two kinds of state cross a fork with the memory:
//!
//! - Mutexes. SQLite guards its process-wide state with static mutexes (one
//!   around every allocation, one around the shared page cache, one around
//!   the unix VFS's table of open files, a few rarer ones) and each open
//!   file with mutexes of its own. A parent's thread (a connection's worker)
//!   can hold one when another thread forks; the child inherits it locked
//!   with no thread left to unlock it, and its first SQLite call (opening
//!   its own store, as the fork child of a language binding does) waits
//!   forever. Before a fork the handlers registered here take each open
//!   connection's mutex (connections are opened serialized, so a thread
//!   inside any call on one holds it: with all of them held no thread is
//!   inside SQLite's per-file code), then the static mutexes; they release
//!   them after the fork, in the parent and in the child.
//!
//! - Connections. The unix VFS keeps one record per open file and process,
//!   with counts of the locks its connections hold, and trusts it over the
//!   OS. A child that opened the parent's database while the parent's
//!   connections were still in that record would count their locks (which
//!   the OS does not give a child) as its own, take no lock of its own, and
//!   lose its writes to a WAL file that the parent, closing its last
//!   connection, sees as unused and deletes. So a child closes every
//!   connection it inherited ([`close_inherited`], before the store opens
//!   its own): nothing is written by that close (no checkpoint, no
//!   rollback of a write), and the parent's connections are untouched.
//!
//! The static mutexes are taken in an order that agrees with every nesting
//! SQLite does itself (the shared-cache open lock before the VFS lock, which
//! is held while the PRNG is seeded, which may look up the default VFS under
//! the main lock; the page cache before the page allocator; allocation
//! statistics last, a leaf); a connection's mutex is outermost in SQLite and
//! is only tried, never waited on while holding another, so a fork never
//! deadlocks with a thread inside SQLite. The cost is a few uncontended lock
//! operations per fork and connection.
//!
//! What is left: a connection that stays busy through the whole wait below
//! (a statement waiting on another process's lock, for as long as the busy
//! timeout) or that was in a write transaction at the fork is not closed in
//! the child, only leaked (logged); one being opened at the fork (before it
//! is registered) is neither waited for nor closed.

use std::cell::UnsafeCell;
use std::os::raw::{c_int, c_void};
use std::sync::Once;
use std::time::{Duration, Instant};

use libsqlite3_sys as ffi;

/// SQLite's static mutexes, outermost first.
const ORDER: [c_int; 7] = [
    ffi::SQLITE_MUTEX_STATIC_OPEN,
    ffi::SQLITE_MUTEX_STATIC_VFS1,
    ffi::SQLITE_MUTEX_STATIC_PRNG,
    ffi::SQLITE_MUTEX_STATIC_MAIN,
    ffi::SQLITE_MUTEX_STATIC_LRU,
    ffi::SQLITE_MUTEX_STATIC_PMEM,
    ffi::SQLITE_MUTEX_STATIC_MEM,
];

/// How long a fork waits for the connections in use to finish their call.
const QUIESCE: Duration = Duration::from_millis(50);

/// The name of the client data that unregisters a connection when it closes.
const CLIENT_DATA: &std::ffi::CStr = c"burrow.fork";

/// An open connection of this process (or, in a fork child, of a parent).
struct Conn {
    /// The process that opened it.
    pid: u32,
    db: *mut ffi::sqlite3,
    /// It was in a call through the whole wait of the last fork.
    busy_at_fork: bool,
}

/// The open connections, behind a plain pthread mutex: the fork handlers
/// hold it from before the fork to after it, which no guard type can.
struct Registry {
    lock: UnsafeCell<libc::pthread_mutex_t>,
    conns: UnsafeCell<Vec<Conn>>,
    /// The connections' mutexes held through a fork.
    held: UnsafeCell<Vec<*mut ffi::sqlite3_mutex>>,
}

// SAFETY: `conns` and `held` are only touched with `lock` held.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    lock: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    conns: UnsafeCell::new(Vec::new()),
    held: UnsafeCell::new(Vec::new()),
};

impl Registry {
    fn enter(&self) {
        // SAFETY: a statically initialized mutex, never destroyed.
        unsafe { libc::pthread_mutex_lock(self.lock.get()) };
    }

    fn leave(&self) {
        // SAFETY: entered by this thread.
        unsafe { libc::pthread_mutex_unlock(self.lock.get()) };
    }

    /// Runs `f` on the connections, the lock held.
    fn with<T>(&self, f: impl FnOnce(&mut Vec<Conn>) -> T) -> T {
        self.enter();
        // SAFETY: the lock is held.
        let out = f(unsafe { &mut *self.conns.get() });
        self.leave();
        out
    }
}

fn pid() -> u32 {
    std::process::id()
}

/// Registers the fork handlers (once per process).
pub(crate) fn hold_sqlite_across_fork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_initialize is thread-safe and idempotent; the
        // handlers are `extern "C"` functions that live for the process.
        unsafe {
            ffi::sqlite3_initialize();
            libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child));
        }
    });
}

/// Records a connection just opened (a pool's `after_connect`). It must
/// have been opened serialized (its own mutex); it is forgotten when it
/// closes.
pub(crate) fn register(db: *mut ffi::sqlite3) {
    REGISTRY.with(|conns| {
        conns.push(Conn {
            pid: pid(),
            db,
            busy_at_fork: false,
        })
    });
    // SAFETY: a live connection, locked out of its worker by the caller;
    // the destructor is an `extern "C"` function that lives for the process.
    unsafe {
        ffi::sqlite3_set_clientdata(db, CLIENT_DATA.as_ptr(), db.cast(), Some(forget));
    }
}

/// Runs when a connection closes (its mutex held, in its worker).
unsafe extern "C" fn forget(db: *mut c_void) {
    let me = pid();
    REGISTRY.with(|conns| conns.retain(|c| !(c.db.cast() == db && c.pid == me)));
}

/// Closes the connections a fork child inherited from its parent (a no-op
/// in any other process, and after the first call). Called before the
/// store opens connections of its own.
pub(crate) fn close_inherited() {
    let me = pid();
    let inherited: Vec<Conn> =
        REGISTRY.with(|conns| conns.extract_if(.., |c| c.pid != me).collect());
    for conn in inherited {
        // SAFETY: the connection is alive (a parent's, never closed here)
        // and no thread of this process uses it: its worker thread did not
        // cross the fork, and it was idle at the fork unless marked busy.
        let closed = unsafe { close_in_child(&conn) };
        if !closed {
            tracing::warn!(
                parent = conn.pid,
                "a SQLite connection inherited over fork was in use at the fork and is left open"
            );
        }
    }
}

/// Closes an inherited connection without writing: no checkpoint, no
/// rollback of a write. Refuses one that was busy or writing at the fork.
///
/// # Safety
/// `conn.db` is a live connection that no thread of this process uses.
unsafe fn close_in_child(conn: &Conn) -> bool {
    let db = conn.db;
    // SAFETY: the caller's guarantee; each call gets that connection or one
    // of its statements.
    unsafe {
        if conn.busy_at_fork
            || ffi::sqlite3_txn_state(db, std::ptr::null()) == ffi::SQLITE_TXN_WRITE
        {
            return false;
        }
        ffi::sqlite3_db_config(
            db,
            ffi::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            1 as c_int,
            std::ptr::null_mut::<c_int>(),
        );
        loop {
            let stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
            if stmt.is_null() {
                break;
            }
            ffi::sqlite3_finalize(stmt);
        }
        ffi::sqlite3_close(db) == ffi::SQLITE_OK
    }
}

/// Before a fork: the registry, every connection's mutex (waiting up to
/// [`QUIESCE`] for those in a call), then the static mutexes.
extern "C" fn before_fork() {
    let deadline = Instant::now() + QUIESCE;
    loop {
        REGISTRY.enter();
        // SAFETY: the registry's lock is held.
        let (conns, held) = unsafe { (&mut *REGISTRY.conns.get(), &mut *REGISTRY.held.get()) };
        let last_try = Instant::now() >= deadline;
        let mut all = true;
        for conn in conns.iter_mut() {
            // SAFETY: a registered connection is alive (it unregisters,
            // under this lock, before it is freed).
            let m = unsafe { ffi::sqlite3_db_mutex(conn.db) };
            if m.is_null() {
                continue;
            }
            // SAFETY: a live connection's mutex.
            if unsafe { ffi::sqlite3_mutex_try(m) } == ffi::SQLITE_OK {
                held.push(m);
            } else if last_try {
                conn.busy_at_fork = true;
            } else {
                all = false;
                break;
            }
        }
        if all {
            break;
        }
        // One is in a call (or closing, waiting for this lock): let go of
        // everything and try again shortly.
        release_connections(held);
        REGISTRY.leave();
        std::thread::sleep(Duration::from_micros(200));
    }
    for id in ORDER {
        // SAFETY: a static mutex of an initialized SQLite is never freed;
        // a null one (no mutexes compiled in) is ignored by SQLite.
        unsafe { ffi::sqlite3_mutex_enter(ffi::sqlite3_mutex_alloc(id)) }
    }
}

fn release_connections(held: &mut Vec<*mut ffi::sqlite3_mutex>) {
    for m in held.drain(..).rev() {
        // SAFETY: taken by this thread in `before_fork`.
        unsafe { ffi::sqlite3_mutex_leave(m) }
    }
}

/// After a fork, in either process (the thread that forked: in the child
/// the only one): the static mutexes released.
fn release_statics() {
    for id in ORDER.iter().rev() {
        // SAFETY: as in `before_fork`; this thread holds each one.
        unsafe { ffi::sqlite3_mutex_leave(ffi::sqlite3_mutex_alloc(*id)) }
    }
}

extern "C" fn in_parent() {
    release_statics();
    // SAFETY: the registry's lock is still held from `before_fork`.
    release_connections(unsafe { &mut *REGISTRY.held.get() });
    // SAFETY: the registry's lock is still held from `before_fork`.
    for conn in unsafe { &mut *REGISTRY.conns.get() } {
        conn.busy_at_fork = false;
    }
    REGISTRY.leave();
}

/// In the child the connections' mutexes are made anew, unlocked: they are
/// recursive, and a recursive mutex can only be unlocked by the thread that
/// locked it, which the child's thread no longer is (its thread id changed
/// with the fork; the unlock fails with EPERM). The static ones are plain
/// mutexes and are released.
extern "C" fn in_child() {
    release_statics();
    // SAFETY: the registry's lock is still held from `before_fork`; each
    // held mutex is a connection's (SQLite's pthread mutex begins with its
    // `pthread_mutex_t`), locked by this thread before the fork and used by
    // no other thread of this process.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_settype(&mut attr, libc::PTHREAD_MUTEX_RECURSIVE);
        for m in (*REGISTRY.held.get()).drain(..) {
            libc::pthread_mutex_init(m.cast::<libc::pthread_mutex_t>(), &attr);
        }
        libc::pthread_mutexattr_destroy(&mut attr);
    }
    REGISTRY.leave();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::marker::PhantomData;
    use std::time::{Duration, Instant};

    use super::ffi;
    use crate::engine::paths::Home;
    use crate::engine::store::Store;

    /// Holds SQLite's allocation mutex until dropped, as a connection's
    /// worker does in the middle of any allocation.
    struct AllocationInProgress(PhantomData<*const ()>);

    impl AllocationInProgress {
        fn begin() -> Self {
            // SAFETY: a static mutex of an initialized SQLite.
            unsafe {
                ffi::sqlite3_initialize();
                ffi::sqlite3_mutex_enter(ffi::sqlite3_mutex_alloc(ffi::SQLITE_MUTEX_STATIC_MEM));
            }
            AllocationInProgress(PhantomData)
        }
    }

    impl Drop for AllocationInProgress {
        fn drop(&mut self) {
            // SAFETY: taken by `begin` on this thread (the type is not Send).
            unsafe {
                ffi::sqlite3_mutex_leave(ffi::sqlite3_mutex_alloc(ffi::SQLITE_MUTEX_STATIC_MEM))
            }
        }
    }

    /// In the child: a runtime of its own and the store opened (exit code
    /// 2 or 3 if either fails), then `body`'s exit code.
    fn child_with_store<F: std::future::Future<Output = i32>>(
        home: &Home,
        body: impl FnOnce(Store) -> F,
    ) -> i32 {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return 2;
        };
        rt.block_on(async {
            match Store::open(home).await {
                Ok(store) => body(store).await,
                Err(_) => 3,
            }
        })
    }

    /// In the child: the store opened and read.
    fn child_uses_the_store(home: &Home) -> i32 {
        child_with_store(home, |store| async move {
            if store.list().await.is_ok() {
                0
            } else {
                4
            }
        })
    }

    /// Waits up to 30 s for the child `pid`, killing it after that; its
    /// exit code, or `None` if it had to be killed.
    fn exit_code(pid: libc::pid_t) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut status = 0;
        loop {
            // SAFETY: waits for a child of this test.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
                return Some(libc::WEXITSTATUS(status));
            }
            if Instant::now() > deadline {
                // SAFETY: a child of this test, still unreaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Forks; the child runs `child` and `_exit`s with its code.
    fn fork_running(child: impl FnOnce() -> i32) -> libc::pid_t {
        // SAFETY: the child runs only `child` and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = child();
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        pid
    }

    /// A home in a temporary directory, a runtime, and its store opened.
    fn parent_store() -> (tempfile::TempDir, Home, tokio::runtime::Runtime, Store) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = rt.block_on(Store::open(&home)).unwrap();
        (dir, home, rt, store)
    }

    /// A pipe: (read end, write end).
    fn pipe() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: two fresh descriptors, owned by the files from here.
        unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    /// A fork while another thread is inside SQLite's allocator (the
    /// window held open): the fork waits for the allocation to end, and the
    /// child opens and reads the store. Without the handlers the child
    /// inherits the mutex locked and waits forever.
    #[test]
    fn a_fork_during_an_allocation_leaves_the_child_a_working_sqlite() {
        // The parent's store stays open across the fork, its connections live.
        let (_dir, home, rt, store) = parent_store();
        rt.block_on(store.list()).unwrap();

        let (held, holding) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let alloc = AllocationInProgress::begin();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(alloc);
        });
        holding.recv().unwrap();
        let pid = fork_running(|| child_uses_the_store(&home));
        holder.join().unwrap();
        let code = exit_code(pid).expect("the child hung for 30 s: SQLite deadlocked after fork");
        assert_eq!(code, 0, "the child could not use the store");
        // The parent's store still works.
        rt.block_on(store.list()).unwrap();
        rt.block_on(store.close());
    }

    /// Counts the rows of `who` in the probe table.
    async fn probes(store: &Store, who: &str) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COUNT(*) FROM fork_probe WHERE who = ?")
            .bind(who)
            .fetch_one(&store.pool)
            .await
    }

    async fn probe(store: &Store, who: &str) -> Result<(), sqlx::Error> {
        sqlx::query("INSERT INTO fork_probe (who) VALUES (?)")
            .bind(who)
            .execute(&store.pool)
            .await
            .map(drop)
    }

    /// A fork child and its parent keep seeing each other's commits after
    /// the parent closes its store and opens it again. Had the child kept
    /// the connections it inherited, it would have counted their locks as
    /// its own and taken none on the database: the parent's close would
    /// have found the file unused and deleted the WAL and its index, and the
    /// child gone on with an index no other process shares.
    #[test]
    fn a_fork_child_and_its_parent_share_the_database_after_the_parent_reopens() {
        use std::io::{Read, Write};

        let (_dir, home, rt, store) = parent_store();
        rt.block_on(sqlx::query("CREATE TABLE fork_probe (who TEXT)").execute(&store.pool))
            .unwrap();
        let (mut ready_r, mut ready_w) = pipe();
        let (mut go_r, mut go_w) = pipe();
        let pid = fork_running(|| {
            child_with_store(&home, |store| async move {
                let mut byte = [0u8];
                if ready_w.write_all(b"r").is_err() || go_r.read_exact(&mut byte).is_err() {
                    return 4;
                }
                match probes(&store, "parent").await {
                    Ok(1) => {}
                    Ok(_) => return 5,
                    Err(_) => return 6,
                }
                // Ends without closing its store, as a killed child would.
                if probe(&store, "child").await.is_ok() {
                    0
                } else {
                    7
                }
            })
        });
        let mut byte = [0u8];
        ready_r.read_exact(&mut byte).unwrap();
        rt.block_on(store.close());
        let store = rt.block_on(Store::open(&home)).unwrap();
        rt.block_on(probe(&store, "parent")).unwrap();
        go_w.write_all(b"g").unwrap();
        assert_eq!(
            exit_code(pid),
            Some(0),
            "the child (5: did not see the parent's row) failed"
        );
        assert_eq!(
            rt.block_on(probes(&store, "child")).unwrap(),
            1,
            "the child's committed row is not seen"
        );
        rt.block_on(store.close());
    }
}
