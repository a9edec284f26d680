//! `burrow-agent`: the guest agent. PID 1 of every sandbox (or `/init` of a
//! microVM), it serves the burrow protocol on one channel: process execution,
//! file access, tunnels and shutdown.
//!
//! Usage: `burrow-agent [--channel PATH] [--vm | --vm-template | --vm-template-root | --vm-layer] [--seccomp HEX]`. Without `--channel` the
//! protocol runs on stdin/stdout; with it, on the file or character device
//! at PATH. With `--vm` the agent is the `/init` of a microVM: it sets the
//! guest up from `/burrow/boot.json` (see `vm`), serves the protocol on the
//! virtio console port named there, and ends the VM when it exits
//! (`--vm-template`, `--vm-template-root`: the same, after waiting in a
//! snapshot for a sandbox's identity; `--vm-layer`: only to stream a stopped
//! sandbox's writable layer; see `vm`). With
//! `--seccomp` (container mode), the agent first installs the seccomp
//! filter given as the hex of a classic BPF program (built by the host's
//! container driver): every process of the sandbox inherits it. Logs go to
//! stderr. `--init` and `--install DIR` are the two roles of the agent in a
//! Kubernetes pod (see `pod`); a pod's session agents get `--calls-lock
//! PATH`, and `--reclaim-lock PATH` is a reclaim's check (see `calls`).

mod agent;
mod archive;
mod calls;
mod channel;
mod exec;
mod files;
mod flow;
mod fs;
mod layer;
mod log;
mod mailbox;
mod pod;
mod pty;
mod reaper;
mod shutdown;
mod spawn;
mod sys;
mod tunnel;
mod udp_tunnel;
mod vm;

use std::path::{Path, PathBuf};

use burrow_protocol::vm::{VM_LAYER_ARG, VM_MODE_ARG, VM_TEMPLATE_ARG, VM_TEMPLATE_ROOT_ARG};

use crate::agent::ProcessBase;
use crate::log::{error, warning};
use crate::sys::exit_process;

const USAGE: &str =
    "usage: burrow-agent [--channel PATH] [--vm | --vm-template | --vm-template-root | --vm-layer] [--seccomp HEX] [--calls-lock PATH] | --init | --install DIR | --reclaim-lock PATH";

/// Parsed command line.
#[derive(Debug, Default, PartialEq)]
struct Args {
    channel: Option<PathBuf>,
    vm: bool,
    /// VM mode, booted to become a template (see `vm`).
    template: Option<vm::Template>,
    /// VM mode, booted only to stream the data disk's layer (see `vm`).
    layer: bool,
    /// A seccomp filter to install first (hex of `struct sock_filter`s).
    seccomp: Option<String>,
    /// A pod's init (see `pod`): no channel, reap and stop.
    init: bool,
    /// Copy this binary into the directory and exit (a pod's init container).
    install: Option<PathBuf>,
    /// A pod's session: requests in flight hold a shared lock of this file.
    calls_lock: Option<PathBuf>,
    /// A reclaim in a pod: take this file's exclusive lock (see `calls`).
    reclaim_lock: Option<PathBuf>,
    /// Arguments that were ignored.
    unknown: Vec<String>,
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
        } else if text == "--seccomp" {
            let hex = args.next().ok_or("--seccomp needs a program")?;
            parsed.seccomp = Some(hex.to_string_lossy().into_owned());
        } else if text == VM_MODE_ARG {
            parsed.vm = true;
        } else if text == VM_TEMPLATE_ARG {
            parsed.vm = true;
            parsed.template = Some(vm::Template::Image);
        } else if text == VM_TEMPLATE_ROOT_ARG {
            parsed.vm = true;
            parsed.template = Some(vm::Template::Root);
        } else if text == VM_LAYER_ARG {
            parsed.vm = true;
            parsed.layer = true;
        } else if text == "--init" {
            parsed.init = true;
        } else if text == "--install" {
            let dir = args.next().ok_or("--install needs a directory")?;
            parsed.install = Some(dir.into());
        } else if text == "--calls-lock" {
            let path = args.next().ok_or("--calls-lock needs a path")?;
            parsed.calls_lock = Some(path.into());
        } else if text == "--reclaim-lock" {
            let path = args.next().ok_or("--reclaim-lock needs a path")?;
            parsed.reclaim_lock = Some(path.into());
        } else if text == "--version" || text == "-V" {
            println!("burrow-agent {}", env!("CARGO_PKG_VERSION"));
            exit_process(0);
        } else if text == "--help" || text == "-h" {
            println!("{USAGE}");
            exit_process(0);
        } else {
            warning!("ignoring unknown argument {text:?} ({USAGE})");
            parsed.unknown.push(text.into_owned());
        }
    }
    Ok(parsed)
}

