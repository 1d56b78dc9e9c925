"""The executor: the one place that turns a `Decision` into writes.

Write, then release. For every decision the outcome is written first (history
row, replacement job, dead letter) and only then is the claim released with a
conditional ack. Acking first would leave a window in which the job is neither
queued nor in flight; a process that died there would lose it. `plan` spells
the steps out as data, so tests can check their order and crash between any
two of them.

A step that raises (an infrastructure fault the adapter could not ride out
within its own retry budget) stops the plan: nothing after it runs, the claim
stays in flight, and the lease keeper reclaims the job later. Never acked
unwritten. Only the adapter retries, so retries do not stack beyond the lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

import attrs

from ..core import (
    Cancel,
    CancelClaim,
    Complete,
    DeadLetter,
    Decision,
    HandBack,
    PruneOrder,
    Reclaim,
    RequestCancel,
    Requeue,
    Retry,
    Revive,
    WriteRetryPolicy,
)
from ..core.prefetch import StartClaim
from . import outage
from .ports import (
    BadClaim,
    BatchingJobQueue,
    CancellingJobQueue,
    Claim,
    Clock,
    FinishingJobQueue,
    JobQueue,
    JobStore,
    SystemClock,
    UniqueKeyHeld,
)
from .retrying import Retrier

log = logging.getLogger("conveyor.executor")

T = TypeVar("T")


@attrs.frozen(slots=True)
class Step:
    """One effect of carrying out a decision. `kind` is fence, write or release. A
    fence or write that answers False found the claim lost (or its guard changed)."""

    kind: str
    name: str
    run: Callable[[], object]


class ClaimLost(Exception):
    """The claim was no longer held (its lease expired and someone else owns the job)."""


class Executor:
    """Carries out decisions against a queue and a store."""

    def __init__(
        self,
        queue: JobQueue,
        store: JobStore,
        *,
        clock: Clock | None = None,
        attempts: int = 1,
        backoff_s: float = 0.05,
        retry: WriteRetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`retry` (or, in short, `attempts` and `backoff_s`) says how a step that
        raises is retried; `sleep` waits between tries. By default a step is tried once:
        the adapters are the one layer that retries passing faults, within a budget
        shorter than the lease, so retries never stack past it."""
        self.queue = queue
        self.store = store
        self.clock = clock or SystemClock()
        self.retry = retry or WriteRetryPolicy(initial_s=backoff_s, max_attempts=attempts)
        self.sleep = sleep
        self._atomic_finish = isinstance(queue, FinishingJobQueue) and queue.finishes_with(store)
        #: Completed and dead-lettered jobs can be finished several per round trip.
        self.batches_finish = self._atomic_finish and isinstance(queue, BatchingJobQueue)
        #: Jobs can be cancelled (queued ones at once, claimed ones by a request).
        self.cancels = self._atomic_finish and isinstance(queue, CancellingJobQueue)

    def plan(self, claim: Claim | BadClaim | None, decision: Decision) -> Sequence[Step]:
        """The steps for `decision`, in the order they must happen."""
        q, s = self.queue, self.store
        finishing: Any = q
        match decision:
            case Complete(job=job) | DeadLetter(job=job) if self._atomic_finish:
                assert claim is not None
                guard = decision.abandoned_before if isinstance(decision, DeadLetter) else None
                # Same database/server: the record and the release commit together, fenced
                # by the token (and, from the lease keeper, by "still abandoned").
                return (
                    Step(
                        "write",
                        "finish",
                        lambda: finishing.finish(claim, job, abandoned_before=guard),
                    ),
                )
            case Complete(job=job) | DeadLetter(job=job):
                assert claim is not None
                return (
                    # Fence: a holder whose claim was taken over must not write an outcome.
                    Step("fence", "extend", lambda: q.extend(claim, self.clock.now())),
                    Step("write", "record", lambda: s.record(job)),
                    Step("release", "ack", lambda: q.ack(claim)),
                )
            case Retry(job=job) | Requeue(job=job) | HandBack(job=job):
                assert isinstance(claim, Claim)
                return (
                    # replace is fenced and leaves the job parked or ready, unlocked...
                    Step("write", "replace", lambda: q.replace(claim, job)),
                    # ...so this conditional ack finds nothing of ours and removes nothing.
                    Step("release", "ack", lambda: q.ack(claim)),
                )
            case Reclaim(job=job, abandoned_before=cutoff):
                assert isinstance(claim, Claim)
                # One conditional write: back to ready only if still abandoned and ours.
                return (Step("write", "reclaim", lambda: q.reclaim(claim, job, cutoff)),)
            case Revive(dead=dead, job=job) if self._atomic_finish:
                # Queue and record together, only while the store still holds a dead letter.
                return (Step("write", "revive", lambda: finishing.revive(dead, job)),)
            case Revive(job=job):
                # Store apart from the queue: the new work is written before the dead
                # letter is replaced, so a crash between leaves the job queued.
                return (
                    Step("write", "enqueue", lambda: q.enqueue(job)),
                    Step("write", "record", lambda: s.record(job)),
                )
            case Cancel(job=job):
                # Out of the queue and recorded cancelled together, only while unclaimed.
                return (Step("write", "cancel", lambda: self._cancelling().cancel(job)),)
            case RequestCancel(job=job, at=at):
                return (
                    Step("write", "request", lambda: self._cancelling().request_cancel(job.id, at)),
                )
            case StartClaim(at=at):
                assert isinstance(claim, Claim)
                # One write fenced by the prefetched token: a new token and a renewed
                # lease. Nothing is released: the claim is held on, under its new token.
                return (
                    Step(
                        "write",
                        "start_claim",
                        lambda: self._batching().start_claim(claim, at) or False,
                    ),
                )
            case CancelClaim(job=job, abandoned_before=guard):
                assert claim is not None
                # Record, clear the request and release in one fenced step.
                return (
                    Step(
                        "write",
                        "finish_cancelled",
                        lambda: self._cancelling().finish_cancelled(claim, job, guard),
                    ),
                )

    def _batching(self) -> BatchingJobQueue:
        """The queue, when it claims in batches (the only queue whose claims are taken
        prefetched, and so need starting); else a `TypeError`."""
        if not isinstance(self.queue, BatchingJobQueue):
            raise TypeError(f"{type(self.queue).__name__} does not prefetch claims to start")
        return self.queue

    def _cancelling(self) -> CancellingJobQueue:
        """The queue, when it cancels atomically with this store; else a `TypeError`:
        a cancel written in two steps could record a job cancelled that then runs."""
        if not (self.cancels and isinstance(self.queue, CancellingJobQueue)):
            raise TypeError(
                f"{type(self.queue).__name__} cannot cancel jobs atomically with "
                f"{type(self.store).__name__}: cancelling needs the queue's own store"
            )
        return self.queue

    def carry_out(self, claim: Claim | BadClaim | None, decision: Decision) -> bool:
        """Run the plan. True when every step ran; False when the claim was lost or the
        decision's guard no longer held (nothing more is written), or a step kept
        failing (left to the lease)."""
        for step in self.plan(claim, decision):
            try:
                ok = self._run(step)
            except ClaimLost:
                # The lease keeper's writes are guarded by "still abandoned": after a
                # crash every live process's keeper reaches for the same claims, and
                # all but one lose, routinely. A worker's own claim lost is worth a line.
                keepers = getattr(decision, "abandoned_before", None) is not None
                log.log(
                    logging.DEBUG if keepers else logging.INFO,
                    "job %s: %s found the claim lost or the guard changed; leaving it",
                    _job_id(claim, decision),
                    step.name,
                )
                return False
            except UniqueKeyHeld:
                raise  # a refusal with nothing written, for the caller to tell
            except Exception as exc:
                self._left_to_leases(
                    exc, f"{step.name} job {_job_id(claim, decision)}", "it to its lease"
                )
                return False
            if not ok:
                return False
        return True

    def start(self, claim: Claim, decision: StartClaim) -> Claim | None:
        """Carry out a `StartClaim` before the claim's handler runs: the claim under its
        new token, or None when the prefetched one was lost (nothing is written). A
        fault that outlasts the retry policy is raised: the caller's round stops there,
        as at any failed read, and the claim, unstarted, returns after its lease."""
        [step] = self.plan(claim, decision)
        begun = self._retrying(step.name, step.run)
        return begun if isinstance(begun, Claim) else None

    def finish_many(self, items: Sequence[tuple[Claim, Decision]]) -> list[bool]:
        """Carry out several `Complete`/`DeadLetter` decisions in one round trip. Each
        job's record and release stay one atomic, fenced step; a lost claim writes
        nothing. On a persistent fault nothing is released (left to the leases)."""
        if not items:
            return []
        if not self.batches_finish:
            return [self.carry_out(claim, decision) for claim, decision in items]
        queue: Any = self.queue
        pairs = [(claim, decision.job) for claim, decision in items]
        try:
            done = self._retrying("finish_many", lambda: queue.finish_many(pairs))
        except Exception as exc:
            self._left_to_leases(exc, f"finish {len(pairs)} jobs", "them to their leases")
            return [False] * len(pairs)
        return [bool(ok) for ok in done]

    def prune(self, order: PruneOrder) -> int:
        """Carry out a prune order (the retention policy's decision): the store deletes
        at most `order.limit` finished records, re-checking the order's guards inside
        its write. Returns how many went; a fault propagates (pruning tries again on
        its next interval)."""
        if order.is_empty or order.limit <= 0:
            return 0
        return self._retrying("prune", lambda: self.store.prune(order))

    def purge_dead(self, job_id: UUID | None) -> int:
        """An operator's purge: delete one dead letter (`job_id`) or all of them.
        Returns how many went."""
        return self._retrying("purge", lambda: self.store.purge_dead(job_id))

    def _retrying(self, name: str, call: Callable[[], T]) -> T:
        """`call()`, retried while it raises and the retry policy allows; the last
        error is re-raised."""

        def told(exc: Exception, failures: int, _: float) -> None:
            if outage.is_trouble(exc):
                log.debug("%s failed (attempt %d): %s; retrying", name, failures, exc)
            else:
                log.warning("%s failed (attempt %d), retrying", name, failures, exc_info=exc)

        # No jitter sample is drawn: the policy here has none (0.5 = no change).
        return Retrier(self.retry, on_retry=told, jitter=lambda: 0.5).call(call, self.sleep)

    def _left_to_leases(self, exc: Exception, what: str, whose: str) -> None:
        """Log a write given up on: its claims run again after their leases. An outage gets
        a line without a traceback (one per job would flood the log while every write
        fails alike; the worker's loop reports the outage itself, once, on its next
        call); anything else is logged with its traceback."""
        if outage.is_trouble(exc):
            log.info("could not %s while the server is away or full; leaving %s", what, whose)
            # Counted on the server's state, so that the worker's round around this
            # write is not taken for the server's return.
            outage.for_queue(self.queue).met(exc)
        else:
            log.exception("could not %s; leaving %s", what, whose)

    def _run(self, step: Step) -> bool:
        result = self._retrying(step.name, step.run)
        if result is False and step.kind in ("fence", "write"):
            raise ClaimLost(step.name)
        # A release that finds nothing of ours (after replace) is expected.
        return True


def _job_id(claim: Claim | BadClaim | None, decision: Decision) -> str:
    if isinstance(claim, BadClaim):
        return claim.job_id
    return str(decision.job.id)
