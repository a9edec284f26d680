//! `burrow mcp` acts only on its own sandboxes (issue 56, item 6). The
//! reviewed build guarded `create` alone: `list` showed every sandbox of
//! the home (other tenants' scoped ones included), `exec` and every other
//! tool ran in any of them, an empty `--allow-image` let an agent use the
//! burrow home itself as its image (and read `secrets.key`), and
//! `--max-memory-mb` was bypassed by leaving memory unset.
//!
//! Each attack is made by a real MCP client (the official Python SDK, as
//! `tests/mcp/client.py` is) against `burrow mcp` on a test home where the
//! library made the victims: another tenant's sandbox (`t1/x`, even
//! carrying the server's label) and a plain one without the label. Each is
//! checked afterwards, from the library, to be exactly as it was.

use burrow_cli_testkit as common;

use burrow::{Backend as _, ErrorCode, SandboxHandle, Status};
use common::{busybox_rootfs, mcp_client_python, TestHome};
use serde_json::{json, Value};

/// Drives `burrow mcp` (`stdio`, or `http:URL` of one listening) through
/// the steps read as JSON from stdin; prints what each saw: a tool call's
/// `{is_error, structured}`, the resources' URIs, a resource's text or its
/// JSON-RPC error code.
const DRIVER: &str = r#"
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

async def main():
    transport, burrow, *server_args = sys.argv[1:]
    steps = json.load(sys.stdin)
    if transport == "stdio":
        env = {k: v for k, v in os.environ.items() if k.startswith("BURROW_")}
        connect = stdio_client(StdioServerParameters(command=burrow, args=["mcp", *server_args], env=env))
    else:
        connect = streamable_http_client(transport.removeprefix("http:"))
    out = []
    async with connect as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            for step in steps:
                if "tool" in step:
                    r = await session.call_tool(step["tool"], step.get("args", {}))
                    out.append({"is_error": bool(r.is_error), "structured": r.structured_content})
                elif "list_resources" in step:
                    listed = await session.list_resources()
                    out.append(sorted(str(r.uri) for r in listed.resources))
                else:
                    try:
                        r = await session.read_resource(step["read_resource"])
                        out.append({"text": r.contents[0].text})
                    except Exception as e:
                        out.append({"error": getattr(getattr(e, "error", None), "code", repr(e))})
    print(json.dumps(out))

asyncio.run(main())
"#;

/// JSON-RPC's code for a resource that is not there (MCP's
/// `resource_not_found`).
const RESOURCE_NOT_FOUND: i64 = -32002;

/// Runs [`DRIVER`] with `steps` on `transport` against `burrow mcp ARGS` of
/// `th`: one answer per step.
async fn drive(th: &TestHome, transport: &str, args: &[&str], steps: &[Value]) -> Vec<Value> {
    use tokio::io::AsyncWriteExt;
    let python = tokio::task::spawn_blocking(mcp_client_python)
        .await
        .unwrap();
    let script = tempfile::Builder::new()
        .prefix("mcp-scope")
        .suffix(".py")
        .tempfile()
        .unwrap();
    std::fs::write(script.path(), DRIVER).unwrap();
    let mut child = tokio::process::Command::new(python)
        .arg(script.path())
        .arg(transport)
        .arg(common::burrow_bin())
        .args(args)
        .env("BURROW_HOME", th.path())
        .env("BURROW_BIN", common::burrow_bin())
        .env("BURROW_AGENT_BIN", common::agent_bin())
        .env_remove("BURROW_URL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(&serde_json::to_vec(steps).unwrap())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "the MCP client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answers.len(), steps.len(), "{answers:?}");
    answers
}

fn tool(name: &str, args: Value) -> Value {
    json!({"tool": name, "args": args})
}

/// The code of a tool call's refusal (`None`: it was answered).
fn code(answer: &Value) -> Option<&str> {
    (answer["is_error"] == true).then(|| answer["structured"]["code"].as_str().unwrap_or("?"))
}

