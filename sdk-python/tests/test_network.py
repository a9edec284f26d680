"""Networks and published ports from Python: a policy kept in the
configuration and changed live, a bad rule refused with its typed error,
and a published port reaching a server in the sandbox. Loopback only."""

from __future__ import annotations

import asyncio
import socket

import pytest


async def test_a_policy_is_kept_and_changed_live(image):
    from burrow import NetworkPolicy, Sandbox, errors

    policy = NetworkPolicy(allow=["pypi.org", "tcp:*.github.com:443"], deny=["udp:*"])
    async with await Sandbox.create("py-net", image=image, network=policy, destroy=True) as sb:
        net = (await sb.info()).config["network"]
        assert net == {"allow": ["pypi.org", "tcp:*.github.com:443"], "deny": ["udp:*"]}
        plan = await sb.modify(network={"allow": ["files.pythonhosted.org"]})
        change = next(c for c in plan.changes if c.field == "network")
        assert change.applies == "live"
        assert (await sb.info()).config["network"] == {"allow": ["files.pythonhosted.org"]}
        with pytest.raises(errors.InvalidConfigError):
            await sb.modify(network=NetworkPolicy(allow=["a..b"]))
        assert (await sb.info()).config["network"] == {"allow": ["files.pythonhosted.org"]}
        plan = await sb.modify(network=False)
        assert (await sb.info()).config["network"] is False


async def test_bad_rules_and_ports_are_typed_and_create_nothing(image):
    from burrow import NetworkPolicy, Sandbox, errors

    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.create("py-bad", image=image, network=NetworkPolicy(allow=["pypi.org:9-8"]))
    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.define("py-bad", image=image, ports=["80"])
    with pytest.raises(TypeError):
        await Sandbox.define("py-bad", image=image, network=42)
    with pytest.raises(TypeError):
        await Sandbox.define("py-bad", image=image, ports="8080:80")
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("py-bad")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_published_port_reaches_the_sandbox(image):
    from burrow import Sandbox

    port = _free_port()
    async with await Sandbox.create("py-port", image=image, ports=[f"{port}:8000"], destroy=True) as sb:
        assert (await sb.info()).config["ports"] == [f"127.0.0.1:{port}:8000"]
        await sb.exec(["sh", "-c", "setsid nc -ll -p 8000 -e echo hi </dev/null >/dev/null 2>&1 &"])
        got = b""
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                got = await reader.read()
                writer.close()
            except OSError:
                pass
            if got:
                break
            await asyncio.sleep(0.1)
        assert got == b"hi\n"


async def test_a_secret_reaches_its_host_and_never_the_sandbox(image):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from burrow import NetworkPolicy, Sandbox, Secret, errors

    value = "py_secret_value_9c1e"
    heads = []

    class Keep(BaseHTTPRequestHandler):
        def do_GET(self):
            heads.append(str(self.headers))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Keep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    secret = Secret("TOKEN", value, ["127.0.0.1"])
    assert value not in repr(secret)
    try:
        assert (await Sandbox.capabilities()).secrets
        async with await Sandbox.create(
            "py-secret",
            image=image,
            network=NetworkPolicy(allow=["127.0.0.1"]),
            secrets=[secret],
            destroy=True,
        ) as sb:
            (got,) = (await sb.info()).config["secrets"]
            assert got["name"] == "TOKEN" and got["hosts"] == ["127.0.0.1"]
            assert "value" not in got
            out = await sb.exec(
                [
                    "sh",
                    "-c",
                    f'echo $TOKEN; wget -q -O - --header "Authorization: Bearer $TOKEN" http://10.0.2.2:{port}/',
                ]
            )
            assert out.stdout.decode() == got["placeholder"] + "\nok"
            assert f"Authorization: Bearer {value}" in heads[0]
    finally:
        server.shutdown()
    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.create("py-secret-bad", image=image, secrets=[Secret("TOKEN", value, ["127.0.0.1"])])
    with pytest.raises(errors.InvalidConfigError):
        await Sandbox.create(
            "py-secret-bad", image=image, network=True, secrets=[Secret("TOKEN", value, ["bad host"])]
        )
    with pytest.raises(TypeError):
        await Sandbox.define("py-secret-bad", image=image, secrets=secret)
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("py-secret-bad")


async def test_a_secrets_headers_round_trip_and_get_the_value(image):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from burrow import NetworkPolicy, Sandbox, Secret, errors

    value = "py_header_value_2b8d"
    heads = []

    class Keep(BaseHTTPRequestHandler):
        def do_GET(self):
            heads.append(self.headers)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Keep)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    secret = Secret("KEY", value, ["127.0.0.1"], headers=["X-Api-Key"])
    assert value not in repr(secret)
    try:
        async with await Sandbox.create(
            "py-secret-headers",
            image=image,
            network=NetworkPolicy(allow=["127.0.0.1"]),
            secrets=[secret],
            destroy=True,
        ) as sb:
            (got,) = (await sb.info()).config["secrets"]
            assert got["headers"] == ["X-Api-Key"] and got["hosts"] == ["127.0.0.1"]
            assert "value" not in got
            out = await sb.exec(
                ["sh", "-c", f'wget -q -O - --header "X-Api-Key: $KEY" http://10.0.2.2:{port}/']
            )
            assert out.stdout.decode() == "ok"
            assert heads[0]["X-Api-Key"] == value
            # Authorization is not one of its headers now: refused, and
            # nothing of that request leaves.
            out = await sb.exec(
                ["sh", "-c", f'wget -q -O - --header "Authorization: Bearer $KEY" http://10.0.2.2:{port}/a']
            )
            assert out.stdout.decode() != "ok"
            assert len(heads) == 1
    finally:
        server.shutdown()
    # The core checks the headers: one that routes the request, or too many.
    for headers in (["Host"], [f"X-{i}" for i in range(17)]):
        with pytest.raises(errors.InvalidConfigError):
            await Sandbox.create(
                "py-secret-bad",
                image=image,
                network=True,
                secrets=[Secret("KEY", value, ["127.0.0.1"], headers=headers)],
            )
    with pytest.raises(TypeError):
        await Sandbox.define(
            "py-secret-bad", image=image, network=True, secrets=[Secret("KEY", value, ["a.b"], headers="X-Api-Key")]
        )
    with pytest.raises(errors.SandboxNotFoundError):
        await Sandbox.get("py-secret-bad")
