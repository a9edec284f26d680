"""The language-neutral lifecycle cases (tests/conformance/cases.json), one test
per case id, run by conformance_runner against real sandboxes (their
structure checked by conformance_cases)."""

from __future__ import annotations

import os

import pytest

import _support
import conformance_cases
import conformance_runner

DOCUMENT = conformance_cases.load_document()
CASES = DOCUMENT["cases"]


@pytest.mark.no_sandbox
def test_cases_file_is_well_formed():
    problems = conformance_cases.validate_cases(DOCUMENT)
    assert not problems, "\n".join(problems)
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.no_sandbox
def test_cases_cover_the_required_areas():
    areas = {c["id"].split(".")[0] for c in CASES}
    for area in ("convergence", "identity", "restart", "destroy", "config", "create",
                 "input", "wait", "drain", "idle"):
        assert area in areas, f"no {area} case"
    assert any(
        s["op"] == "race" and s.get("processes") for c in CASES for s in c["steps"]
    ), "a race across processes"


async def lacking(case: dict) -> list[str]:
    """The capabilities the case needs that the backend lacks, as the
    package reports them (the local backend of an unprivileged user lacks
    pause; a Kubernetes-backed server lacks several)."""
    import burrow

    caps = await burrow.Sandbox.capabilities()
    return [
        t for t in case.get("tags", [])
        if t in conformance_cases.CAPABILITY_TAGS and not getattr(caps, t)
    ]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_case(case, burrow_home):
    missing = await lacking(case)
    if missing:
        # As the Rust kit reports it: unsupported, not passed. What the
        # backend does instead (refuse with UnsupportedError) is checked by
        # test_a_backend_refuses_what_it_lacks.
        pytest.skip(f"unsupported by the backend (lacks {', '.join(missing)})")
    runner = conformance_runner.Runner(
        image=_support.image(), configure=_support.configure_kwargs(burrow_home)
    )
    await runner.run_case(case)
    if _support.remote_mode():
        # The case really went through the server.
        assert _support.CURRENT_SERVER is not None
        assert _support.CURRENT_SERVER.api_requests() > 0


async def test_a_backend_refuses_what_it_lacks(burrow_home):
    """The package reports the backend's capabilities (remotely, the
    server's, which are its backend's); an operation of a capability it
    lacks is refused with UnsupportedError and changes nothing, one it has
    works."""
    import dataclasses

    import burrow

    caps = dataclasses.asdict(await burrow.Sandbox.capabilities())
    assert set(caps) == conformance_cases.CAPABILITY_TAGS
    if _support.remote_mode():
        assert _support.CURRENT_SERVER is not None
        served = _support.CURRENT_SERVER.capabilities()
        assert caps == {t: served[t] for t in caps}, (caps, served)
    if not _support.kube_mode() and os.geteuid() == 0:
        # The local engine run by root has every capability; full snapshots
        # (memory and processes) are the vm driver's alone.
        full = caps.pop("full_snapshots")
        assert not full or os.environ.get("BURROW_DRIVER") == "vm", caps
        assert all(caps.values()), caps
    sb = await burrow.Sandbox.create("caps", image=_support.image(), startup_timeout=120)
    try:
        checks = {"pause": sb.pause, "metrics": sb.metrics, "logs": sb.logs}
        for capability, call in checks.items():
            if caps[capability]:
                await call()
            else:
                with pytest.raises(burrow.errors.UnsupportedError):
                    await call()
        if caps["pause"]:
            await sb.resume()
        info = await sb.info()
        assert (info.status.value, info.generation) == ("running", 1)
        out = await sb.exec(["echo", "still"])
        assert out.stdout.strip() == b"still"
    finally:
        await sb.destroy()
