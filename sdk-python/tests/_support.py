"""Shared helpers of the Python SDK tests: where the binaries and the test image
are, a fresh burrow home per test, and cleanup of what a test left running
(the Python twin of core/cli/tests/common/mod.rs).

Importable without the ``burrow`` package (it is imported lazily).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

TESTS_DIR = Path(__file__).resolve().parent
SDK_DIR = TESTS_DIR.parent
REPO_ROOT = SDK_DIR.parent


def _env_path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else default


def self_contained() -> bool:
    """``BURROW_TEST_SELF_CONTAINED=1``: the tests give the package no
    binary (no ``BURROW_BIN``, no ``BURROW_AGENT_BIN``): it runs sandboxes
    with the supervisor its native library carries, as a user's install
    does (scripts/python-sdk.sh runs the suites so as an unprivileged user)."""
    return os.environ.get("BURROW_TEST_SELF_CONTAINED") == "1"


def burrow_bin() -> Path:
    """The `burrow` binary hosting the supervisor ($BURROW_BIN, else target/debug/burrow)."""
    return _env_path("BURROW_BIN", REPO_ROOT / "target" / "debug" / "burrow")


def agent_bin() -> Path:
    """The static guest agent ($BURROW_AGENT_BIN, else the scripts/build-agent.sh output)."""
    return _env_path(
        "BURROW_AGENT_BIN",
        REPO_ROOT / "target" / "agent" / "x86_64-unknown-linux-musl" / "release" / "burrow-agent",
    )


def test_image() -> Path:
    """The busybox root filesystem ($BURROW_TEST_IMAGE, else target/test-images/busybox)."""
    return _env_path("BURROW_TEST_IMAGE", REPO_ROOT / "target" / "test-images" / "busybox")


def image() -> str:
    """The image of the tests' sandboxes: the busybox root filesystem, or on
    the test cluster the busybox image its containerd holds
    ($BURROW_TEST_KUBE_IMAGE, else burrow.test/busybox:1)."""
    if kube_mode():
        return os.environ.get("BURROW_TEST_KUBE_IMAGE") or "burrow.test/busybox:1"
    return str(test_image())


def kube_mode() -> bool:
    """``BURROW_TEST_REMOTE=1`` with ``BURROW_TEST_REMOTE_BACKEND=kubernetes``:
    each test's ``burrow serve`` runs its sandboxes on the test cluster of
    scripts/k8s/cluster.sh (``BURROW_TEST_KUBECONFIG``), in a namespace of
    the test's own."""
    return remote_mode() and os.environ.get("BURROW_TEST_REMOTE_BACKEND") == "kubernetes"


def kubectl(*args: str) -> None:
    """Runs the cluster's kubectl ($BURROW_K8S_BIN/kubectl) on the test cluster."""
    import subprocess

    subprocess.run(
        [os.path.join(os.environ["BURROW_K8S_BIN"], "kubectl"), *args],
        env={**os.environ, "KUBECONFIG": os.environ["BURROW_TEST_KUBECONFIG"]},
        check=True, capture_output=True,
    )


def missing_prerequisites() -> list[str]:
    problems = []
    if self_contained():
        for var in ("BURROW_BIN", "BURROW_AGENT_BIN", "BURROW_SUPERVISOR_BIN"):
            if os.environ.get(var):
                problems.append(f"{var} is set, but BURROW_TEST_SELF_CONTAINED=1 runs without it")
        if remote_mode():
            problems.append("BURROW_TEST_SELF_CONTAINED=1 runs the local backend only (a server needs burrow)")
    else:
        if not os.access(burrow_bin(), os.X_OK):
            problems.append(f"no burrow binary at {burrow_bin()} (cargo build -p burrow-cli, or set BURROW_BIN)")
        if not os.access(agent_bin(), os.X_OK):
            problems.append(f"no guest agent at {agent_bin()} (bash scripts/build-agent.sh, or set BURROW_AGENT_BIN)")
    if kube_mode():
        for var in ("BURROW_TEST_KUBECONFIG", "BURROW_K8S_BIN"):
            if not os.environ.get(var):
                problems.append(
                    f"{var} is not set: start the test cluster"
                    " (eval \"$(bash scripts/k8s/cluster.sh start)\") and export it"
                )
    elif not (test_image() / "bin").is_dir():
        problems.append(
            f"no busybox image at {test_image()} (bash scripts/make-demo-rootfs.sh {test_image()},"
            " or set BURROW_TEST_IMAGE)"
        )
    return problems


def configure_kwargs(home: str) -> dict:
    """Arguments of burrow.configure() for `home` (also handed to child processes)."""
    if self_contained():
        return {"home": home}
    return {"home": home, "burrow_bin": str(burrow_bin()), "agent_bin": str(agent_bin())}


def point_at(home: str) -> dict:
    """Points this process (and the children it starts) at `home` and the test binaries."""
    import burrow

    os.environ["BURROW_HOME"] = home
    if not self_contained():
        os.environ["BURROW_BIN"] = str(burrow_bin())
        os.environ["BURROW_AGENT_BIN"] = str(agent_bin())
    kwargs = configure_kwargs(home)
    burrow.configure(**kwargs)
    return kwargs


