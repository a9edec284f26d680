//! The `burrow` command line. Thin: parses input and calls the library.
//! Also hosts the internal `__supervise`, `__remove`, `__layer`, `__unlayer` and `__link` entries, which the
//! library uses when the lean `burrow-supervisor` binary is not installed
//! beside `burrow`.

use std::process::ExitCode;

mod agent;
mod commands;
mod supervise;

fn main() -> ExitCode {
    agent::register();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__supervise") {
        return supervise::supervise(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("__remove") {
        return supervise::remove(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("__link") {
        return supervise::link(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("__layer") {
        return supervise::layer(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("__unlayer") {
        return supervise::unlayer(&args[2..]);
    }
    commands::main()
}
