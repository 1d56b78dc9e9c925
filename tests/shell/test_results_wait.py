"""Waiting for a job's outcome (`Runtime.result`, `Runtime.aresult`) on every backend:
each outcome has its own answer, and the wait is woken by the finish itself."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import conveyor
import pytest
from backends import Backend
from conveyor import JobCancelled, JobFailed, JobNotFound, ResultTimeout
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.config import Config
from conveyor.shell.ports import FinishWatchingStore
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from helpers import make_job

pytestmark = pytest.mark.timeout(120)

NESTED = {"rows": [1, {"a": None}], "name": "é"}


def boom(args: Any) -> None:
    raise conveyor.Permanent("the printer is on fire")


def runtime_on(backend: Backend, queue: Any = None, store: Any = None) -> Runtime:
    handlers = {"work": lambda args: NESTED, "boom": boom}
    return Runtime(
        Config(), queue or backend.queue, store or backend.store, Registry(handlers)
    )


def drain_soon(runtime: Runtime, delay_s: float = 0.3) -> threading.Thread:
    """Run the queue's jobs in another thread after `delay_s`, while the test waits."""

    def run() -> None:
        time.sleep(delay_s)
        runtime.drain(timeout_s=30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_result_returns_a_completed_jobs_result_as_plain_json(backend: Backend) -> None:
    runtime = runtime_on(backend)
    job = runtime.enqueue("work", {})
    worker = drain_soon(runtime)
    assert runtime.result(job.id, timeout=30) == NESTED
    assert type(runtime.result(str(job.id), timeout=0)) is dict, "read again: still there"
    worker.join()


def test_a_dead_job_raises_job_failed_with_its_last_error(backend: Backend) -> None:
    runtime = runtime_on(backend)
    job = runtime.enqueue("boom", {})
    worker = drain_soon(runtime)
    with pytest.raises(JobFailed, match="the printer is on fire") as raised:
        runtime.result(job.id, timeout=30)
    assert raised.value.job_id == job.id
    assert raised.value.error is not None and raised.value.error.type == "Permanent"
    worker.join()


def test_a_cancelled_job_raises_job_cancelled(backend: Backend) -> None:
    runtime = runtime_on(backend)
    job = runtime.enqueue("work", {}, delay=3600)
    threading.Timer(0.2, runtime.cancel, args=(job.id,)).start()
    with pytest.raises(JobCancelled) as raised:
        runtime.result(job.id, timeout=30)
    assert raised.value.job_id == job.id


def test_a_wait_that_runs_out_raises_result_timeout_with_the_jobs_state(backend: Backend) -> None:
    runtime = runtime_on(backend)
    job = runtime.enqueue("work", {}, delay=3600)
    began = time.monotonic()
    with pytest.raises(ResultTimeout) as raised:
        runtime.result(job.id, timeout=0.3)
    assert time.monotonic() - began >= 0.3
    assert raised.value.state is JobStatus.SCHEDULED and raised.value.job_id == job.id
    assert isinstance(raised.value, TimeoutError)
    assert "scheduled" in str(raised.value)


def test_an_unknown_id_raises_job_not_found_at_once(backend: Backend) -> None:
    runtime = runtime_on(backend)
    unknown = uuid4()
    began = time.monotonic()
    with pytest.raises(JobNotFound) as raised:
        runtime.result(unknown, timeout=30)
    assert time.monotonic() - began < 10, "no wait for an id nobody holds"
    assert raised.value.job_id == unknown and isinstance(raised.value, LookupError)


def test_a_malformed_id_or_a_negative_timeout_is_a_validation_error(backend: Backend) -> None:
    runtime = runtime_on(backend)
    with pytest.raises(ValidationError, match="job_id"):
        runtime.result("not-a-uuid")
    with pytest.raises(ValidationError, match="timeout"):
        runtime.result(uuid4(), timeout=-1)


def test_aresult_waits_on_the_event_loop(backend: Backend) -> None:
    runtime = runtime_on(backend)
    done, dead, parked = (
        runtime.enqueue("work", {}),
        runtime.enqueue("boom", {}),
        runtime.enqueue("work", {}, delay=3600),
    )
    worker = drain_soon(runtime)
    ticks: list[int] = []

    async def ticking() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.01)

    async def main() -> tuple[Any, BaseException, BaseException]:
        ticker = asyncio.create_task(ticking())
        value = await runtime.aresult(done.id, timeout=30)
        failures = await asyncio.gather(
            runtime.aresult(dead.id, timeout=30),
            runtime.aresult(parked.id, timeout=0.3),
            return_exceptions=True,
        )
        ticker.cancel()
        return value, failures[0], failures[1]

    value, failed, timed_out = asyncio.run(main())
    worker.join()
    assert value == NESTED
    assert isinstance(failed, JobFailed) and failed.job_id == dead.id
    assert isinstance(timed_out, ResultTimeout) and timed_out.state is JobStatus.SCHEDULED
    assert len(ticks) > 5, "the loop ran on while the waits waited"


