//! Human-readable log lines on the agent's stderr (fd 2), which the
//! container runtime or the VM console captures. The protocol channel is
//! never used for logs.

use std::io::Write;

/// Writes one log line. Errors are ignored: a closed or broken stderr must
/// not take the agent down (unlike `eprintln!`, which panics).
pub fn line(level: &str, args: std::fmt::Arguments<'_>) {
    // One write per line, so lines from other writers of the same stream
    // (guest processes writing to /proc/1/fd/2) never land inside ours.
    let text = format!("burrow-agent: {level}: {args}\n");
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

macro_rules! info {
    ($($arg:tt)*) => { $crate::log::line("info", format_args!($($arg)*)) };
}

macro_rules! warning {
    ($($arg:tt)*) => { $crate::log::line("warn", format_args!($($arg)*)) };
}

macro_rules! error {
    ($($arg:tt)*) => { $crate::log::line("error", format_args!($($arg)*)) };
}

pub(crate) use {error, info, warning};
