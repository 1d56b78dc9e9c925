"""Write, then release: for every decision kind, the order and what a crash leaves.

Each decision's outcome (history row, replacement, dead letter) must be written
before the claim is released. The order tests fail if the release comes first;
the crash tests kill the 'process' before each effect in turn and check that
the job is still somewhere: queued, scheduled, in flight, or recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from conveyor.core import (
    Decision,
    ErrorInfo,
    Failed,
    NoHandler,
    Policies,
    Succeeded,
    decide,
    decide_reclaim,
    reclaim_cutoff,
    start,
)
from conveyor.core.policies import LeasePolicy
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.executor import Executor
from conveyor.shell.ports import Claim
from conveyor.testing.clock import ManualClock
from helpers import T0, Crash, Recorder, locate, make_job

POLICIES = Policies()
RETRYABLE = Failed(ErrorInfo("Boom", "try again", retryable=True))
PERMANENT = Failed(ErrorInfo("Bad", "never works", retryable=False))


def _handled(outcome: object) -> Callable[[Claim], tuple[Decision, dict[str, object]]]:
    def build(claim: Claim) -> tuple[Decision, dict[str, object]]:
        job = start(claim.job, T0).unwrap()
        return decide(job, outcome, T0, POLICIES, 0.5), {}  # type: ignore[arg-type]

    return build


def _reclaimed(poison: bool) -> Callable[[Claim], tuple[Decision, dict[str, object]]]:
    def build(claim: Claim) -> tuple[Decision, dict[str, object]]:
        job = start(claim.job, T0).unwrap()
        policy = LeasePolicy(lease_ms=1000, max_reclaims=0 if poison else 5)
        later = T0 + timedelta(seconds=5)
        return decide_reclaim(job, later, policy), {"cutoff": reclaim_cutoff(later, 1000)}

    return build


# (decision kind, how to reach it, the write that must precede any release)
CASES = {
    "Complete": (_handled(Succeeded({"ok": True})), "store.record"),
    "Retry": (_handled(RETRYABLE), "queue.replace"),
    "DeadLetter": (_handled(PERMANENT), "store.record"),
    "Requeue": (_handled(NoHandler()), "queue.replace"),
    "Reclaim": (_reclaimed(poison=False), "queue.reclaim"),
    "DeadLetter(poison pill)": (_reclaimed(poison=True), "store.record"),
}


def _setup(
    crash: dict[str, int],
) -> tuple[Executor, list[str], MemoryJobQueue, MemoryJobStore, Claim]:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    log: list[str] = []
    executor = Executor(
        Recorder(queue, "queue", log, crash),  # type: ignore[arg-type]
        Recorder(store, "store", log, crash),  # type: ignore[arg-type]
        clock=ManualClock(T0),
        sleep=lambda _: None,
    )
    return executor, log, queue, store, claim


@pytest.mark.parametrize("kind", list(CASES))
def test_the_decision_is_written_before_the_claim_is_released(kind: str) -> None:
    build, write = CASES[kind]
    executor, log, queue, store, claim = _setup({})
    decision, extra = build(claim)
    assert type(decision).__name__ == kind.split("(")[0]
    assert executor.carry_out(claim, decision, **extra)  # type: ignore[arg-type]
    assert write in log, f"{kind}: {write} never happened: {log}"
    releases = [i for i, call in enumerate(log) if call == "queue.ack"]
    assert all(log.index(write) < i for i in releases), f"{kind}: released before writing: {log}"


@pytest.mark.parametrize("kind", list(CASES))
def test_a_crash_between_any_two_steps_leaves_the_job_somewhere(kind: str) -> None:
    build, _ = CASES[kind]
    probe_executor, *_ = _setup({})
    claim0, decision0, extra0 = _probe(build)
    steps = len(probe_executor.plan(claim0, decision0, **extra0))  # type: ignore[arg-type]
    for crash_at in range(1, steps + 2):
        crash = {"at": crash_at}
        executor, _, queue, store, claim = _setup(crash)
        decision, extra = build(claim)
        try:
            executor.carry_out(claim, decision, **extra)  # type: ignore[arg-type]
        except Crash:
            pass
        where = locate(queue, store, claim.job.id)
        assert where != "nowhere", f"{kind}: crash before effect {crash_at} lost the job"


def _probe(
    build: Callable[[Claim], tuple[Decision, dict[str, object]]],
) -> tuple[Claim, Decision, dict[str, object]]:
    queue = MemoryJobQueue()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    return (claim, *build(claim))


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
    executor = Executor(queue, flaky, clock=ManualClock(T0), sleep=lambda _: None)
    decision = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
    assert executor.carry_out(claim, decision) is True
    assert flaky.get(claim.job.id) is not None
    assert queue.counts(T0)["default"].in_flight == 0
    del store
