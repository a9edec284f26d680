//! The environment the commands run in: the shared compiler wrappers, and
//! the artifacts the tests need, each prepared once (the scripts that build
//! them keep them under `target/` and print their paths).

use std::borrow::BorrowMut;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The workspace root (xtask lives in `xtask/`).
pub fn workspace_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.parent().map_or(dir.clone(), PathBuf::from)
}

/// Whether `program` is on PATH.
pub fn has_program(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Variables set for every command this run starts (on top of ours).
#[derive(Debug, Default)]
pub struct Env {
    vars: Vec<(String, String)>,
    agent: bool,
    image: bool,
    kernel: bool,
    mcp: bool,
    helm: bool,
}

impl Env {
    /// The compiler wrappers every cargo call shares (unless the caller set
    /// them): clippy-driver for the workspace's crates, so one build both
    /// lints and compiles them for the tests; sccache for everything where
    /// it is installed, without incremental compilation (its artifacts
    /// cannot be cached).
    pub fn new() -> Env {
        let mut env = Env::default();
        if std::env::var_os("RUSTC_WORKSPACE_WRAPPER").is_none() {
            if let Ok(driver) = output(Command::new("rustup").args(["which", "clippy-driver"])) {
                env.set("RUSTC_WORKSPACE_WRAPPER", driver.trim());
                env.set(
                    "CLIPPY_ARGS",
                    "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
                );
            }
        }
        if std::env::var_os("RUSTC_WRAPPER").is_none() && has_program("sccache") {
            env.set("RUSTC_WRAPPER", "sccache");
            env.set("CARGO_INCREMENTAL", "0");
        }
        env
    }

    /// Sets `key` for the commands started from now on.
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Env {
        self.vars.retain(|(k, _)| k != key);
        self.vars.push((key.to_owned(), value.into()));
        self
    }

    fn apply(&self, c: &mut Command) {
        for (k, v) in &self.vars {
            c.env(k, v);
        }
    }

    /// What the workspace's builds embed, built once: the static guest
    /// agent (`burrow` embeds this same file) and the web console
    /// (`burrow-server` embeds console/dist), with the browser tests'
    /// packages.
    pub fn agent(&mut self) -> Result<&mut Env, String> {
        if !self.agent {
            output(script(self, "scripts/build-console.sh"))?;
            let path = output(script(self, "scripts/build-agent.sh"))?;
            let path = path.trim().to_owned();
            self.set("BURROW_AGENT_BIN", path.clone())
                .set("BURROW_EMBED_AGENT", path);
            self.agent = true;
        }
        Ok(self)
    }

    /// The busybox demo image of the tests (target/test-images/busybox).
    pub fn image(&mut self) -> Result<&mut Env, String> {
        if !self.image {
            let dir = "target/test-images/busybox";
            if !workspace_root().join(dir).join(".complete").exists() {
                run(script(self, "scripts/make-demo-rootfs.sh").arg(dir))?;
                std::fs::write(workspace_root().join(dir).join(".complete"), b"")
                    .map_err(|e| format!("marking {dir} complete: {e}"))?;
            }
            self.image = true;
        }
        Ok(self)
    }

    /// The vm driver's guest kernel (BURROW_VM_KERNEL).
    pub fn kernel(&mut self) -> Result<&mut Env, String> {
        if !self.kernel {
            let path = last_line(&output(script(self, "scripts/build-kernel.sh"))?);
            self.set("BURROW_VM_KERNEL", path);
            self.kernel = true;
        }
        Ok(self)
    }

    /// The MCP example's image (Node.js and the MCP SDK on busybox).
    pub fn mcp_image(&mut self) -> Result<&mut Env, String> {
        if !self.mcp {
            let dir = last_line(&output(script(self, "examples/mcp/build-image.sh"))?);
            // The tests take it from here (an unprivileged user's test
            // could not take the build's lock).
            self.set("BURROW_MCP_IMAGE", dir);
            self.mcp = true;
        }
        Ok(self)
    }

    /// helm, from the Go module proxy (BURROW_HELM).
    pub fn helm(&mut self) -> Result<&mut Env, String> {
        if !self.helm {
            let path = last_line(&output(script(self, "scripts/build-helm.sh"))?);
            self.set("BURROW_HELM", path);
            self.helm = true;
        }
        Ok(self)
    }

    /// The directory of the cluster's binaries (runsc among them), built
    /// once per version.
    pub fn k8s_bin(&mut self) -> Result<String, String> {
        let out = last_line(&output(script(self, "scripts/k8s/build.sh"))?);
        Ok(format!("{out}/bin"))
    }

    /// Runs `f` with the Kubernetes test cluster up (its variables set and
    /// the agent's image imported), and stops it afterwards whatever `f`
    /// returned (stop restores the host).
    pub fn with_cluster(
        &mut self,
        f: impl FnOnce(&mut Env) -> Result<(), String>,
    ) -> Result<(), String> {
        self.agent()?;
        self.k8s_bin()?;
        let started = output(script(self, "scripts/k8s/cluster.sh").arg("start"));
        let result = started.and_then(|exports| {
            for line in exports.lines() {
                if let Some((k, v)) = line
                    .strip_prefix("export ")
                    .and_then(|kv| kv.split_once('='))
                {
                    self.set(k, v);
                }
            }
            let kubeconfig = self
                .get("KUBECONFIG")
                .ok_or("the cluster printed no KUBECONFIG")?;
            self.set("BURROW_TEST_KUBECONFIG", kubeconfig);
            self.import_agent_image()?;
            f(self)
        });
        let stopped = run(script(self, "scripts/k8s/cluster.sh").arg("stop"));
        result.and(stopped)
    }

    fn get(&self, key: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// The image of the pods' init containers: the static agent alone.
    fn import_agent_image(&mut self) -> Result<(), String> {
        let agent = self.get("BURROW_AGENT_BIN").ok_or("no agent")?;
        let bin = self.get("BURROW_K8S_BIN").ok_or("no BURROW_K8S_BIN")?;
        let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml"))
            .map_err(|e| format!("reading Cargo.toml: {e}"))?;
        let version = manifest
            .lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
            .ok_or("no version in Cargo.toml")?;
        let root = std::env::temp_dir().join(format!("burrow-agent-image.{}", std::process::id()));
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        std::fs::copy(&agent, root.join("burrow-agent")).map_err(|e| e.to_string())?;
        let made = run(Command::new("python3").args([
            "scripts/k8s/oci-image.py",
            &root.display().to_string(),
            &format!("burrow.dev/agent:{version}"),
            "target/k8s/agent.tar",
            r#"{"Entrypoint":["/burrow-agent"],"WorkingDir":"/"}"#,
        ]));
        let _ = std::fs::remove_dir_all(&root);
        made?;
        let mut ctr = Command::new(format!("{bin}/ctr"));
        self.apply(&mut ctr);
        output(ctr.args(["images", "import", "target/k8s/agent.tar"])).map(|_| ())
    }

    /// sccache's hits and misses of this run's compilation, when it is used.
    pub fn sccache_stats(&self) {
        if self.get("RUSTC_WRAPPER").as_deref() == Some("sccache") {
            if let Ok(stats) = output(Command::new("sccache").arg("--show-stats")) {
                for l in stats.lines().filter(|l| {
                    ["Compile requests ", "Cache hits ", "Cache misses "]
                        .iter()
                        .any(|p| l.starts_with(p))
                }) {
                    println!("{l}");
                }
            }
        }
    }
}

/// `cargo` with the environment.
pub fn cargo(env: &Env) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    env.apply(&mut c);
    c
}

/// `bash SCRIPT` with the environment.
pub fn script(env: &Env, path: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg(path);
    env.apply(&mut c);
    c
}

/// Runs `c` with our stdio; an error names it unless it succeeded.
pub fn run(mut c: impl BorrowMut<Command>) -> Result<(), String> {
    let c = c.borrow_mut();
    let status = c.status().map_err(|e| format!("{}: {e}", shown(c)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} failed ({status})", shown(c)))
    }
}

/// Runs `c` and returns its stdout (its stderr goes to ours: progress).
pub fn output(mut c: impl BorrowMut<Command>) -> Result<String, String> {
    let c = c.borrow_mut();
    let out = c
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", shown(c)))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", shown(c), out.status));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{}: {e}", shown(c)))
}

fn last_line(text: &str) -> String {
    text.lines().last().unwrap_or_default().trim().to_owned()
}

fn shown(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}