fn main() {
    // In a VM a panic escaping `main` would kill PID 1, which the host sees
    // as a bare reset: give it the usual panic exit code instead.
    if std::panic::catch_unwind(agent_main).is_err() {
        error!("the agent panicked");
    }
    exit_process(101)
}

/// The agent proper; ends through [`exit_process`], never returns.
fn agent_main() {
    // First of all, so that every exit path (even a bad argument) ends the
    // VM with the agent's word rather than with a kernel panic.
    if std::env::args_os().skip(1).any(|a| {
        a == VM_MODE_ARG || a == VM_TEMPLATE_ARG || a == VM_TEMPLATE_ROOT_ARG || a == VM_LAYER_ARG
    }) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != 1 {
            // VM mode mounts over / and ends by resetting the machine: only
            // ever as the init of a VM.
            error!("{VM_MODE_ARG} is only for the init of a microVM (pid 1)");
            std::process::exit(2);
        }
        sys::set_vm_exit();
    }
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            error!("{e} ({USAGE})");
            exit_process(2);
        }
    };
    if let Some(dir) = &args.install {
        match pod::install(dir) {
            Ok(()) => exit_process(0),
            Err(e) => {
                error!("installing the agent into {}: {e}", dir.display());
                exit_process(1);
            }
        }
    }
    if let Some(path) = &args.reclaim_lock {
        exit_process(calls::reclaim(path));
    }
    let calls = match args.calls_lock.as_deref().map(calls::CallsLock::open) {
        None => None,
        Some(Ok(lock)) => Some(lock),
        Some(Err(e)) => {
            error!("opening the calls lock: {e}");
            exit_process(1);
        }
    };
    if args.init {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != 1 {
            // Stopping signals every process it may (kill -1): only ever as
            // the init of a container's own PID namespace.
            error!("--init is only for the init of a container (pid 1)");
            exit_process(2);
        }
        exit_process(pod::init());
    }
    // Before anything else, on the only thread: nothing of the sandbox may
    // run, or read input, without the filter.
    if let Some(hex) = &args.seccomp {
        if args.vm {
            warning!("ignoring --seccomp: a microVM is its own boundary");
        } else if let Err(e) = sys::install_seccomp(hex) {
            error!("cannot install the seccomp filter: {e}");
            exit_process(1);
        }
    }
    // The VM setup runs on the only thread, before the signal mask (a
    // template sets up the channel before it is saved; see `serve`).
    let (channel_path, base, early, notes) = if args.vm {
        if args.channel.is_some() {
            warning!("ignoring --channel: in VM mode the channel is the boot configuration's");
        }
        if args.unknown.iter().any(|a| a.starts_with("virtio_mmio.")) {
            // QEMU's microvm appends its virtio_mmio.device=... words to the
            // command line: after a `--` they reach init instead of the
            // kernel, which then has no virtio devices at all.
            error!(
                "virtio_mmio.* kernel parameters reached init as arguments: the guest has \
                 no virtio devices. Do not end the kernel command line with `-- {VM_MODE_ARG}` \
                 (QEMU appends its own parameters after it); pass {VM_MODE_ARG} as a plain word"
            );
        }
        // A template guest starts serving the channel it holds before it
        // is saved: a restored guest does not pay for the writer thread.
        let early = |path: &Path, port: &std::fs::File| {
            let port = port
                .try_clone()
                .map_err(|e| format!("cannot duplicate the channel: {e}"))?;
            serve(Some(path), Some(port), true)
        };
        let setup = if args.layer {
            vm::setup_layer().map(|guest| (guest, None))
        } else {
            vm::setup(args.template, early)
        };
        match setup {
            Ok((guest, early)) => (
                Some((guest.channel, guest.open_channel)),
                guest.base,
                early,
                vec![guest.summary],
            ),
            Err(e) => {
                error!("VM setup failed: {e}");
                exit_process(e.code());
            }
        }
    } else {
        (
            args.channel.map(|c| (c, None)),
            ProcessBase::inherited(),
            None,
            Vec::new(),
        )
    };
    let serving = match early {
        Some(serving) => serving,
        None => {
            let (channel_path, open_channel) = channel_path.unzip();
            let served = serve(channel_path.as_deref(), open_channel.flatten(), args.vm);
            match served {
                Ok(serving) => serving,
                Err(e) => {
                    error!("{e}");
                    exit_process(1);
                }
            }
        }
    };
    let on_resume = args.vm.then_some(vm::apply_resume as agent::ResumeHook);
    exit_process(agent::run(
        serving.reader,
        serving.out,
        serving.signals,
        base,
        on_resume,
        calls,
        &notes
            .iter()
            .map(|n| n as &dyn std::fmt::Display)
            .collect::<Vec<_>>(),
    ))
}

