"""Workers on the in-memory backend, with an injected clock: the behaviour users see."""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta
from typing import Any

import pytest
from conveyor.core import JobStatus, Policies, Priority, RequeuePolicy, RetryPolicy
from conveyor.core.policies import LeasePolicy
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.ports import Claim
from conveyor.shell.registry import Permanent, Registry
from conveyor.shell.worker.loop import Worker, WorkerPool
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job
from returns.result import Failure, Success

NO_JITTER = Policies(retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter=False))


def _worker(registry: Registry, clock: ManualClock, policies: Policies = NO_JITTER, **kw: Any):
    queue, store = MemoryJobQueue(), MemoryJobStore()
    worker = Worker(
        queue, store, registry, clock=clock, policies=policies, jitter=lambda: 0.5, **kw
    )
    return worker, queue, store


def test_jobs_run_critical_to_low_and_fifo_within_a_priority() -> None:
    ran: list[str] = []
    registry = Registry({"work": lambda args: ran.append(args["name"])})
    clock = ManualClock(T0)
    worker, queue, _ = _worker(registry, clock)
    order = ["low", "normal", "high", "critical"]
    for i in range(3):
        for p in order:
            queue.enqueue(make_job(args={"name": f"{p}{i}"}, priority=Priority(p)))
    assert worker.drain() == 12
    expected = [f"{p}{i}" for p in reversed(order) for i in range(3)]
    assert ran == expected


def test_a_failing_job_is_retried_with_the_policy_delays_then_dead_lettered() -> None:
    attempts: list[Any] = []

    def flaky(args: Any) -> None:
        attempts.append(clock.now())
        raise ConnectionError("upstream down")

    registry = Registry({"work": flaky})
    clock = ManualClock(T0)
    worker, queue, store = _worker(registry, clock)
    job = make_job(max_retries=3)
    queue.enqueue(job)
    assert worker.drain() == 1
    for delay in (100, 200, 400):
        clock.advance(delay - 1)
        assert worker.drain() == 0, "not due yet"
        clock.advance(1)
        assert worker.drain() == 1
    gaps = [(b - a) / timedelta(milliseconds=1) for a, b in itertools.pairwise(attempts)]
    assert gaps == [100, 200, 400]
    dead = store.list_dead()
    assert [j.id for j in dead] == [job.id]
    assert dead[0].status is JobStatus.FAILED
    assert dead[0].retry_count == 3
    assert dead[0].last_error is not None
    assert dead[0].last_error.type == "ConnectionError"
    assert dead[0].last_error.message == "upstream down"


def test_a_permanent_failure_is_dead_lettered_without_retries() -> None:
    def bad(args: Any) -> None:
        raise Permanent("card declined", type="declined")

    clock = ManualClock(T0)
    worker, queue, store = _worker(Registry({"work": bad}), clock)
    queue.enqueue(make_job())
    worker.drain()
    [dead] = store.list_dead()
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.retryable) == ("declined", False)


def test_returns_success_and_failure_are_honoured() -> None:
    clock = ManualClock(T0)
    registry = Registry(
        {"ok": lambda a: Success({"n": 1}), "no": lambda a: Failure(ValueError("nope"))}
    )
    worker, queue, store = _worker(registry, clock)
    ok, no = make_job("ok"), make_job("no", max_retries=0)
    queue.enqueue(ok)
    queue.enqueue(no)
    worker.drain()
    recorded = store.get(ok.id)
    assert recorded is not None and recorded.status is JobStatus.COMPLETED
    assert recorded.result == {"n": 1}
    failed = store.get(no.id)
    assert failed is not None and failed.last_error is not None
    assert failed.last_error.type == "ValueError"


def test_a_job_with_no_handler_is_parked_then_dead_lettered_after_the_age_window() -> None:
    clock = ManualClock(T0)
    policies = Policies(requeue=RequeuePolicy(requeue_delay_ms=1000, max_requeue_age_ms=5000))
    worker, queue, store = _worker(Registry({"other": lambda a: None}), clock, policies)
    job = make_job("unknown-type")
    queue.enqueue(job)
    assert worker.drain() == 1
    counts = queue.counts(clock.now())["default"]
    assert (counts.ready, counts.scheduled) == (0, 1), "parked, not straight back on ready"
    assert worker.drain() == 0, "the worker does not spin on it during the delay"
    for _ in range(5):
        clock.advance(1000)
        worker.drain()
    [dead] = store.list_dead()
    assert dead.id == job.id
    assert dead.last_error is not None and dead.last_error.type == "no-handler"
    assert dead.metadata.first_missing_at == T0


def test_an_undecodable_payload_is_dead_lettered_and_the_worker_keeps_going() -> None:
    from backends import make_backend

    b = make_backend("sqlite")  # memory stores values: nothing there fails to decode
    try:
        clock = ManualClock(T0)
        ran: list[int] = []
        registry = Registry({"work": lambda a: ran.append(1)})
        worker = Worker(b.queue, b.store, registry, clock=clock, jitter=lambda: 0.5)
        poisoned = make_job()
        b.queue.enqueue(poisoned)
        assert b.corrupt is not None
        b.corrupt(poisoned, "\x80pickle")
        b.queue.enqueue(make_job())
        assert worker.drain() == 2 and ran == [1]
        [dead] = b.store.list_dead()
        assert dead.id == poisoned.id
        assert dead.last_error is not None and dead.last_error.type == "decode-error"
    finally:
        b.cleanup()


