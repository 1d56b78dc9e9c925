"""A handler's progress reports (`JobContext.progress`) on every backend: checked where
they are made, written with the lease renewal, shown by `Runtime.get`, `conveyor job
show` and the dashboard's job page while the job runs, and never shown for another
attempt than the one that made them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from backends import Backend
from conveyor.core import JobStatus, Progress, RetryPolicy, ValidationError
from conveyor.shell.config import Config
from conveyor.shell.context import JobContext
from conveyor.shell.job_view import JobView
from conveyor.shell.lookup import describe
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime

pytestmark = pytest.mark.timeout(120)

#: Renewals every 200 ms: a report shows within about 150 ms.
LEASE_MS = 600


def runtime_on(backend: Backend, handlers: dict[str, Any], queue: Any = None) -> Runtime:
    config = Config(lease_ms=LEASE_MS, retry=RetryPolicy(initial_delay_ms=0, jitter=False))
    return Runtime(config, queue or backend.queue, backend.store, Registry(handlers))


def run_in_thread(runtime: Runtime) -> threading.Thread:
    thread = threading.Thread(target=lambda: runtime.drain(timeout_s=60), daemon=True)
    thread.start()
    return thread


def wait_for(read: Callable[[], JobView | None], ok: Callable[[JobView], bool]) -> JobView:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        view = read()
        if view is not None and ok(view):
            return view
        time.sleep(0.02)
    raise AssertionError(f"never seen; last: {read()}")


def test_a_report_shows_in_get_job_show_and_the_dashboard_while_the_job_runs(
    backend: Backend,
) -> None:
    release = threading.Event()

    def export(args: Any, ctx: JobContext) -> str:
        ctx.progress(0.25)
        ctx.progress(0.5, {"stage": "upload", "rows": [4000, "<b>"]})  # the newest wins
        release.wait(30)
        return "done"

    runtime = runtime_on(backend, {"export": export})
    job = runtime.enqueue("export", {})
    worker = run_in_thread(runtime)
    try:
        view = wait_for(lambda: runtime.get(job.id), lambda v: v.progress is not None)
        report = view.progress
        assert view.state is JobStatus.RUNNING
        assert isinstance(report, Progress) and report.fraction == 0.5
        assert view.to_dict()["progress"] == {
            "fraction": 0.5,
            "value": {"stage": "upload", "rows": [4000, "<b>"]},
            "at": report.at.isoformat(),
        }
        shown = "\n".join(describe(view))
        assert 'progress: 50.0% {"stage": "upload", "rows": [4000, "<b>"]}' in shown
        # A listing shows it too (`jobs list --json` said "progress": null).
        for listed in (runtime.list_jobs(), runtime.list_jobs(state="running")):
            assert [v.progress for v in listed if v.job_id == str(job.id)] == [report]

        from conveyor.dashboard import create_app
        from starlette.testclient import TestClient

        # 30 s for the page's reads: a busy machine must not turn it into "not answered".
        page = TestClient(create_app(runtime, backend_timeout_s=30.0)).get(f"/jobs/{job.id}").text
        assert 'id="progress"' in page and '<progress max="1" value="0.5">' in page
        assert "&lt;b&gt;" in page and "<b>" not in page, "escaped like every other text"
    finally:
        release.set()
        worker.join()
    done = runtime.get(job.id)
    assert done is not None and done.state is JobStatus.COMPLETED and done.progress is None


def test_a_report_from_an_earlier_attempt_is_not_shown_for_the_next(backend: Backend) -> None:
    release, second = threading.Event(), threading.Event()

    def flaky(args: Any, ctx: JobContext) -> str:
        if ctx.attempt == 1:
            ctx.progress(0.9, "almost")
            time.sleep(LEASE_MS / 1000)  # long enough for the report to be written
            raise RuntimeError("lost the connection")
        second.set()
        release.wait(30)
        return "done"

    runtime = runtime_on(backend, {"flaky": flaky})
    job = runtime.enqueue("flaky", {})
    worker = run_in_thread(runtime)
    try:
        assert second.wait(20)
        view = wait_for(lambda: runtime.get(job.id), lambda v: v.state is JobStatus.RUNNING)
        time.sleep(LEASE_MS / 1000)  # a renewal of the second attempt's claim lands
        view = runtime.get(job.id)
        assert view is not None and view.job is not None and view.job.retry_count == 1
        assert view.progress is None, "the first attempt's report is not the second's"
    finally:
        release.set()
        worker.join()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda ctx: ctx.progress(1.5), "fraction"),
        (lambda ctx: ctx.progress("half"), "fraction"),
        (lambda ctx: ctx.progress(None, {"when": object()}), "value"),
        (lambda ctx: ctx.progress(None, "x" * 5000), "value"),
        (lambda ctx: ctx.progress(), "progress"),
    ],
)
def test_a_bad_report_raises_in_the_handler_naming_the_field(
    call: Callable[[JobContext], None], field: str
) -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    raised: list[ValidationError] = []

    def handler(args: Any, ctx: JobContext) -> None:
        try:
            call(ctx)
        except ValidationError as exc:
            raised.append(exc)

    runtime = Runtime(Config(), MemoryJobQueue(store), store, Registry({"h": handler}))
    runtime.enqueue("h", {})
    runtime.drain(timeout_s=10)
    [error] = raised
    assert error.errors[0].field == field


class CountingQueue:
    """The memory queue, counting the renewals written."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.writes: list[str] = []

    def extend(self, claim: Any, now: Any) -> bool:
        self.writes.append("extend")
        return bool(self._inner.extend(claim, now))

    def extend_with_progress(self, claim: Any, now: Any, note: str) -> bool:
        self.writes.append(note)
        return bool(self._inner.extend_with_progress(claim, now, note))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_reporting_often_costs_at_most_one_write_more_per_heartbeat() -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    counting = CountingQueue(MemoryJobQueue(store))
    run_s = 1.2
    interval_s = LEASE_MS / 3 / 1000

    def busy(args: Any, ctx: JobContext) -> None:
        end = time.monotonic() + run_s
        n = 0
        while time.monotonic() < end:
            n += 1
            ctx.progress(min(n / 100_000, 1.0), {"n": n})
            time.sleep(0.0005)

    runtime = Runtime(Config(lease_ms=LEASE_MS), counting, store, Registry({"busy": busy}))
    runtime.enqueue("busy", {})
    runtime.drain(timeout_s=20)
    notes = [w for w in counting.writes if w != "extend"]
    assert notes, "the reports were written"
    # Renewals alone: run_s / interval_s; with reports waiting, one per half interval.
    assert len(counting.writes) <= run_s / (interval_s / 2) + 2, counting.writes
