"""Waiting for a job's outcome (`Runtime.result`, `Runtime.aresult`) on every backend:
each outcome has its own answer, and the wait is woken by the finish itself."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import attrs
import conveyor
import pytest
import redis
import sqlalchemy as sa
from backends import REDIS_TEST_DB, Backend, make_backend
from conveyor import JobCancelled, JobFailed, JobNotFound, ResultTimeout
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.adapters.redis.finishes import CARRIED_MAX_BYTES as REDIS_CARRIED_MAX_BYTES
from conveyor.shell.adapters.sql import wakeups
from conveyor.shell.adapters.sql.postgres_ddl import CARRIED_MAX_BYTES, FINISHED_CHANNEL
from conveyor.shell.codec import encode
from conveyor.shell.config import Config
from conveyor.shell.ports import FinishWatchingStore
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.testing.redis_server import redis_url
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


# ---- a finish signal that carries the record -------------------------------------


class CountingStore:
    """The real store, counting the reads that found a job's finished record."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.finished_reads: Counter[UUID] = Counter()
        #: Reads that found a job unfinished. A waiter reads once, puts its watch on,
        #: and reads again: from its second read on, it watches the job.
        self.unfinished_reads: Counter[UUID] = Counter()

    def get(self, job_id: UUID) -> Any:
        found = self._inner.get(job_id)
        if found is not None and found.status.is_terminal:
            self.finished_reads[job_id] += 1
        else:
            self.unfinished_reads[job_id] += 1
        return found

    def drain_once_watched(self, runtime: Runtime, *job_ids: UUID) -> threading.Thread:
        """`runtime.drain` in another thread once a waiter has read each of `job_ids`
        unfinished twice (and so watches it): a finish before that, on a busy machine,
        is read from the store, not handed over."""

        def run() -> None:
            deadline = time.monotonic() + 30
            while not all(self.unfinished_reads[i] >= 2 for i in job_ids):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            runtime.drain(timeout_s=30)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture(params=["postgresql", "redis"])
