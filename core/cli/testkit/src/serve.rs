//! `burrow serve` processes for tests, and a small blocking HTTP/1.1 client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{agent_bin, burrow_bin};

pub use burrow_test_support::pg;

/// A replica `r1` for tests of tenants and roles: a fresh home with the test
/// image named `busybox` (a tenant may not name host directories), its own
/// database `database`, and the tenants and tokens made before it starts.
pub struct TenantServer {
    // Field order is drop order: the replica stops before its home goes.
    pub server: Server,
    pub env: ServeEnv,
    /// The secrets of the tokens asked for, in their order.
    pub tokens: Vec<String>,
    _home: crate::TestHome,
}

impl TenantServer {
    /// `tokens` are (name, tenant, role).
    pub fn start(database: &str, tenants: &[&str], tokens: &[(&str, &str, &str)]) -> TenantServer {
        TenantServer::start_with(database, tenants, tokens, &[])
    }

    /// [`TenantServer::start`] with extra settings (`BURROW_SERVE_<key>`).
    pub fn start_with(
        database: &str,
        tenants: &[&str],
        tokens: &[(&str, &str, &str)],
        vars: &[(&str, &str)],
    ) -> TenantServer {
        let home = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(crate::TestHome::new());
        home.name_image("busybox");
        let mut env = ServeEnv::new(home.path(), database);
        for (k, v) in vars {
            env = env.set(k, v);
        }
        for tenant in tenants {
            env.create_tenant(tenant);
        }
        let tokens = tokens
            .iter()
            .map(|(name, tenant, role)| env.create_token_in(name, tenant, role))
            .collect();
        TenantServer {
            server: env.start("r1"),
            env,
            tokens,
            _home: home,
        }
    }

    /// `method path` with `token` and a JSON `body`.
    pub fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Resp {
        let body = body.map(|b| b.to_string());
        let url = format!("{}{path}", self.server.url);
        http(method, &url, Some(token), body.as_deref())
    }
}

/// A running `burrow serve` replica.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` (`https://` with TLS).
    pub url: String,
    /// Its replica id.
    pub replica: String,
    /// `http://127.0.0.1:PORT` of its gateway listener, when it has one
    /// (`BURROW_SERVE_GATEWAY_LISTEN`).
    pub gateway: Option<String>,
    stderr: PathBuf,
}

/// Settings of a replica (environment variables of `burrow serve`, and
/// flags of it).
#[derive(Clone)]
pub struct ServeEnv {
    pub home: PathBuf,
    pub database: String,
    pub vars: Vec<(String, String)>,
    /// Flags after `burrow serve` (`--tls-cert FILE`, ...).
    pub args: Vec<String>,
}

