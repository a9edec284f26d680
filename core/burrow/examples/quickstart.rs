//! Quickstart: create a sandbox, run commands and file operations in it,
//! stop it and remove it.
//!
//! ```text
//! # as root; scripts/quickstart.sh does all of this for you
//! cargo build -p burrow-cli                     # target/debug/burrow (+ the guest agent)
//! bash scripts/make-demo-rootfs.sh demo/busybox # busybox rootfs
//! cargo run -p burrow --example quickstart -- demo/busybox
//! ```
//!
//! The image is the first argument, else `$BURROW_DEMO_IMAGE`: a rootfs
//! directory, an OCI layout (`oci:DIR[:TAG]`) or a name imported under
//! `$BURROW_HOME/images/named/`. The sandbox is called `quickstart`; an
//! existing one of that name is replaced, so the example can be rerun.

use std::path::Path;
use std::process::ExitCode;

use burrow::{ErrorCode, Sandbox, SandboxHandle};

const NAME: &str = "quickstart";

#[tokio::main]
async fn main() -> ExitCode {
    let Some(image) = image_from_args() else {
        eprintln!("usage: quickstart IMAGE   (or set BURROW_DEMO_IMAGE)");
        eprintln!("  IMAGE: a rootfs directory, oci:DIR[:TAG], or an imported image name");
        eprintln!("  build a demo image with: bash scripts/make-demo-rootfs.sh demo/busybox");
        return ExitCode::from(2);
    };
    match run(&image).await {
        Ok(()) => {
            println!("quickstart finished");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The image reference. An existing directory given as a relative path is
/// made absolute (burrow takes paths starting with `/`, `./` or `../`, and
/// resolves relative ones against the current directory at every start).
fn image_from_args() -> Option<String> {
    let raw = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("BURROW_DEMO_IMAGE").ok())
        .filter(|s| !s.is_empty())?;
    if Path::new(&raw).is_dir() {
        if let Ok(abs) = std::fs::canonicalize(&raw) {
            return Some(abs.to_string_lossy().into_owned());
        }
    }
    Some(raw)
}

async fn run(image: &str) -> Result<(), Failure> {
    println!("creating sandbox {NAME:?} from {image}");
    // `replace()` destroys any earlier sandbox of this name first; without
    // it, `create()` fails with `already_exists` when the name is taken.
    // The sandbox is attached (the default): it stops if this process exits.
    let sb = Sandbox::builder(NAME)
        .image(image)
        .replace()
        .create()
        .await?;
    println!(
        "  id {}, generation {}, status {}",
        sb.id(),
        sb.generation(),
        sb.status().await?
    );

    // If a step fails, do not leave the sandbox behind.
    let steps = async {
        let out = sb.exec(["echo", "hello from the sandbox"]).await?;
        check("echo", &out)?;
        println!("echo      -> {}", out.stdout_str().trim_end());

        let out = sb.exec(["uname", "-a"]).await?;
        check("uname -a", &out)?;
        println!("uname -a  -> {}", out.stdout_str().trim_end());

        let text = "written by the quickstart example\n";
        sb.fs().write("/tmp/quickstart.txt", text).await?;
        let back = sb.fs().read_to_string("/tmp/quickstart.txt").await?;
        if back != text {
            return Err(Failure::Check(format!(
                "read back {back:?} from /tmp/quickstart.txt, wrote {text:?}"
            )));
        }
        println!(
            "fs        -> wrote and read back /tmp/quickstart.txt: {}",
            back.trim_end()
        );

        // A metadata handle, found by name and bound to the same id.
        let handle: SandboxHandle = Sandbox::get(NAME).await?;
        println!("handle    -> {} is {}", handle.id(), handle.status().await?);

        let stopped = sb.stop().await?;
        let reason = stopped
            .last_run
            .as_ref()
            .and_then(|r| r.exit_reason)
            .map_or("-", |r| r.as_str());
        println!(
            "stopped   -> status {}, exit reason {reason}",
            stopped.status
        );

        handle.remove().await?;
        println!("removed   -> {NAME:?} ({}) is gone", handle.id());
        Ok(())
    }
    .await;
    if steps.is_err() {
        if let Err(e) = sb.destroy().await {
            eprintln!("cleanup: destroying {NAME:?} failed: {e}");
        }
    }
    steps
}

/// A process that did not exit 0 is a failure of the example.
fn check(what: &str, out: &burrow::ExecOutput) -> Result<(), Failure> {
    if out.success() {
        Ok(())
    } else {
        Err(Failure::Check(format!(
            "`{what}` ended with {:?}; stderr: {}",
            out.status,
            out.stderr_str().trim_end()
        )))
    }
}

/// Why the example failed.
#[derive(Debug)]
enum Failure {
    /// A burrow call failed.
    Burrow(burrow::Error),
    /// A result was not what the example expected.
    Check(String),
}

impl From<burrow::Error> for Failure {
    fn from(e: burrow::Error) -> Self {
        Failure::Burrow(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Burrow(e) => write!(f, "[{}] {e}", e.code()),
            Failure::Check(msg) => f.write_str(msg),
        }
    }
}

impl Failure {
    /// What to try next, by error code (never by message text).
    fn hint(&self) -> Option<&'static str> {
        let Failure::Burrow(e) = self else {
            return None;
        };
        Some(match e.code() {
            ErrorCode::InvalidImage => {
                "pass an existing rootfs directory (bash scripts/make-demo-rootfs.sh demo/busybox), \
                 oci:DIR[:TAG], or a name under $BURROW_HOME/images/named/"
            }
            ErrorCode::StartFailed | ErrorCode::Timeout | ErrorCode::RuntimeUnavailable => {
                "the reason above names the step that failed. Common causes: not running as root, \
                 runc missing (apt-get install runc), the burrow binary not built (cargo build \
                 -p burrow-cli; or set BURROW_BIN), a wrong BURROW_AGENT_BIN (unset it: the \
                 burrow binaries carry the agent; docs/install.md). The failed sandbox is \
                 kept (status crashed) so its logs can be read: `burrow logs quickstart \
                 --supervisor`; rerunning the example replaces it."
            }
            ErrorCode::Store | ErrorCode::Io => {
                "check that $BURROW_HOME (default ~/.local/share/burrow) is writable and short"
            }
            _ => return None,
        })
    }
}
