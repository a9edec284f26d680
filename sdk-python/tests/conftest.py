"""Test setup for the Python SDK: real sandboxes, as root, against the installed
``burrow`` wheel, with a fresh short burrow home per test.

Every test gets a new home (``tempfile.mkdtemp(prefix="bp", dir="/tmp")``: unix
socket paths live under it, so it stays short), the process is pointed at it
(``BURROW_HOME`` and ``burrow.configure``), and when the test ends every
``burrow __supervise`` process (and QEMU guest) whose argv names that home is
SIGKILLed, as ``core/cli/tests/common/mod.rs`` does. On failure the sandbox
logs are attached to the report. Tests marked ``no_sandbox`` get no home.

Environment: ``BURROW_BIN``, ``BURROW_AGENT_BIN``, ``BURROW_TEST_IMAGE`` (else the
repository's target/ defaults), ``BURROW_DRIVER`` (read by the local backend, or the server),
``BURROW_TEST_KEEP_HOME=1`` keeps the homes for inspection.

``BURROW_TEST_REMOTE=1`` runs every test against the remote backend: each
test's home gets its own ``burrow serve`` (TCP, API token), and
``BURROW_URL``/``BURROW_TOKEN`` point the test and its child processes at it.
"""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# The helper modules of this directory (never the package's source tree).
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import _support  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_sandbox: the test needs no burrow home or binaries")
    config.addinivalue_line("markers", "slow: the test takes tens of seconds")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name: str, obj):
    # Coroutine tests run under pytest-asyncio whatever its mode (strict or
    # auto, whichever configuration file pytest picked): mark them before
    # pytest-asyncio looks at them, then let the normal collection go on.
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        if not any(getattr(m, "name", None) == "asyncio" for m in getattr(obj, "pytestmark", [])):
            pytest.mark.asyncio(obj)
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    setattr(item, f"_burrow_rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def installed_burrow():
    """The burrow package, checked to come from the installed wheel."""
    try:
        import burrow
    except ImportError as e:
        pytest.fail(f"the burrow package is not installed in this Python ({sys.executable}): {e}", pytrace=False)
    _support.check_installed_package()
    return burrow


@pytest.fixture(scope="session")
def prerequisites(installed_burrow):
    """The binaries and the test image exist, and we are root."""
    problems = _support.missing_prerequisites()
    if problems:
        pytest.fail("cannot run sandboxes:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture(autouse=True)
def burrow_home(request: pytest.FixtureRequest):
    """A fresh burrow home for the test; cleaned up (supervisors killed) afterwards."""
    if request.node.get_closest_marker("no_sandbox"):
        yield None
        return
    request.getfixturevalue("prerequisites")
    home = tempfile.mkdtemp(prefix="bp", dir="/tmp")
    saved = {
        k: os.environ.get(k)
        for k in ("BURROW_HOME", "BURROW_BIN", "BURROW_AGENT_BIN", "BURROW_URL", "BURROW_TOKEN")
    }
    _support.point_at(home)
    server = None
    if _support.remote_mode():
        server = _support.Server(home)
        _support.CURRENT_SERVER = server
        os.environ["BURROW_URL"] = server.url
        os.environ["BURROW_TOKEN"] = server.token
    try:
        yield home
    finally:
        if server is not None:
            _support.CURRENT_SERVER = None
            server.stop()
        _support.kill_supervisors_of(home)
        _support.eventually(10, lambda: not _support.supervisors_of(home))
        failed = any(
            getattr(getattr(request.node, f"_burrow_rep_{when}", None), "failed", False)
            for when in ("setup", "call")
        )
        if failed and server is not None:
            request.node.add_report_section("teardown", "burrow serve log", server.log())
        if failed:
            logs = _support.dump_logs(home)
            if logs:
                request.node.add_report_section("teardown", "sandbox logs", logs)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not os.environ.get("BURROW_TEST_KEEP_HOME"):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def image() -> str:
    """The busybox test image (a root filesystem directory)."""
    return _support.image()


@pytest.fixture
def configure_kwargs(burrow_home) -> dict:
    """burrow.configure() arguments for this test's home (for child processes)."""
    return _support.configure_kwargs(burrow_home)
