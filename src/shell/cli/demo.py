"""`conveyor demo`: a realistic mix of jobs on the embedded SQLite default.

All four priorities, a scheduled job, a flaky handler that succeeds on retry,
one that exhausts its retries into the dead letters, and a job type nobody
handles (parked, then dead-lettered as no-handler). Short backoff settings keep
it under a minute; they are printed so nobody mistakes them for the defaults.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core import Job, JobStatus
from ..runtime import build
from ..terminal import escape

DEMO_SETTINGS: dict[str, Any] = {
    "workers": {
        "count": 3,
        "queues": ["default"],
        "poll_interval_ms": 50,
        "promote_interval_ms": 100,
        "retry": {"initial_delay_ms": 200, "max_delay_ms": 1000, "jitter": True},
    },
    "requeue": {"requeue_delay_ms": 300, "max_requeue_age_ms": 3000},
    "lease_ms": 10_000,
    "entry_points": False,
}


def _handlers() -> dict[str, Any]:
    attempts: Counter[str] = Counter()
    lock = threading.Lock()

    def send_email(args: Any) -> dict[str, Any]:
        time.sleep(random.uniform(0.005, 0.02))
        return {"sent_to": args["to"]}

    def resize_image(args: Any) -> dict[str, Any]:
        time.sleep(random.uniform(0.01, 0.04))
        return {"width": args["width"] // 2}

    def charge_card(args: Any) -> dict[str, Any]:
        with lock:
            attempts[args["order"]] += 1
            n = attempts[args["order"]]
        if n <= 2:
            raise ConnectionError(f"payment gateway timed out (attempt {n})")
        return {"charged": args["amount"]}

    def sync_inventory(args: Any) -> None:
        raise ConnectionError("inventory service unreachable")

    def send_reminder(args: Any) -> str:
        return "reminded"

    return {
        "send-email": send_email,
        "resize-image": resize_image,
        "charge-card": charge_card,
        "sync-inventory": sync_inventory,
        "send-reminder": send_reminder,
    }


def _cli() -> str:
    """The command that runs this CLI again from the current folder, as it was run:
    plain `conveyor` only when that is what PATH finds (`python3 dev.py demo` runs
    `.venv/bin/conveyor` without activating the venv)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.stem == "conveyor" and argv0.is_file():
        script = argv0
    else:
        # `python -m conveyor.shell.cli`, or a library call: this interpreter's script.
        script = Path(sys.executable).parent / ("conveyor.exe" if os.name == "nt" else "conveyor")
        if not script.is_file():
            return f"{shlex.quote(sys.executable)} -m conveyor.shell.cli"
    on_path = shutil.which("conveyor")
    if on_path and os.path.samefile(on_path, script):
        return "conveyor"
    try:
        shown = os.path.relpath(script.absolute())
    except ValueError:  # another drive
        shown = ".."
    if shown.startswith(".."):
        shown = str(script.absolute())
    elif os.sep not in shown:
        shown = os.path.join(".", shown)
    return shlex.quote(shown)


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def run_demo(directory: str | None = None, jobs: int = 40, out: Any = None) -> int:
    out = out or sys.stdout
    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="conveyor-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'conveyor-demo.db'}"
    config = {"provider": "db", "url": url, **DEMO_SETTINGS}
    print(f"Conveyor demo on {url}", file=out)
    print(
        "Demo settings (shorter than the defaults): retry backoff 200 ms doubling to 1 s; "
        "no-handler jobs parked 300 ms and dead-lettered after 3 s; 3 workers.",
        file=out,
    )
    with _expected_failures_untold(out):
        return _run(config, url, jobs, out)


