"""burrow: an embeddable sandbox lifecycle library (Python binding).

The async API is the primary surface::

    from burrow import Sandbox

    async with await Sandbox.create("worker", image="/srv/images/busybox") as sb:
        print((await sb.exec(["echo", "hi"])).stdout_text)

``burrow.sync`` mirrors it with blocking methods, ``burrow.errors`` holds
one exception class per core error code. Every validation, lifecycle rule
and error comes from the Rust core (``burrow._native``).
"""

from __future__ import annotations

import atexit as _atexit

from . import _native, errors
from ._api import FileReader, FileWriter, Fs, Process, Sandbox, SandboxHandle, SandboxPage
from ._common import configure
from .types import (
    Applies,
    Capabilities,
    DirEntry,
    Driver,
    ExecResult,
    ExitReason,
    ExitStatus,
    FieldChange,
    FileKind,
    FileStat,
    IdleAction,
    LogLine,
    LogSource,
    Metrics,
    ModifyPlan,
    NetworkPolicy,
    Secret,
    Ping,
    PoolInfo,
    RunInfo,
    SandboxInfo,
    SnapshotInfo,
    SnapshotKind,
    Status,
)

__all__ = [
    "Sandbox",
    "SandboxHandle",
    "SandboxPage",
    "Fs",
    "FileReader",
    "FileWriter",
    "Process",
    "SandboxInfo",
    "RunInfo",
    "Status",
    "ExitReason",
    "Driver",
    "IdleAction",
    "ExecResult",
    "ExitStatus",
    "DirEntry",
    "FileStat",
    "FileKind",
    "ModifyPlan",
    "FieldChange",
    "Applies",
    "LogLine",
    "LogSource",
    "Metrics",
    "Ping",
    "Capabilities",
    "SnapshotInfo",
    "SnapshotKind",
    "PoolInfo",
    "NetworkPolicy",
    "Secret",
    "configure",
    "errors",
]

# Before the interpreter finalizes, let the binding finish handing results
# to event loops (a worker thread touching Python during finalization would
# abort the process).
_atexit.register(_native._at_exit)