# ---- woken by the finish itself ---------------------------------------------------


def test_every_store_signals_the_finish_of_a_watched_job(backend: Backend) -> None:
    """The watch wakes when the job's record is written by another connection (another
    process's view where the backend has one), and, where the backend tells finishes
    apart, not when another job's is."""
    store = backend.store
    assert isinstance(store, FinishWatchingStore)
    writer = backend.peer()[1] if backend.peer is not None else store
    job = make_job("work")
    with store.watch_finished(job.id) as watch:
        watch.wait(1.0)  # a listener that just (re)subscribed wakes everyone once
        if backend.name != "sqlite":  # SQLite only knows that something committed
            other = make_job("work")
            writer.record(_finished(other))
            assert not watch.wait(0.3), "another job's finish does not wake this waiter"
        writer.record(_finished(job))
        assert watch.wait(10.0), "the finish woke the waiter"


def _finished(job: Any) -> Any:
    import attrs

    return attrs.evolve(job, status=JobStatus.COMPLETED, result="ok")


def test_a_store_that_cannot_signal_is_polled(backend: Backend) -> None:
    class Plain:
        """The store's port without its finish signals."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            if name == "watch_finished":
                raise AttributeError(name)
            return getattr(self._inner, name)

    plain = Plain(backend.store)
    assert not isinstance(plain, FinishWatchingStore)
    runtime = runtime_on(backend, store=plain)
    job = runtime.enqueue("work", {})
    worker = drain_soon(runtime)
    assert runtime.result(job.id, timeout=30) == NESTED
    worker.join()


# ---- a pruned record, told apart from an unknown id ------------------------------


def test_a_pruned_record_is_told_apart_from_an_id_never_enqueued(backend: Backend) -> None:
    from datetime import timedelta

    from conveyor.core import RetentionPolicy, prune_order

    runtime = runtime_on(backend)
    job = runtime.enqueue("work", {})
    runtime.drain(timeout_s=30)
    assert runtime.result(job.id, timeout=0) == NESTED
    later = datetime.now(UTC) + timedelta(days=30)
    policy = RetentionPolicy(completed_ms=1000, dead_ms=1000)
    assert backend.store.prune(prune_order(policy, later)) == 1
    with pytest.raises(JobNotFound) as pruned:
        runtime.result(job.id, timeout=5)
    assert pruned.value.pruned is True and pruned.value.pruned_at == later
    assert "pruned by retention" in str(pruned.value)
    with pytest.raises(JobNotFound) as unknown:
        runtime.result(uuid4(), timeout=5)
    assert unknown.value.pruned is False and unknown.value.pruned_at is None
    assert "never enqueued here" in str(unknown.value)


def test_a_tombstone_is_forgotten_after_remember_pruned_ms(backend: Backend) -> None:
    from datetime import timedelta

    from conveyor.core import RetentionPolicy, prune_order

    runtime = runtime_on(backend)
    first, second = runtime.enqueue("work", {}), runtime.enqueue("boom", {})
    runtime.drain(timeout_s=30)
    policy = RetentionPolicy(completed_ms=1000, dead_ms=1000, remember_pruned_ms=60_000)
    at = datetime.now(UTC) + timedelta(days=30)
    store = backend.store
    assert store.prune(prune_order(policy, at, limit=1)) == 1  # the oldest: `first`
    assert store.pruned_at(first.id) is not None
    # A prune two minutes later drops tombstones over a minute old as it writes its own;
    # Redis lets each expire on its own a minute after it was written instead.
    assert store.prune(prune_order(policy, at + timedelta(minutes=2))) == 1
    assert store.pruned_at(second.id) is not None
    if backend.name != "redis":
        assert store.pruned_at(first.id) is None


def test_no_tombstone_is_written_when_remember_pruned_ms_is_0(backend: Backend) -> None:
    from datetime import timedelta

    from conveyor.core import RetentionPolicy, prune_order

    runtime = runtime_on(backend)
    job = runtime.enqueue("work", {})
    runtime.drain(timeout_s=30)
    policy = RetentionPolicy(completed_ms=1000, remember_pruned_ms=0)
    assert backend.store.prune(prune_order(policy, datetime.now(UTC) + timedelta(days=1))) == 1
    with pytest.raises(JobNotFound) as raised:
        runtime.result(job.id, timeout=0)
    assert raised.value.pruned is False
