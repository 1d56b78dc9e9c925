"""The supervisor's watchdog under `conveyor worker --processes N`: a copy stopped by
SIGSTOP (it can answer nothing, so its liveness mark goes stale), and a copy whose
server connection freezes (it marks itself stalled), are SIGKILLed and replaced, and
every job still completes once: the job such a copy was running returns with its
lease and runs elsewhere. Real worker processes on Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import conveyor
import pytest
from backends import REDIS_TEST_DB
from conveyor.core import JobStatus
from conveyor.shell.liveness import TOUCH_EVERY_S
from frozen_proxy import FrozenProxy
from test_forced_stop import _toml, kill_tree

pytestmark = pytest.mark.timeout(60)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
LEASE_MS = 1000
STALL_LEASES = 2
LIMIT_S = STALL_LEASES * LEASE_MS / 1000

HANDLERS = """
import os, pathlib, time
FOLDER = pathlib.Path(os.environ["WATCH_FOLDER"])
def work(args, ctx):
    started = FOLDER / "started" / str(ctx.job_id)
    again = started.exists()
    with open(started, "a") as f:
        f.write(f"{os.getpid()}\\n")
    # A job run again (its first worker was lost) is quick: the test waits less.
    time.sleep(0.05 if again else args["s"])
    # One line per finished run, appended whole: the ledger of who ran what.
    with open(FOLDER / "runs.txt", "a") as f:
        f.write(f"{ctx.job_id} {os.getpid()}\\n")
