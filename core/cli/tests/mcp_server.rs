#![allow(clippy::unwrap_used)]
//! `burrow mcp` driven by a real MCP client: the official Python SDK
//! (PyPI `mcp`, `tests/mcp/client.py`) spawns it over stdio on a test home
//! and creates a sandbox of the test image, refuses an image the policy
//! does not allow (a tool error with burrow's code), streams an exec's
//! output as progress notifications, cancels one (its process killed),
//! writes and reads a file, destroys the sandbox, and gets `not_found`
//! after; over streamable HTTP the same; with `BURROW_URL` the same through
//! a `burrow serve`; and the official TypeScript client over stdio.

use burrow_cli_testkit as common;

use common::mcp::{self, check};
use common::{agent_bin, burrow_bin, mcp_image, workspace_root, TestHome};
use serde_json::Value;

async fn client(th: &TestHome, transport: &str) -> Value {
    client_with(th, transport, &[]).await
}

async fn client_with(th: &TestHome, transport: &str, env: &[(&str, &str)]) -> Value {
    mcp::python_client(th.path(), transport, "busybox", env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_burrow_mcp_over_stdio() {
    let th = TestHome::new().await;
    th.name_image("busybox");
    check(&client(&th, "stdio").await);
}

/// The remote backend: `burrow mcp` with `BURROW_URL` acts through a
/// `burrow serve` (SQLite) on the test home, with the same results; the
/// sandbox it made is the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burrow_mcp_acts_through_a_server_with_burrow_url() {
    let th = TestHome::new().await;
    th.name_image("busybox");
    let sqlite = format!("sqlite://{}/serve.db", th.path().display());
    let env = common::serve::ServeEnv::new(th.path(), &sqlite);
    let token = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.create_token("mcp"))
            .await
            .unwrap()
    };
    let server = env.start("a");
    let remote = [
        ("BURROW_URL", server.url.as_str()),
        ("BURROW_TOKEN", &token),
    ];
    check(&client_with(&th, "stdio", &remote).await);
    // What it did went through the server: its audit log has the create.
    let r = common::serve::http(
        "GET",
        &format!("{}/v1/audit?limit=1000", server.url),
        Some(&token),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let created = r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["operation"] == "POST /v1/sandboxes" && e["status"] == 201);
    assert!(created, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_burrow_mcp_over_streamable_http() {
    use tokio::io::AsyncBufReadExt;
    let th = TestHome::new().await;
    th.name_image("busybox");
    let mut server = th.cli_async();
    let mut child = server
        .args(["mcp", "--listen", "127.0.0.1:0", "--allow-image", "busybox"])
        .args(["--max-sandboxes", "2"])
        .args(mcp::cpu_ceiling())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.strip_prefix("listening on ").unwrap().to_owned();
    check(&client(&th, &format!("http:{url}")).await);
    // Refused: a listen address other than loopback (no authentication).
    let out = th
        .cli()
        .args(["--json", "mcp", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "invalid_argument's exit code");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["error"]["code"], "invalid_argument");
}

/// The official TypeScript client (the SDK of examples/mcp, from the
/// example's image build) over stdio: tools, a refused image, exec
/// streamed as progress, a cancellation through an AbortSignal killing the
/// process, a binary file through base64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_drives_burrow_mcp_over_stdio() {
    let th = TestHome::new().await;
    th.name_image("busybox");
    let modules = tokio::task::spawn_blocking(sdk_modules).await.unwrap();
    // The client script beside the SDK's modules.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(modules, dir.path().join("node_modules")).unwrap();
    std::fs::copy(
        workspace_root().join("tests/mcp/client.mjs"),
        dir.path().join("client.mjs"),
    )
    .unwrap();
    let out = tokio::process::Command::new("node")
        .arg(dir.path().join("client.mjs"))
        .arg("stdio")
        .arg(burrow_bin())
        .arg("busybox")
        .args(["--allow-image", "busybox"])
        .env("BURROW_HOME", th.path())
        .env("BURROW_BIN", burrow_bin())
        .env("BURROW_AGENT_BIN", agent_bin())
        .env_remove("BURROW_URL")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["tools"].as_array().unwrap().iter().any(|t| t == "exec"));
    assert_eq!(r["refused"]["structured"]["code"], "invalid_config");
    assert_eq!(r["created"]["is_error"], false, "{}", r["created"]);
    assert_eq!(r["exec"]["structured"]["stdout"], "one\ntwo\n");
    let progress: String = r["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap_or(""))
        .collect();
    // `one` is streamed 0.2 s before `two` is printed, so before the
    // result; the last chunk's notification may reach the client after
    // the result (rmcp queues notifications apart from responses), and the
    // TypeScript client drops progress of a request it has answered.
    assert!(
        progress.starts_with("one\n") && "one\ntwo\n".starts_with(&progress),
        "progress {progress:?}"
    );
    assert!(r["cancelled"]["aborted"].is_string(), "{}", r["cancelled"]);
    let ps = r["after_cancel_ps"].as_str().unwrap();
    assert!(
        !ps.contains("sleep 30"),
        "a cancelled exec's process lives on:\n{ps}"
    );
    assert_eq!(r["read_binary"]["structured"]["base64"], true);
    assert_eq!(r["read_binary"]["structured"]["content"], "AAEC/w==");
    assert_eq!(r["destroy"]["is_error"], false, "{}", r["destroy"]);
}

/// The TypeScript SDK's modules of the MCP example's image: one built
/// already (the newest; what a run as an unprivileged user over root's
/// build can use without the build's lock), else built now.
fn sdk_modules() -> std::path::PathBuf {
    let built = std::fs::read_dir(workspace_root().join("target/mcp"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("rootfs/app/node_modules"))
        .filter(|m| m.join("@modelcontextprotocol/sdk").exists())
        .max_by_key(|m| m.metadata().and_then(|md| md.modified()).ok());
    built.unwrap_or_else(|| mcp_image().join("rootfs/app/node_modules"))
}
