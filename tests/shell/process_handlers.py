"""Handlers for process execution: module-level, so a child process can import them.
They import only the standard library, so a child starts quickly."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def double(args: Any) -> int:
    return int(args["n"]) * 2


def report_pid_then_hang(args: Any) -> None:
    """Writes its process id where the test can read it, then never returns in time."""
    Path(args["pid_file"]).write_text(str(os.getpid()))
    time.sleep(120)


def with_context(args: Any, ctx: Any) -> dict[str, Any]:
    return {"attempt": ctx.attempt, "job_id": str(ctx.job_id), "pid": os.getpid()}


def fails(args: Any) -> None:
    raise ValueError("bad input")


def dies(args: Any) -> None:
    os._exit(3)


def exits(args: Any) -> None:
    raise SystemExit(3)


def sums_inputs(args: Any, ctx: Any) -> int:
    """The sum of the results the job waited for, read in a child process."""
    return sum(ctx.inputs().by_id.values())
