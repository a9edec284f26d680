//! User commands.

use std::process::ExitCode;

pub fn main() -> ExitCode {
    eprintln!("burrow: user commands are not built yet");
    ExitCode::from(2)
}
