//! The binding core against real sandboxes (the local backend, the
//! container driver, the busybox image): calls as JSON on the module and on
//! objects, run the way adapters run them (`run::block_on`, `run::spawn`),
//! their outputs, their typed failures, `call_timeout` and cancellation
//! leaving nothing running in the guest or on the runtime.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow_binding::{call, error_codes, process, run, Failure, Object, Output};
use burrow_test_support::{busybox_rootfs, init_env, new_home_dir, Home};
use serde_json::{json, Value};

/// One burrow home for this test binary (the binding's home is per
/// process), configured once.
fn setup() {
    static HOME: OnceLock<Home> = OnceLock::new();
    HOME.get_or_init(|| {
        init_env();
        std::env::remove_var("BURROW_URL");
        let home = Home::new(new_home_dir().unwrap());
        process::configure(Some(home.path().to_owned()));
        home
    });
}

/// Runs a call to its end, as a blocking adapter does.
fn go(target: Option<&Object>, op: Value, data: Option<&[u8]>) -> Result<Output, Failure> {
    let fut = call(target, &op.to_string(), data.map(<[u8]>::to_vec));
    run::block_on(fut, || Ok::<(), ()>(())).unwrap()
}

fn object(out: Output) -> Object {
    match out {
        Output::Object(o) => o,
        other => panic!("expected an object, got {other:?}"),
    }
}

