//! `burrow-conformance-caller --home DIR`: one caller of a conformance race
//! in processes, on the local backend of the burrow home `DIR` (the
//! program the local backend's conformance test spawns for each caller; see
//! `burrow_conformance::caller`).

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let home = match args.as_slice() {
        [flag, home] if flag == "--home" => home.clone(),
        _ => {
            eprintln!(
                "usage: burrow-conformance-caller --home DIR (started by the conformance kit)"
            );
            return ExitCode::from(2);
        }
    };
    burrow_conformance::caller::main(move || async move {
        Ok(Arc::new(burrow::LocalBackend::open_at(home).await?) as Arc<dyn burrow::Backend>)
    })
}
