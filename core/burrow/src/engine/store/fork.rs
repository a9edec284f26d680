//! SQLite across `fork()`: no static mutex of SQLite is held in a child.
//!
//! SQLite guards its process-wide state with static mutexes: one around
//! every allocation (memory statistics), one around the shared page cache's
//! LRU list, one around the unix VFS's table of open files, and a few rarer
//! ones. A thread of the parent (a connection's worker) can hold one at the
//! moment another thread forks; the child inherits it locked, with no thread
//! left to unlock it, and its first SQLite call (opening its own store, as a
//! fork child of a language binding does) waits forever.
//!
//! The handlers registered here take those mutexes before a fork and release
//! them after it, in the parent and in the child, so every fork happens
//! between SQLite's critical sections. They are taken in an order that
//! agrees with every nesting SQLite does itself (the shared-cache open lock
//! before the VFS lock, which is held while the PRNG is seeded, which may
//! look up the default VFS under the main lock; the page cache before the
//! page allocator; allocation statistics last, a leaf), so a fork never
//! deadlocks with a thread inside SQLite. The application mutexes (`APP1`
//! to `APP3`) and the extension VFS ones are not SQLite's own and are left
//! alone. The cost is a few uncontended lock operations per fork.

use std::os::raw::c_int;
use std::sync::Once;

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

/// Registers the fork handlers (once per process).
pub(crate) fn hold_sqlite_across_fork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_initialize is thread-safe and idempotent; the
        // handlers are `extern "C"` functions that live for the process.
        unsafe {
            ffi::sqlite3_initialize();
            libc::pthread_atfork(Some(enter_all), Some(leave_all), Some(leave_all));
        }
    });
}

extern "C" fn enter_all() {
    for id in ORDER {
        // SAFETY: a static mutex of an initialized SQLite is never freed;
        // a null one (no mutexes compiled in) is ignored by SQLite.
        unsafe { ffi::sqlite3_mutex_enter(ffi::sqlite3_mutex_alloc(id)) }
    }
}

/// Runs in the parent and in the child (whose only thread is the one that
/// took the mutexes in [`enter_all`]).
extern "C" fn leave_all() {
    for id in ORDER.iter().rev() {
        // SAFETY: as in `enter_all`; this thread holds each one.
        unsafe { ffi::sqlite3_mutex_leave(ffi::sqlite3_mutex_alloc(*id)) }
    }
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

    /// In the child: a runtime of its own, the store opened and read.
    fn child_uses_the_store(home: &Home) -> i32 {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return 2;
        };
        rt.block_on(async {
            match Store::open(home).await {
                Ok(store) if store.list().await.is_ok() => 0,
                _ => 3,
            }
        })
    }

    /// A fork while another thread is inside SQLite's allocator (the
    /// window held open): the fork waits for the allocation to end, and the
    /// child opens and reads the store. Without the handlers the child
    /// inherits the mutex locked and waits forever.
    #[test]
    fn a_fork_during_an_allocation_leaves_the_child_a_working_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path()).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        // The parent's store stays open across the fork, its connections live.
        let store = rt.block_on(Store::open(&home)).unwrap();
        rt.block_on(store.list()).unwrap();

        let (held, holding) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let alloc = AllocationInProgress::begin();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(alloc);
        });
        holding.recv().unwrap();
        // SAFETY: the child runs only `child_uses_the_store` and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = child_uses_the_store(&home);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        holder.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            let mut status = 0;
            // SAFETY: waits for the child forked above.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break Some(status);
            }
            if Instant::now() > deadline {
                // SAFETY: the child forked above, still unreaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let status =
            status.expect("the child did not finish in 30 s: SQLite deadlocked after fork");
        assert!(libc::WIFEXITED(status), "the child was killed: {status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child could not use the store"
        );
        // The parent's store still works.
        rt.block_on(store.list()).unwrap();
        rt.block_on(store.close());
    }
}
