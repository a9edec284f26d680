//! `burrow-agent`: the guest agent. PID 1 of every sandbox (or `/init` of a
//! microVM), it serves the burrow protocol on one channel: process execution,
//! file access, tunnels and shutdown.
//!
//! Usage: `burrow-agent [--channel PATH]`. Without `--channel` the protocol
//! runs on stdin/stdout; with it, on the file or character device at PATH
//! (a VM's virtio console port). Logs go to stderr.

mod agent;
mod archive;
mod channel;
mod exec;
mod files;
mod fs;
mod log;
mod mailbox;
mod pty;
mod reaper;
mod shutdown;
mod spawn;
mod sys;
mod tunnel;

use std::path::PathBuf;

use crate::log::{error, warning};

const USAGE: &str = "usage: burrow-agent [--channel PATH]";

/// Parsed command line.
#[derive(Debug, Default)]
struct Args {
    channel: Option<PathBuf>,
}

/// Parses the command line. Unknown arguments are ignored with a warning:
/// as a VM's init the agent gets whatever the kernel command line left over,
/// and refusing to start would panic the kernel.
fn parse_args(mut args: impl Iterator<Item = std::ffi::OsString>) -> Result<Args, String> {
    let mut parsed = Args::default();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--channel" {
            let path = args.next().ok_or("--channel needs a path")?;
            parsed.channel = Some(path.into());
        } else if let Some(path) = text.strip_prefix("--channel=") {
            parsed.channel = Some(path.into());
        } else if text == "--version" || text == "-V" {
            println!("burrow-agent {}", env!("CARGO_PKG_VERSION"));
            std::process::exit(0);
        } else if text == "--help" || text == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        } else {
            warning!("ignoring unknown argument {text:?} ({USAGE})");
        }
    }
    Ok(parsed)
}

fn main() {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            error!("{e} ({USAGE})");
            std::process::exit(2);
        }
    };
    // Before any thread exists, so that every thread inherits the mask.
    let signals = match reaper::block_signals() {
        Ok(s) => s,
        Err(e) => {
            error!("cannot set up signal handling: {e}");
            std::process::exit(1);
        }
    };
    let channel = match channel::open(args.channel.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            error!("cannot open the channel: {e}");
            std::process::exit(1);
        }
    };
    channel::describe(&channel, args.channel.as_deref());
    std::process::exit(agent::run(channel, signals))
}
