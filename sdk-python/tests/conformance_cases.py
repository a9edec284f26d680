"""The cases document of the conformance list (tests/conformance/cases.json):
loading it, the step vocabulary this interpreter knows (kept equal to the
Rust kit's tables, core/conformance/src/cases.rs) and the structural check
of a document. Needs nothing but the standard library."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES_PATH = Path(
    os.environ.get("BURROW_CONFORMANCE_CASES")
    or REPO_ROOT / "tests" / "conformance" / "cases.json"
)

NAME_OPS = {
    "create", "connect_or_create", "define", "get", "get_by_id", "list", "get_snapshot",
    "list_snapshots", "remove_snapshot", "create_pool", "get_pool", "list_pools", "scale_pool",
    "remove_pool",
}
TARGET_OPS = {
    "handle", "info", "status", "config", "start", "connect_or_start", "connect",
    "restart", "stop", "kill", "request_drain", "pause", "resume", "touch", "modify",
    "wait_for_status", "wait_until_stopped", "destroy", "detach", "ping", "exec",
    "spawn", "fs_write", "fs_read", "fs_exists", "fs_mkdir", "fs_list", "fs_write_stream",
    "fs_read_stream", "follow_logs", "snapshot", "fork",
}
CONTROL_OPS = {"wait", "await", "sleep", "repeat", "race", "remove"}
KNOWN_OPS = NAME_OPS | TARGET_OPS | CONTROL_OPS
# Operations allowed as the `do` of a race run in several processes.
PROCESS_RACE_OPS = {"create", "connect_or_create", "connect_or_start"}

COMMON_KEYS = {"op", "as", "save", "expect", "tolerate", "within", "background"}
OP_KEYS = {
    "create": {"name", "options"},
    "connect_or_create": {"name", "options"},
    "define": {"name", "options"},
    "get": {"name"},
    "get_by_id": {"id"},
    "list": {"status", "labels"},
    "remove": {"name", "sandbox"},
    "stop": {"sandbox", "grace"},
    "modify": {"sandbox", "changes"},
    "wait_for_status": {"sandbox", "statuses", "timeout"},
    "exec": {"sandbox", "argv", "stdin", "env", "cwd", "timeout", "output_limit"},
    "spawn": {"sandbox", "argv", "env", "cwd", "timeout"},
    "fs_write": {"sandbox", "path", "data"},
    "fs_read": {"sandbox", "path"},
    "fs_write_stream": {"sandbox", "path", "data", "chunks"},
    "fs_read_stream": {"sandbox", "path"},
    "fs_exists": {"sandbox", "path"},
    "fs_mkdir": {"sandbox", "path", "parents"},
    "fs_list": {"sandbox", "path"},
    "follow_logs": {"sandbox", "source", "timeout"},
    "snapshot": {"sandbox", "snapshot", "kind"},
    "fork": {"sandbox", "count", "names"},
    "get_snapshot": {"snapshot"},
    "remove_snapshot": {"snapshot"},
    "list_snapshots": set(),
    "create_pool": {"pool", "size", "options"},
    "get_pool": {"pool"},
    "list_pools": set(),
    "scale_pool": {"pool", "size"},
    "remove_pool": {"pool"},
    "wait": {"process"},
    "await": {"job"},
    "sleep": {"seconds"},
    "repeat": {"seconds", "interval", "do"},
    "race": {"callers", "processes", "do"},
    "connect_or_start": {"sandbox", "name"},
}
CREATE_OPTIONS = {
    "image", "cpus", "memory_mb", "pids_limit", "disk_mb", "best_effort_limits", "default_limits",
    "seccomp_allow", "env", "workdir",
    "labels", "network", "ports", "secrets", "idle_timeout", "idle_action", "max_duration", "startup_timeout",
    "demand_start", "detached", "replace",
}
# The changes a `modify` step may name (durations in seconds; null clears
# cpus, memory_mb, idle_timeout and max_duration).
MODIFY_CHANGES = {
    "cpus", "memory_mb", "env_set", "env_unset", "labels_set", "labels_unset",
    "idle_timeout", "idle_action", "max_duration", "network",
}
RACE_EXPECT_KEYS = {"outcomes", "same_id", "starts", "each"}
# Tags naming a backend capability (burrow::Capabilities): a case carries the
# tag of every capability its steps use (see step_capability). The Rust kit
# reports such a case unsupported on a backend without that capability, and
# so does this runner's test (test_conformance.lacking).
CAPABILITY_TAGS = {
    "pause", "modify_live", "metrics", "logs", "idle_reclaim", "attached", "persistent_layer",
    "network_policy", "published_ports", "secrets", "snapshots", "full_snapshots",
    "fork", "pools",
}
VALUE_OPERATORS = {"var", "str_repeat"}
MATCH_OPERATORS = {"ne", "one_of", "present"}
OPERATOR_MODIFIERS = {"add", "times"}


def load_document(path: Path | str = CASES_PATH) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_cases(path: Path | str = CASES_PATH) -> list[dict]:
    return load_document(path)["cases"]


def validate_cases(doc: dict, repo_root: Path = REPO_ROOT) -> list[str]:
    """Structural problems of a cases document (empty when it is well formed)."""
    problems: list[str] = []
    if doc.get("format") != "burrow-conformance/1":
        problems.append(f"unknown format {doc.get('format')!r}")
    seen: set[str] = set()
    for i, case in enumerate(doc.get("cases", [])):
        where = case.get("id", f"case #{i}")
        for key in ("id", "title", "reference", "steps"):
            if key not in case:
                problems.append(f"{where}: missing {key!r}")
        extra = set(case) - {"id", "title", "reference", "steps", "tags", "timeout", "notes"}
        if extra:
            problems.append(f"{where}: unknown keys {sorted(extra)}")
        if where in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(where)
        ref = case.get("reference", "")
        file_part, _, func = ref.partition("::")
        ref_path = repo_root / file_part
        if not func or not ref_path.is_file():
            problems.append(f"{where}: reference {ref!r} is not path::function")
        elif f"fn {func}(" not in ref_path.read_text(encoding="utf-8"):
            problems.append(f"{where}: {file_part} has no fn {func}")
        bound: set[str] = set()
        for j, step in enumerate(case.get("steps", [])):
            problems += _validate_step(step, f"{where} step {j + 1}", bound, top=True)
            problems += _check_capability_tags(step, f"{where} step {j + 1}", case.get("tags", []))
    return problems


def step_capability(step: dict) -> str | None:
    """The capability a step needs by itself (as the Rust kit's step_capability)."""
    op = step.get("op")
    options = step.get("options") or {}
    if op in ("pause", "resume"):
        return "pause"
    if op == "modify":
        return "modify_live"
    if op == "follow_logs":
        return "logs"
    if op == "detach":
        return "attached"
    if op == "snapshot" and step.get("kind") == "full":
        return "full_snapshots"
    if op in ("snapshot", "get_snapshot", "list_snapshots", "remove_snapshot"):
        return "snapshots"
    if op == "fork":
        return "fork"
    if op in ("create_pool", "get_pool", "list_pools", "scale_pool", "remove_pool"):
        return "pools"
    if op == "race" and step.get("processes"):
        do = step.get("do") or {}
        owns = do.get("op") in ("create", "connect_or_create") and not (
            do.get("options") or {}
        ).get("detached", False)
        return "attached" if owns else None
    if isinstance(options.get("network"), dict):
        return "network_policy"
    if "ports" in options:
        return "published_ports"
    if "secrets" in options:
        return "secrets"
    if {"idle_timeout", "idle_action", "demand_start"} & set(options):
        return "idle_reclaim"
    return None


def _check_capability_tags(step: dict, where: str, tags: list[str]) -> list[str]:
    problems: list[str] = []
    cap = step_capability(step)
    if cap is not None and "unsupported" not in (step.get("tolerate") or []) and cap not in tags:
        problems.append(f"{where}: {step.get('op')} needs the capability tag {cap!r} on its case")
    if isinstance(step.get("do"), dict):
        problems += _check_capability_tags(step["do"], f"{where} do", tags)
    return problems


def _validate_step(step: dict, where: str, bound: set[str], top: bool) -> list[str]:
    problems: list[str] = []
    op = step.get("op")
    if op not in KNOWN_OPS:
        return [f"{where}: unknown op {op!r}"]
    allowed = COMMON_KEYS | OP_KEYS.get(op, {"sandbox"})
    extra = set(step) - allowed
    if extra:
        problems.append(f"{where}: {op}: unknown keys {sorted(extra)}")
    if op in TARGET_OPS and op != "connect_or_start" and "sandbox" not in step:
        problems.append(f"{where}: {op} needs 'sandbox'")
    if op == "connect_or_start" and ("sandbox" in step) == ("name" in step):
        problems.append(f"{where}: connect_or_start needs exactly one of 'sandbox', 'name'")
    if "sandbox" in step and top and step["sandbox"] not in bound:
        problems.append(f"{where}: variable {step['sandbox']!r} is not bound by an earlier step")
    for k in ("options",):
        if k in step:
            bad = set(step[k]) - CREATE_OPTIONS
            if bad:
                problems.append(f"{where}: unknown options {sorted(bad)}")
    if "changes" in step:
        if not isinstance(step["changes"], dict):
            problems.append(f"{where}: changes must be an object")
        else:
            bad = set(step["changes"]) - MODIFY_CHANGES
            if bad:
                problems.append(f"{where}: unknown changes {sorted(bad)}")
    if "within" in step and "background" in step:
        problems.append(f"{where}: 'within' and 'background' do not combine")
    if op in ("repeat", "race"):
        if not isinstance(step.get("do"), dict):
            problems.append(f"{where}: {op} needs a 'do' step")
        else:
            problems += _validate_step(step["do"], f"{where} do", bound, top=False)
            if "do" in step and "as" in step["do"]:
                problems.append(f"{where}: the 'do' of a {op} cannot bind with 'as'")
    if op == "race":
        exp = step.get("expect", {})
        bad = set(exp) - RACE_EXPECT_KEYS
        if bad:
            problems.append(f"{where}: race: unknown expect keys {sorted(bad)}")
        if step.get("processes"):
            do = step.get("do", {})
            if do.get("op") not in PROCESS_RACE_OPS or "name" not in do:
                problems.append(
                    f"{where}: a race in processes runs only {sorted(PROCESS_RACE_OPS)} by name"
                )
    if "as" in step:
        bound.add(step["as"])
    if op == "await" and "as" in step:
        bound.add(step["as"])
    return problems
