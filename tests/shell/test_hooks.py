"""Lifecycle hooks: called once per event, after the write they report; a hook that
raises is logged and changes nothing."""

from __future__ import annotations

import logging
from typing import Any

import conveyor
import pytest
from backends import make_backend
from conveyor.core import ErrorInfo, Job, JobStatus, Policies, RetryPolicy
from conveyor.core.policies import LeasePolicy
from conveyor.shell.executor import Executor
from conveyor.shell.hooks import Hooks
from conveyor.shell.registry import Permanent, Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job
from returns.result import Failure

FAST = Policies(retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter=False))


class Heard:
    """Every hook call, in order, as (event, job id, extra)."""

    def __init__(self, hooks: Hooks) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        hooks.on_enqueued(lambda job: self.calls.append(("enqueued", job.id, None)))
        hooks.on_started(lambda job: self.calls.append(("started", job.id, None)))
        hooks.on_succeeded(lambda job: self.calls.append(("succeeded", job.id, job.result)))
        hooks.on_failed(lambda job, exc: self.calls.append(("failed", job.id, exc)))
        hooks.on_dead_lettered(lambda job, err: self.calls.append(("dead_lettered", job.id, err)))
        hooks.on_cancelled(lambda job, *_: self.calls.append(("cancelled", job.id, job.status)))

    def events(self) -> list[str]:
        return [event for event, _, _ in self.calls]


def test_a_runtime_reports_each_lifecycle_event_once() -> None:
    raised = ConnectionError("upstream down")
    attempts: list[int] = []

    def flaky(args: Any) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise raised
        return "sent"

    runtime = conveyor.build(
        {"provider": "memory", "entry_points": False, "retry": {"initial_delay_ms": 1}},
        handlers={"send": flaky, "refuse": lambda a: Failure(Permanent("no"))},
    )
    heard = Heard(runtime.hooks)
    sent = runtime.enqueue("send", {"to": "a@example.com"})
    refused = runtime.enqueue("refuse")
    runtime.drain(wait_scheduled=True, timeout_s=10)
    mine = [(e, x) for e, i, x in heard.calls if i == sent.id]
    assert mine == [
        ("enqueued", None),
        ("started", None),
        ("failed", raised),
        ("started", None),
        ("succeeded", "sent"),
    ]
    theirs = [(e, x) for e, i, x in heard.calls if i == refused.id]
    assert [e for e, _ in theirs] == ["enqueued", "started", "failed", "dead_lettered"]
    assert isinstance(theirs[2][1], Permanent), "a returned exception reaches the hook"
    assert isinstance(theirs[3][1], ErrorInfo) and theirs[3][1].retryable is False
    runtime.close()


def test_build_takes_hooks_and_enqueue_many_reports_each_job() -> None:
    hooks = conveyor.Hooks()
    heard = Heard(hooks)
    runtime = conveyor.build({"provider": "memory", "entry_points": False}, hooks=hooks)
    assert runtime.hooks is hooks
    jobs = runtime.enqueue_many("send", [{"n": 1}, {"n": 2}])
    assert heard.calls == [("enqueued", j.id, None) for j in jobs]
    runtime.close()


def test_hooks_run_after_the_outcome_is_written(backend: Any) -> None:
    """Each hook sees the store already holding what it reports."""
    seen: list[tuple[str, Any]] = []

    def where(job: Job) -> Any:
        recorded = backend.store.get(job.id)
        return None if recorded is None else recorded.status

    hooks = Hooks()
    hooks.on_succeeded(lambda job: seen.append(("succeeded", where(job))))
    hooks.on_dead_lettered(lambda job, err: seen.append(("dead_lettered", where(job))))

    def failed(job: Job, exc: BaseException | None) -> None:
        if job.status is JobStatus.FAILED:
            seen.append(("failed", where(job)))
        else:  # a retry: parked in its queue
            seen.append(("failed", backend.queue.next_due(job.queue) is not None))

    hooks.on_failed(failed)
    registry = Registry({"ok": lambda a: 1, "bad": lambda a: 1 / 0})
    for prefetch in (1, 3):
        worker = Worker(
            backend.queue,
            backend.store,
            registry,
            clock=ManualClock(T0),
            policies=FAST,
            hooks=hooks,
            prefetch=prefetch,
            queue_name=f"q{prefetch}",
        )
        seen.clear()
        backend.queue.enqueue(make_job("ok", queue=f"q{prefetch}"))
        backend.queue.enqueue(make_job("bad", max_retries=0, queue=f"q{prefetch}"))
        backend.queue.enqueue(make_job("bad", max_retries=1, queue=f"q{prefetch}"))
        worker.drain()
        assert sorted(seen, key=str) == sorted(
            [
                ("succeeded", JobStatus.COMPLETED),
                ("failed", JobStatus.FAILED),
                ("failed", True),
                ("dead_lettered", JobStatus.FAILED),
            ],
            key=str,
        ), f"prefetch={prefetch}"


