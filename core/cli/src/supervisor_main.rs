//! `burrow-supervisor`: the per-sandbox supervisor process, spawned by the
//! library as `burrow-supervisor __supervise --home H --id ID ...`. The same
//! code as `burrow __supervise`, without the CLI and the server linked in:
//! one of these runs beside every running sandbox, so its size is memory.

use std::process::ExitCode;

mod agent;
mod supervise;

fn main() -> ExitCode {
    agent::register();
    let args: Vec<String> = std::env::args().collect();
    // `__supervise` first, as with `burrow`, so both read alike in `ps`.
    let rest = match args.get(1).map(String::as_str) {
        Some("__supervise") => &args[2..],
        Some("__remove") => return supervise::remove(&args[2..]),
        Some("__link") => return supervise::link(&args[2..]),
        Some("__layer") => return supervise::layer(&args[2..]),
        Some("__unlayer") => return supervise::unlayer(&args[2..]),
        _ => {
            eprintln!("burrow-supervisor is started by the burrow library, not by hand");
            return ExitCode::from(2);
        }
    };
    supervise::supervise(rest)
}
