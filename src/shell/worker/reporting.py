"""Reporting what a worker did: its counters, its log lines and the lifecycle hooks.

Everything here comes after the fact. An attempt is counted once it has run; a
decision is reported once the executor has carried it out, or failed to: a
written outcome is counted by its kind and handed to the hooks, a refused one
counts as a lost claim. A failed attempt is one WARNING either way (saying
whether its outcome was written), carrying the handler's traceback; a dead
letter is one ERROR. Hooks hear only of outcomes the store now holds.
"""

from __future__ import annotations

import logging
from collections import Counter

import attrs

from ...core import (
    CancelClaim,
    Complete,
    DeadLetter,
    Decision,
    HandBack,
    Job,
    Requeue,
    Retry,
    Succeeded,
)
from ..hooks import Hooks
from ..logs import job_fields, log_dead_letter, log_failed_attempt
from ..ports import BadClaim
from .attempts import Attempted

log = logging.getLogger("conveyor.worker")


@attrs.frozen(slots=True)
class WorkerStats:
    """What a worker has done so far (for progress and status)."""

    processed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    requeued: int = 0
    reclaimed: int = 0
    handed_back: int = 0
    lost_claims: int = 0
    #: Attempts abandoned at their deadline and recorded as `Timeout` failures.
    timed_out: int = 0
    #: Claimed jobs recorded cancelled because a cancel was requested while they ran.
    cancelled: int = 0


def stats_between(before: WorkerStats, after: WorkerStats) -> WorkerStats:
    """What a worker did between two readings of its stats."""
    old = attrs.asdict(before)
    return WorkerStats(**{k: v - old[k] for k, v in attrs.asdict(after).items()})


def add_stats(a: WorkerStats, b: WorkerStats) -> WorkerStats:
    """Two workers' stats, summed."""
    other = attrs.asdict(b)
    return WorkerStats(**{k: v + other[k] for k, v in attrs.asdict(a).items()})


#: The counter each kind of written decision adds to.
COUNTERS: dict[type, str] = {
    Complete: "completed",
    Retry: "retried",
    DeadLetter: "dead_lettered",
    Requeue: "requeued",
    HandBack: "handed_back",
    CancelClaim: "cancelled",
}


class Reporter:
    """Counts, logs and hooks for one worker. `counts` holds the `WorkerStats` fields."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks
        self.counts: Counter[str] = Counter()
        #: The job types this worker found no handler for, told once each.
        self._unhandled: set[str] = set()

    def stats(self) -> WorkerStats:
        """The counts so far."""
        return WorkerStats(**self.counts)

    def started(self, job: Job) -> None:
        """`job`'s attempt starts (its handler, if any here, runs next)."""
        self.hooks.started(job)

    def no_handlers(self, worker_id: str, queue_name: str) -> None:
        """A worker starts with no handler registered: say so, loudly."""
        log.warning(
            "worker %s on queue %r started with NO handlers registered: every job it "
            "claims will be parked for another worker and finally dead-lettered as "
            "no-handler. Register handlers before starting workers.",
            worker_id,
            queue_name,
        )

    def ran(self, attempt: Attempted) -> None:
        """An attempt ran to its outcome (which is decided next)."""
        self.counts["processed"] += 1
        if attempt.timed_out:
            self.counts["timed_out"] += 1

    def lost(self) -> None:
        """A claim was lost before its job started: it is skipped."""
        self.counts["lost_claims"] += 1

    def reclaimed(self, reclaimed: int, buried: int) -> None:
        """The lease keeper returned `reclaimed` claims and dead-lettered `buried`."""
        self.counts["reclaimed"] += reclaimed
        self.counts["dead_lettered"] += buried

    def written(self, attempt: Attempted | None, decision: Decision, written: bool) -> None:
        """`decision`, for `attempt` (None when no handler ran: a hand-back), was carried
        out (`written`) or refused or left to its lease."""
        if written:
            counter = COUNTERS.get(type(decision))
            if counter is not None:
                self.counts[counter] += 1
        else:
            self.counts["lost_claims"] += 1
        job = decision.job
        error = None if attempt is None else attempt.error
        if (
            error is None
            and attempt is not None
            and isinstance(attempt.outcome, Succeeded)
            and isinstance(decision, DeadLetter)
        ):
            # The handler returned, but its result was refused (not JSON, too large):
            # a failed attempt like any other, in the log, the hooks and the metrics.
            error = decision.error
        if error is not None:
            assert attempt is not None
            log_failed_attempt(log, job, error, attempt.exception, decision, written=written)
            if written:
                self.hooks.failed(job, attempt.exception)
        if not written:
            return
        if isinstance(decision, DeadLetter):
            log_dead_letter(log, job, decision.error)
            self.hooks.dead_lettered(job, decision.error)
        elif isinstance(decision, Complete):
            self.hooks.succeeded(job)
        elif isinstance(decision, Requeue) and job.job_type not in self._unhandled:
            # Silence until the dead letter minutes later hid a handler left out here.
            self._unhandled.add(job.job_type)
            log.warning(
                "job %s (%s): no handler for job type %r in this worker; requeued for a "
                "worker that has one, and dead-lettered as no-handler if none takes it "
                "within requeue.max_requeue_age_ms (each worker tells it once per job type)",
                job.id,
                job.job_type,
                job.job_type,
                extra=job_fields(job),
            )

    def cancelled(self, decision: CancelClaim) -> None:
        """A claimed job was recorded cancelled instead of its outcome, because a cancel
        request refused the outcome's write."""
        log.info("job %s: cancel requested while it ran; recorded cancelled", decision.job.id)
        self.written(None, decision, True)
        self.hooks.cancelled(decision.job)

    def buried(self, decision: DeadLetter | None, bad: BadClaim) -> None:
        """An undecodable claim was dead-lettered (`decision`), or could not be (None)."""
        if decision is None:
            log.warning("could not dead-letter undecodable job %s: %s", bad.job_id, bad.reason)
            return
        self.counts["dead_lettered"] += 1
        self.counts["processed"] += 1
        log_dead_letter(log, decision.job, decision.error)
        self.hooks.dead_lettered(decision.job, decision.error)
