//! `run::in_flight` as a caller sees it: a call that has handed over its
//! answer is no longer counted. (Alone in its binary: the count is the
//! process's, and no other test's calls may run beside this one.)
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;

use burrow_binding::{call, process, run};
use burrow_test_support::{init_env, new_home_dir, Home};
use serde_json::json;

#[test]
fn a_call_that_has_answered_is_not_in_flight() {
    init_env();
    std::env::remove_var("BURROW_URL");
    let home = Home::new(new_home_dir().unwrap());
    process::configure(Some(home.path().to_owned()));
    for _ in 0..50 {
        let (tx, rx) = mpsc::channel();
        run::spawn(
            call(None, &json!({"op": "list"}).to_string(), None),
            move |r| {
                // Where an adapter resolves its promise: the caller may ask
                // right away.
                let _ = tx.send((r.is_ok(), run::in_flight()));
            },
        )
        .unwrap();
        let (ok, seen) = rx.recv().unwrap();
        assert!(ok);
        assert_eq!(seen, 0, "the answered call was still counted");
    }
    assert_eq!(run::in_flight(), 0);
}
