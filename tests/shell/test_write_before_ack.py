"""Write, then release: the executor's side of it.

What every backend must show (for every decision kind, the outcome written before the
claim is released, and a crash between any two steps leaving the job somewhere) is in
the contract's `write_before_ack` cases, run on memory, SQLite, PostgreSQL and Redis
by test_adapter_surface.py. Here: those cases catch an executor that releases first,
on every backend; every decision that holds a claim has a case; and the executor's
own handling of writes that fail (retried within bounds, never followed by a
release).
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Sequence
from datetime import timedelta

import pytest
from backends import Backend, make_backend
from conveyor.core import (
    CancelClaim,
    Complete,
    DeadLetter,
    Decision,
    Policies,
    Succeeded,
    cancel_claimed,
    decide,
    decide_reclaim,
    start,
)
from conveyor.core.prefetch import StartClaim
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.executor import Executor, Step
from conveyor.shell.ports import BadClaim, Claim
from conveyor.testing.clock import ManualClock
from conveyor.testing.contract import check
from conveyor.testing.contract.cases.write_before_ack import DECISIONS
from helpers import T0, locate, make_job

POLICIES = Policies()

ORDER = "every_decision_is_written_before_its_claim_is_released"
CRASH = "a_crash_between_any_two_steps_leaves_the_job_somewhere"


class AckFirstExecutor(Executor):
    """A broken executor: it releases the claim first, then writes the outcome (with no
    fence: once the claim is gone there is nothing left to fence with). A process that
    dies between the two loses the job."""

    def plan(self, claim: Claim | BadClaim | None, decision: Decision) -> Sequence[Step]:
        if claim is None or isinstance(decision, StartClaim):
            return super().plan(claim, decision)
        queue, store, job = self.queue, self.store, decision.job
        release = Step("release", "ack", lambda: queue.ack(claim))
        if isinstance(decision, Complete | DeadLetter | CancelClaim):
            return (release, Step("write", "record", lambda: store.record(job)))
        return (release, Step("write", "enqueue", lambda: queue.enqueue(job)))


def test_the_contract_catches_an_executor_that_acks_first(backend: Backend) -> None:
    """Run against the broken executor, both write-before-ack cases fail, each for the
    reason it names; against the real one, on fresh subjects alike, both pass."""

    def fresh() -> Backend:
        return make_backend(backend.name)

    honest = check(fresh, cases=[ORDER, CRASH])
    assert honest.ok and honest.passed == (ORDER, CRASH), honest
    broken = check(fresh, cases=[ORDER, CRASH], executor=AckFirstExecutor)
    assert sorted(broken.failures) == sorted([ORDER, CRASH]), broken
    assert "released before writing" in broken.failures[ORDER]
    assert "lost the job" in broken.failures[CRASH]


def test_an_executor_that_acks_first_is_caught_by_the_crash_check() -> None:
    """The crash check can fail: with the release first, the process stopped after it
    (and before the write) leaves the job nowhere, and the check says which decision,
    after how many steps."""
    report = check(lambda: make_backend("memory"), cases=[CRASH], executor=AckFirstExecutor)
    assert list(report.failures) == [CRASH], report
    assert "Complete (step-by-step): a crash after 1 of 2 steps" in report.failures[CRASH]
    # The job is gone, not merely in a place the check does not look.
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    held = queue.dequeue("default", T0)
    assert isinstance(held, Claim)
    done = decide(start(held.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
    [release, _] = AckFirstExecutor(queue, store).plan(held, done)
    release.run()  # then the process dies
    assert locate(queue, store, held.job.id) == "nowhere"
    assert queue.counts(T0)["default"].in_flight == 0 and store.get(held.job.id) is None


def test_every_decision_that_releases_a_claim_has_a_write_before_ack_case() -> None:
    """The contract's table reaches every decision kind a claim holder carries out (the
    rest hold no claim, or have cases of their own: a start, a cancelled claim)."""
    kinds = {t.__name__ for t in typing.get_args(Decision)}
    own_cases = {"StartClaim", "CancelClaim"}
    holds_no_claim = {"Revive", "Cancel", "RequestCancel"}
    covered = {kind.split("(")[0] for kind in DECISIONS}
    assert covered == kinds - own_cases - holds_no_claim


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


def test_a_queue_apart_from_its_store_refuses_to_cancel_rather_than_write_twice() -> None:
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    executor = Executor(queue, store, clock=ManualClock(T0))
    decision = cancel_claimed(start(claim.job, T0).unwrap(), T0, Succeeded(1))
    assert executor.carry_out(claim, decision) is False
    assert locate(queue, store, claim.job.id) == "in flight"


def test_a_lost_race_of_the_lease_keeper_is_not_told_as_a_lost_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # After a crash, every live process's lease keeper reaches for the same abandoned
    # claims: the losers logged INFO "reclaim found the claim lost" for jobs that had
    # in fact been reclaimed, or that their own worker had finished meanwhile. A lost
    # race is routine (DEBUG); a worker's own write finding its claim gone is not.
    queue, store = MemoryJobQueue(), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    executor = Executor(queue, store, clock=ManualClock(T0))
    later = T0 + timedelta(minutes=5)
    cutoff = later - timedelta(seconds=60)
    reclaim = decide_reclaim(claim.job, later, POLICIES.lease, cutoff, started=False)
    assert executor.carry_out(claim, reclaim) is True
    with caplog.at_level(logging.DEBUG, logger="conveyor.executor"):
        assert executor.carry_out(claim, reclaim) is False  # another keeper's, again
        finish = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)
        assert executor.carry_out(claim, finish) is False  # the worker's own, too late
    told = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in told] == [logging.DEBUG, logging.INFO], told
    assert all("found the claim lost" in message for _, message in told), told
    assert "reclaim found" in told[0][1], told
