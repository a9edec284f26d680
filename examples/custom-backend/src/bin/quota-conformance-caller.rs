//! `quota-conformance-caller --home DIR --namespace NS [--max-running N]
//! [--max-running-per-label KEY=N]`: one caller of a conformance race in
//! processes, on a [`QuotaBackend`] over the burrow home `DIR`. The program
//! `tests/conformance.rs` spawns for each caller (see
//! `burrow_conformance::caller`): each is its own process, as separate
//! applications sharing one home would be.

use std::process::ExitCode;
use std::sync::Arc;

use burrow::Backend;
use custom_backend::{Quota, QuotaBackend};

fn parse(args: &[String]) -> Result<(String, String, Quota), String> {
    let (mut home, mut namespace, mut quota) = (None, None, Quota::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--home" => home = Some(value.clone()),
            "--namespace" => namespace = Some(value.clone()),
            "--max-running" => {
                quota = quota.max_running(value.parse().map_err(|e| format!("{flag}: {e}"))?)
            }
            "--max-running-per-label" => {
                let (key, n) = value.split_once('=').ok_or(format!("{flag}: KEY=N"))?;
                quota = quota
                    .max_running_per_label(key, n.parse().map_err(|e| format!("{flag}: {e}"))?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((
        home.ok_or("--home is required")?,
        namespace.ok_or("--namespace is required")?,
        quota,
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (home, namespace, quota) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("quota-conformance-caller: {e}");
            return ExitCode::from(2);
        }
    };
    burrow_conformance::caller::main(move || async move {
        Ok(Arc::new(QuotaBackend::open(home, &namespace, quota).await?) as Arc<dyn Backend>)
    })
}
