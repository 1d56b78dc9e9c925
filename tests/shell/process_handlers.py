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


class Unreadable(Exception):
    """Pickles (as its args) but cannot be rebuilt from them: `__init__` wants two."""

    def __init__(self, first: int, second: int) -> None:
        super().__init__(first + second)


def returns_unreadable(args: Any) -> Any:
    with Path(args["runs"]).open("a") as runs:
        runs.write(f"{os.getpid()}\n")
    return Unreadable(1, 2)


def leaves_a_thread(args: Any) -> str:
    import threading

    threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon
    return "answered"


def writes_pid_then_sleeps(args: Any) -> str:
    """Writes its process id and group, then takes `seconds` and returns."""
    Path(args["pid_file"]).write_text(f"{os.getpid()} {os.getpgid(0)}")
    time.sleep(float(args["seconds"]))
    return "finished"


def starts_a_process_then_hangs(args: Any) -> None:
    """Starts a process that would outlive it, writes that one's id, then hangs."""
    import subprocess
    import sys

    started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(args["pid_file"]).write_text(str(started.pid))
    time.sleep(120)


def starts_a_process_then_sleeps(args: Any) -> str:
    """Starts a process of its own, writes its id and that one's, then sleeps; with
    `ignore_sigterm`, deaf to SIGTERM first (as a library may make it)."""
    import signal
    import subprocess
    import sys

    if args.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(args["pid_file"]).write_text(f"{os.getpid()} {started.pid}")
    time.sleep(120)
    return "finished"


def interrupts(args: Any) -> None:
    raise KeyboardInterrupt("from the handler")


def deaf_sleeper(args: Any) -> str:
    """Deaf to SIGTERM, writes its process id, then sleeps `seconds`."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(args["pid_file"]).write_text(str(os.getpid()))
    time.sleep(float(args["seconds"]))
    return "finished"
