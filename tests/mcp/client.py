"""Drives `burrow mcp` over stdio with the official Python MCP client.

Usage: client.py stdio|http:URL BURROW_BIN IMAGE [server args...]. Prints one JSON object:
what each step saw (core/cli/tests/mcp_server.rs asserts on it).
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
    }


async def main() -> None:
    transport, burrow, image, *server_args = sys.argv[1:]
    if transport == "stdio":
        # The client passes the server a minimal environment: burrow's own
        # variables (its home, its binaries) are handed on.
        env = {k: v for k, v in os.environ.items() if k.startswith("BURROW_")}
        params = StdioServerParameters(command=burrow, args=["mcp", *server_args], env=env)
        connect = stdio_client(params)
    else:
        # `http:URL`: a `burrow mcp --listen` the test started.
        connect = streamable_http_client(transport.removeprefix("http:"))
    out = {}
    async with connect as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["tools_capability"] = init.capabilities.tools is not None
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["create_schema"] = next(t.input_schema for t in tools.tools if t.name == "create")
            out["refused"] = structured(
                await session.call_tool("create", {"name": "no", "image": "not-allowed:1"})
            )
            out["created"] = structured(
                await session.call_tool("create", {"name": "agent", "image": image})
            )
            again = structured(
                await session.call_tool("connect_or_create", {"name": "agent", "image": image})
            )
            out["converged_same_id"] = again["structured"]["id"] == out["created"]["structured"]["id"]
            out["too_many_cpus"] = structured(
                await session.call_tool("create", {"name": "big", "image": image, "cpus": 64})
            )
            out["no_network"] = structured(
                await session.call_tool(
                    "create", {"name": "net", "image": image, "network_allow": ["tcp:example.com:443"]}
                )
            )
            progress = []

            async def on_progress(p, total, message):
                progress.append(message)

            out["exec"] = structured(
                await session.call_tool(
                    "exec",
                    {"name": "agent", "argv": ["sh", "-c", "echo one; sleep 0.2; echo two"]},
                    progress_callback=on_progress,
                )
            )
            out["progress"] = progress
            # A cancelled call: the client's cancellation reaches the
            # server, which kills the process.
            started = asyncio.Event()

            async def on_started(p, total, message):
                if message and "started" in message:
                    started.set()

            long = asyncio.create_task(
                session.call_tool(
                    "exec",
                    {"name": "agent", "argv": ["sh", "-c", "echo started; exec sleep 30"]},
                    progress_callback=on_started,
                )
            )
            await asyncio.wait_for(started.wait(), 30)
            long.cancel()
            try:
                await long
            except asyncio.CancelledError:
                pass
            ps = ""
            for _ in range(50):
                ps = (await session.call_tool("exec", {"name": "agent", "argv": ["ps"]})).structured_content["stdout"]
                if "sleep 30" not in ps:
                    break
                await asyncio.sleep(0.1)
            out["after_cancel_ps"] = ps
            spawned = (
                await session.call_tool(
                    "spawn", {"name": "agent", "argv": ["sh", "-c", "echo a; sleep 0.3; echo b"]}
                )
            ).structured_content
            collected, last = "", {}
            for _ in range(100):
                last = (
                    await session.call_tool("read", {"process": spawned["process"]})
                ).structured_content
                collected += last["stdout"]
                if last["ended"]:
                    break
                await asyncio.sleep(0.05)
            out["spawned"] = {"stdout": collected, "exit_code": last.get("exit_code")}
            out["read_unknown"] = structured(await session.call_tool("read", {"process": 999999}))
            out["resources_capability"] = init.capabilities.resources is not None
            listed = await session.list_resources()
            out["resources"] = sorted(str(r.uri) for r in listed.resources)
            info = await session.read_resource("burrow://sandbox/agent/info")
            out["info_resource"] = json.loads(info.contents[0].text)
            try:
                await session.read_resource("burrow://sandbox/nobody/info")
                out["missing_resource"] = "answered"
            except Exception as e:  # the SDK raises the JSON-RPC error
                out["missing_resource"] = type(e).__name__
            out["write"] = structured(
                await session.call_tool(
                    "fs_write", {"name": "agent", "path": "/tmp/f.txt", "content": "hello"}
                )
            )
            out["read"] = structured(
                await session.call_tool("fs_read", {"name": "agent", "path": "/tmp/f.txt"})
            )
            out["destroy"] = structured(await session.call_tool("destroy", {"name": "agent"}))
            out["gone"] = structured(await session.call_tool("stop", {"name": "agent"}))
    print(json.dumps(out))


asyncio.run(main())