/// The channel, ready to serve.
struct Serving {
    /// The signals the reaper thread waits for (blocked in every thread).
    signals: reaper::Signals,
    /// Host frames come from here.
    reader: std::fs::File,
    /// Guest frames go through the writer thread.
    out: channel::Outbox,
}

/// Blocks the signals, sets up the channel (`file`, else the one at
/// `path`, else stdin/stdout) and starts its writer thread: the first
/// thread, so that it inherits the mask.
fn serve(path: Option<&Path>, file: Option<std::fs::File>, vm: bool) -> Result<Serving, String> {
    let signals =
        reaper::block_signals().map_err(|e| format!("cannot set up signal handling: {e}"))?;
    let opened = match file {
        Some(file) => channel::adopt(file),
        None => channel::open(path),
    };
    let channel = opened.map_err(|e| format!("cannot open the channel: {e}"))?;
    if vm {
        vm::wait_for_host(&channel.reader);
    }
    channel::describe(&channel, path);
    let channel::Channel { reader, writer } = channel;
    let out = channel::start_writer(writer)
        .map_err(|e| format!("cannot start the writer thread: {e}"))?;
    Ok(Serving {
        signals,
        reader,
        out,
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_args, Args};

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(args.iter().map(|a| a.into()))
    }

    #[test]
    fn arguments() {
        assert_eq!(parse(&[]), Ok(Args::default()));
        assert_eq!(
            parse(&["--vm"]),
            Ok(Args {
                vm: true,
                ..Args::default()
            })
        );
        assert_eq!(
            parse(&["quiet", "--channel", "/dev/x", "--vm"]),
            Ok(Args {
                channel: Some("/dev/x".into()),
                vm: true,
                unknown: vec!["quiet".into()],
                ..Args::default()
            })
        );
        assert_eq!(
            parse(&["--vm-template"]).map(|a| (a.vm, a.template)),
            Ok((true, Some(crate::vm::Template::Image)))
        );
        assert_eq!(
            parse(&["--vm-template-root"]).map(|a| (a.vm, a.template)),
            Ok((true, Some(crate::vm::Template::Root)))
        );
        assert_eq!(
            parse(&["--vm-layer"]).map(|a| (a.vm, a.layer, a.template)),
            Ok((true, true, None))
        );
        assert_eq!(parse(&["--init"]).map(|a| a.init), Ok(true));
        assert_eq!(
            parse(&["--install", "/d"]).map(|a| a.install),
            Ok(Some("/d".into()))
        );
        assert!(parse(&["--install"]).is_err());
        assert_eq!(
            parse(&["--calls-lock", "/l"]).map(|a| a.calls_lock),
            Ok(Some("/l".into()))
        );
        assert_eq!(
            parse(&["--reclaim-lock", "/l"]).map(|a| a.reclaim_lock),
            Ok(Some("/l".into()))
        );
        assert!(parse(&["--calls-lock"]).is_err());
        assert!(parse(&["--reclaim-lock"]).is_err());
        assert_eq!(
            parse(&["--seccomp", "0600000000007fff"]).map(|a| a.seccomp),
            Ok(Some("0600000000007fff".into()))
        );
        assert!(parse(&["--seccomp"]).is_err());
        assert_eq!(
            parse(&["--channel=/dev/y"]).map(|a| a.channel),
            Ok(Some("/dev/y".into()))
        );
        assert!(parse(&["--channel"]).is_err());
    }
}
