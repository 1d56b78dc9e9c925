"""Cancellation through the public API and the CLI, and the race a running job's
cancel must win on PostgreSQL. (Each backend's adapter cases are the
contract's `cancel` cases.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import sqlalchemy as sa
from backends import make_backend
from cli_support import Ran, call_main, run_process
from conveyor.core import (
    CancelResult,
    JobStatus,
    Policies,
    Succeeded,
    ValidationError,
    decide,
    start,
)
from conveyor.shell.ports import Claim
from helpers import T0, make_job


def _config(kind: str, tmp_path: Path) -> dict[str, Any]:
    base: dict[str, Any] = {"entry_points": False, "workers": {"count": 1, "poll_interval_ms": 20}}
    if kind == "memory":
        return {"provider": "memory", **base}
    return {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}", **base}


def _wait_for(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_running_job_cancelled_through_the_runtime_is_recorded_cancelled(
    kind: str, tmp_path: Path
) -> None:
    running = threading.Event()

    def export(args: dict[str, Any], ctx: Any) -> dict[str, int]:
        running.set()
        steps = 0
        while not ctx.cancel_requested() and steps < 1000:
            steps += 1
            time.sleep(0.01)
        return {"steps": steps}

    rt = conveyor.build(_config(kind, tmp_path), handlers={"export": export})
    with rt.start():
        job = rt.enqueue("export", {})
        assert running.wait(20)
        assert rt.cancel(job.id) is CancelResult.REQUESTED
        _wait_for(lambda: (v := rt.get(job.id)) is not None and v.state.is_terminal)
        view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.CANCELLED
    assert view.job is not None and view.job.result["steps"] < 1000, "the handler saw the request"
    assert rt.cancel(job.id) is CancelResult.FINISHED
    rt.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_cancelled_job_keeps_no_result_over_max_result_bytes(kind: str, tmp_path: Path) -> None:
    # A result is read with every read of its record: a cancelled job's is capped as a
    # finished one's is (it was kept whatever its size).
    running = threading.Event()

    def export(args: dict[str, Any], ctx: Any) -> str:
        running.set()
        while not ctx.cancel_requested():
            time.sleep(0.01)
        return "x" * args["size"]

    config = {**_config(kind, tmp_path), "max_result_bytes": 4000}
    rt = conveyor.build(config, handlers={"export": export})
    views = []
    with rt.start():
        for size in (5000, 100):
            running.clear()
            job = rt.enqueue("export", {"size": size})
            assert running.wait(20)
            assert rt.cancel(job.id) is CancelResult.REQUESTED
            _wait_for(lambda j=job.id: (v := rt.get(j)) is not None and v.state.is_terminal)
            views.append(rt.get(job.id))
    rt.close()
    assert [v.state for v in views] == [JobStatus.CANCELLED, JobStatus.CANCELLED]
    assert views[0].job.result is None, "over the cap: dropped"
    assert views[1].job.result == "x" * 100, "within the cap: kept"


def test_a_queued_job_cancelled_through_the_runtime_never_runs(tmp_path: Path) -> None:
    ran: list[str] = []
    rt = conveyor.build(_config("memory", tmp_path), handlers={"mail": ran.append})
    job = rt.enqueue("mail", {"to": "x"})
    assert rt.cancel(str(job.id)) is CancelResult.CANCELLED
    rt.drain()
    assert ran == []
    assert [v.job_id for v in rt.list_jobs(state="cancelled")] == [str(job.id)]


def test_bulk_cancel_needs_a_queue_or_a_type(tmp_path: Path) -> None:
    rt = conveyor.build(_config("memory", tmp_path))
    with pytest.raises(ValidationError, match="queue"):
        rt.cancel_many()


def test_bulk_cancel_cancels_every_matching_job_however_many_pages_they_fill(
    backend: Any,
) -> None:
    # The queue was read in pages by offset while each cancel removed rows already
    # read: of 1,200 jobs, 700 were cancelled and 500 stayed queued, exit 0.
    from conveyor.shell.config import Config
    from conveyor.shell.registry import Registry
    from conveyor.shell.runtime import Runtime

    runtime = Runtime(Config(), backend.queue, backend.store, Registry())
    runtime.enqueue_many("report", [{"n": n} for n in range(1200)], queue="bulk")
    runtime.enqueue_many("report", [{"n": n} for n in range(30)], queue="bulk", delay=3600)
    kept = runtime.enqueue("other", {}, queue="bulk")
    assert runtime.cancel_many(queue="bulk", job_type="report", dry_run=True).cancelled == 1230
    counts = runtime.cancel_many(queue="bulk", job_type="report")
    assert (counts.cancelled, counts.requested) == (1230, 0)
    left = runtime.list_jobs(queue="bulk", limit=2000)
    assert [v.job_id for v in left if not v.state.is_terminal] == [str(kept.id)]


def test_a_cancel_request_committed_while_a_finish_waits_wins_on_postgresql() -> None:
    """The finish began before the request committed: it waits on the row, then must
    find the row rewritten and write nothing, never record the job completed."""
    b = make_backend("postgresql")
    try:
        b.queue.enqueue(make_job())
        claim = b.queue.dequeue("default", T0)
        assert isinstance(claim, Claim)
        done = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
        answers: list[bool] = []
        with b.queue.engine.connect() as conn, conn.begin():
            table = b.queue._t
            conn.execute(
                sa.select(table.c.id).where(table.c.id == str(claim.job.id)).with_for_update()
            )
            finisher = threading.Thread(target=lambda: answers.append(b.queue.finish(claim, done)))
            finisher.start()
            time.sleep(0.5)  # the finish is now waiting on the row lock held here
            assert b.queue._request_cancel_in(conn, claim.job.id, T0)
        finisher.join(30)
        assert answers == [False]
        assert b.store.get(claim.job.id) is None, "never recorded completed"
        assert b.queue.cancel_requested(claim.job.id)
    finally:
        b.cleanup()


# ---- the CLI ----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite project folder, the current directory while the test runs."""
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\nentry_points = false\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    return tmp_path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """`cli(project, *args)`: `conveyor *args` in the project folder, in this process
    (test_cli.py runs the commands in processes of their own)."""
    return lambda project, *args: call_main(capsys, *args)