def test_an_abandoned_claim_is_reclaimed_after_the_lease_and_run_again() -> None:
    clock = ManualClock(T0)
    ran: list[int] = []
    policies = Policies(lease=LeasePolicy(lease_ms=1000))
    worker, queue, store = _worker(Registry({"work": lambda a: ran.append(1)}), clock, policies)
    job = make_job()
    queue.enqueue(job)
    dead_worker_claim = queue.dequeue("default", clock.now())  # a worker that then died
    assert isinstance(dead_worker_claim, Claim)
    clock.advance(1001)
    assert worker.drain() == 1
    assert ran == [1]
    recorded = store.get(job.id)
    assert recorded is not None and recorded.metadata.reclaim_count == 1
    assert queue.ack(dead_worker_claim) is False


def test_a_poison_pill_is_dead_lettered_with_lease_expired() -> None:
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(lease_ms=1000, max_reclaims=2))
    worker, queue, store = _worker(Registry({"work": lambda a: None}), clock, policies)
    job = make_job(max_retries=2)
    queue.enqueue(job)
    for _ in range(3):  # the job kills its worker every time
        assert queue.dequeue("default", clock.now()) is not None
        clock.advance(1001)
        worker.reclaim_abandoned(clock.now())
    [dead] = store.list_dead()
    assert dead.last_error is not None and dead.last_error.type == "lease-expired"


def test_an_empty_registry_logs_a_loud_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(T0)
    worker, _, _ = _worker(Registry(), clock)
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        worker.drain()
    assert any("NO handlers" in r.getMessage() for r in caplog.records)


def test_a_scheduled_job_runs_only_once_due() -> None:
    clock = ManualClock(T0)
    ran: list[int] = []
    worker, queue, _ = _worker(Registry({"work": lambda a: ran.append(1)}), clock)
    queue.enqueue(make_job(delay=timedelta(seconds=30)))
    assert worker.drain() == 0
    clock.advance(30_000)
    assert worker.drain() == 1 and ran == [1]


def test_job_args_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(T0)

    def fails(args: Any) -> None:
        raise RuntimeError("boom")

    worker, queue, _ = _worker(Registry({"work": fails}), clock)
    queue.enqueue(make_job(args={"password": "s3cr3t-canary"}, max_retries=0))
    with caplog.at_level(logging.DEBUG):
        worker.drain()
    assert "s3cr3t-canary" not in caplog.text


def test_a_pool_processes_with_several_threads_and_stops_gracefully() -> None:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    done: list[int] = []
    registry = Registry({"work": lambda a: done.append(a["i"])})
    pool = WorkerPool(queue, store, registry, worker_count=4, poll_interval_ms=5)
    for i in range(200):
        queue.enqueue(make_job(args={"i": i}))
    pool.start()
    import time

    deadline = time.monotonic() + 10
    while len(done) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.stop(grace_s=5)
    assert sorted(done) == list(range(200))
    assert pool.stats.completed == 200


def test_a_long_job_keeps_its_claim_alive_by_heartbeat() -> None:
    import threading
    import time

    from conveyor.core import reclaim_cutoff
    from conveyor.shell.ports import SystemClock

    queue, store = MemoryJobQueue(), MemoryJobStore()
    clock = SystemClock()
    release = threading.Event()
    registry = Registry({"slow": lambda a: release.wait(5)})
    policies = Policies(lease=LeasePolicy(lease_ms=300))
    worker = Worker(queue, store, registry, policies=policies, heartbeat_interval_ms=50)
    queue.enqueue(make_job("slow", now=clock.now()))
    runner = threading.Thread(target=worker.drain)
    runner.start()
    seen_abandoned = []
    for _ in range(8):  # 0.8 s: well past the 300 ms lease
        time.sleep(0.1)
        seen_abandoned += queue.abandoned(reclaim_cutoff(clock.now(), 300))
    release.set()
    runner.join(5)
    assert seen_abandoned == [], "the heartbeat renewed the lease while the handler ran"
    assert worker.stats.completed == 1


def test_a_graceful_stop_of_several_pools_claims_nothing_more_in_any_of_them(caplog) -> None:
    # The pools were stopped one after another: while the first waited out its grace
    # for a running job, the second went on claiming (and started jobs enqueued after
    # the stop began), then was given no grace at all ("busy after 0.0s").
    import threading
    import time

    import conveyor

    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow(args: Any) -> None:
        started.set()
        release.wait(10)

    workers = {"queues": ["slow", "fast"], "count": 1, "poll_interval_ms": 10}
    rt = conveyor.build(
        {"provider": "memory", "workers": workers},
        handlers={"slow": slow, "fast": lambda a: ran.append("fast")},
    )
    held = rt.enqueue("slow", {}, queue="slow")
    rt.start()
    assert started.wait(10)
    stopping = threading.Thread(target=rt.stop, args=(1.0,))
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        stopping.start()
        time.sleep(0.2)
        late = rt.enqueue("fast", {}, queue="fast")
        stopping.join(10)
    release.set()
    assert ran == [], "a pool claimed a job enqueued after the stop began"
    assert rt.get(late.id).state is JobStatus.PENDING
    busy = [r.getMessage() for r in caplog.records if "still busy" in r.getMessage()]
    # Named, and what leaving them costs said: a job left this way on every deploy
    # ends as a poison pill (lease-expired) once its reclaims run out.
    assert busy == [
        f"1 worker(s) on 'slow' still busy after 1.0s; their jobs are left to the lease: "
        f"{held.id}; each returns when its lease runs out, charged as an expired lease "
        "(max_reclaims); a drain timeout (conveyor worker --drain-timeout) hands them "
        "back at once, uncharged"
    ]