def check_installed_package() -> None:
    """The tests exercise the installed wheel, never the source tree."""
    import burrow

    origin = Path(burrow.__file__).resolve()
    source_tree = (SDK_DIR / "python").resolve()
    if origin.is_relative_to(SDK_DIR.resolve()) and "site-packages" not in origin.parts:
        raise RuntimeError(
            f"burrow was imported from the source tree ({origin}); install the wheel into a"
            " virtualenv and run the tests with its python"
        )
    for entry in sys.path:
        if entry and Path(entry).resolve() == source_tree:
            raise RuntimeError(f"{source_tree} must not be on sys.path")


# ---------------------------------------------------------------------------
# Processes


def processes_with(pred: Callable[[list[str]], bool]) -> list[int]:
    """Pids of processes whose argument vector satisfies `pred`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if args and pred(args):
            pids.append(int(entry))
    return pids


def _names_home(args: Iterable[str], home: str) -> bool:
    return any(a == home or a.startswith(home + "/") for a in args)


def supervisors_of(home: str) -> list[int]:
    """Pids of live `burrow __supervise` processes of `home`."""
    home = os.path.realpath(home)
    return processes_with(lambda a: "__supervise" in a and (_names_home(a, home)))


def vms_of(home: str) -> list[int]:
    home = os.path.realpath(home)
    return processes_with(lambda a: "qemu-system" in a[0] and _names_home(a, home))


def kill_supervisors_of(home: str) -> None:
    """SIGKILLs every supervisor (and QEMU guest) of `home`, as the Rust TestHome drop does."""
    for pid in supervisors_of(home) + vms_of(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def dump_logs(home: str) -> str:
    """Every sandbox log of `home`, for a failing test's report."""
    out = []
    root = Path(home) / "sandboxes"
    if not root.is_dir():
        return ""
    for sb in sorted(root.iterdir()):
        for log in (sb / "logs" / "supervisor.log", sb / "logs" / "guest.log", sb / "runtime" / "runtime.log"):
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            out.append(f"----- {log} -----\n{text[-20000:]}")
    return "\n".join(out)


def eventually(limit: float, f: Callable[[], bool], interval: float = 0.05) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if f():
            return True
        time.sleep(interval)
    return f()


async def eventually_async(limit: float, f, interval: float = 0.1) -> bool:
    """Polls the coroutine function `f` until it returns true or `limit` seconds pass."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await f():
            return True
        await asyncio.sleep(interval)
    return bool(await f())


class Server:
    """A ``burrow serve`` on the test's home (SQLite, TCP on a free loopback
    port, an API token), for running the tests against the remote backend:
    ``BURROW_URL``/``BURROW_TOKEN`` point this process and its children at it."""

    def __init__(self, home: str) -> None:
        import subprocess

        env = dict(os.environ)
        env.update(
            BURROW_HOME=home,
            BURROW_BIN=str(burrow_bin()),
            BURROW_AGENT_BIN=str(agent_bin()),
            BURROW_SERVE_LISTEN="127.0.0.1:0",
            BURROW_SERVE_IDLE_TIMEOUT="0",
        )
        env.pop("BURROW_URL", None)
        env.pop("BURROW_TOKEN", None)
        self.namespace: str | None = None
        if kube_mode():
            import secrets

            self.namespace = "py-" + secrets.token_hex(5)
            kubectl("create", "namespace", self.namespace)
            env.update(
                BURROW_SERVE_BACKEND="kubernetes",
                BURROW_KUBECONFIG=os.environ["BURROW_TEST_KUBECONFIG"],
                BURROW_KUBE_NAMESPACE=self.namespace,
            )
        self.token = subprocess.run(
            [str(burrow_bin()), "serve", "token", "create", "tests", "--role", "admin"],
            env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()
        self.log_path = os.path.join(home, "serve.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(burrow_bin()), "serve"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self._log,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"burrow serve did not start: {line!r}\n{self.log()}")
        self.url = line[len("listening on "):]

    def api_requests(self) -> int:
        """How many API requests this server answered (from /metrics)."""
        import urllib.request

        req = urllib.request.Request(
            self.url + "/metrics", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("burrow_api_requests_total "):
                    return int(line.split()[1])
        raise AssertionError("no burrow_api_requests_total in /metrics")

    def capabilities(self) -> dict:
        """The server's backend's capabilities (GET /v1/capabilities)."""
        import json
        import urllib.request

        req = urllib.request.Request(
            self.url + "/v1/capabilities", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        if self.namespace is not None:
            try:
                kubectl("delete", "namespace", self.namespace, "--wait=false")
            except Exception:
                pass
        self._log.close()


#: The server of the running test in remote mode.
CURRENT_SERVER: "Server | None" = None


def remote_mode() -> bool:
    """``BURROW_TEST_REMOTE=1``: every test runs against a ``burrow serve``."""
    return os.environ.get("BURROW_TEST_REMOTE") == "1"
