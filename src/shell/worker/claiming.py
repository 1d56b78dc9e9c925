"""How a worker claims: under its queue's limits, a batch at a time, or one job.

A queue with limits (fair shares, caps, rates: `conveyor.core.limits`) is claimed
through `LimitedJobQueue.dequeue_limited`, and a backend without it is refused
when the worker is built. Otherwise a queue that claims in batches
(`BatchingJobQueue`) gives up to the prefetch policy's batch size per round trip,
and any other queue one job. What the queue can do is asked once, up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from ...core.limits import QueueLimits
from ...core.prefetch import PrefetchPolicy, batch_size
from ..ports import BadClaim, BatchingJobQueue, Claim, JobQueue, LimitedJobQueue
from .idle import Idle


def limits_refusal(queue: object) -> str:
    """The one line refusing limits on a queue that cannot claim under them."""
    return f"limits are not supported by {type(queue).__name__}"


class JobBudget(Protocol):
    """What bounds the jobs the workers of one process claim in all (a recycling
    process's budget: `conveyor.shell.worker.recycling`). Each claim reserves what it
    asks for and gives back what it did not get."""

    def reserve(self, want: int) -> int:
        """Up to `want` jobs, now counted as claimed; 0 when no more may be."""
        ...

    def refund(self, unused: int) -> None:
        """Jobs reserved and not claimed after all."""
        ...


class Claimer:
    """Claims the jobs of one worker's queue."""

    def __init__(
        self,
        queue: JobQueue,
        queue_name: str,
        prefetch: PrefetchPolicy,
        limits: QueueLimits | None,
        idle: Idle,
        budget: JobBudget | None = None,
    ) -> None:
        """`idle` hears what each limited claim saw (jobs held back, until when);
        `budget`, when given, bounds how many jobs the claims take in all."""
        if limits is not None and not isinstance(queue, LimitedJobQueue):
            raise ValueError(limits_refusal(queue))
        self._queue, self._queue_name, self._prefetch = queue, queue_name, prefetch
        self._limits, self._idle, self._budget = limits, idle, budget
        self._limited = queue if isinstance(queue, LimitedJobQueue) else None
        self._batching = queue if isinstance(queue, BatchingJobQueue) else None

    def size(self, mean_job_ms: float | None) -> int:
        """How many jobs the next claim takes, given the mean job time here (one, on a
        queue that claims one at a time)."""
        return batch_size(self._prefetch, mean_job_ms) if self._batching is not None else 1

    def take(self, now: datetime, want: int) -> Sequence[Claim | BadClaim]:
        """Claim up to `want` jobs due at `now`, in claim order (none once the budget,
        if any, is spent)."""
        if self._budget is None:
            return self._take(now, want)
        granted = self._budget.reserve(want)
        got = self._take(now, granted) if granted else ()
        self._budget.refund(granted - len(got))
        return got

    def _take(self, now: datetime, want: int) -> Sequence[Claim | BadClaim]:
        got = self._claim(now, want)
        # The server answered, with jobs or with none due: the loop progresses.
        self._idle.watch.progressed()
        return got

    def _claim(self, now: datetime, want: int) -> Sequence[Claim | BadClaim]:
        if self._limits is not None and self._limited is not None:
            got = self._limited.dequeue_limited(self._queue_name, now, want, self._limits)
            self._idle.claimed_limited(len(got.claims), got.held_back, got.wait_until)
            return got.claims
        if want > 1 and self._batching is not None:
            return self._batching.dequeue_many(self._queue_name, now, want)
        claim = self._queue.dequeue(self._queue_name, now)
        return () if claim is None else (claim,)
