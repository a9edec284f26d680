"""The language-neutral lifecycle cases (tests/conformance/cases.json), one test
per case id, run by conformance_runner against real sandboxes."""

from __future__ import annotations

import pytest

import _support
import conformance_runner

DOCUMENT = conformance_runner.load_document()
CASES = DOCUMENT["cases"]


@pytest.mark.no_sandbox
def test_cases_file_is_well_formed():
    problems = conformance_runner.validate_cases(DOCUMENT)
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


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_case(case, burrow_home):
    runner = conformance_runner.Runner(
        image=_support.image(), configure=_support.configure_kwargs(burrow_home)
    )
    await runner.run_case(case)
    if _support.remote_mode():
        # The case really went through the server.
        assert _support.CURRENT_SERVER is not None
        assert _support.CURRENT_SERVER.api_requests() > 0
