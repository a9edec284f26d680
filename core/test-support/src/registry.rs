//! A real OCI registry for tests: Debian's `docker-registry` (distribution
//! 2.8) on 127.0.0.1 with a free port, a temporary config and storage
//! directory, optional htpasswd basic auth, and its log (application and
//! access log) captured to a file. Images are pushed with `skopeo copy` from
//! OCI layouts. The registry process is killed when the value is dropped.
//!
//! Depends on std and tempfile only.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tools the registry tests need (installed by scripts/install-deps.sh).
pub const TOOLS: &[&str] = &["docker-registry", "skopeo", "htpasswd"];

/// Panics with a clear message if a tool is missing.
pub fn require_tools() {
    for tool in TOOLS {
        let found = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
        assert!(
            found,
            "{tool} is not installed: run scripts/install-deps.sh (packages docker-registry, skopeo, apache2-utils)"
        );
    }
}

/// A running registry.
#[derive(Debug)]
pub struct TestRegistry {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    log: PathBuf,
    auth: Option<(String, String)>,
}

impl TestRegistry {
    /// An anonymous registry.
    pub fn start() -> TestRegistry {
        TestRegistry::launch(None)
    }

    /// A registry requiring basic auth (htpasswd) as `user`/`password`.
    pub fn start_with_auth(user: &str, password: &str) -> TestRegistry {
        TestRegistry::launch(Some((user.to_owned(), password.to_owned())))
    }

    fn launch(auth: Option<(String, String)>) -> TestRegistry {
        require_tools();
        let dir = tempfile::Builder::new()
            .prefix("registry")
            .tempdir()
            .expect("registry temp dir");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).expect("registry storage");
        let auth_section = match &auth {
            Some((user, password)) => {
                let htpasswd = dir.path().join("htpasswd");
                let out = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("running htpasswd");
                assert!(out.status.success(), "htpasswd failed");
                std::fs::write(&htpasswd, &out.stdout).expect("writing htpasswd");
                format!(
                    "auth:\n  htpasswd:\n    realm: burrow-test\n    path: {}\n",
                    htpasswd.display()
                )
            }
            None => String::new(),
        };
        let log = dir.path().join("registry.log");
        for _attempt in 0..5 {
            let port = free_port();
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: info\n  formatter: text\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: burrow-test-secret\n{auth_section}",
                    storage.display()
                ),
            )
            .expect("writing the registry config");
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("registry log");
            let err = out.try_clone().expect("registry log");
            let mut child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("starting docker-registry");
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return TestRegistry {
                        child,
                        dir,
                        port,
                        log,
                        auth,
                    };
                }
                if child.try_wait().expect("registry status").is_some() || Instant::now() > deadline
                {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!(
            "the registry did not start; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT/<name>` (name may carry a tag or digest).
    pub fn reference(&self, name: &str) -> String {
        format!("{}/{name}", self.host())
    }

    /// The registry's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The registry's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Access-log lines of requests made with a user agent containing
    /// `agent`.
    pub fn requests_by(&self, agent: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| {
                l.starts_with("127.0.0.1 - ")
                    && l.contains("\" \"")
                    && l.contains(&format!("\"{agent}"))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Successful `GET /v2/.../blobs/<digest>` requests made by `agent`,
    /// counted per digest.
    pub fn blob_gets(&self, agent: &str) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for line in self.requests_by(agent) {
            let Some(req) = line.split('"').nth(1) else {
                continue;
            };
            let mut parts = req.split(' ');
            let (Some("GET"), Some(path)) = (parts.next(), parts.next()) else {
                continue;
            };
            let status_ok = line
                .split('"')
                .nth(2)
                .and_then(|s| s.split_whitespace().next())
                .is_some_and(|s| s == "200");
            if let (Some((_, digest)), true) = (path.split_once("/blobs/"), status_ok) {
                *out.entry(digest.to_owned()).or_insert(0) += 1;
            }
        }
        out
    }

    /// Pushes `oci:LAYOUT:TAG` (all platforms of an index) to
    /// `127.0.0.1:PORT/<dest>` with skopeo.
    pub fn push(&self, layout: &Path, tag: &str, dest: &str) {
        self.push_with(layout, tag, dest, &[]);
    }

    /// Like [`TestRegistry::push`] with extra `skopeo copy` arguments (e.g.
    /// `--format=v2s2` for Docker schema2 manifests and manifest lists).
    /// Note that skopeo compresses uncompressed layers when pushing.
    pub fn push_with(&self, layout: &Path, tag: &str, dest: &str, extra: &[&str]) {
        let mut cmd = Command::new("skopeo");
        cmd.args(["copy", "--quiet", "--all", "--dest-tls-verify=false"]);
        cmd.args(extra);
        if let Some((user, password)) = &self.auth {
            cmd.arg(format!("--dest-creds={user}:{password}"));
        }
        let out = cmd
            .arg(format!("oci:{}:{tag}", layout.display()))
            .arg(format!("docker://{}", self.reference(dest)))
            .stdin(Stdio::null())
            .output()
            .expect("running skopeo");
        assert!(
            out.status.success(),
            "skopeo copy to {dest} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "----- registry log ({}) -----\n{}",
                self.dir.path().display(),
                self.log()
            );
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("local addr").port()
}
