//! Lifecycle convergence: many processes ask for the same sandbox at once
//! and all get the same one.
//!
//! The parent spawns N copies of itself (`--child`). Each child calls
//! `Sandbox::builder("shared").image(..).detached(true).connect_or_create()`
//! at the same moment and prints the id and runtime generation it got. The
//! parent checks that every child got the same id and the same generation
//! (one create, one start), prints them, then destroys the sandbox.
//!
//! ```text
//! # as root, with BURROW_BIN and BURROW_AGENT_BIN set (see the quickstart)
//! cargo run -p burrow --example convergence -- demo/busybox [N]
//! ```
//!
//! The image is the first argument, else `$BURROW_DEMO_IMAGE`; N defaults
//! to 4. The children are detached creators: an attached sandbox would stop
//! as soon as the child that started it exits.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use burrow::{ErrorCode, Sandbox};

const NAME: &str = "shared";
const DEFAULT_CHILDREN: usize = 4;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return match args.get(1) {
            Some(image) => child(image).await,
            None => {
                eprintln!("--child needs the image");
                ExitCode::from(2)
            }
        };
    }
    let Some(image) = image_from(args.first()) else {
        eprintln!("usage: convergence IMAGE [N]   (or set BURROW_DEMO_IMAGE)");
        return ExitCode::from(2);
    };
    let children = match args.get(1).map(|n| n.parse::<usize>()) {
        None => DEFAULT_CHILDREN,
        Some(Ok(n)) if (1..=64).contains(&n) => n,
        Some(_) => {
            eprintln!("N must be a number between 1 and 64");
            return ExitCode::from(2);
        }
    };
    match parent(&image, children).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("convergence failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The image reference; an existing directory is made absolute, so every
/// child (and every later start) sees the same path.
fn image_from(arg: Option<&String>) -> Option<String> {
    let raw = arg
        .cloned()
        .or_else(|| std::env::var("BURROW_DEMO_IMAGE").ok())
        .filter(|s| !s.is_empty())?;
    if Path::new(&raw).is_dir() {
        if let Ok(abs) = std::fs::canonicalize(&raw) {
            return Some(abs.to_string_lossy().into_owned());
        }
    }
    Some(raw)
}

/// One child: converge on the sandbox and report what it got on stdout as
/// `<id> <generation>`.
async fn child(image: &str) -> ExitCode {
    let got = Sandbox::builder(NAME)
        .image(image)
        .detached(true)
        .connect_or_create()
        .await;
    match got {
        Ok(sb) => {
            println!("{} {}", sb.id(), sb.generation());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("[{}] {e}", e.code());
            ExitCode::FAILURE
        }
    }
}

async fn parent(image: &str, children: usize) -> Result<(), String> {
    // Start from a clean slate: an earlier run may have left "shared".
    match Sandbox::get(NAME).await {
        Ok(old) => {
            println!("destroying the earlier sandbox {NAME:?} ({})", old.id());
            old.destroy()
                .await
                .map_err(|e| format!("destroying the earlier {NAME:?}: {e}"))?;
        }
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => return Err(format!("looking up {NAME:?}: {e}")),
    }

    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    println!("{children} processes call connect_or_create({NAME:?}) at once...");
    let mut spawned = Vec::with_capacity(children);
    for _ in 0..children {
        let c = Command::new(&exe)
            .arg("--child")
            .arg(image)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", exe.display()))?;
        spawned.push(c);
    }

    let mut results = Vec::with_capacity(children);
    let mut failures = Vec::new();
    for (i, c) in spawned.into_iter().enumerate() {
        let pid = c.id();
        let out = c
            .wait_with_output()
            .map_err(|e| format!("waiting for child {pid}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        let parsed = stdout
            .split_once(' ')
            .and_then(|(id, generation)| Some((id.to_owned(), generation.parse::<u64>().ok()?)));
        match (out.status.success(), parsed) {
            (true, Some((id, generation))) => {
                println!("  child {i} (pid {pid}): {id} generation {generation}");
                results.push((id, generation));
            }
            _ => {
                println!(
                    "  child {i} (pid {pid}) failed: {}",
                    if stderr.is_empty() { &stdout } else { &stderr }
                );
                failures.push(pid);
            }
        }
    }

    let verdict = if !failures.is_empty() {
        Err(format!("{} of {children} children failed", failures.len()))
    } else if results.iter().any(|r| r != &results[0]) {
        Err(format!("the children did not converge: {results:?}"))
    } else {
        let (id, generation) = &results[0];
        println!("all {children} processes got the same sandbox: {id}, generation {generation} (one start)");
        Ok(())
    };

    // Clean up whatever was created, converged or not.
    match Sandbox::get(NAME).await {
        Ok(h) => {
            h.destroy()
                .await
                .map_err(|e| format!("destroying {NAME:?}: {e}"))?;
            println!("destroyed {NAME:?} ({})", h.id());
        }
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => return Err(format!("looking up {NAME:?} for cleanup: {e}")),
    }
    verdict
}