def test_a_hook_that_raises_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = Hooks()
    later: list[str] = []

    def broken(*args: Any) -> None:
        raise RuntimeError("the tracker is down")

    for on in (hooks.on_started, hooks.on_succeeded, hooks.on_failed, hooks.on_dead_lettered):
        on(broken)
    hooks.on_succeeded(lambda job: later.append("succeeded"))
    hooks.on_dead_lettered(lambda job, err: later.append("dead_lettered"))
    queue_store = conveyor.build({"provider": "memory", "entry_points": False})
    queue, store = queue_store.queue, queue_store.store
    worker = Worker(
        queue,
        store,
        Registry({"ok": lambda a: 1, "bad": lambda a: 1 / 0}),
        clock=ManualClock(T0),
        hooks=hooks,
    )
    ok, bad = make_job("ok"), make_job("bad", max_retries=0)
    queue.enqueue(ok)
    queue.enqueue(bad)
    with caplog.at_level(logging.ERROR, logger="conveyor.hooks"):
        assert worker.drain() == 2
    assert store.get(ok.id).status is JobStatus.COMPLETED
    assert store.get(bad.id).status is JobStatus.FAILED
    assert later == ["succeeded", "dead_lettered"], "the other hooks still ran"
    broken_logs = [r for r in caplog.records if r.name == "conveyor.hooks"]
    assert len(broken_logs) == 5  # started x2, succeeded, failed, dead_lettered
    assert all("the tracker is down" in (r.exc_text or "") for r in broken_logs)
    assert worker.stats.completed == 1 and worker.stats.dead_lettered == 1


def test_a_lost_write_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    class Losing(Executor):
        def carry_out(self, claim: Any, decision: Any) -> bool:
            return False

        def finish_many(self, items: Any) -> list[bool]:
            return [False] * len(items)

    runtime = conveyor.build({"provider": "memory", "entry_points": False})
    queue, store = runtime.queue, runtime.store
    hooks = Hooks()
    heard = Heard(hooks)
    worker = Worker(
        queue,
        store,
        Registry({"bad": lambda a: 1 / 0}),
        clock=ManualClock(T0),
        hooks=hooks,
        executor=Losing(queue, store),
    )
    queue.enqueue(make_job("bad", max_retries=0))
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        worker.drain(max_jobs=1)
    assert heard.events() == ["started"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "not written" in warning.getMessage()
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]


def _leasing_worker(b: Any, hooks: Hooks, clock: ManualClock, *, max_reclaims: int) -> Worker:
    """A worker on `b` with a 1 s lease, whose lease keeper the test drives."""
    policies = Policies(lease=LeasePolicy(lease_ms=1000, max_reclaims=max_reclaims))
    return Worker(
        b.queue,
        b.store,
        Registry({"work": lambda a: None}),
        clock=clock,
        policies=policies,
        hooks=hooks,
        clock_check=False,
    )


def test_lease_expired_and_undecodable_dead_letters_reach_the_hook() -> None:
    from backends import make_backend

    b = make_backend("sqlite")
    try:
        hooks = Hooks()
        heard = Heard(hooks)
        clock = ManualClock(T0)
        worker = _leasing_worker(b, hooks, clock, max_reclaims=1)
        killer = make_job(max_retries=1)
        b.queue.enqueue(killer)
        for _ in range(2):  # the job kills its worker every time
            assert b.queue.dequeue("default", clock.now()) is not None
            clock.advance(1001)
            worker.reclaim_abandoned(clock.now())
        poisoned = make_job()
        b.queue.enqueue(poisoned)
        assert b.corrupt is not None
        b.corrupt(poisoned, "\x80pickle")
        worker.drain()
        dead = [(i, x.type) for e, i, x in heard.calls if e == "dead_lettered"]
        assert dead == [(killer.id, "lease-expired"), (poisoned.id, "decode-error")]
    finally:
        b.cleanup()


def test_a_queued_job_cancelled_by_id_or_in_bulk_is_reported_once() -> None:
    runtime = conveyor.build({"provider": "memory", "entry_points": False})
    heard = Heard(runtime.hooks)
    one = runtime.enqueue("mail", {"n": 1})
    bulk = runtime.enqueue_many("mail", [{"n": 2}, {"n": 3}], queue="bulk")
    runtime.cancel(one.id)
    runtime.cancel(one.id)  # already cancelled: nothing new is written, nothing heard
    runtime.cancel_many(queue="bulk")
    cancelled = [(i, x) for e, i, x in heard.calls if e == "cancelled"]
    assert cancelled == [(j.id, JobStatus.CANCELLED) for j in (one, *bulk)]
    runtime.close()


def test_a_running_job_is_reported_cancelled_when_its_worker_records_it() -> None:
    b = make_backend("memory")
    hooks = Hooks()
    heard = Heard(hooks)
    clock = ManualClock(T0)
    job = make_job()
    b.queue.enqueue(job)

    def asked_to_stop(args: Any) -> str:
        b.queue.request_cancel(job.id, clock.now())  # an operator's cancel while it runs
        return "done anyway"

    worker = Worker(
        b.queue, b.store, Registry({job.job_type: asked_to_stop}), clock=clock, hooks=hooks
    )
    worker.drain()
    assert [e for e, i, _ in heard.calls if i == job.id] == ["started", "cancelled"]
    assert b.store.get(job.id).status is JobStatus.CANCELLED


def test_an_abandoned_claim_with_a_cancel_request_is_reported_cancelled() -> None:
    b = make_backend("sqlite")
    try:
        hooks = Hooks()
        heard = Heard(hooks)
        clock = ManualClock(T0)
        worker = _leasing_worker(b, hooks, clock, max_reclaims=3)
        job = make_job()
        b.queue.enqueue(job)
        assert b.queue.dequeue("default", clock.now()) is not None  # its worker then dies
        b.queue.request_cancel(job.id, clock.now())
        clock.advance(1001)
        worker.reclaim_abandoned(clock.now())
        assert [(e, i) for e, i, _ in heard.calls] == [("cancelled", job.id)]
    finally:
        b.cleanup()


def test_on_hooks_work_as_decorators_and_refuse_what_is_not_callable() -> None:
    hooks = Hooks()

    @hooks.on_failed
    def report(job: Job, exc: BaseException | None) -> None:
        pass

    assert callable(report)
    with pytest.raises(TypeError, match="must be callable"):
        hooks.on_started("not a function")  # type: ignore[arg-type]
