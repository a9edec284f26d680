//! burrow's developer commands: `cargo xtask <command>` (`cargo xtask help`).
//!
//! Each command prepares what it needs (the static guest agent, the busybox
//! demo image, the guest kernel, the local Kubernetes cluster, ...), each
//! of them built once and kept under `target/`, then runs one part of what
//! CI runs. `scripts/test.sh` (CI) is these commands in a row. Every cargo
//! call goes through the same compiler wrappers (clippy-driver for the
//! workspace's crates, sccache where installed), so the commands share one
//! compilation instead of rebuilding each other's.

mod env;

use std::process::ExitCode;

use env::{cargo, run, script, Env};

const HELP: &str = "\
usage: cargo xtask <command> [args]

  fmt [--fix]          rustfmt over the workspace: check (or apply)
  lint                 clippy -D warnings over every crate and target, built
                       once for the tests too; the crate without its default
                       features; cargo deny where installed
  console              the web console (console/ -> console/dist, embedded
                       by burrow-server when it is compiled; every command
                       that builds does this first) and the browser tests'
                       packages (tests/console)
  unit                 the unit tests of every crate (no sandboxes)
  test ARGS...         `cargo test ARGS` with the end-to-end tests'
                       environment (agent, demo image; the guest kernel when
                       BURROW_DRIVER=vm), e.g. `cargo xtask test -p burrow-cli
                       --test logs follow`
  test --rootless ARGS...
                       test binaries (`--test NAME`, ...) as the unprivileged
                       user of scripts/rootless-user.sh; root
  e2e [DRIVER] [--rootless]
                       the shared lifecycle suites against a driver:
                       container (default), vm (QEMU microVMs) or runsc
                       (gVisor); root. --rootless: run them as an
                       unprivileged user (scripts/rootless-user.sh)
  all                  every test binary of the workspace (container
                       driver), with the Kubernetes test cluster, the MCP
                       image and helm; root
  kube [ARGS...]       the Kubernetes backend's tests on the test cluster;
                       with ARGS, `cargo test ARGS` with the cluster up, e.g.
                       `cargo xtask kube -p burrow-kube --test warm_pools`
  conformance [DRIVER] [--rootless]
                       the conformance kit on the local backend (as an
                       unprivileged user with --rootless)
  sdk LANG             an SDK from its installed package: python, node, go,
                       ruby (python also through a server on the cluster)
  fuzz [SECONDS]       every fuzz target from its seeds (default 20 s each)
  bench [NAME]         a benchmark of core/cli/benches (lifecycle, policies,
                       images, vm, serve, mcp, throughput, pools (BURROW_DRIVER
                       =vm for the vm's), console) or kube
                       (core/kube/benches)
  deny                 cargo deny: licenses, bans, sources
  ci                   everything CI runs (scripts/test.sh)

The lifecycle suites are core/cli/tests/{lifecycle,policies,processes,logs,
registry_sandbox,flow}.rs. Artifacts are built once per content under target/:
the agent (target/agent), the demo image (target/test-images), the guest
kernel (target/kernel), the cluster and runsc (target/k8s); the console under
console/dist.";

/// The suites every driver runs (the driver-independent lifecycle).
const SUITES: &[&str] = &[
    "lifecycle",
    "policies",
    "processes",
    "logs",
    "registry_sandbox",
    "flow",
    "ports",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = env::workspace_root();
    if let Err(e) = std::env::set_current_dir(&root) {
        eprintln!("xtask: cannot enter {}: {e}", root.display());
        return ExitCode::FAILURE;
    }
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<(), String> {
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    let mut env = Env::new();
    match (cmd, rest) {
        ("help" | "-h" | "--help", _) => {
            println!("{HELP}");
            Ok(())
        }
        ("fmt", []) => run(cargo(&env).args(["fmt", "--all", "--", "--check"])),
        ("fmt", [fix]) if fix == "--fix" => run(cargo(&env).args(["fmt", "--all"])),
        ("lint", []) => lint(&mut env),
        ("console", []) => run(script(&env, "scripts/build-console.sh")),
        ("unit", []) => {
            env.agent()?;
            run(cargo(&env).args(["test", "-q", "--workspace", "--lib", "--bins"]))
        }
        ("test", [flag, args @ ..]) if flag == "--rootless" && !args.is_empty() => {
            env.agent()?.image()?.mcp_image()?;
            rootless(&mut env)?;
            run(script(&env, "scripts/test-parallel.sh").args(args))
        }
        ("test", args) if !args.is_empty() => {
            env.agent()?.image()?;
            if std::env::var("BURROW_DRIVER").as_deref() == Ok("vm") {
                env.kernel()?;
            }
            run(cargo(&env).arg("test").arg("-q").args(args))
        }
        ("e2e", []) => e2e(&mut env, "container"),
        ("e2e", [flag]) if flag == "--rootless" => {
            rootless(&mut env)?;
            e2e(&mut env, "container")
        }
        ("e2e", [driver]) => e2e(&mut env, driver),
        ("e2e", [driver, flag]) if flag == "--rootless" => {
            rootless(&mut env)?;
            e2e(&mut env, driver)
        }
        ("all", []) => all(&mut env),
        ("kube", []) => kube(&mut env),
        ("kube", args) => {
            env.agent()?.image()?;
            env.with_cluster(|env| run(cargo(env).arg("test").arg("-q").args(args)))
        }
        ("conformance", []) => conformance(&mut env, "container"),
        ("conformance", [driver]) => conformance(&mut env, driver),
        ("conformance", [driver, flag]) if flag == "--rootless" => {
            rootless(&mut env)?;
            conformance(&mut env, driver)
        }
        ("sdk", [lang]) => sdk(&mut env, lang),
        ("fuzz", []) => fuzz(&env, "20"),
        ("fuzz", [secs]) => fuzz(&env, secs),
        ("bench", [name]) => bench(&mut env, name),
        ("deny", []) => deny(&env),
        ("ci", []) => run(script(&env, "scripts/test.sh")),
        _ => Err(format!(
            "unknown command or arguments: {}\n\n{HELP}",
            args.join(" ")
        )),
    }
}

/// Clippy over every target (the same compilation the tests use), then the
/// bare contract without the engine's and the client's dependencies.
fn lint(env: &mut Env) -> Result<(), String> {
    env.agent()?;
    // clippy-driver is the workspace crates' compiler (see Env::new), so
    // building every test, bench and example lints them all.
    run(cargo(env).args(["test", "-q", "--workspace", "--all-targets", "--no-run"]))?;
    env.sccache_stats();
    for features in ["", "remote", "local"] {
        run(cargo(env).args([
            "check",
            "-q",
            "-p",
            "burrow",
            "--lib",
            "--no-default-features",
            "--features",
            features,
        ]))?;
    }
    run(cargo(env).args([
        "check",
        "-q",
        "-p",
        "burrow-conformance",
        "--lib",
        "--no-default-features",
    ]))?;
    for krate in ["burrow", "burrow-conformance"] {
        let tree = env::output(cargo(env).args([
            "tree",
            "-q",
            "-p",
            krate,
            "--no-default-features",
            "-e",
            "normal",
            "--prefix",
            "none",
        ]))?;
        let heavy: Vec<&str> = tree
            .lines()
            .filter(|l| {
                let name = l.split(' ').next().unwrap_or_default();
                ["sqlx", "oci-client", "hyper", "tar", "flate2", "zstd"].contains(&name)
            })
            .collect();
        if !heavy.is_empty() {
            return Err(format!(
                "{krate} --no-default-features depends on the engine's or the client's crates: {heavy:?}"
            ));
        }
    }
    if env::has_program("cargo-deny") {
        deny(env)?;
    }
    Ok(())
}

fn driver_env(env: &mut Env, driver: &str) -> Result<(), String> {
    env.agent()?.image()?;
    match driver {
        "container" => {}
        "vm" => {
            env.kernel()?.set("BURROW_DRIVER", "vm");
        }
        "runsc" => {
            let bin = env.k8s_bin()?;
            env.set("BURROW_RUNTIME", "runsc")
                .set("BURROW_RUNSC", format!("{bin}/runsc"));
        }
        other => return Err(format!("unknown driver {other:?}: container, vm or runsc")),
    }
    Ok(())
}

/// The commands' tests run as the unprivileged user of
/// scripts/rootless-user.sh (see scripts/test-parallel.sh).
fn rootless(env: &mut Env) -> Result<(), String> {
    let user = env::output(script(env, "scripts/rootless-user.sh"))?;
    env.set("BURROW_TEST_USER", user.trim());
    Ok(())
}

fn e2e(env: &mut Env, driver: &str) -> Result<(), String> {
    driver_env(env, driver)?;
    let mut c = script(env, "scripts/test-parallel.sh");
    c.arg("--no-fail-fast");
    for s in SUITES {
        c.args(["--test", s]);
    }
    // Network policies and secrets: the sandbox's stack, which both
    // drivers use (runsc has no network yet).
    if driver != "runsc" {
        c.args(["--test", "network", "--test", "secrets"]);
    }
    // Filesystem snapshots and forks: the container driver's writable
    // layer; the vm driver's come through its agent (a running guest's, or
    // a layer boot's: run rootless too).
    if driver != "vm" {
        c.args(["--test", "snapshots", "--test", "fork"]);
    } else {
        c.args(["--test", "vm_snapshots"]);
    }
    // Warm pools: claims of either driver's running sandboxes.
    c.args(["--test", "pools"]);
    run(&mut c)
}

fn all(env: &mut Env) -> Result<(), String> {
    env.agent()?.image()?.mcp_image()?.helm()?.kernel()?;
    env.with_cluster(|env| run(script(env, "scripts/test-parallel.sh").arg("--no-fail-fast")))
}

fn kube(env: &mut Env) -> Result<(), String> {
    env.agent()?.image()?.mcp_image()?.helm()?;
    env.with_cluster(|env| {
        run(cargo(env).args(["test", "-q", "-p", "burrow-kube"]))?;
        run(cargo(env).args([
            "test",
            "-q",
            "--workspace",
            "--test",
            "kube",
            "--test",
            "kube_serverless",
            "--test",
            "helm",
        ]))
    })
}

fn conformance(env: &mut Env, driver: &str) -> Result<(), String> {
    driver_env(env, driver)?;
    if driver == "vm" {
        // TCG boots are slower than containers: the cases' bounds scaled.
        env.set("BURROW_CONFORMANCE_TIME_SCALE", "3");
    }
    // --workspace, not -p: the dependencies' features stay those of the
    // shared build, so nothing is compiled again. Through
    // scripts/test-parallel.sh, which runs it as BURROW_TEST_USER when set.
    run(script(env, "scripts/test-parallel.sh").args([
        "--test",
        "local_container",
        "--no-fail-fast",
    ]))
}

fn sdk(env: &mut Env, lang: &str) -> Result<(), String> {
    let script_path = match lang {
        "python" => "scripts/python-sdk.sh",
        "node" => "scripts/node-sdk.sh",
        "go" => "scripts/go-sdk.sh",
        "ruby" => "scripts/ruby-sdk.sh",
        other => return Err(format!("unknown SDK {other:?}: python, node, go or ruby")),
    };
    env.agent()?.image()?;
    if lang == "python" {
        // Its conformance list also runs through a server on the cluster.
        return env.with_cluster(|env| run(script(env, script_path)));
    }
    run(script(env, script_path))
}

fn fuzz(env: &Env, seconds: &str) -> Result<(), String> {
    if seconds.parse::<u32>().is_err() {
        return Err(format!("fuzz SECONDS: {seconds:?} is not a number"));
    }
    run(script(env, "scripts/fuzz.sh").env("BURROW_FUZZ_SECONDS", seconds))
}

fn bench(env: &mut Env, name: &str) -> Result<(), String> {
    env.agent()?.image()?;
    match name {
        "kube" => {
            env.mcp_image()?;
            env.with_cluster(|env| {
                run(cargo(env).args(["bench", "-p", "burrow-kube", "--bench", "kube"]))
            })
        }
        "vm" | "lifecycle" | "policies" | "images" | "serve" | "mcp" | "burrow_mcp"
        | "throughput" | "console" | "pools" => {
            if name == "vm" || name == "throughput" || name == "pools" {
                // The throughput bench's vm rows need the guest kernel.
                env.kernel()?;
            }
            if name == "mcp" || name == "burrow_mcp" {
                env.mcp_image()?;
            }
            run(cargo(env).args(["bench", "-p", "burrow-cli", "--bench", name]))
        }
        other => Err(format!(
            "unknown bench {other:?}: lifecycle, policies, images, vm, serve, mcp, burrow_mcp, throughput, pools, console, kube"
        )),
    }
}

fn deny(env: &Env) -> Result<(), String> {
    if !env::has_program("cargo-deny") {
        return Err("cargo-deny is not installed (cargo install --locked cargo-deny)".into());
    }
    // No advisories: their database is fetched from GitHub, which CI cannot
    // reach; licenses, bans and sources need nothing but the lock file.
    run(cargo(env).args([
        "deny",
        "--all-features",
        "check",
        "licenses",
        "bans",
        "sources",
    ]))
}
