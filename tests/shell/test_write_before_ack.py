"""Write, then release: for every decision kind, the order and what a crash leaves.

Each decision's outcome (history row, replacement, dead letter) must be written
before the claim is released. The order tests fail if the release comes first;
the crash tests kill the 'process' before each effect in turn and check that
the job is still somewhere: queued, scheduled, in flight, or recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
from conveyor.core import (
    Decision,
    ErrorInfo,
    Failed,
    Metadata,
    NoHandler,
    Policies,
    Succeeded,
    cancel_claimed,
    decide,
    decide_hand_back,
    decide_reclaim,
    decide_revive,
    reclaim_cutoff,
    start,
)
from conveyor.core.policies import LeasePolicy
from conveyor.core.prefetch import StartClaim, decide_start
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.executor import Executor
from conveyor.shell.placeholder import undecodable_dead_letter
from conveyor.shell.ports import BadClaim, Claim
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, Crash, Recorder, locate, make_job

POLICIES = Policies()
RETRYABLE = Failed(ErrorInfo("Boom", "try again", retryable=True))
PERMANENT = Failed(ErrorInfo("Bad", "never works", retryable=False))


Build = Callable[[Claim, MemoryJobStore], Decision]


def _handled(outcome: object) -> Build:
    def build(claim: Claim, store: MemoryJobStore) -> Decision:
        job = start(claim.job, T0).unwrap()
        return decide(job, outcome, T0, POLICIES, 0.5)  # type: ignore[arg-type]

    return build


def _reclaimed(poison: bool) -> Build:
    def build(claim: Claim, store: MemoryJobStore) -> Decision:
        job = start(claim.job, T0).unwrap()
        policy = LeasePolicy(lease_ms=1000, max_reclaims=0 if poison else 5)
        later = T0 + timedelta(seconds=5)
        return decide_reclaim(job, later, policy, reclaim_cutoff(later, 1000))

    return build


def _handed_back(claim: Claim, store: MemoryJobStore) -> Decision:
    return decide_hand_back(claim.job, T0)


def _undecodable(claim: Claim, store: MemoryJobStore) -> Decision:
    bad = BadClaim(str(claim.job.id), claim.token, claim.queue, "{oops", "not JSON", T0)
    return undecodable_dead_letter(bad, T0)


# (decision kind, how to reach it, the write that must precede any release)
CASES = {
    "Complete": (_handled(Succeeded({"ok": True})), "store.record"),
    "Retry": (_handled(RETRYABLE), "queue.replace"),
    "DeadLetter": (_handled(PERMANENT), "store.record"),
    "Requeue": (_handled(NoHandler()), "queue.replace"),
    "Reclaim": (_reclaimed(poison=False), "queue.reclaim"),
    "DeadLetter(poison pill)": (_reclaimed(poison=True), "store.record"),
    "HandBack": (_handed_back, "queue.replace"),
    "DeadLetter(decode error)": (_undecodable, "store.record"),
}
#: The runtime's path: queue and store in one backend, record and release in one step.
ATOMIC_WRITE = {"store.record": "queue.finish"}

#: step by step: a queue apart from its store; atomic: the runtime's own pairing.
MODES = ("step-by-step", "atomic")


def _setup(
    crash: dict[str, int], mode: str = "step-by-step"
) -> tuple[Executor, list[str], MemoryJobQueue, MemoryJobStore, Claim]:
    store = MemoryJobStore()
    queue = MemoryJobQueue(store) if mode == "atomic" else MemoryJobQueue()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    log: list[str] = []
    executor = Executor(
        Recorder(queue, "queue", log, crash),  # type: ignore[arg-type]
        # Atomic: the queue finishes into this very store, so the executor gets it bare.
        store if mode == "atomic" else Recorder(store, "store", log, crash),  # type: ignore[arg-type]
        clock=ManualClock(T0),
        sleep=lambda _: None,
    )
    assert executor.batches_finish is (mode == "atomic")
    return executor, log, queue, store, claim


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(CASES))
def test_the_decision_is_written_before_the_claim_is_released(kind: str, mode: str) -> None:
    build, write = CASES[kind]
    executor, log, queue, store, claim = _setup({}, mode)
    decision = build(claim, store)
    assert type(decision).__name__ == kind.split("(")[0]
    if mode == "atomic":
        write = ATOMIC_WRITE.get(write, write)
    assert executor.carry_out(claim, decision)
    assert write in log, f"{kind}: {write} never happened: {log}"
    releases = [i for i, call in enumerate(log) if call == "queue.ack"]
    assert all(log.index(write) < i for i in releases), f"{kind}: released before writing: {log}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(CASES))
def test_a_crash_between_any_two_steps_leaves_the_job_somewhere(kind: str, mode: str) -> None:
    build, _ = CASES[kind]
    probe, _, _, probe_store, probe_claim = _setup({}, mode)
    steps = len(probe.plan(probe_claim, build(probe_claim, probe_store)))
    for crash_at in range(1, steps + 2):
        crash = {"at": crash_at}
        executor, _, queue, store, claim = _setup(crash, mode)
        decision = build(claim, store)
        try:
            executor.carry_out(claim, decision)
        except Crash:
            pass
        where = locate(queue, store, claim.job.id)
        assert where != "nowhere", f"{kind}: crash before effect {crash_at} lost the job"


def test_a_batch_of_outcomes_is_written_and_released_in_one_atomic_step() -> None:
    """The batched finish the worker uses: each record and release together, and a
    crash before it leaves every job in flight (reclaimed later), none lost."""
    for crash_at in (None, 1):
        store = MemoryJobStore()
        queue = MemoryJobQueue(store)
        for _ in range(3):
            queue.enqueue(make_job())
        claims = [c for c in queue.dequeue_many("default", T0, 3) if isinstance(c, Claim)]
        log: list[str] = []
        crash = {} if crash_at is None else {"at": crash_at}
        executor = Executor(Recorder(queue, "queue", log, crash), store)  # type: ignore[arg-type]
        items = [
            (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)) for c in claims
        ]
        try:
            done = executor.finish_many(items)
        except Crash:
            done = [False] * 3
        for claim, ok in zip(claims, done, strict=True):
            where = locate(queue, store, claim.job.id)
            assert where == ("recorded:completed" if ok else "in flight"), (crash_at, where)
        assert log == ([] if crash_at else ["queue.finish_many"])


def test_a_revive_queues_and_records_in_one_guarded_step() -> None:
    store = MemoryJobStore()
    queue = MemoryJobQueue(store)
    job = make_job()
    queue.enqueue(job)
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    dead = decide(start(claim.job, T0).unwrap(), PERMANENT, T0, POLICIES, 0.5)
    assert queue.finish(claim, dead.job)
    log: list[str] = []
    executor = Executor(Recorder(queue, "queue", log, {}), store)  # type: ignore[arg-type]
    revival = decide_revive(dead.job, T0)
    assert revival is not None
    assert executor.carry_out(None, revival) is True
    assert log == ["queue.revive"]
    assert executor.carry_out(None, revival) is False, "a second revive must find no dead letter"
    assert locate(queue, store, job.id) == "queued"


def test_an_executor_that_acks_first_is_caught_by_the_crash_check() -> None:
    """The crash check can fail: release before write, crash in between, job gone."""
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    queue.ack(claim)  # the wrong order: released first, then the process dies
    assert locate(queue, store, claim.job.id) == "nowhere"


def test_a_late_ack_with_a_stale_token_leaves_the_job_alone() -> None:
    queue = MemoryJobQueue()
    queue.enqueue(make_job())
    first = queue.dequeue("default", T0)
    assert isinstance(first, Claim)
    cutoff = T0 + timedelta(seconds=10)
    [stale] = queue.abandoned(cutoff)
    assert queue.reclaim(stale, first.job, cutoff)
    second = queue.dequeue("default", cutoff)
    assert isinstance(second, Claim) and second.token != first.token
    assert queue.ack(first) is False
    assert queue.extend(first, cutoff) is False
    assert queue.replace(first, first.job) is False
    assert queue.ack(second) is True


def test_an_ack_after_a_reenqueue_of_the_same_id_leaves_the_new_job_alone() -> None:
    queue = MemoryJobQueue()
    job = make_job()
    queue.enqueue(job)
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    queue.enqueue(job)  # upsert by id: ready and unlocked again
    assert queue.ack(claim) is False
    assert queue.counts(T0)["default"].ready == 1


def test_a_write_that_keeps_failing_is_never_followed_by_a_release() -> None:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)

    class BrokenStore(MemoryJobStore):
        calls = 0

        def record(self, job: object) -> None:
            BrokenStore.calls += 1
            raise OSError("disk on fire")

    executor = Executor(
        queue, BrokenStore(), clock=ManualClock(T0), attempts=3, sleep=lambda _: None
    )
    decision = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
    assert executor.carry_out(claim, decision) is False
    assert BrokenStore.calls == 3, "the write is retried a bounded number of times"
    assert [c.job.id for c in queue.abandoned(T0 + timedelta(hours=1))] == [claim.job.id]
    del store


def test_a_write_that_fails_once_is_retried_then_released() -> None:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    failures = iter([OSError("blip")])

    class FlakyStore(MemoryJobStore):
        def record(self, job: object) -> None:
            for exc in failures:
                raise exc
            super().record(job)  # type: ignore[arg-type]

    flaky = FlakyStore()
    executor = Executor(queue, flaky, clock=ManualClock(T0), attempts=2, sleep=lambda _: None)
    decision = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
    assert executor.carry_out(claim, decision) is True
    assert flaky.get(claim.job.id) is not None
    assert queue.counts(T0)["default"].in_flight == 0
    del store


def test_the_executor_does_not_retry_on_top_of_the_adapter() -> None:
    """One retry layer: the adapter's, within a quarter lease. Stacking the executor's
    own retries on it once kept a write going for minutes against a one-minute lease."""
    queue = MemoryJobQueue()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    calls: list[int] = []

    class DownStore(MemoryJobStore):
        def record(self, job: object) -> None:
            calls.append(1)
            raise OSError("still down after the adapter's own retries")

    executor = Executor(queue, DownStore(), clock=ManualClock(T0), sleep=lambda _: None)
    decision = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
    assert executor.carry_out(claim, decision) is False
    assert calls == [1]


@pytest.mark.parametrize("crash_at", [None, 1])
def test_a_cancelled_claim_is_recorded_and_released_in_one_fenced_step(
    crash_at: int | None,
) -> None:
    """The worker's write after a cancel request refused its outcome: record, clear the
    request and release together; a crash before it leaves the job in flight, and
    the request still standing (the lease keeper then records the cancel)."""
    store = MemoryJobStore()
    queue = MemoryJobQueue(store)
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    assert queue.request_cancel(claim.job.id, T0)
    log: list[str] = []
    crash = {} if crash_at is None else {"at": crash_at}
    executor = Executor(Recorder(queue, "queue", log, crash), store)  # type: ignore[arg-type]
    decision = cancel_claimed(start(claim.job, T0).unwrap(), T0, Succeeded(1))
    try:
        assert executor.carry_out(claim, decision) is True
    except Crash:
        pass
    if crash_at is None:
        assert log == ["queue.finish_cancelled"]
        assert not queue.cancel_requested(claim.job.id)
        assert locate(queue, store, claim.job.id) == "recorded:cancelled"
    else:
        assert queue.cancel_requested(claim.job.id)
        assert locate(queue, store, claim.job.id) == "in flight"


def test_a_queue_apart_from_its_store_refuses_to_cancel_rather_than_write_twice() -> None:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    executor = Executor(queue, store, clock=ManualClock(T0))
    decision = cancel_claimed(start(claim.job, T0).unwrap(), T0, Succeeded(1))
    assert executor.carry_out(claim, decision) is False
    assert locate(queue, store, claim.job.id) == "in flight"


# --- starting a prefetched claim: written before its handler runs, nothing released ---


def _prefetched_back(mode: str, crash: dict[str, int]) -> tuple[Executor, list[str], Any, Claim]:
    """A prefetched claim of a job that already came back from a dead worker's batch,
    and an executor whose queue records every effect."""
    store = MemoryJobStore()
    queue = MemoryJobQueue(store) if mode == "atomic" else MemoryJobQueue()
    queue.enqueue(attrs.evolve(make_job(), metadata=Metadata(prefetch_reclaims=1)))
    [claim] = queue.dequeue_many("default", T0, 5)
    assert isinstance(claim, Claim) and not claim.started
    log: list[str] = []
    executor = Executor(Recorder(queue, "queue", log, crash), store, sleep=lambda _: None)  # type: ignore[arg-type]
    return executor, log, queue, claim


@pytest.mark.parametrize("mode", MODES)
def test_starting_a_prefetched_claim_is_one_fenced_write_that_releases_nothing(mode: str) -> None:
    executor, log, queue, claim = _prefetched_back(mode, {})
    decision = decide_start(claim.job, claim.started, T0)
    assert isinstance(decision, StartClaim)
    begun = executor.start(claim, decision)
    assert begun is not None and begun.started and begun.token != claim.token
    assert log == ["queue.start_claim"], "a start writes once and never releases the claim"
    assert queue.extend(claim, T0) is False, "the prefetched token holds nothing any more"
    assert queue.extend(begun, T0) is True, "the started claim is still held"
    assert executor.start(claim, decision) is None, "a lost prefetched claim starts nothing"


@pytest.mark.parametrize("mode", MODES)
def test_a_crash_around_a_start_leaves_the_job_in_flight(mode: str) -> None:
    for crash_at in (1, 2):
        executor, _, queue, claim = _prefetched_back(mode, {"at": crash_at})
        decision = decide_start(claim.job, claim.started, T0)
        assert decision is not None
        try:
            executor.start(claim, decision)
        except Crash:
            pass
        assert locate(queue, MemoryJobStore(), claim.job.id) == "in flight"


def test_a_worker_writes_the_start_before_the_handler_runs() -> None:
    """The start must be written before the handler runs: a job that kills its worker
    is then charged on its next reclaim. Started after (or not at all), it would come
    back as an unstarted prefetched claim forever."""
    store = MemoryJobStore()
    queue = MemoryJobQueue(store)
    log: list[str] = []
    recorded = Recorder(queue, "queue", log, {})
    job = attrs.evolve(make_job(), metadata=Metadata(prefetch_reclaims=1))
    queue.enqueue(job)
    worker = Worker(
        recorded,  # type: ignore[arg-type]
        store,
        Registry({"work": lambda args: log.append("handler")}),
        clock=ManualClock(T0),
        prefetch=5,
        clock_check=False,
    )
    assert worker.drain() == 1
    assert "queue.start_claim" in log, log
    assert log.index("queue.start_claim") < log.index("handler"), log
    assert locate(queue, store, job.id) == "recorded:completed", "its outcome written"