/// The names in a `list` answer.
fn listed(answer: &Value) -> Vec<String> {
    let all = answer["structured"]["sandboxes"].as_array().unwrap();
    all.iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A sandbox the library made in `th`, and what it was like.
struct Victim {
    name: &'static str,
    id: burrow::SandboxId,
    generation: u64,
}

/// Makes `name` (labelled as the MCP server's own when `labelled`) running
/// in `th`, with a file `/tmp/mark` that an attack would change.
async fn victim(th: &TestHome, name: &'static str, labelled: bool) -> Victim {
    let mut b = th.builder(name).detached(true);
    if labelled {
        b = b.label(burrow_mcp::LABEL, "true");
    }
    let sb = b.create().await.unwrap();
    common::sh_ok(&sb, "echo untouched > /tmp/mark").await;
    let info = sb.handle().info().await.unwrap();
    Victim {
        name,
        id: info.id,
        generation: info.generation,
    }
}

impl Victim {
    /// Still there, the same sandbox, running the same run, its files as
    /// they were.
    async fn untouched(&self, th: &TestHome) {
        let h = SandboxHandle::get_in(th.dyn_backend(), self.name)
            .await
            .unwrap_or_else(|e| panic!("{} is gone: {e}", self.name));
        let info = h.info().await.unwrap();
        assert_eq!(
            (&info.id, info.status, info.generation),
            (&self.id, Status::Running, self.generation),
            "{} was acted on",
            self.name
        );
        let sb = h.connect().await.unwrap();
        let files = common::sh_ok(
            &sb,
            "cat /tmp/mark; ls /tmp/pwned /tmp/written 2>/dev/null; true",
        )
        .await;
        assert_eq!(files, "untouched\n", "{}'s files were changed", self.name);
    }
}

/// Every tool that names a sandbox, on `name`.
fn every_tool_on(name: &str) -> Vec<Value> {
    let n = json!(name);
    vec![
        tool(
            "exec",
            json!({"name": n, "argv": ["sh", "-c", "echo x > /tmp/pwned"]}),
        ),
        tool(
            "spawn",
            json!({"name": n, "argv": ["sh", "-c", "echo x > /tmp/pwned"]}),
        ),
        tool("fs_read", json!({"name": n, "path": "/tmp/mark"})),
        tool(
            "fs_write",
            json!({"name": n, "path": "/tmp/written", "content": "x"}),
        ),
        tool("fs_list", json!({"name": n, "path": "/tmp"})),
        tool("fs_stat", json!({"name": n, "path": "/tmp/mark"})),
        tool("fs_remove", json!({"name": n, "path": "/tmp/mark"})),
        tool("logs", json!({"name": n})),
        tool("metrics", json!({"name": n})),
        tool("start", json!({"name": n})),
        tool("stop", json!({"name": n})),
        tool("destroy", json!({"name": n})),
    ]
}

/// The steps of the scope attack and what each must answer: `list` and
/// the resources show only the server's own sandbox `mine`; every tool on
/// the unlabelled `plain`, or on `x` (the base of another tenant's
/// `t1/x`), is `not_found`; every tool naming `t1/x` itself is
/// `invalid_name`; converging on `plain` is the create's `already_exists`
/// and creating into another tenant's scope is `invalid_name`.
fn scope_attack() -> (Vec<Value>, Vec<Option<&'static str>>) {
    let mut steps = vec![
        tool("create", json!({"name": "mine", "image": "busybox"})),
        tool("list", json!({})),
        json!({"list_resources": true}),
        json!({"read_resource": "burrow://sandbox/plain/info"}),
        json!({"read_resource": "burrow://sandbox/plain/logs"}),
        json!({"read_resource": "burrow://sandbox/t1/x/info"}),
        tool(
            "connect_or_create",
            json!({"name": "plain", "image": "busybox"}),
        ),
        tool("create", json!({"name": "t1/y", "image": "busybox"})),
        tool(
            "connect_or_create",
            json!({"name": "t1/x", "image": "busybox"}),
        ),
    ];
    let mut want = vec![
        None,
        None,
        None,
        None,
        None,
        None,
        Some("already_exists"),
        Some("invalid_name"),
        Some("invalid_name"),
    ];
    for (name, refusal) in [
        ("plain", "not_found"),
        ("x", "not_found"),
        ("t1/x", "invalid_name"),
    ] {
        let all = every_tool_on(name);
        want.extend(std::iter::repeat_n(Some(refusal), all.len()));
        steps.extend(all);
    }
    (steps, want)
}

/// Checks the answers of [`scope_attack`], then that the victims are
/// untouched and nothing was made in another tenant's scope.
async fn check_scope_attack(th: &TestHome, victims: &[Victim], answers: &[Value]) {
    let (steps, want) = scope_attack();
    for ((step, answer), want) in steps.iter().zip(answers).zip(&want) {
        if step.get("tool").is_some() {
            assert_eq!(code(answer), *want, "{step} answered {answer}");
        }
    }
    assert_eq!(listed(&answers[1]), ["mine"], "{}", answers[1]);
    assert_eq!(
        answers[2],
        json!(["burrow://sandbox/mine/info", "burrow://sandbox/mine/logs"])
    );
    for read in &answers[3..6] {
        assert_eq!(read["error"], RESOURCE_NOT_FOUND, "{read}");
    }
    for v in victims {
        v.untouched(th).await;
    }
    let err = SandboxHandle::get_in(th.dyn_backend(), "t1/y")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
}

/// The victims of the scope attack: another tenant's sandbox carrying the
/// server's label (a tenant may set any label), and an unlabelled plain
/// one.
async fn victims(th: &TestHome) -> Vec<Victim> {
    vec![
        victim(th, "t1/x", true).await,
        victim(th, "plain", false).await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sandboxes_of_the_home_are_invisible_and_untouchable_over_stdio() {
    let th = TestHome::new().await;
    th.name_image("busybox");
    let victims = victims(&th).await;
    let answers = drive(&th, "stdio", &[], &scope_attack().0).await;
    check_scope_attack(&th, &victims, &answers).await;
}

/// The same policy on the other transport: `burrow mcp --listen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sandboxes_of_the_home_are_invisible_and_untouchable_over_http() {
    use tokio::io::AsyncBufReadExt;
    let th = TestHome::new().await;
    th.name_image("busybox");
    let victims = victims(&th).await;
    let mut server = th
        .cli_async()
        .args(["mcp", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.strip_prefix("listening on ").unwrap().to_owned();
    let answers = drive(&th, &format!("http:{url}"), &[], &scope_attack().0).await;
    check_scope_attack(&th, &victims, &answers).await;
}

/// The burrow home (which holds `secrets.key` and every sandbox's files),
/// any directory under or above it, and any other host directory are no
/// images under an empty `--allow-image`; with `--allow-host-images` a
/// host directory is, the home still never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_and_host_directories_are_no_images_unless_allowed() {
    let th = TestHome::new().await;
    let home = th.path().display().to_string();
    let host = busybox_rootfs().display().to_string();
    let create = |name: &str, image: &str| tool("create", json!({"name": name, "image": image}));
    let home_images = [
        home.clone(),
        format!("{home}/."),
        format!("oci:{home}"),
        th.path().join("..").display().to_string(),
        "/".into(),
    ];
    let mut steps: Vec<Value> = home_images.iter().map(|i| create("h", i)).collect();
    steps.push(create("d", &host));
    steps.push(create("o", &format!("oci:{host}")));
    for answer in drive(&th, "stdio", &[], &steps).await {
        assert_eq!(code(&answer), Some("invalid_config"), "{answer}");
    }

    let mut steps: Vec<Value> = home_images.iter().map(|i| create("h", i)).collect();
    steps.push(create("d", &host));
    let answers = drive(&th, "stdio", &["--allow-host-images"], &steps).await;
    let (home_answers, host_answer) = answers.split_at(home_images.len());
    for answer in home_answers {
        assert_eq!(code(answer), Some("invalid_config"), "{answer}");
    }
    assert_eq!(code(&host_answer[0]), None, "{}", host_answer[0]);

    // Only the allowed one was made.
    let all = th
        .backend
        .list(&burrow::ListFilter::default())
        .await
        .unwrap();
    let names: Vec<_> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["d"]);
}

/// `--max-memory-mb` and `--max-cpus` are the limits of a sandbox created
/// without any: never unlimited. Where this host cannot enforce them (a
/// rootless container without a delegated cgroup) such a create is
/// refused, as one asking for them is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_left_out_are_the_servers_maximum() {
    let th = TestHome::new().await;
    th.name_image("busybox");
    let args = ["--max-memory-mb", "64", "--max-cpus", "1"];
    let steps = [tool("create", json!({"name": "lim", "image": "busybox"}))];
    let answer = &drive(&th, "stdio", &args, &steps).await[0];
    let can = common::enforceable();
    let found = SandboxHandle::get_in(th.dyn_backend(), "lim").await;
    if !(can.memory && can.cpus) {
        assert_eq!(code(answer), Some("invalid_config"), "{answer}");
        assert_eq!(found.unwrap_err().code(), ErrorCode::NotFound);
        return;
    }
    assert_eq!(code(answer), None, "{answer}");
    let config = found.unwrap().config().await.unwrap();
    assert_eq!((config.memory_mb, config.cpus), (Some(64), Some(1.0)));
}
