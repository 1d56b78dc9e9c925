"""Worker processes recycled under `conveyor worker --processes N`: each copy that has
done its job budget (or reached its memory bound) stops gracefully and the supervisor
starts a fresh one at once. Across 100 recycles no job is lost or run twice: a
prefetched claim goes back unstarted, a running job finishes before its process
exits. Real worker processes on SQLite and Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.core import JobStatus
from test_forced_stop import _backend, _toml, kill_tree

pytestmark = pytest.mark.timeout(300)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]

HANDLERS = """
import os
RUNS = os.environ["RUNS_FILE"]
LEAK = []
def record(args, ctx):
    # One short line per run, appended whole (O_APPEND): the ledger of who ran what.
    with open(RUNS, "a") as f:
        f.write(f"{ctx.job_id} {os.getpid()}\\n")
def hog(args, ctx):
    LEAK.append(bytearray(args["mb"] * 2**20))
    record(args, ctx)
HANDLERS = {"record": record, "hog": hog}
"""


class Site:
    def __init__(self, backend: str, folder: Path, **workers: Any) -> None:
        self.folder = folder
        (folder / "recycle_handlers.py").write_text(HANDLERS)
        self.runs = folder / "runs.txt"
        self.runs.touch()
        where, self._cleanup = _backend(backend, folder)
        config = {
            **where,
            "handlers": ["recycle_handlers:HANDLERS"],
            "entry_points": False,
            "workers": {"count": 2, "queues": ["default"], "poll_interval_ms": 20, **workers},
        }
        (folder / "conveyor.toml").write_text(_toml(config))
        self.runtime = conveyor.build({**where, "entry_points": False})

    def worker(self, *args: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = str(self.folder) + os.pathsep + env.get("PYTHONPATH", "")
        env["RUNS_FILE"] = str(self.runs)
        return subprocess.Popen(
            [*CONVEYOR, "worker", *args],
            cwd=self.folder,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def wait_all_done(
        self, ids: list[Any], worker: subprocess.Popen[str], timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            done = len(self.runs.read_text().splitlines())
            if done >= len(ids):
                views = [self.runtime.get(i) for i in ids]
                if all(v is not None and v.state is JobStatus.COMPLETED for v in views):
                    return
            assert worker.poll() is None, stop(worker)
            assert time.monotonic() < deadline, f"{done} of {len(ids)} ran in {timeout_s} s"
            time.sleep(0.2)

    def close(self) -> None:
        self.runtime.close()
        if self._cleanup is not None:
            self._cleanup()


def stop(worker: subprocess.Popen[str]) -> str:
    """SIGTERM the supervisor and wait for it; its stderr."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_tree(worker.pid)
            worker.wait()
    return worker.stderr.read() if worker.stderr else ""


@pytest.fixture(params=["sqlite", "redis"])
def one_at_a_time(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    """One worker thread claiming one job at a time: memory is looked at between jobs."""
    made = Site(request.param, tmp_path, count=1, prefetch=1)
    yield made
    made.close()


# 100 recycles on SQLite; on Redis 20, the same paths at a fifth of the time.
@pytest.mark.parametrize(
    ("backend", "recycles"), [("sqlite", 100), ("redis", 20)], ids=["sqlite", "redis"]
)
def test_a_hundred_recycles_lose_no_job_and_run_none_twice(
    backend: str, recycles: int, tmp_path: Path
) -> None:
    site = Site(backend, tmp_path)
    try:
        check_recycles(site, recycles)
    finally:
        site.close()


def check_recycles(site: Site, recycles: int) -> None:
    ids = [site.runtime.enqueue("record", {"n": n}).id for n in range(recycles * 4)]
    worker = site.worker("--processes", "3", "--max-jobs-per-child", "4")
    try:
        site.wait_all_done(ids, worker, timeout_s=280)
    finally:
        stderr = stop(worker)
    assert worker.returncode == 0, stderr
    runs = [line.split() for line in site.runs.read_text().splitlines()]
    per_job = Counter(job for job, _ in runs)
    assert set(per_job) == {str(i) for i in ids}, "every job ran"
    assert max(per_job.values()) == 1, "no job ran twice"
    per_process = Counter(pid for _, pid in runs)
    assert len(per_process) >= recycles, f"{len(per_process)} processes ran jobs"
    # The budget bounds the claims: no process ran more than its 4 jobs.
    assert max(per_process.values()) <= 4, per_process.most_common(3)
    recycled = [line for line in stderr.splitlines() if "recycling:" in line]
    assert len(recycled) >= recycles - 3, stderr[-2000:]


def test_a_process_past_its_memory_bound_is_replaced_and_its_jobs_complete(
    one_at_a_time: Site,
) -> None:
    site = one_at_a_time
    ids = [site.runtime.enqueue("hog", {"mb": 300}).id for _ in range(3)]
    worker = site.worker("--processes", "1", "--max-memory-per-child", "250")
    try:
        site.wait_all_done(ids, worker, timeout_s=120)
    finally:
        stderr = stop(worker)
    assert worker.returncode == 0, stderr
    runs = [line.split() for line in site.runs.read_text().splitlines()]
    assert sorted(job for job, _ in runs) == sorted(str(i) for i in ids)
    recycled = [line for line in stderr.splitlines() if "recycling:" in line]
    assert recycled and all("MB resident" in line for line in recycled), stderr[-2000:]
    assert len({pid for _, pid in runs}) == 3, "each job ran in a fresh process"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--max-jobs-per-child", "5"], "needs --processes"),
        (["--processes", "2", "--max-jobs-per-child", "0"], "--max-jobs-per-child"),
        (["--processes", "2", "--max-memory-per-child", "-3"], "--max-memory-per-child"),
    ],
)
def test_a_bad_recycling_flag_is_refused_naming_it(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    from conveyor.shell import cli
    from conveyor.shell.cli.supervisor import PROCESS_INDEX_ENV

    monkeypatch.delenv(PROCESS_INDEX_ENV, raising=False)
    assert cli.main(["worker", *args]) == 2
    assert named in capsys.readouterr().err
