//! The per-call overhead of the binding core against the same call straight
//! from Rust, in one run: `ping` of one running sandbox, N times each way.
//! Usage: cargo run -p burrow-binding --example ping -- IMAGE [N]
//! (scripts/bench-ping.sh runs it beside the same call from Node).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use burrow_binding::{call, run, Object, Output};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    let mut args = std::env::args().skip(1);
    let image = args.next().expect("usage: ping IMAGE [N]");
    let n: usize = args.next().map_or(2000, |s| s.parse().unwrap());
    let go = |target: Option<&Object>, op: String| {
        run::block_on(call(target, &op, None), || Ok::<(), ()>(()))
            .unwrap()
            .unwrap()
    };
    let build = format!(
        r#"{{"op": "build", "mode": "replace", "name": "bench-ping", "image": "{image}"}}"#
    );
    let Output::Object(obj) = go(None, build) else {
        panic!("a sandbox")
    };
    let Object::Sandbox(sb_obj) = &obj else {
        panic!("a sandbox")
    };
    // The same sandbox straight through the Rust API.
    let st = burrow_binding::process::state().unwrap();
    let sb = st
        .runtime()
        .block_on(async {
            let h = burrow::SandboxHandle::get_by_id_in(st.backend().await?, sb_obj.id()).await?;
            h.sandbox().await
        })
        .unwrap();
    let mut rust = Vec::with_capacity(n);
    let mut core = Vec::with_capacity(n);
    for _ in 0..50 {
        st.runtime().block_on(sb.ping()).unwrap();
        go(Some(&obj), r#"{"op": "ping"}"#.into());
    }
    for _ in 0..n {
        let t = Instant::now();
        st.runtime().block_on(sb.ping()).unwrap();
        rust.push(t.elapsed());
        let t = Instant::now();
        go(Some(&obj), r#"{"op": "ping"}"#.into());
        core.push(t.elapsed());
    }
    println!(
        "ping from Rust (burrow::Sandbox::ping)      median {:.1} us",
        median(rust)
    );
    println!(
        "ping through the binding core (JSON call)   median {:.1} us",
        median(core)
    );
    go(Some(&obj), r#"{"op": "destroy"}"#.into());
}