@contextlib.contextmanager
def _expected_failures_untold(out: Any) -> Iterator[None]:
    """The demo's failing jobs fail on purpose and its table counts them: a worker's
    WARNING per failed attempt (with its traceback) and the enqueue's warning about
    the unhandled type would only scroll the progress away. Shown at DEBUG."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        yield
        return
    quiet = [logging.getLogger(name) for name in ("conveyor.worker", "conveyor.runtime")]
    levels = [logger.level for logger in quiet]
    print(
        "Failed attempts are counted in the table at the end (a worker logs a warning for "
        "each; --log-level DEBUG shows them here).",
        file=out,
    )
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


def _run(config: dict[str, Any], url: str, jobs: int, out: Any) -> int:
    runtime = build(config, handlers=_handlers())
    started = time.monotonic()
    enqueued: list[Job] = []
    priorities = ["critical", "high", "normal", "low"]
    for i in range(jobs):
        kind = "send-email" if i % 2 else "resize-image"
        args = {"to": f"user{i}@example.com"} if kind == "send-email" else {"width": 800 + i}
        enqueued.append(runtime.enqueue(kind, args, priority=priorities[i % 4]))
    enqueued.append(
        runtime.enqueue("charge-card", {"order": "A-1001", "amount": 42}, priority="high")
    )
    enqueued.append(runtime.enqueue("sync-inventory", {"sku": "X-1"}, max_retries=2))
    enqueued.append(runtime.enqueue("legacy-report", {"month": "2026-11"}, priority="low"))
    enqueued.append(runtime.enqueue("send-reminder", {"user": 7}, delay=2.0))
    total = len(enqueued)
    print(
        f"Enqueued {total} jobs: {jobs} emails/images across all four priorities, a flaky "
        "charge-card, a doomed sync-inventory, a legacy-report nobody handles, and a "
        "send-reminder scheduled 2 s ahead.",
        file=out,
    )
    ids = {j.id for j in enqueued}
    runtime.start()
    deadline = time.monotonic() + 50
    tty = hasattr(out, "isatty") and out.isatty()
    shown = -1
    try:
        while time.monotonic() < deadline:
            finished = [
                j
                for j in runtime.store.list_history(limit=10 * total)
                if j.id in ids and j.status.is_terminal
            ]
            done = len(finished)
            dead = sum(1 for j in finished if j.status is JobStatus.FAILED)
            line = (
                f"{_bar(done, total)} {done}/{total} finished, {dead} dead-lettered, "
                f"{time.monotonic() - started:4.1f}s"
            )
            if tty:
                print("\r" + line, end="", file=out, flush=True)
            elif done != shown:
                print(line, file=out, flush=True)
            shown = done
            if done >= total:
                break
            time.sleep(0.1)
    finally:
        runtime.stop(5)
    if tty:
        print(file=out)
    records = [r for j in enqueued if (r := runtime.store.get(j.id)) is not None]
    _summary(records, out)
    missing = total - sum(1 for r in records if r.status.is_terminal)
    # Quoting the value alone keeps `NAME=value` an assignment for the shell.
    env, cli = f"CONVEYOR_URL={shlex.quote(url)}", _cli()
    print(
        f"\nDone in {time.monotonic() - started:.1f}s. Inspect it yourself:\n"
        f"  {env} {cli} status\n"
        f"  {env} {cli} dead list",
        file=out,
    )
    runtime.close()
    if missing:
        print(f"{missing} job(s) did not finish in time", file=out)
        return 1
    return 0


def _summary(records: list[Job], out: Any) -> None:
    by_type: dict[str, list[Job]] = defaultdict(list)
    for r in records:
        by_type[r.job_type].append(r)
    headers = ("job type", "completed", "retries", "dead", "reason", "mean time", "max time")
    rows = []
    for job_type in sorted(by_type):
        group = by_type[job_type]
        completed = [j for j in group if j.status is JobStatus.COMPLETED]
        dead = [j for j in group if j.status is JobStatus.FAILED]
        retried = sum(j.retry_count for j in group)
        times = [
            (j.finished_at - j.created_at).total_seconds()
            for j in group
            if j.finished_at is not None
        ]
        reasons = sorted({j.last_error.type for j in dead if j.last_error})
        rows.append(
            (
                job_type,
                len(completed),
                retried,
                len(dead),
                ",".join(reasons) or "-",
                f"{statistics.mean(times):.2f}s" if times else "-",
                f"{max(times):.2f}s" if times else "-",
            )
        )
    cells = [list(map(str, headers)), *[list(map(str, r)) for r in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    print(file=out)
    for n, row in enumerate(cells):
        print("  ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)
    dead = [r for r in records if r.status is JobStatus.FAILED]
    if dead:
        print("\nDead letters:", file=out)
        for r in dead:
            assert r.last_error is not None
            error = escape(f"{r.last_error.type}: {r.last_error.message}")
            print(f"  {r.job_type} {r.id}: {error}", file=out)