impl ServeEnv {
    pub fn new(home: &Path, database: &str) -> ServeEnv {
        ServeEnv {
            home: home.to_path_buf(),
            database: database.to_owned(),
            vars: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds flags of `burrow serve` (before any subcommand).
    pub fn args(mut self, args: &[&str]) -> ServeEnv {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Adds `BURROW_SERVE_<key>=value`.
    pub fn set(mut self, key: &str, value: &str) -> ServeEnv {
        self.vars
            .push((format!("BURROW_SERVE_{key}"), value.to_owned()));
        self
    }

    /// A `burrow serve ...` command with this environment.
    pub fn command(&self) -> Command {
        let mut c = Command::new(burrow_bin());
        c.arg("serve")
            .args(&self.args)
            .env("BURROW_HOME", &self.home)
            .env("BURROW_BIN", burrow_bin())
            .env("BURROW_AGENT_BIN", agent_bin())
            .env("BURROW_SERVE_DATABASE", &self.database)
            .env_remove("BURROW_URL")
            .stdin(Stdio::null());
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    /// Creates an API token named `name` (the default tenant's admin);
    /// returns its secret.
    pub fn create_token(&self, name: &str) -> String {
        self.create_token_in(name, "default", "admin")
    }

    /// Creates an API token named `name` of `tenant` with `role`; returns
    /// its secret.
    pub fn create_token_in(&self, name: &str, tenant: &str, role: &str) -> String {
        let out = self.admin(&["token", "create", name, "--tenant", tenant, "--role", role]);
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Creates the tenant `name`.
    pub fn create_tenant(&self, name: &str) {
        self.admin(&["tenant", "create", name]);
    }

    /// Runs `burrow serve ARGS`, which must succeed.
    pub fn admin(&self, args: &[&str]) -> std::process::Output {
        let out = self
            .command()
            .args(args)
            .output()
            .expect("running burrow serve");
        assert!(
            out.status.success(),
            "burrow serve {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Starts a replica listening on a free loopback port.
    pub fn start(&self, replica: &str) -> Server {
        let stderr = self.home.join(format!("serve-{replica}.log"));
        let mut cmd = self.command();
        if !self.vars.iter().any(|(k, _)| k == "BURROW_SERVE_LISTEN") {
            cmd.env("BURROW_SERVE_LISTEN", "127.0.0.1:0");
        }
        let mut child = cmd
            .env("BURROW_SERVE_REPLICA_ID", replica)
            .env("BURROW_LOG", "warn,burrow_server=debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawning burrow serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "burrow serve did not start: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            }
        };
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        // The gateway's listeners are announced after the API's.
        let gateway = self
            .vars
            .iter()
            .any(|(k, _)| k == "BURROW_SERVE_GATEWAY_LISTEN")
            .then(|| {
                let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
                line.strip_prefix("gateway listening on ")
                    .unwrap_or_else(|| panic!("unexpected line {line:?}"))
                    .to_owned()
            });
        Server {
            child: Some(child),
            url,
            gateway,
            replica: replica.to_owned(),
            stderr,
        }
    }
}

impl Server {
    /// SIGKILLs the replica (no cleanup of any kind).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The replica's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first: a graceful shutdown.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("----- burrow serve {} -----\n{}", self.replica, self.log());
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `error.code` of an error answer.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    match rest.find('/') {
        Some(i) => (rest[..i].to_owned(), rest[i..].to_owned()),
        None => (rest.to_owned(), String::new()),
    }
}

/// The JSON of a `2xx` answer (`null` for an empty body); any other answer
/// fails the test with `what`, the status and the body.
pub fn ok(r: Resp, what: &str) -> serde_json::Value {
    assert!(
        (200..300).contains(&r.status),
        "{what}: {} {}",
        r.status,
        r.text()
    );
    if r.body.is_empty() {
        serde_json::Value::Null
    } else {
        r.json()
    }
}

/// A request to the listener at `addr` (`127.0.0.1:PORT`) that names
/// `host` (a gateway origin's host name), with `headers`; the answer.
pub fn request_to_host(
    addr: &str,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Content-Length: 0\r\n\r\n");
    s.write_all(req.as_bytes()).expect("send");
    read_response(s)
}

/// Opens a connection and sends a request; returns the stream to read from.
pub fn send(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> TcpStream {
    send_with(method, url, token, &[], body)
}

/// [`send`] with extra request headers.
pub fn send_with(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> TcpStream {
    let (authority, prefix) = split_url(url);
    let mut s = TcpStream::connect(&authority).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let path = if prefix.is_empty() {
        "/".into()
    } else {
        prefix
    };
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || method != "GET" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    s
}

/// Reads an answer's status line and headers (names lowercased).
pub fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).expect("header");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    (status, headers)
}

/// Reads an answer's body to its end (`Connection: close`), decoding a
/// chunked one, handing each piece to `take` as it arrives.
pub fn read_body(
    r: &mut BufReader<TcpStream>,
    headers: &[(String, String)],
    mut take: impl FnMut(&[u8]),
) {
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        loop {
            let mut size = String::new();
            if r.read_line(&mut size).unwrap_or(0) == 0 {
                break;
            }
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            if r.read_exact(&mut chunk).is_err() {
                break;
            }
            take(&chunk[..n]);
        }
    } else {
        let mut buf = [0u8; 16384];
        while let Ok(n @ 1..) = r.read(&mut buf) {
            take(&buf[..n]);
        }
    }
}

/// Reads a whole answer (`Connection: close`), decoding chunked bodies.
pub fn read_response(s: TcpStream) -> Resp {
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    read_body(&mut r, &headers, |b| body.extend_from_slice(b));
    Resp {
        status,
        headers,
        body,
    }
}

/// One request, one answer.
pub fn http(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> Resp {
    read_response(send(method, url, token, body))
}

/// A gateway call that honours `503` + `Retry-After` until `deadline`;
/// returns the final answer and how many 503s it saw.
pub fn call_retrying(url: &str, token: &str, deadline: Duration) -> (Resp, usize) {
    let end = Instant::now() + deadline;
    let mut busy = 0;
    loop {
        let r = http("GET", url, Some(token), None);
        if r.status != 503 || Instant::now() > end {
            return (r, busy);
        }
        busy += 1;
        let after: u64 = r
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("a 503 carries Retry-After");
        std::thread::sleep(Duration::from_secs(after).min(Duration::from_millis(500)));
    }
}

/// The argv of a target command starting busybox httpd on 8080 after
/// `delay` seconds, serving `/index.html` ("ok") and a CGI
/// `/cgi-bin/slow?N` that prints a line per second for N seconds.
pub fn web_command(delay: u32) -> Vec<String> {
    let script = format!(
        "sleep {delay}; mkdir -p /www/cgi-bin; echo ok > /www/index.html; \
         printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\nn=${{QUERY_STRING:-3}}\\nwhile [ $n -gt 0 ]; do echo tick $n; n=$((n-1)); sleep 1; done\\n' > /www/cgi-bin/slow; \
         chmod +x /www/cgi-bin/slow; httpd -p 8080 -h /www"
    );
    vec!["sh".into(), "-c".into(), script]
}

/// The value of `sample` (a metric name with its labels) in the `/metrics`
/// of the replica at `url`, if it is there.
pub fn metric_sample(url: &str, token: &str, sample: &str) -> Option<u64> {
    let r = http("GET", &format!("{url}/metrics"), Some(token), None);
    assert_eq!(r.status, 200);
    r.text().lines().find_map(|l| {
        l.strip_prefix(sample)
            .map(|v| v.trim().parse::<u64>().unwrap())
    })
}
