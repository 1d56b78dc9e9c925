"""A second Ctrl-C stops `conveyor worker` at once: a real worker process running a job
that never ends, on SQLite, PostgreSQL and Redis. The first SIGINT is a graceful stop;
the second (or a SIGTERM after it) hands the running job's claim back at once, names
the job in one line and exits 130; the job can be claimed again right away, long
before its lease would have run out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.core import AttemptOutcome, JobStatus
from conveyor.shell.ports import Claim

pytestmark = pytest.mark.timeout(180)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]

HANDLERS = """
import os, pathlib, time
STARTED = pathlib.Path(os.environ["STARTED_DIR"])
def forever(args, ctx):
    (STARTED / str(ctx.job_id)).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
def brief(args, ctx):
    (STARTED / str(ctx.job_id)).write_text(str(os.getpid()))
    time.sleep(1.5)
HANDLERS = {"forever": forever, "brief": brief}
"""

#: Far longer than any test waits: a job back in the queue was handed back, not reclaimed.
LEASE_MS = 600_000


def _backend(name: str, folder: Path) -> tuple[dict[str, Any], Any]:
    """The backend part of the config, and how to clean up after it."""
    if name == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}"}, None
    if name == "postgresql":
        from conveyor.testing.postgres_server import drop_database, fresh_database

        url = fresh_database(prefix="conveyor_forced")
        return {"provider": "db", "url": url, "auto_migrate": True}, lambda: drop_database(url)
    from backends import REDIS_TEST_DB
    from conveyor.testing.redis_server import redis_url

    redis = {"url": redis_url(REDIS_TEST_DB), "prefix": f"forced-{uuid.uuid4().hex[:8]}"}
    return {"provider": "redis", "redis": redis}, None


def _toml(config: dict[str, Any]) -> str:
    lines, tables = [], []
    for key, value in config.items():
        if isinstance(value, dict):
            tables.append(f"[{key}]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in value.items()))
        else:
            lines.append(f"{key} = {_value(value)}\n")
    return "".join(lines) + "".join(tables)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


class Site:
    """A project directory with a config and a handler module, and a runtime in the
    test's own process on the same backend to look at the queue."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.folder = folder
        (folder / "forever_handlers.py").write_text(HANDLERS)
        (folder / "started").mkdir()
        where, self._cleanup = _backend(backend, folder)
        config = {
            **where,
            "lease_ms": LEASE_MS,
            "handlers": ["forever_handlers:HANDLERS"],
            "entry_points": False,
            "workers": {"count": 1, "queues": ["default"], "poll_interval_ms": 20},
        }
        (folder / "conveyor.toml").write_text(_toml(config))
        self.runtime = conveyor.build({**where, "lease_ms": LEASE_MS, "entry_points": False})

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = str(self.folder) + os.pathsep + env.get("PYTHONPATH", "")
        env["STARTED_DIR"] = str(self.folder / "started")
        return env

    def worker(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*CONVEYOR, "worker", *args],
            cwd=self.folder,
            env=self.env(),
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def wait_started(self, job_id: uuid.UUID, process: subprocess.Popen[str]) -> None:
        marker = self.folder / "started" / str(job_id)
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, _stderr(process)
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)

    def close(self) -> None:
        self.runtime.close()
        if self._cleanup is not None:
            self._cleanup()


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    made = Site(request.param, tmp_path)
    yield made
    made.close()


