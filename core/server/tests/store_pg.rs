#![allow(clippy::unwrap_used)]
//! The store's Postgres forms of the gateway's warm path and the reaper's
//! batched statements (the SQLite forms are tested in the crate): the same
//! answers, and a warm call and a reclaim claim racing for one row never
//! both win.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use burrow_server::store::{RuntimeState, Store, SweepCutoffs, Target, TargetKind};
use common::pg::PgCluster;

fn cluster() -> &'static PgCluster {
    static PG: OnceLock<PgCluster> = OnceLock::new();
    PG.get_or_init(PgCluster::start)
}

async fn store(name: &str) -> Store {
    let name = name.to_owned();
    let url = tokio::task::spawn_blocking(move || cluster().create_database(&name).unwrap())
        .await
        .unwrap();
    Store::open(&url, &url, 8, Duration::from_secs(10))
        .await
        .unwrap()
}

fn target(id: &str) -> Target {
    Target {
        id: id.into(),
        kind: TargetKind::Sandbox {
            port: 8080,
            command: None,
        },
        metadata: serde_json::json!({}),
        headers: Vec::new(),
        created_at: 0,
        tenant: "default".into(),
    }
}

fn cut(now: i64) -> SweepCutoffs {
    SweepCutoffs {
        now,
        idle_before: now - 1000,
        starting_before: now - 5000,
        failed_before: now - 1000,
    }
}

async fn row(s: &Store, id: &str, state: &str, last_used_at: i64, updated_at: i64) {
    s.put_target(&target(id)).await.unwrap();
    sqlx::query(
        "INSERT INTO runtime_state \
           (target_id, state, prev_state, generation, last_used_at, updated_at) \
         VALUES ($1, $2, $3, 1, $4, $5) \
         ON CONFLICT (target_id) DO UPDATE SET state = $2, prev_state = $3, \
           last_used_at = $4, updated_at = $5, owner = NULL, last_error = NULL",
    )
    .bind(id)
    .bind(state)
    .bind((state == "reaping").then_some("ready"))
    .bind(last_used_at)
    .bind(updated_at)
    .execute(s.pool())
    .await
    .unwrap();
}