def test_job_cancel_cancels_a_queued_job_in_one_line(
    project: Path, cli: Callable[..., Ran]
) -> None:
    job_id = cli(project, "enqueue", "mail", "{}").stdout.strip()
    done = run_process(project, "job", "cancel", job_id)  # once as a user runs it
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"cancelled job {job_id}\n"
    shown = json.loads(cli(project, "job", "show", job_id, "--json").stdout)
    assert shown["state"] == "cancelled"


def test_job_cancel_of_a_finished_job_exits_1(project: Path, cli: Callable[..., Ran]) -> None:
    job_id = cli(project, "enqueue", "mail", "{}").stdout.strip()
    cli(project, "job", "cancel", job_id)
    again = cli(project, "job", "cancel", job_id)
    assert again.returncode == 1
    assert again.stderr == f"conveyor: job {job_id} has already finished; nothing to cancel\n"


def test_job_cancel_of_an_unknown_id_exits_1_and_of_a_malformed_one_exits_2(
    project: Path, cli: Callable[..., Ran]
) -> None:
    assert cli(project, "migrate").returncode == 0  # a database, without that job
    unknown = cli(project, "job", "cancel", "00000000-0000-4000-8000-000000000009")
    assert unknown.returncode == 1 and "no job" in unknown.stderr
    bad = cli(project, "job", "cancel", "not-an-id")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_jobs_cancel_counts_first_with_dry_run_then_cancels(
    project: Path, cli: Callable[..., Ran]
) -> None:
    mails = [cli(project, "enqueue", "mail", "{}").stdout.strip() for _ in range(2)]
    cli(project, "enqueue", "report", "{}")
    dry = cli(project, "jobs", "cancel", "--queue", "default", "--type", "mail", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == "would cancel 2 queued jobs, ask 0 running jobs to stop\n"
    real = cli(project, "jobs", "cancel", "--type", "mail")
    assert real.stdout == "cancelled 2 queued jobs, asked 0 running jobs to stop\n"
    listed = json.loads(cli(project, "jobs", "list", "--state", "cancelled", "--json").stdout)
    assert sorted(v["id"] for v in listed) == sorted(mails)


def test_jobs_cancel_without_a_queue_or_type_exits_2(
    project: Path, cli: Callable[..., Ran]
) -> None:
    result = cli(project, "jobs", "cancel")
    assert result.returncode == 2
    assert result.stderr.startswith("conveyor: invalid input: --queue")


def test_a_running_job_shows_its_cancel_request_until_it_is_recorded(tmp_path: Path) -> None:
    from conveyor.shell.job_text import describe

    rt = conveyor.build(_config("memory", tmp_path))
    job = rt.enqueue("export", {})
    claim = rt.queue.dequeue("default", rt.clock.now())
    assert isinstance(claim, Claim)
    assert rt.get(job.id).cancel_requested is False
    assert rt.cancel(job.id) is CancelResult.REQUESTED
    view = rt.get(job.id)
    assert view is not None and view.cancel_requested
    assert view.to_dict()["claim"]["cancel_requested"] is True
    assert any(line.startswith("cancel: requested") for line in describe(view))


def test_a_queue_apart_from_its_store_says_it_cannot_cancel() -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
    from conveyor.shell.cancellation import CancelError, cancel_job
    from conveyor.shell.executor import Executor

    queue, store = MemoryJobQueue(), MemoryJobStore()
    job = make_job()
    queue.enqueue(job)
    with pytest.raises(CancelError, match="cannot cancel"):
        cancel_job(queue, store, Executor(queue, store), job.id, T0)
    assert queue.find(job.id) is not None
