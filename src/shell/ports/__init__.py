"""The ports: small protocols the executor and workers talk to.

Adapters implement them; they store and move jobs and never decide policy
(when to retry, how long to wait, when to give up). Every write a claim holder
makes is fenced by the claim's token: a holder whose lease expired and whose job
was claimed again cannot ack, extend or replace it.

A new `JobQueue` operation gets a case in `tests/shell/test_adapter_surface.py`
on the way in, so every backend is held to it.

Where each part lives:

* `claims`: `Claim`, `BadClaim` and the prefetch mark of a claim's token;
* `reads`: what the read-only operations answer (`QueueCounts`, `QueuedJob`,
  `HistoryFilter`, ...);
* `queue`: `JobQueue`, and the queues that enqueue in the caller's transaction,
  finish atomically and claim in batches;
* `store`: `JobStore`, the history and the dead letters;
* `limits`: claiming under fair shares, caps and rates, and reporting them;
* `capabilities`: cancelling, waking an idle worker, keeping progress, telling a
  database file lost;
* `finishes`: waking a caller that waits for a job's outcome;
* `clock`: `Clock`, jitter, and what a handler is.
"""

from __future__ import annotations

from .capabilities import (
    FIND_MANY_BATCH,
    CancellingJobQueue,
    ClaimOnWakeJobQueue,
    FileBackedJobQueue,
    FindingManyJobQueue,
    InterruptibleWaitsJobQueue,
    ProgressJobQueue,
    WakingJobQueue,
)
from .claims import PREFETCH_MARK, BadClaim, Claim, is_prefetched, prefetch_token
from .clock import Clock, Handler, HandlerRegistry, Jitter, SystemClock
from .finishes import FinishWaiter, FinishWatchingStore, RecordCarryingWaiter
from .limits import LimitedClaims, LimitedJobQueue, LimitReportingJobQueue, LimitUsage
from .queue import (
    BatchingJobQueue,
    FinishingJobQueue,
    JobQueue,
    TransactionalJobQueue,
    UniqueKeyHeld,
)
from .reads import (
    HISTORY_FILTER_SCAN,
    FinishedPerMinute,
    HistoryFilter,
    Place,
    PriorityCounts,
    QueueCounts,
    QueuedJob,
)
from .store import JobStore, ManyReadingStore, PruneRememberingStore, records_of

__all__ = [
    "FIND_MANY_BATCH",
    "HISTORY_FILTER_SCAN",
    "PREFETCH_MARK",
    "BadClaim",
    "BatchingJobQueue",
    "CancellingJobQueue",
    "Claim",
    "ClaimOnWakeJobQueue",
    "Clock",
    "FileBackedJobQueue",
    "FindingManyJobQueue",
    "FinishWaiter",
    "FinishWatchingStore",
    "FinishedPerMinute",
    "FinishingJobQueue",
    "Handler",
    "HandlerRegistry",
    "HistoryFilter",
    "InterruptibleWaitsJobQueue",
    "Jitter",
    "JobQueue",
    "JobStore",
    "LimitReportingJobQueue",
    "LimitUsage",
    "LimitedClaims",
    "LimitedJobQueue",
    "ManyReadingStore",
    "Place",
    "PriorityCounts",
    "ProgressJobQueue",
    "PruneRememberingStore",
    "QueueCounts",
    "QueuedJob",
    "RecordCarryingWaiter",
    "SystemClock",
    "TransactionalJobQueue",
    "UniqueKeyHeld",
    "WakingJobQueue",
    "is_prefetched",
    "is_transactional",
    "prefetch_token",
    "records_of",
]


def is_transactional(queue: object) -> bool:
    """True when `queue` offers `enqueue_in_tx` (ask before calling it)."""
    return isinstance(queue, TransactionalJobQueue)
