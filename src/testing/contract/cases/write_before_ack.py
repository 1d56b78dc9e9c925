"""Cases of write-before-ack, through the subject's executor: for every decision kind,
the outcome (history row, replacement job, dead letter) is written before the claim
is released, and a process that dies between any two steps leaves the job somewhere:
queued, scheduled, in flight, or recorded.

Crash injection: the executor gets the subject's queue (and store) behind a
`Recorder`, which logs each effect and raises `Crash` in place of the k-th one; every
step of a plan is one effect, so for k = 1 .. steps + 1 the process stops after
k - 1 steps. `locate` then looks for the job through the ports alone.

Two pairings: step by step (the store behind its own recorder, so the executor
writes and releases in separate steps) and, for a queue that finishes into its
store, atomic (the pairing the runtime uses).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import attrs

from ....core import (
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
    reclaim_cutoff,
    start,
)
from ....core.policies import LeasePolicy
from ....core.prefetch import StartClaim, decide_start
from ....shell.executor import Executor
from ....shell.placeholder import undecodable_dead_letter
from ....shell.ports import BadClaim, Claim
from ....shell.registry import Registry
from ....shell.worker.loop import Worker
from ...clock import ManualClock
from ..case import case
from ..subject import BATCHING, CANCELLING, Subject
from ..support import T0, Crash, Recorder, claims, locate, make_job, only_claim

POLICIES = Policies()
RETRYABLE = Failed(ErrorInfo("Boom", "try again", retryable=True))
PERMANENT = Failed(ErrorInfo("Bad", "never works", retryable=False))

Build = Callable[[Claim | BadClaim], Decision]


def _good(held: Claim | BadClaim) -> Claim:
    assert isinstance(held, Claim), f"expected a claim, got {held!r}"
    return held


def _handled(outcome: Any) -> Build:
    def build(held: Claim | BadClaim) -> Decision:
        return decide(start(_good(held).job, T0).unwrap(), outcome, T0, POLICIES, 0.5)

    return build


def _reclaimed(poison: bool) -> Build:
    def build(held: Claim | BadClaim) -> Decision:
        policy = LeasePolicy(lease_ms=1000, max_reclaims=0 if poison else 5)
        later = T0 + timedelta(seconds=5)
        job = start(_good(held).job, T0).unwrap()
        return decide_reclaim(job, later, policy, reclaim_cutoff(later, 1000))

    return build


def _handed_back(held: Claim | BadClaim) -> Decision:
    return decide_hand_back(_good(held).job, T0)


def _undecodable(held: Claim | BadClaim) -> Decision:
    assert isinstance(held, BadClaim), f"expected a bad claim, got {held!r}"
    return undecodable_dead_letter(held, T0)


#: decision kind -> (how to reach it from a claim, the write that must precede any
#: release). The decode error's claim is a `BadClaim` the adapter itself hands out, so
#: that kind runs where the subject can corrupt a payload (`corrupt`).
DECISIONS: dict[str, tuple[Build, str]] = {
    "Complete": (_handled(Succeeded({"ok": True})), "store.record"),
    "Retry": (_handled(RETRYABLE), "queue.replace"),
    "DeadLetter": (_handled(PERMANENT), "store.record"),
    "Requeue": (_handled(NoHandler()), "queue.replace"),
    "Reclaim": (_reclaimed(poison=False), "queue.reclaim"),
    "DeadLetter(poison pill)": (_reclaimed(poison=True), "store.record"),
    "HandBack": (_handed_back, "queue.replace"),
    "DeadLetter(decode error)": (_undecodable, "store.record"),
}
UNDECODABLE = "DeadLetter(decode error)"
#: Atomic: the record and the release are one step of the queue.
ATOMIC_WRITE = {"store.record": "queue.finish"}
STEP_BY_STEP, ATOMIC = "step-by-step", "atomic"


def _modes(s: Subject) -> list[str]:
    finishes = hasattr(s.queue, "finishes_with") and s.queue.finishes_with(s.store)
    return [STEP_BY_STEP, ATOMIC] if finishes else [STEP_BY_STEP]


def _kinds(s: Subject) -> list[str]:
    return [kind for kind in DECISIONS if kind != UNDECODABLE or s.corrupt is not None]


@attrs.define
class _Run:
    """One claimed job and an executor whose every effect is logged (and may crash)."""

    executor: Executor
    log: list[str]
    claim: Claim | BadClaim
    job_id: UUID


def _claimed(s: Subject, mode: str, crash: dict[str, int], n: int, kind: str) -> _Run:
    """A fresh job on its own queue (`wba-<n>`), claimed (as a `BadClaim`, its payload
    corrupted first, for the decode error), and an executor over recorded ports: both
    recorded step by step, the queue alone (finishing into the bare store) when atomic."""
    queue = f"wba-{n}"
    job = make_job(queue=queue)
    s.queue.enqueue(job)
    if kind == UNDECODABLE:
        assert s.corrupt is not None
        s.corrupt(job, "{not json")
    held = s.queue.dequeue(queue, T0)
    assert held is not None, f"{job.id} was not claimed"
    log: list[str] = []
    store = s.store if mode == ATOMIC else Recorder(s.store, "store", log, crash)
    executor = s.executor(
        Recorder(s.queue, "queue", log, crash),
        store,
        clock=ManualClock(T0),
        sleep=lambda _: None,
    )
    return _Run(executor, log, held, job.id)


@case()
def every_decision_is_written_before_its_claim_is_released(s: Subject) -> None:
    numbers = itertools.count(1)
    for mode in _modes(s):
        for kind in _kinds(s):
            build, write = DECISIONS[kind]
            run = _claimed(s, mode, {}, next(numbers), kind)
            decision = build(run.claim)
            assert type(decision).__name__ == kind.split("(")[0]
            if mode == ATOMIC:
                write = ATOMIC_WRITE.get(write, write)
            assert run.executor.carry_out(run.claim, decision), f"{kind} ({mode}): not carried out"
            assert write in run.log, f"{kind} ({mode}): {write} never happened: {run.log}"
            releases = [i for i, call in enumerate(run.log) if call == "queue.ack"]
            first = run.log.index(write)
            assert all(first < i for i in releases), (
                f"{kind} ({mode}): released before writing: {run.log}"
            )


@case()
def a_crash_between_any_two_steps_leaves_the_job_somewhere(s: Subject) -> None:
    numbers = itertools.count(1)
    for mode in _modes(s):
        for kind in _kinds(s):
            build = DECISIONS[kind][0]
            probe = _claimed(s, mode, {}, next(numbers), kind)
            steps = len(probe.executor.plan(probe.claim, build(probe.claim)))
            for crash_at in range(1, steps + 2):
                run = _claimed(s, mode, {"at": crash_at}, next(numbers), kind)
                with contextlib.suppress(Crash):
                    run.executor.carry_out(run.claim, build(run.claim))
                where = locate(s.queue, s.store, run.job_id)
                assert where != "nowhere", (
                    f"{kind} ({mode}): a crash after {crash_at - 1} of {steps} steps "
                    f"({run.log}) lost the job"
                )


@case(BATCHING)
def a_batch_of_outcomes_is_written_and_released_in_one_atomic_step(s: Subject) -> None:
    """The batched finish the worker uses: each record and release together, and a
    crash before it leaves every job in flight (reclaimed later), none lost."""
    for n, crash_at in enumerate((None, 1)):
        queue = f"batch-{n}"
        s.queue.enqueue_many([make_job(queue=queue) for _ in range(3)])
        got = claims(s.queue.dequeue_many(queue, T0, 3))
        log: list[str] = []
        crash = {} if crash_at is None else {"at": crash_at}
        executor = s.executor(Recorder(s.queue, "queue", log, crash), s.store)
        items = [
            (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5)) for c in got
        ]
        try:
            done = executor.finish_many(items)
        except Crash:
            done = [False] * 3
        for held, ok in zip(got, done, strict=True):
            where = locate(s.queue, s.store, held.job.id)
            assert where == ("recorded:completed" if ok else "in flight"), (crash_at, where)
        assert log == ([] if crash_at else ["queue.finish_many"])


@case(CANCELLING)
def a_cancelled_claim_is_recorded_and_released_in_one_fenced_step(s: Subject) -> None:
    """The worker's write after a cancel request refused its outcome: record, clear the
    request and release together; a crash before it leaves the job in flight, and
    the request still standing (the lease keeper then records the cancel)."""
    for n, crash_at in enumerate((None, 1)):
        queue = f"cancel-{n}"
        s.queue.enqueue(make_job(queue=queue))
        held = only_claim(s.queue.dequeue(queue, T0))
        assert s.queue.request_cancel(held.job.id, T0)
        log: list[str] = []
        crash = {} if crash_at is None else {"at": crash_at}
        executor = s.executor(Recorder(s.queue, "queue", log, crash), s.store)
        decision = cancel_claimed(start(held.job, T0).unwrap(), T0, Succeeded(1))
        with contextlib.suppress(Crash):
            assert executor.carry_out(held, decision) is True
        if crash_at is None:
            assert log == ["queue.finish_cancelled"]
            assert not s.queue.cancel_requested(held.job.id)
            assert locate(s.queue, s.store, held.job.id) == "recorded:cancelled"
        else:
            assert s.queue.cancel_requested(held.job.id)
            assert locate(s.queue, s.store, held.job.id) == "in flight"


def _prefetched_back(
    s: Subject, mode: str, crash: dict[str, int], n: int
) -> tuple[Executor, list[str], Claim]:
    """A prefetched claim of a job that already came back from a dead worker's batch,
    and an executor whose queue records every effect."""
    queue = f"start-{n}"
    s.queue.enqueue(attrs.evolve(make_job(queue=queue), metadata=Metadata(prefetch_reclaims=1)))
    [held] = claims(s.queue.dequeue_many(queue, T0, 5))
    assert not held.started
    log: list[str] = []
    store = s.store if mode == ATOMIC else Recorder(s.store, "store", [], {})
    executor = s.executor(
        Recorder(s.queue, "queue", log, crash),
        store,
        sleep=lambda _: None,
    )
    return executor, log, held


@case(BATCHING)
def starting_a_prefetched_claim_is_one_fenced_write_that_releases_nothing(s: Subject) -> None:
    for n, mode in enumerate(_modes(s)):
        executor, log, held = _prefetched_back(s, mode, {}, n)
        decision = decide_start(held.job, held.started, T0)
        assert isinstance(decision, StartClaim)
        begun = executor.start(held, decision)
        assert begun is not None and begun.started and begun.token != held.token
        assert log == ["queue.start_claim"], "a start writes once and never releases"
        assert s.queue.extend(held, T0) is False, "the prefetched token holds nothing"
        assert s.queue.extend(begun, T0) is True, "the started claim is still held"
        assert executor.start(held, decision) is None, "a lost claim starts nothing"


@case(BATCHING)
def a_crash_around_a_start_leaves_the_job_in_flight(s: Subject) -> None:
    numbers = itertools.count(100)
    for mode in _modes(s):
        for crash_at in (1, 2):
            executor, _, held = _prefetched_back(s, mode, {"at": crash_at}, next(numbers))
            decision = decide_start(held.job, held.started, T0)
            assert decision is not None
            with contextlib.suppress(Crash):
                executor.start(held, decision)
            assert locate(s.queue, s.store, held.job.id) == "in flight", (mode, crash_at)


@case(BATCHING)
def a_worker_writes_the_start_before_the_handler_runs(s: Subject) -> None:
    """The start must be written before the handler runs: a job that kills its worker
    is then charged on its next reclaim. Started after (or not at all), it would come
    back as an unstarted prefetched claim forever."""
    log: list[str] = []
    recorded = Recorder(s.queue, "queue", log, {})
    job = attrs.evolve(make_job(), metadata=Metadata(prefetch_reclaims=1))
    s.queue.enqueue(job)
    worker = Worker(
        recorded,
        s.store,
        Registry({"work": lambda args: log.append("handler")}),
        clock=ManualClock(T0),
        prefetch=5,
        clock_check=False,
    )
    assert worker.drain() == 1
    assert "queue.start_claim" in log, log
    assert log.index("queue.start_claim") < log.index("handler"), log
    assert locate(s.queue, s.store, job.id) == "recorded:completed", "its outcome written"


WRITE_BEFORE_ACK_CASES = (
    every_decision_is_written_before_its_claim_is_released,
    a_crash_between_any_two_steps_leaves_the_job_somewhere,
    a_batch_of_outcomes_is_written_and_released_in_one_atomic_step,
    a_cancelled_claim_is_recorded_and_released_in_one_fenced_step,
    starting_a_prefetched_claim_is_one_fenced_write_that_releases_nothing,
    a_crash_around_a_start_leaves_the_job_in_flight,
    a_worker_writes_the_start_before_the_handler_runs,
)