HANDLERS = {"work": work}
"""


def children(pid: int) -> set[int]:
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return {int(p) for p in found.stdout.split()}


class Site:
    """Worker processes under one supervisor, on Redis (through `proxy` when given),
    and a runtime in the test's own process on the same jobs, straight to Redis."""

    def __init__(self, folder: Path, proxy: bool = False) -> None:
        from conveyor.testing.redis_server import redis_url

        self.folder = folder
        (folder / "watch_handlers.py").write_text(HANDLERS)
        (folder / "started").mkdir()
        self.runs = folder / "runs.txt"
        self.runs.touch()
        url = redis_url(REDIS_TEST_DB)
        self.proxy = None
        through = url
        if proxy:
            parts = urlsplit(url)
            self.proxy = FrozenProxy.tcp(parts.hostname or "127.0.0.1", parts.port or 6379)
            through = urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.proxy.port}"))
        prefix = f"watch-{uuid.uuid4().hex[:8]}"
        config = {
            "provider": "redis",
            "redis": {"url": through, "prefix": prefix},
            "lease_ms": LEASE_MS,
            "handlers": ["watch_handlers:HANDLERS"],
            "entry_points": False,
            "workers": {"count": 1, "queues": ["default"], "poll_interval_ms": 20, "prefetch": 1},
        }
        (folder / "conveyor.toml").write_text(_toml(config))
        direct: dict[str, Any] = {"provider": "redis", "redis": {"url": url, "prefix": prefix}}
        self.runtime = conveyor.build({**direct, "entry_points": False})
        self.supervisor: subprocess.Popen[str] | None = None
        self.stderr = ""

    def start(self, processes: int) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = str(self.folder) + os.pathsep + env.get("PYTHONPATH", "")
        env["WATCH_FOLDER"] = str(self.folder)
        self.supervisor = subprocess.Popen(
            [
                *CONVEYOR,
                "worker",
                "--processes",
                str(processes),
                "--stall-leases",
                str(STALL_LEASES),
            ],
            cwd=self.folder,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        return self.supervisor

    def running_pid(self, job: Any) -> int:
        """The pid of the copy that started `job`, once one has."""
        marker = self.folder / "started" / str(job)
        deadline = time.monotonic() + 20
        while not marker.exists() or not marker.read_text().strip():
            assert self.supervisor is not None and self.supervisor.poll() is None
            assert time.monotonic() < deadline, "no copy started the job"
            time.sleep(0.02)
        return int(marker.read_text().split()[0])

    def wait_gone(self, pid: int, since: float) -> float:
        """Seconds from `since` until `pid` is no longer a copy of the supervisor."""
        assert self.supervisor is not None
        while pid in children(self.supervisor.pid):
            assert time.monotonic() - since < LIMIT_S + 5, f"copy {pid} is still there"
            time.sleep(0.1)
        return time.monotonic() - since

    def wait_completed(self, ids: list[Any], copies: int) -> None:
        deadline = time.monotonic() + 20
        while True:
            views = [self.runtime.get(i) for i in ids]
            if all(v is not None and v.state is JobStatus.COMPLETED for v in views):
                break
            assert time.monotonic() < deadline, [v.state if v else None for v in views]
            time.sleep(0.1)
        # The copies in place of the lost ones are running.
        assert self.supervisor is not None
        while len(children(self.supervisor.pid)) != copies:
            assert time.monotonic() < deadline, children(self.supervisor.pid)
            time.sleep(0.1)

    def ledger(self) -> list[tuple[str, int]]:
        return [
            (job, int(pid))
            for job, pid in (ln.split() for ln in self.runs.read_text().splitlines())
        ]

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.thaw()
        supervisor = self.supervisor
        if supervisor is not None:
            if supervisor.poll() is None:
                supervisor.send_signal(signal.SIGTERM)
                try:
                    supervisor.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    kill_tree(supervisor.pid)
                    supervisor.wait()
            self.stderr = supervisor.stderr.read() if supervisor.stderr else ""
        self.runtime.close()
        if self.proxy is not None:
            self.proxy.close()


def check_each_ran_once(site: Site, ids: list[Any], lost: int, lost_job: Any) -> None:
    ledger = site.ledger()
    assert Counter(job for job, _ in ledger) == Counter(str(i) for i in ids), (
        "each job ran to its end exactly once"
    )
    (pid,) = [pid for job, pid in ledger if job == str(lost_job)]
    assert pid != lost, "the held job ran again in another copy"


@pytest.mark.parametrize("backend", ["redis"])
def test_a_stopped_worker_process_is_replaced_and_every_job_completes_once(
    backend: str, tmp_path: Path
) -> None:
    site = Site(tmp_path)
    try:
        supervisor = site.start(2)
        long = site.runtime.enqueue("work", {"s": 1.5}).id
        stopped = site.running_pid(long)
        os.kill(stopped, signal.SIGSTOP)  # mid-handler: its ledger line is not written
        stopped_at = time.monotonic()
        ids = [long, *(site.runtime.enqueue("work", {"s": 0.05}).id for _ in range(20))]
        replaced_after = site.wait_gone(stopped, stopped_at)
        site.wait_completed(ids, copies=2)
    finally:
        site.close()
    # Not before the limit from its mark's last touch (once a second at most).
    assert replaced_after >= LIMIT_S - TOUCH_EVERY_S, replaced_after
    assert supervisor.returncode == 0, site.stderr[-3000:]
    assert f"(pid {stopped}) no sign of life" in site.stderr, site.stderr[-3000:]
    check_each_ran_once(site, ids, stopped, long)


@pytest.mark.parametrize("backend", ["redis"])
def test_a_worker_process_whose_connection_freezes_is_replaced_and_nothing_is_lost(
    backend: str, tmp_path: Path
) -> None:
    site = Site(tmp_path, proxy=True)
    assert site.proxy is not None
    try:
        supervisor = site.start(2)
        # Its handler ends a second before the stall limit: its outcome is what hangs.
        long = site.runtime.enqueue("work", {"s": LIMIT_S - 1}).id
        frozen = site.running_pid(long)
        site.proxy.freeze()  # its handler finishes, its outcome write never answers
        frozen_at = time.monotonic()
        replaced_after = site.wait_gone(frozen, frozen_at)
        # The other copy stalls too (its connection is frozen as well); the fresh ones
        # connect through the same proxy: let them through.
        site.proxy.thaw()
        ids = [long, *(site.runtime.enqueue("work", {"s": 0.05}).id for _ in range(10))]
        site.wait_completed(ids, copies=2)
    finally:
        site.close()
    assert replaced_after >= LIMIT_S - 0.5, replaced_after
    assert supervisor.returncode == 0, site.stderr[-3000:]
    # The copy said why itself, and the supervisor passed it on.
    assert f"(pid {frozen}) stalled: worker loop 0: no progress" in site.stderr, site.stderr[-3000:]
    ledger = site.ledger()
    # Its handler ran to its end, but its outcome was never written: the job ran
    # again in the fresh copy, and completed there once.
    runs = Counter(job for job, _ in ledger)
    assert runs == Counter({str(long): 2, **{str(i): 1 for i in ids[1:]}}), runs
    view = site.runtime.get(long)
    assert view is not None and view.state is JobStatus.COMPLETED


@pytest.mark.parametrize("backend", ["redis"])
def test_a_copy_stopped_by_sigstop_does_not_hold_up_the_supervisors_stop(
    backend: str, tmp_path: Path
) -> None:
    site = Site(tmp_path)
    try:
        supervisor = site.start(2)
        job = site.runtime.enqueue("work", {"s": 0.05}).id
        stopped = site.running_pid(job)
        os.kill(stopped, signal.SIGSTOP)
        supervisor.send_signal(signal.SIGTERM)  # the stopped copy cannot act on its own
        sent = time.monotonic()
        code = supervisor.wait(timeout=LIMIT_S + 10)
        took = time.monotonic() - sent
    finally:
        site.close()
    assert code == 3, site.stderr[-3000:]  # UNFINISHED_EXIT: its jobs left to their leases
    assert took < LIMIT_S + 5, took
    assert f"(pid {stopped}) no sign of life" in site.stderr, site.stderr[-3000:]