def _stderr(process: subprocess.Popen[str]) -> str:
    """What the process wrote; a process still running is killed first, with every
    process it started (a supervisor's copies are in process groups of their own)."""
    if process.poll() is None:
        kill_tree(process.pid)
        process.wait()
    return process.stderr.read() if process.stderr else ""


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants, children first found, so none is left behind."""
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    for child in found.stdout.split():
        kill_tree(int(child))
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop_twice(process: subprocess.Popen[str], second: signal.Signals) -> tuple[int, float]:
    """SIGINT, then `second` half a second later: the exit code, and how long after the
    second signal the process took to exit."""
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert process.poll() is None, "the first SIGINT waits for the running job"
    process.send_signal(second)
    sent = time.monotonic()
    try:
        code = process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        message = f"still running 15 s after the second signal: {_stderr(process)}"
        raise AssertionError(message) from None
    return code, time.monotonic() - sent


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_second_signal_hands_the_running_job_back_at_once_and_exits_130(
    site: Site, second: signal.Signals
) -> None:
    job = site.runtime.enqueue("forever", {})
    worker = site.worker("--grace", "120")
    site.wait_started(job.id, worker)
    code, took = _stop_twice(worker, second)
    stderr = _stderr(worker)
    assert code == 130, stderr
    assert took < 10, f"took {took:.1f}s"
    lines = [line for line in stderr.splitlines() if "handed back" in line]
    assert len(lines) == 1 and str(job.id) in lines[0], stderr
    view = site.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.PENDING, view
    assert [a.outcome for a in view.job.attempts] == [AttemptOutcome.INTERRUPTED]
    claim = site.runtime.queue.dequeue("default", datetime.now(UTC))
    assert isinstance(claim, Claim) and claim.job.id == job.id, "claimable now, not after the lease"


def test_one_signal_still_waits_for_the_running_job_within_the_grace(site: Site) -> None:
    job = site.runtime.enqueue("forever", {})
    worker = site.worker("--grace", "1")
    site.wait_started(job.id, worker)
    worker.send_signal(signal.SIGINT)
    code = worker.wait(timeout=30)
    stderr = _stderr(worker)
    assert code == 3, stderr
    assert "handed back" not in stderr
    view = site.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.RUNNING, "left to its lease"


def test_a_drain_timeout_hands_a_job_still_running_back_when_it_runs_out(site: Site) -> None:
    job = site.runtime.enqueue("forever", {})
    worker = site.worker("--drain-timeout", "1")
    site.wait_started(job.id, worker)
    worker.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    code = worker.wait(timeout=30)
    took = time.monotonic() - sent
    stderr = _stderr(worker)
    assert code == 3, stderr
    assert 1.0 <= took < 15, f"took {took:.1f}s"
    lines = [line for line in stderr.splitlines() if "drain timeout" in line]
    assert len(lines) == 1 and str(job.id) in lines[0] and "handed back" in lines[0], stderr
    view = site.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.PENDING, view
    assert [a.outcome for a in view.job.attempts] == [AttemptOutcome.INTERRUPTED]
    claim = site.runtime.queue.dequeue("default", datetime.now(UTC))
    assert isinstance(claim, Claim) and claim.job.id == job.id, "claimable now, not after the lease"


def test_a_job_that_ends_within_the_drain_timeout_completes_and_the_exit_is_clean(
    site: Site,
) -> None:
    job = site.runtime.enqueue("brief", {})
    worker = site.worker("--drain-timeout", "30")
    site.wait_started(job.id, worker)
    worker.send_signal(signal.SIGTERM)
    code = worker.wait(timeout=30)
    stderr = _stderr(worker)
    assert code == 0, stderr
    assert "drain timeout" not in stderr and "handed back" not in stderr
    view = site.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.COMPLETED, view


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--drain-timeout", "-1"], "--drain-timeout"),
        (["--drain-timeout", "nan"], "--drain-timeout"),
        (["--drain-timeout", "5", "--grace", "5"], "not both"),
    ],
)
def test_a_bad_drain_timeout_is_refused_naming_the_flag(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell import cli

    assert cli.main(["worker", *args]) == 2
    assert named in capsys.readouterr().err


def test_ctrl_c_twice_at_a_terminal_stops_worker_processes_at_once(tmp_path: Path) -> None:
    """`worker --processes 2`: Ctrl-C at a terminal signals the whole foreground group.
    The first stops the copies gracefully (each hears it once), the second at once."""
    site = Site("sqlite", tmp_path)
    try:
        job = site.runtime.enqueue("forever", {})
        supervisor = site.worker("--processes", "2", "--grace", "120")
        site.wait_started(job.id, supervisor)
        deadline = time.monotonic() + 60
        while len(site.runtime.status().workers) < 2:  # both copies are up and polling
            assert time.monotonic() < deadline, _stderr(supervisor)
            time.sleep(0.1)
        group = os.getpgid(supervisor.pid)
        os.killpg(group, signal.SIGINT)
        time.sleep(1.0)
        assert supervisor.poll() is None, "one Ctrl-C waits for the running job"
        view = site.runtime.get(job.id)
        assert view is not None and view.state is JobStatus.RUNNING
        os.killpg(group, signal.SIGINT)
        try:
            code = supervisor.wait(timeout=20)
        except subprocess.TimeoutExpired:
            message = f"still running after a second Ctrl-C: {_stderr(supervisor)}"
            raise AssertionError(message) from None
        stderr = _stderr(supervisor)
        assert code == 130, stderr
        assert sum(str(job.id) in line for line in stderr.splitlines()) == 1, stderr
        view = site.runtime.get(job.id)
        assert view is not None and view.state is JobStatus.PENDING, stderr
    finally:
        site.close()


# ---- in one process: what a forced stop does with each kind of claim --------------------


def _blocking_runtime(release: Any, prefetch: int) -> Any:
    started: list[str] = []

    def block(args: dict[str, Any]) -> None:
        started.append(args["n"])
        release.wait(30)

    rt = conveyor.build(
        {
            "provider": "memory",
            "workers": {"count": 1, "prefetch": prefetch, "poll_interval_ms": 20},
        },
        handlers={"block": block},
    )
    return rt, started


def _wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_prefetched_job_goes_back_unstarted_and_the_running_one_interrupted() -> None:
    release = threading.Event()
    rt, started = _blocking_runtime(release, prefetch=2)
    try:
        first, second = rt.enqueue_many("block", [{"n": "a"}, {"n": "b"}])
        rt.start()
        _wait_for(lambda: started == ["a"])
        handed = rt.stop_now()
        assert set(handed.handed_back) == {first.id, second.id}
        assert handed.left_to_lease == ()
        interrupted, waiting = rt.get(first.id), rt.get(second.id)
        assert interrupted is not None and waiting is not None
        assert interrupted.state is JobStatus.PENDING and waiting.state is JobStatus.PENDING
        assert [a.outcome for a in interrupted.job.attempts] == [AttemptOutcome.INTERRUPTED]
        assert waiting.job.attempts == () and waiting.job.attempt == 0, "never started"
    finally:
        release.set()
        rt.close()


def test_a_hand_back_that_cannot_be_written_is_left_to_the_lease_and_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    rt, started = _blocking_runtime(release, prefetch=1)
    try:
        job = rt.enqueue("block", {"n": "a"})
        rt.start()
        _wait_for(lambda: started == ["a"])

        def down(*_: Any) -> bool:
            raise ConnectionError("server unreachable")

        monkeypatch.setattr(rt.queue, "replace", down)
        handed = rt.stop_now()
        assert (handed.handed_back, handed.left_to_lease) == ((), (job.id,))
        assert str(job.id) in handed.describe() and "lease" in handed.describe()
        view = rt.get(job.id)
        assert view is not None and view.state is JobStatus.RUNNING, "still in flight"
    finally:
        release.set()
        rt.close()
