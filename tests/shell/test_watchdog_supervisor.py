"""The supervisor's watchdog under `conveyor worker --processes N`: a copy stopped by
SIGSTOP (it can answer nothing, so its liveness mark goes stale) is SIGKILLed and
replaced within the stall limit, and every job still completes once: the job the
stopped copy was running returns with its lease and runs elsewhere. Real worker
processes on Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import conveyor
import pytest
from conveyor.core import JobStatus
from conveyor.shell.liveness import TOUCH_EVERY_S
from test_forced_stop import _backend, _toml, kill_tree

pytestmark = pytest.mark.timeout(60)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
LEASE_MS = 1000
STALL_LEASES = 2

HANDLERS = """
import os, pathlib, time
FOLDER = pathlib.Path(os.environ["WATCH_FOLDER"])
def work(args, ctx):
    (FOLDER / "started" / str(ctx.job_id)).write_text(str(os.getpid()))
    time.sleep(args["s"])
    # One line per finished run, appended whole: the ledger of who ran what.
    with open(FOLDER / "runs.txt", "a") as f:
        f.write(f"{ctx.job_id} {os.getpid()}\\n")
HANDLERS = {"work": work}
"""


def children(pid: int) -> set[int]:
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return {int(p) for p in found.stdout.split()}


@pytest.mark.parametrize("backend", ["redis"])
def test_a_stopped_worker_process_is_replaced_and_every_job_completes_once(
    backend: str, tmp_path: Path
) -> None:
    (tmp_path / "watch_handlers.py").write_text(HANDLERS)
    (tmp_path / "started").mkdir()
    runs = tmp_path / "runs.txt"
    runs.touch()
    where, cleanup = _backend(backend, tmp_path)
    config = {
        **where,
        "lease_ms": LEASE_MS,
        "handlers": ["watch_handlers:HANDLERS"],
        "entry_points": False,
        "workers": {"count": 1, "queues": ["default"], "poll_interval_ms": 20, "prefetch": 1},
    }
    (tmp_path / "conveyor.toml").write_text(_toml(config))
    runtime = conveyor.build({**where, "entry_points": False})
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    env["WATCH_FOLDER"] = str(tmp_path)
    supervisor = subprocess.Popen(
        [*CONVEYOR, "worker", "--processes", "2", "--stall-leases", str(STALL_LEASES)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stopped = None
    try:
        long = runtime.enqueue("work", {"s": 1.5}).id
        marker = tmp_path / "started" / str(long)
        deadline = time.monotonic() + 20
        while not marker.exists() or not marker.read_text():
            assert supervisor.poll() is None, supervisor.stderr.read() if supervisor.stderr else ""
            assert time.monotonic() < deadline, "no copy started the long job"
            time.sleep(0.02)
        stopped = int(marker.read_text())
        os.kill(stopped, signal.SIGSTOP)  # mid-handler: its ledger line is not written
        stopped_at = time.monotonic()
        ids = [long, *(runtime.enqueue("work", {"s": 0.05}).id for _ in range(20))]

        while stopped in children(supervisor.pid):
            assert time.monotonic() - stopped_at < STALL_LEASES * LEASE_MS / 1000 + 5, (
                "the stopped copy is still there"
            )
            time.sleep(0.1)
        replaced_after = time.monotonic() - stopped_at

        deadline = time.monotonic() + 20
        while True:
            views = [runtime.get(i) for i in ids]
            if all(v is not None and v.state is JobStatus.COMPLETED for v in views):
                break
            assert time.monotonic() < deadline, [v.state if v else None for v in views]
            time.sleep(0.1)
        # The copy in its place is running: two copies again, the stopped one gone.
        deadline = time.monotonic() + 10
        while len(children(supervisor.pid)) != 2:
            assert time.monotonic() < deadline, children(supervisor.pid)
            time.sleep(0.1)
    finally:
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGTERM)
            try:
                supervisor.wait(timeout=20)
            except subprocess.TimeoutExpired:
                kill_tree(supervisor.pid)
                supervisor.wait()
        stderr = supervisor.stderr.read() if supervisor.stderr else ""
        runtime.close()
        if cleanup is not None:
            cleanup()
    # Not before the limit from its mark's last touch (once a second at most).
    assert replaced_after >= STALL_LEASES * LEASE_MS / 1000 - TOUCH_EVERY_S, replaced_after
    assert supervisor.returncode == 0, stderr[-3000:]
    assert f"(pid {stopped}) no sign of life" in stderr, stderr[-3000:]
    ledger = Counter(line.split()[0] for line in runs.read_text().splitlines())
    assert ledger == Counter(str(i) for i in ids), "each job ran to its end exactly once"
    long_pid = next(line.split()[1] for line in runs.read_text().splitlines() if str(long) in line)
    assert int(long_pid) != stopped, "the held job ran again elsewhere"