def carrying(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The backends whose finish signal carries the record."""
    made = make_backend(request.param)
    yield made
    made.cleanup()


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def handing(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The backends whose listener hands a waiter its record (SQLite reads the watched
    jobs' records once per commit)."""
    made = make_backend(request.param)
    yield made
    made.cleanup()


def _announce(backend: Backend, message: str) -> None:
    """Send a finish message on the backend's own channel, as a finish would."""
    if backend.name == "postgresql":
        with backend.engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_notify(:c, :m)"), {"c": FINISHED_CHANNEL, "m": message})
    else:
        # Onto every inbox registered for the job, as a finish's script pushes it.
        keys = backend.store.keys
        client = redis.Redis.from_url(redis_url(REDIS_TEST_DB))
        try:
            for name in client.smembers(keys.waiters(message.partition("\n")[0])):
                client.rpush(keys.inbox(name.decode()), message)
        finally:
            client.close()


@pytest.fixture
def signals_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiters woken by finish signals alone: their fallback read (once a second) would
    read the store on a slow machine before the signal's record was handed over."""
    from conveyor.shell.runtime import results

    monkeypatch.setattr(results, "FALLBACK_POLL_S", 30.0)


@pytest.mark.parametrize("mode", ["result", "aresult"])
def test_a_waiter_handed_its_record_does_not_read_the_store(
    handing: Backend, mode: str, signals_only: None
) -> None:
    counting = CountingStore(handing.store)
    waiter = runtime_on(handing, store=counting)
    worker = runtime_on(handing, *handing.peer())  # finishes through its own connection
    job = waiter.enqueue("work", {})
    finishing = counting.drain_once_watched(worker, job.id)
    if mode == "result":
        value = waiter.result(job.id, timeout=30)
    else:
        value = asyncio.run(waiter.aresult(job.id, timeout=30))
    finishing.join()
    assert value == NESTED
    assert counting.finished_reads[job.id] == 0, "the record came with the signal"


@pytest.mark.parametrize("mode", ["result", "aresult"])
def test_a_waiter_handed_a_dead_letter_raises_its_last_error_without_a_read(
    handing: Backend, mode: str, signals_only: None
) -> None:
    counting = CountingStore(handing.store)
    waiter = runtime_on(handing, store=counting)
    worker = runtime_on(handing, *handing.peer())
    job = waiter.enqueue("boom", {})
    finishing = counting.drain_once_watched(worker, job.id)
    with pytest.raises(JobFailed, match="the printer is on fire") as raised:
        if mode == "result":
            waiter.result(job.id, timeout=30)
        else:
            asyncio.run(waiter.aresult(job.id, timeout=30))
    finishing.join()
    error = raised.value.error
    assert error is not None and (error.type, error.retryable) == ("Permanent", False)
    assert error.traceback is not None and "the printer is on fire" in error.traceback
    assert counting.finished_reads[job.id] == 0, "the record came with the signal"


def test_a_carried_record_of_an_earlier_attempt_does_not_end_the_wait(carrying: Backend) -> None:
    runtime = runtime_on(carrying)
    job = runtime.enqueue("work", {}, delay=3600)  # parked: no attempt made yet
    earlier = attrs.evolve(job, status=JobStatus.COMPLETED, result="stale", attempt=job.attempt)
    later = attrs.evolve(job, status=JobStatus.COMPLETED, result="fresh", attempt=job.attempt + 1)

    settled = threading.Event()

    def announce() -> None:
        # Each message again and again: the waiter's listener may still be connecting.
        for _ in range(3):
            time.sleep(0.3)
            _announce(carrying, f"{job.id}\n{encode(earlier)}")
        while not settled.is_set():
            # Never written to the store: only the signal can have brought it.
            _announce(carrying, f"{job.id}\n{encode(later)}")
            settled.wait(0.3)

    thread = threading.Thread(target=announce, daemon=True)
    thread.start()
    try:
        assert runtime.result(job.id, timeout=30) == "fresh"
    finally:
        settled.set()
        thread.join()


def test_a_record_too_large_to_carry_is_announced_by_id_and_read_from_the_store(
    carrying: Backend,
) -> None:
    cap = CARRIED_MAX_BYTES if carrying.name == "postgresql" else REDIS_CARRIED_MAX_BYTES
    big = "x" * cap
    handlers = Registry({"big": lambda a: big, "work": lambda a: 1})
    counting = CountingStore(carrying.store)
    waiter = Runtime(Config(), carrying.queue, counting, handlers)
    worker = Runtime(Config(), *carrying.peer(), handlers)
    small, large = waiter.enqueue("work", {}), waiter.enqueue("big", {})
    with _finish_messages(carrying, {str(small.id), str(large.id)}) as heard:
        finishing = drain_soon(worker)
        assert waiter.result(large.id, timeout=30) == big
        assert waiter.result(small.id, timeout=30) == 1
        finishing.join()
        messages = heard({str(small.id), str(large.id)})
    assert messages[str(small.id)] != "", "a small record rides along"
    # PostgreSQL: too large for a notification. Redis: a list would hold it, but in the
    # server's memory until the waiting process pops it.
    assert messages[str(large.id)] == "", "too large to carry: the id alone"
    assert counting.finished_reads[large.id] == 1, "so the waiter read it"


@contextlib.contextmanager
def _finish_messages(
    backend: Backend, ids: set[str]
) -> Iterator[Callable[[set[str]], dict[str, str]]]:
    """Listen for the backend's finish messages about `ids` (on its channel, or on
    Redis an inbox registered for them); yields `heard(ids)`, which waits for a message
    about each of `ids` and returns, by id, what came after it ('' for none)."""
    got: dict[str, str] = {}

    def keep(message: str) -> None:
        job_id, _, body = message.partition("\n")
        got[job_id] = body

    if backend.name == "postgresql":
        raw = backend.engine.raw_connection()
        conn: Any = raw.driver_connection
        conn.autocommit = True
        conn.execute(f"LISTEN {FINISHED_CHANNEL}")

        def heard(ids: set[str]) -> dict[str, str]:
            deadline = time.monotonic() + 10
            while not ids <= got.keys() and time.monotonic() < deadline:
                for note in conn.notifies(timeout=0.5):
                    keep(note.payload)
            return got

        try:
            yield heard
        finally:
            raw.invalidate()
        return
    # On Redis, an inbox of the test's own, registered for each id as a waiter is.
    keys, inbox = backend.store.keys, "finish-messages-under-test"
    client = redis.Redis.from_url(redis_url(REDIS_TEST_DB))

    def heard_redis(ids: set[str]) -> dict[str, str]:
        deadline = time.monotonic() + 10
        while not ids <= got.keys() and time.monotonic() < deadline:
            popped = client.blpop([keys.inbox(inbox)], timeout=0.5)
            if popped is not None:
                keep(popped[1].decode())
        return got

    for job_id in ids:
        client.sadd(keys.waiters(job_id), inbox)
    try:
        yield heard_redis
    finally:
        client.close()


def test_sqlite_hands_many_waiters_their_records_a_chunk_of_ids_at_a_time(
    monkeypatch: pytest.MonkeyPatch, signals_only: None
) -> None:
    monkeypatch.setattr(wakeups, "SQLITE_FINISHED_CHUNK", 2)
    sqlite = make_backend("sqlite")
    try:
        counting = CountingStore(sqlite.store)
        waiter = runtime_on(sqlite, store=counting)
        jobs = [waiter.enqueue("work", {}) for _ in range(5)]
        finishing = counting.drain_once_watched(
            runtime_on(sqlite, *sqlite.peer()), *(j.id for j in jobs)
        )

        async def wait_all() -> list[Any]:
            return await asyncio.gather(*(waiter.aresult(j.id, timeout=30) for j in jobs))

        assert asyncio.run(wait_all()) == [NESTED] * 5
        finishing.join()
        assert sum(counting.finished_reads.values()) == 0
    finally:
        sqlite.cleanup()


def test_a_watch_hears_a_finish_committed_while_its_listener_was_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first watch of a process starts the SQLite listener, which takes its baseline
    # when its thread runs. A finish committed between the waiter's read and that
    # baseline was never heard: the waiter slept out its fallback poll (a second).
    from conveyor.shell.adapters.sql import file_changes

    opened = file_changes.FileChanges.open

    def slow_open(path: str) -> Any:
        time.sleep(0.5)  # a busy machine: the listener's thread runs late
        return opened(path)

    monkeypatch.setattr(file_changes.FileChanges, "open", staticmethod(slow_open))
    sqlite = make_backend("sqlite")
    try:
        rt = runtime_on(sqlite)
        job = rt.enqueue("work", {})
        with sqlite.store.watch_finished(job.id) as watch:
            assert rt.get(job.id).state is not JobStatus.COMPLETED
            assert runtime_on(sqlite, *sqlite.peer()).drain(timeout_s=30).completed == 1
            assert watch.wait(5.0), "the finish was never announced"
    finally:
        sqlite.cleanup()