async fn leases(s: &Store, target: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE target_id = $1")
        .bind(target)
        .fetch_one(s.pool())
        .await
        .unwrap()
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_call_opens_its_lease_with_the_stamp_and_closes_it_with_the_stamp() {
    let s = store("warm_path").await;
    assert_eq!(s.open_call("sb_none", "r1", 100, 10).await.unwrap(), None);
    assert_eq!(leases(&s, "sb_none").await, 0);

    s.put_target(&target("sb_w")).await.unwrap();
    let (_, version) = s.get_target_versioned("sb_w").await.unwrap().unwrap();
    let o = s.open_call("sb_w", "r1", 100, 10).await.unwrap().unwrap();
    assert_eq!((o.target_version, o.ready), (version, None));
    assert_eq!(leases(&s, "sb_w").await, 1);
    s.close_lease(&o.lease, "sb_w", 11).await.unwrap();
    assert_eq!(leases(&s, "sb_w").await, 0);
    assert_eq!(s.runtime("sb_w").await.unwrap(), None);

    let t0 = 1_000_000;
    assert_eq!(
        s.claim_start("sb_w", "r1", t0, t0 - 5000, None)
            .await
            .unwrap(),
        Some(1)
    );
    assert!(s.finish_start("sb_w", 1, t0, Ok(())).await.unwrap());
    let o = s
        .open_call("sb_w", "r1", t0 + 30_000, t0 + 20)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.ready, Some(1));
    assert_eq!(
        s.runtime("sb_w").await.unwrap().unwrap().last_used_at,
        t0 + 20
    );
    s.close_lease(&o.lease, "sb_w", t0 + 50).await.unwrap();
    assert_eq!(leases(&s, "sb_w").await, 0);
    assert_eq!(
        s.runtime("sb_w").await.unwrap().unwrap().last_used_at,
        t0 + 50
    );

    // Changes move the version, even within a millisecond.
    let mut t = target("sb_w");
    for port in [81, 82] {
        t.kind = TargetKind::Sandbox {
            port,
            command: None,
        };
        s.put_target(&t).await.unwrap();
    }
    let o = s
        .open_call("sb_w", "r1", t0 + 30_000, t0 + 60)
        .await
        .unwrap()
        .unwrap();
    assert!(o.target_version >= version + 2);
    assert_eq!(
        s.get_target_versioned("sb_w").await.unwrap().unwrap().1,
        o.target_version
    );
    s.close_lease(&o.lease, "sb_w", t0 + 61).await.unwrap();
    assert!(s.delete_target("sb_w").await.unwrap());
    assert_eq!(
        s.open_call("sb_w", "r1", t0 + 30_000, t0 + 70)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_batch_claims_exactly_the_candidates_and_finishes_each_its_own_way() {
    let s = store("batch").await;
    let now = 10_000_000;
    row(&s, "sb_idle", "ready", now - 5000, now - 5000).await;
    row(&s, "sb_fresh", "ready", now - 10, now - 10).await;
    row(&s, "sb_leased", "ready", now - 9000, now - 9000).await;
    row(&s, "sb_stale_start", "starting", now - 9000, now - 9000).await;
    row(&s, "sb_new_start", "starting", now - 9000, now - 100).await;
    row(&s, "sb_old_fail", "failed", now - 9000, now - 2000).await;
    row(&s, "sb_orphan", "reaping", now - 9000, now - 9000).await;
    // A lease is no guard (only the lock of a call in flight is, and the
    // sweep takes it before it claims).
    s.open_lease("sb_leased", "r1", now + 30_000).await.unwrap();
    let all = ids(&[
        "sb_idle",
        "sb_fresh",
        "sb_leased",
        "sb_stale_start",
        "sb_new_start",
        "sb_old_fail",
        "sb_orphan",
        "sb_no_row",
    ]);
    let mut found: Vec<String> = s
        .reap_candidates(cut(now), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.target_id)
        .collect();
    found.sort();
    let mut claimed = s.claim_reaps(&all, "r1", cut(now)).await.unwrap();
    claimed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        claimed,
        vec![
            ("sb_idle".to_string(), RuntimeState::Ready),
            ("sb_leased".to_string(), RuntimeState::Ready),
            ("sb_old_fail".to_string(), RuntimeState::Failed),
            ("sb_orphan".to_string(), RuntimeState::Ready),
            ("sb_stale_start".to_string(), RuntimeState::Starting),
        ]
    );
    assert_eq!(
        found,
        claimed.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>()
    );
    s.finish_reaps(
        now + 1,
        &[
            ("sb_idle".into(), Ok(())),
            ("sb_old_fail".into(), Err("it \"said\" no\n".into())),
            ("sb_orphan".into(), Ok(())),
            ("sb_stale_start".into(), Err("boom".into())),
            ("sb_fresh".into(), Ok(())),
        ],
    )
    .await
    .unwrap();
    let state = |id: &'static str| {
        let s = s.clone();
        async move { s.runtime(id).await.unwrap().unwrap() }
    };
    for id in ["sb_idle", "sb_orphan"] {
        let r = state(id).await;
        assert_eq!(
            (r.state, r.owner, r.last_error),
            (RuntimeState::Dormant, None, None)
        );
    }
    let r = state("sb_old_fail").await;
    assert_eq!(
        (r.state, r.last_error.as_deref()),
        (RuntimeState::Failed, Some("it \"said\" no\n"))
    );
    let r = state("sb_stale_start").await;
    assert_eq!(
        (r.state, r.last_error.as_deref()),
        (RuntimeState::Starting, Some("boom"))
    );
    let r = state("sb_fresh").await;
    assert_eq!((r.state, r.updated_at), (RuntimeState::Ready, now - 10));
    assert_eq!(state("sb_leased").await.state, RuntimeState::Reaping);
    assert_eq!(state("sb_new_start").await.state, RuntimeState::Starting);
}