fn json_of(out: Output) -> Value {
    match out {
        Output::Json(text) => serde_json::from_str(&text).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

fn image() -> String {
    busybox_rootfs().display().to_string()
}

fn create(name: &str) -> Object {
    setup();
    object(
        go(
            None,
            json!({"op": "build", "name": name, "image": image()}),
            None,
        )
        .unwrap(),
    )
}

/// Whether a `sleep` runs in the sandbox.
fn sleeping(sb: &Object) -> bool {
    match go(
        Some(sb),
        json!({"op": "exec", "argv": ["pidof", "sleep"]}),
        None,
    )
    .unwrap()
    {
        Output::Exec(out) => out.status.code == Some(0),
        other => panic!("expected an exec result, got {other:?}"),
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn commands_files_processes_and_logs_through_calls() {
    let sb = create("binding-basics");
    let Object::Sandbox(obj) = &sb else {
        panic!("a sandbox")
    };
    assert!(obj.is_live());
    assert!(obj.id().to_string().starts_with("sb_"));
    assert_eq!(obj.generation(), 1);

    match go(
        Some(&sb),
        json!({"op": "exec", "argv": ["sh", "-c", "cat; echo err >&2"]}),
        Some(b"in"),
    )
    .unwrap()
    {
        Output::Exec(out) => {
            assert_eq!(out.stdout, b"in");
            assert_eq!(out.stderr, b"err\n");
            assert_eq!(out.status.code, Some(0));
        }
        other => panic!("expected an exec result, got {other:?}"),
    }
    go(
        Some(&sb),
        json!({"op": "fs_write", "path": "/tmp/f", "mode": 0o600}),
        Some(b"data"),
    )
    .unwrap();
    match go(Some(&sb), json!({"op": "fs_read", "path": "/tmp/f"}), None).unwrap() {
        Output::Bytes(b) => assert_eq!(b, b"data"),
        other => panic!("expected bytes, got {other:?}"),
    }
    let stat = json_of(go(Some(&sb), json!({"op": "fs_stat", "path": "/tmp/f"}), None).unwrap());
    assert_eq!(stat["size"], 4);
    assert!(matches!(
        go(
            Some(&sb),
            json!({"op": "fs_exists", "path": "/tmp/nope"}),
            None
        )
        .unwrap(),
        Output::Bool(false)
    ));
    assert!(matches!(
        go(Some(&sb), json!({"op": "status"}), None).unwrap(),
        Output::Status("running")
    ));
    let info = json_of(go(Some(&sb), json!({"op": "info"}), None).unwrap());
    assert_eq!(info["id"], obj.id().to_string());

    // A process: a pull cursor of events, stdin kept open.
    let p = object(
        go(
            Some(&sb),
            json!({"op": "spawn", "argv": ["cat"], "keep_stdin": true}),
            None,
        )
        .unwrap(),
    );
    go(Some(&p), json!({"op": "write"}), Some(b"streamed")).unwrap();
    go(Some(&p), json!({"op": "close_stdin"}), None).unwrap();
    let mut stdout = Vec::new();
    loop {
        match go(Some(&p), json!({"op": "next"}), None).unwrap() {
            Output::Event(Some(burrow::ExecEvent::Stdout(d))) => stdout.extend(d),
            Output::Event(Some(burrow::ExecEvent::Exit(s))) => {
                assert_eq!(s.code, Some(0));
                break;
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(stdout, b"streamed");
    assert!(matches!(
        go(Some(&p), json!({"op": "next"}), None).unwrap(),
        Output::Event(None)
    ));

    // The supervisor's log has lines; a followed log is a cursor.
    let lines = json_of(
        go(
            Some(&sb),
            json!({"op": "logs", "source": "supervisor"}),
            None,
        )
        .unwrap(),
    );
    assert!(!lines.as_array().unwrap().is_empty());
    let cursor = object(
        go(
            Some(&sb),
            json!({"op": "follow_logs", "tail": 1, "source": "supervisor"}),
            None,
        )
        .unwrap(),
    );
    let line = json_of(
        go(
            Some(&cursor),
            json!({"op": "next", "call_timeout": 10}),
            None,
        )
        .unwrap(),
    );
    assert_eq!(line["source"], "supervisor");

    go(Some(&sb), json!({"op": "destroy"}), None).unwrap();
    let gone = go(Some(&sb), json!({"op": "status"}), None).unwrap_err();
    assert_eq!(gone.code(), "not_found");
}

#[test]
fn handles_from_lookups_act_through_the_current_run() {
    let sb = create("binding-handles");
    let h = object(go(None, json!({"op": "get", "name": "binding-handles"}), None).unwrap());
    let Object::Sandbox(handle) = &h else {
        panic!("a sandbox object")
    };
    assert!(!handle.is_live());
    match go(
        Some(&h),
        json!({"op": "exec", "argv": ["echo", "via handle"]}),
        None,
    )
    .unwrap()
    {
        Output::Exec(out) => assert_eq!(out.stdout, b"via handle\n"),
        other => panic!("expected an exec result, got {other:?}"),
    }
    let info = json_of(go(Some(&h), json!({"op": "stop", "grace": "2s"}), None).unwrap());
    assert_eq!(info["status"], "stopped");
    let refused = go(Some(&h), json!({"op": "exec", "argv": ["true"]}), None).unwrap_err();
    assert_eq!(refused.code(), "invalid_state");
    assert_eq!(refused.body().status, Some(burrow::Status::Stopped));
    // A handle's start gives the live sandbox of the new run.
    let live = object(go(Some(&h), json!({"op": "connect_or_start"}), None).unwrap());
    let Object::Sandbox(live_obj) = &live else {
        panic!("a sandbox object")
    };
    assert!(live_obj.is_live());
    assert_eq!(live_obj.generation(), 2);
    assert_eq!(live_obj.id(), handle.id());
    go(Some(&sb), json!({"op": "destroy"}), None).unwrap();
}

#[test]
fn failures_are_the_cores_error_bodies() {
    setup();
    let bad_name = go(
        None,
        json!({"op": "build", "name": "no/slash/x", "image": image()}),
        None,
    )
    .unwrap_err();
    assert_eq!(bad_name.code(), "invalid_name");
    let sb = create("binding-errors");
    let Object::Sandbox(obj) = &sb else {
        panic!("a sandbox object")
    };
    let exists = go(
        None,
        json!({"op": "build", "name": "binding-errors", "image": image()}),
        None,
    )
    .unwrap_err();
    assert_eq!(exists.code(), "already_exists");
    assert_eq!(exists.body().id.as_ref(), Some(obj.id()));
    let missing = go(None, json!({"op": "get", "name": "binding-nobody"}), None).unwrap_err();
    assert_eq!(missing.code(), "not_found");
    assert_eq!(missing.body().name.as_deref(), Some("binding-nobody"));
    let guest = go(Some(&sb), json!({"op": "fs_read", "path": "/nope"}), None).unwrap_err();
    assert_eq!(guest.code(), "guest");
    assert_eq!(
        guest.body().guest.as_ref().map(|g| g.code),
        Some(burrow::GuestErrorCode::NotFound)
    );
    // Malformed calls: typed, and nothing runs.
    for (op, subject) in [
        (json!({"op": "nope"}), "nope"),
        (json!({"argv": ["true"]}), "op"),
        (json!({"op": "exec"}), "exec"),
        (
            json!({"op": "exec", "argv": ["true"], "surprise": 1}),
            "exec",
        ),
        (json!({"op": "stop", "grace": -1}), "stop"),
        (json!({"op": "stop", "grace": "soon"}), "stop"),
        (json!({"op": "ping", "call_timeout": "x"}), "call_timeout"),
        (
            json!({"op": "wait_for_status", "statuses": ["asleep"]}),
            "status",
        ),
    ] {
        let f = go(Some(&sb), op.clone(), None).unwrap_err();
        assert_eq!(f.code(), "invalid_argument", "{op}: {f}");
        if subject != "status" {
            assert_eq!(f.body().subject.as_deref(), Some(subject), "{op}");
        }
    }
    let not_json = run::block_on(call(None, "{", None), || Ok::<(), ()>(())).unwrap();
    assert_eq!(not_json.unwrap_err().code(), "invalid_argument");
    // Every code the core has, in the core's order.
    assert_eq!(
        error_codes(),
        burrow::ErrorCode::ALL
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
    );
    go(Some(&sb), json!({"op": "destroy"}), None).unwrap();
}

#[test]
fn a_call_timeout_or_a_cancel_leaves_nothing_running() {
    let sb = create("binding-cancel");
    let f = go(
        Some(&sb),
        json!({"op": "exec", "argv": ["sleep", "30"], "call_timeout": 0.5}),
        None,
    )
    .unwrap_err();
    assert_eq!(f.code(), "timeout");
    assert_eq!(f.body().after_ms, Some(500));
    assert_eq!(f.body().operation.as_deref(), Some("exec"));
    wait_until("the timed-out sleep ends in the guest", || !sleeping(&sb));

    let (tx, rx) = mpsc::channel();
    let cancel = run::spawn(
        call(
            Some(&sb),
            &json!({"op": "exec", "argv": ["sleep", "30"]}).to_string(),
            None,
        ),
        move |r| {
            let _ = tx.send(r.is_ok());
        },
    )
    .unwrap();
    wait_until("the sleep starts", || sleeping(&sb));
    let before = run::in_flight();
    assert!(before >= 1);
    cancel.cancel();
    wait_until("the cancelled call leaves the runtime", || {
        cancel.is_finished()
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "a cancelled call never calls back"
    );
    wait_until("the cancelled sleep ends in the guest", || !sleeping(&sb));
    go(Some(&sb), json!({"op": "destroy"}), None).unwrap();
}

/// `close` on a file stream ends a pending pull at once and abandons the
/// transfer in the guest; later calls on the object fail (a writer) or
/// report the end (a reader); the sandbox serves other calls throughout.
#[test]
fn closing_a_file_stream_ends_it_at_once() {
    let sb = create("binding-close");
    // A FIFO whose writer writes one line, then nothing: a second `next`
    // stays pending.
    go(
        Some(&sb),
        json!({"op": "exec", "argv": ["mkfifo", "/tmp/pipe"]}),
        None,
    )
    .unwrap();
    let holder = object(
        go(
            Some(&sb),
            json!({"op": "spawn", "argv": ["sh", "-c", "(echo first; sleep 30) >/tmp/pipe"]}),
            None,
        )
        .unwrap(),
    );
    let reader = object(
        go(
            Some(&sb),
            json!({"op": "fs_open_read", "path": "/tmp/pipe"}),
            None,
        )
        .unwrap(),
    );
    match go(Some(&reader), json!({"op": "next"}), None).unwrap() {
        Output::Bytes(b) => assert_eq!(b, b"first\n"),
        other => panic!("expected bytes, got {other:?}"),
    }
    let (tx, rx) = mpsc::channel();
    let pending = reader.clone();
    std::thread::spawn(move || {
        let _ = tx.send(go(Some(&pending), json!({"op": "next"}), None));
    });
    if let Ok(early) = rx.recv_timeout(Duration::from_millis(300)) {
        panic!("nothing is written: the pull waits, got {early:?}");
    }
    assert!(matches!(
        go(Some(&reader), json!({"op": "close"}), None).unwrap(),
        Output::Unit
    ));
    let ended = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the pending pull ends");
    assert!(matches!(ended.unwrap(), Output::Unit), "a closed read ends");
    assert!(matches!(
        go(Some(&reader), json!({"op": "next"}), None).unwrap(),
        Output::Unit
    ));
    go(Some(&holder), json!({"op": "signal", "signal": 9}), None).unwrap();

    let writer = object(
        go(
            Some(&sb),
            json!({"op": "fs_open_write", "path": "/tmp/w"}),
            None,
        )
        .unwrap(),
    );
    go(Some(&writer), json!({"op": "write"}), Some(b"kept")).unwrap();
    go(Some(&writer), json!({"op": "close"}), None).unwrap();
    // Once `close` returned the sandbox let go of the file: what was
    // written is there, and nothing of this writer lands later.
    match go(Some(&sb), json!({"op": "fs_read", "path": "/tmp/w"}), None).unwrap() {
        Output::Bytes(b) => assert_eq!(b, b"kept"),
        other => panic!("expected bytes, got {other:?}"),
    }
    for op in ["write", "finish"] {
        let f = go(Some(&writer), json!({ "op": op }), Some(b"x")).unwrap_err();
        assert_eq!(f.code(), "invalid_argument", "{op} after close");
    }
    // Closing twice is harmless, and the sandbox serves new streams.
    go(Some(&writer), json!({"op": "close"}), None).unwrap();
    let again = object(
        go(
            Some(&sb),
            json!({"op": "fs_open_write", "path": "/tmp/w"}),
            None,
        )
        .unwrap(),
    );
    go(Some(&again), json!({"op": "write"}), Some(b"new")).unwrap();
    assert_eq!(
        json_of(go(Some(&again), json!({"op": "finish"}), None).unwrap()),
        3
    );
    match go(Some(&sb), json!({"op": "fs_read", "path": "/tmp/w"}), None).unwrap() {
        Output::Bytes(b) => assert_eq!(b, b"new"),
        other => panic!("expected bytes, got {other:?}"),
    }
    go(Some(&sb), json!({"op": "destroy"}), None).unwrap();
}
