//! The supervisor's entry: argument parsing and logging set-up, shared by
//! the lean `burrow-supervisor` binary and `burrow __supervise`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use burrow::internal::supervisor;

/// `burrow __supervise --home H --id ID --generation N --runtime R --driver D
/// [--owner-pid P] [--ready-fd FD] [--spawned-at UNIX_MICROS]`: internal,
/// spawned by the library.
/// Parsed by hand so nothing (no async runtime, no threads) starts before
/// the supervisor's single-threaded setup.
pub(crate) fn supervise(args: &[String]) -> ExitCode {
    match parse_supervise(args) {
        Ok(a) => {
            supervisor::detach_from_starter(a.ready_fd);
            init_supervisor_logging(&a);
            ExitCode::from(supervisor::main(a) as u8)
        }
        // Stderr is `logs/supervisor.stderr` (see the library's spawn).
        Err(e) => {
            eprintln!("burrow __supervise: {e}");
            ExitCode::from(2)
        }
    }
}

/// `burrow __remove DIR`: internal, spawned by the library of an
/// unprivileged user to remove a sandbox directory that holds files of its
/// subordinate ids (it enters a user namespace: single-threaded here).
pub(crate) fn remove(args: &[String]) -> ExitCode {
    let [dir] = args else {
        eprintln!("burrow __remove: expected one directory");
        return ExitCode::from(2);
    };
    match supervisor::remove_in_user_namespace(std::path::Path::new(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow __remove: {}", burrow::error::report(&e));
            ExitCode::from(1)
        }
    }
}

/// `burrow __layer UPPER OUT`: internal, spawned by the library of an
/// unprivileged user to write the writable layer of a stopped rootless
/// sandbox (files of its subordinate ids) as a snapshot layer (it enters a
/// user namespace: single-threaded here).
pub(crate) fn layer(args: &[String]) -> ExitCode {
    let [upper, out] = args else {
        eprintln!("burrow __layer: expected a layer directory and an output file");
        return ExitCode::from(2);
    };
    match supervisor::write_layer_in_user_namespace(upper.as_ref(), out.as_ref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow __layer: {}", burrow::error::report(&e));
            ExitCode::from(1)
        }
    }
}

/// `burrow __unlayer LAYER UPPER`: internal, spawned by the library of an
/// unprivileged user to give a fork's container copy its parent's writable
/// layer (files of its subordinate ids; it enters a user namespace:
/// single-threaded here).
pub(crate) fn unlayer(args: &[String]) -> ExitCode {
    let [layer, upper] = args else {
        eprintln!("burrow __unlayer: expected a layer file and a layer directory");
        return ExitCode::from(2);
    };
    match supervisor::unpack_layer_in_user_namespace(layer.as_ref(), upper.as_ref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow __unlayer: {}", burrow::error::report(&e));
            ExitCode::from(1)
        }
    }
}

/// `burrow __link PID FD`: internal, spawned by a supervisor to give the
/// container of PID its network link (it enters the container's user
/// namespace: single-threaded here) and hand it back over the socket FD.
pub(crate) fn link(args: &[String]) -> ExitCode {
    let (Some(pid), Some(fd)) = (
        args.first().and_then(|a| a.parse::<i32>().ok()),
        args.get(1).and_then(|a| a.parse::<i32>().ok()),
    ) else {
        eprintln!("burrow __link: expected a process id and a descriptor");
        return ExitCode::from(2);
    };
    match supervisor::make_and_send_link(pid, fd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("burrow __link: {e}");
            ExitCode::from(1)
        }
    }
}

fn parse_supervise(args: &[String]) -> Result<supervisor::SuperviseArgs, String> {
    let mut home = None;
    let mut id = None;
    let mut generation = None;
    let mut runtime = burrow::OciRuntime::default();
    let mut driver = burrow::DriverKind::default();
    let mut owner_pid = None;
    let mut ready_fd = None;
    let mut spawned_at_us = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--home" => home = Some(PathBuf::from(value)),
            "--id" => {
                id = Some(
                    value
                        .parse::<burrow::SandboxId>()
                        .map_err(|e| e.to_string())?,
                )
            }
            "--generation" => generation = Some(value.parse::<u64>().map_err(|e| e.to_string())?),
            "--runtime" => runtime = value.parse().map_err(|e: burrow::Error| e.to_string())?,
            "--driver" => driver = value.parse().map_err(|e: burrow::Error| e.to_string())?,
            "--owner-pid" => owner_pid = Some(value.parse::<u32>().map_err(|e| e.to_string())?),
            "--ready-fd" => ready_fd = Some(value.parse::<i32>().map_err(|e| e.to_string())?),
            "--spawned-at" => {
                spawned_at_us = Some(value.parse::<u64>().map_err(|e| e.to_string())?)
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(supervisor::SuperviseArgs {
        home: home.ok_or("--home is required")?,
        id: id.ok_or("--id is required")?,
        generation: generation.ok_or("--generation is required")?,
        runtime,
        driver,
        owner_pid,
        ready_fd,
        spawned_at_us,
    })
}

/// The supervisor logs into `sandboxes/<id>/logs/supervisor.log` (size
/// bound and rotation: `burrow::internal::supervisor::RotatingFile`); if that cannot be
/// opened, into its stderr (`supervisor.stderr`).
fn init_supervisor_logging(args: &supervisor::SuperviseArgs) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BURROW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    match supervisor_log(args) {
        // `Arc<W>` is a `MakeWriter` whenever `&W` is `io::Write`.
        Ok(log) => {
            let _ = builder.with_writer(Arc::new(log)).try_init();
        }
        Err(e) => {
            eprintln!(
                "burrow __supervise: {}; logging to stderr instead",
                burrow::error::report(e.as_ref())
            );
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
}

fn supervisor_log(args: &supervisor::SuperviseArgs) -> anyhow::Result<supervisor::RotatingFile> {
    Ok(supervisor::open_log(&args.home, &args.id)?)
}