#[tokio::test]
async fn advisory_locks_are_taken_and_released_in_batches_and_die_with_their_connection() {
    let s = store("locks").await;
    let mut a = s.reap_locker().await.unwrap();
    let mut b = s.reap_locker().await.unwrap();
    assert_eq!(
        a.try_lock_many(&ids(&["x", "y"])).await.unwrap(),
        ids(&["x", "y"])
    );
    assert_eq!(
        b.try_lock_many(&ids(&["z", "y", "x", "w"])).await.unwrap(),
        ids(&["z", "w"])
    );
    a.unlock_many(&ids(&["x", "y"])).await.unwrap();
    assert_eq!(
        b.try_lock_many(&ids(&["x", "y"])).await.unwrap(),
        ids(&["x", "y"])
    );
    b.unlock_many(&ids(&["x", "y", "z", "w"])).await.unwrap();
    // A session's advisory locks stack: one taken twice (two ids of one
    // key) is released by releasing it twice.
    assert_eq!(
        b.try_lock_many(&ids(&["q", "q"])).await.unwrap(),
        ids(&["q", "q"])
    );
    b.unlock_many(&ids(&["q"])).await.unwrap();
    assert!(!a.try_lock("q").await.unwrap());
    b.unlock_many(&ids(&["q"])).await.unwrap();
    assert!(a.try_lock("q").await.unwrap());
    a.unlock("q").await.unwrap();
    assert_eq!(
        a.try_lock_many(&ids(&["x", "y", "z", "w"])).await.unwrap(),
        ids(&["x", "y", "z", "w"])
    );
    // A reaper that dies takes its locks with it.
    drop(a);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = b.try_lock_many(&ids(&["x", "w"])).await.unwrap();
        if got.len() == 2 {
            break;
        }
        b.unlock_many(&got).await.unwrap();
        assert!(
            std::time::Instant::now() < end,
            "locks outlived their connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_call_and_a_reclaim_claim_never_both_win_a_row() {
    let s = store("race").await;
    let (mut used, mut claimed) = (0, 0);
    for i in 0..100 {
        let now = 10_000_000 + i;
        // Ready, idle: a claim may take it, a call may stamp it; not both.
        row(&s, "sb_r", "ready", now - 5000, now - 5000).await;
        let (a, b) = (s.clone(), s.clone());
        let call = tokio::spawn(async move { a.open_call("sb_r", "r1", now + 30_000, now).await });
        let claim =
            tokio::spawn(async move { b.claim_reaps(&ids(&["sb_r"]), "r2", cut(now)).await });
        let open = call.await.unwrap().unwrap().unwrap();
        let taken = claim.await.unwrap().unwrap();
        assert!(
            open.ready.is_none() || taken.is_empty(),
            "round {i}: used and claimed"
        );
        used += usize::from(open.ready.is_some());
        claimed += taken.len();
        s.close_lease(&open.lease, "sb_r", now).await.unwrap();
    }
    assert_eq!(used + claimed, 100, "each round, one of them wins");
}

/// The backend pid of the call-lock session holding a shared lock, from
/// another session.
async fn lock_session_pid(other: &Store) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid \
         WHERE a.application_name = 'burrow call locks' AND a.datname = current_database() \
           AND l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted",
    )
    .fetch_optional(other.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_call_in_flight_fences_every_reaper_and_its_lock_dies_with_its_session() {
    let s = store("calls").await;
    // A second replica on the same database.
    let url: String = {
        let name: String = sqlx::query_scalar("SELECT current_database()::text")
            .fetch_one(s.pool())
            .await
            .unwrap();
        cluster().url_for(&name)
    };
    let other = Store::open(&url, &url, 2, Duration::from_secs(10))
        .await
        .unwrap();
    let mut reaper = other.reap_locker().await.unwrap();
    let mut own_reaper = s.reap_locker().await.unwrap();

    // Two calls, then one: neither replica's reaper can have the target.
    let first = s.calls().enter("sb_c").await.unwrap().unwrap();
    let second = s.calls().enter("sb_c").await.unwrap().unwrap();
    assert!(!reaper.try_lock("sb_c").await.unwrap());
    assert!(!own_reaper.try_lock("sb_c").await.unwrap());
    first.release().await;
    assert!(!reaper.try_lock("sb_c").await.unwrap());
    // Calls of two replicas on one target share it.
    let theirs = other.calls().enter("sb_c").await.unwrap().unwrap();
    second.release().await;
    assert!(!reaper.try_lock("sb_c").await.unwrap());
    theirs.release().await;
    assert!(s.calls().held().await.is_empty());
    // No call left: a reaper takes it, and no call enters until it lets go.
    assert!(reaper.try_lock("sb_c").await.unwrap());
    assert!(s.calls().enter("sb_c").await.unwrap().is_none());
    assert!(
        s.calls().held().await.is_empty(),
        "a refused call is not counted"
    );
    reaper.unlock("sb_c").await.unwrap();

    // The lock session dies (a replica killed, a connection cut): its lock
    // is gone at once, with no expiry to wait for.
    let call = s.calls().enter("sb_c").await.unwrap().unwrap();
    assert!(!reaper.try_lock("sb_c").await.unwrap());
    let pid = lock_session_pid(&other).await.expect("the lock session");
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(other.pool())
        .await
        .unwrap();
    assert!(killed);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !reaper.try_lock("sb_c").await.unwrap() {
        assert!(
            std::time::Instant::now() < end,
            "the lock outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reaper.unlock("sb_c").await.unwrap();
    // The replica notices at its next check and takes the lock again on a
    // new session, for the call still in flight.
    s.calls().check().await.unwrap();
    assert_ne!(lock_session_pid(&other).await, Some(pid));
    assert!(!reaper.try_lock("sb_c").await.unwrap());
    call.release().await;
    assert!(reaper.try_lock("sb_c").await.unwrap());
    reaper.unlock("sb_c").await.unwrap();
}
