"""The ports: small protocols the executor and workers talk to.

Adapters implement them; they store and move jobs and never decide policy
(when to retry, how long to wait, when to give up). Every write a claim holder
makes is fenced by the claim's token: a holder whose lease expired and whose job
was claimed again cannot ack, extend or replace it.

A new `JobQueue` operation gets a case in `tests/shell/test_adapter_surface.py`
on the way in, so every backend is held to it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

import attrs

from ..core import PRIORITY_ORDER, Job, JobStatus, Priority, PruneOrder
from ..core.limit_report import LimitReport, describe
from ..core.limits import Bucket, Candidate, QueueLimits


@attrs.frozen(slots=True)
class Claim:
    """A job taken by one worker. `token` is fresh for every claim, never a worker name."""

    job: Job
    token: str
    queue: str
    locked_at: datetime

    @property
    def started(self) -> bool:
        """False for a prefetched claim whose job has not begun (see `prefetch_token`):
        reclaiming it charges nothing to the job's reclaim budget."""
        return not is_prefetched(self.token)


#: Tokens of prefetched claims (from `dequeue_many`) begin with this mark; a single
#: `dequeue`, and `start_claim`, give plain tokens. The mark is stored with the claim,
#: so the lease keeper of any process can tell a started claim from one that waited.
PREFETCH_MARK = "p-"


def prefetch_token(base: str) -> str:
    """The token of a prefetched (not yet started) claim built from `base`."""
    return PREFETCH_MARK + base


def is_prefetched(token: str) -> bool:
    """True when `token` belongs to a claim whose job has not started."""
    return token.startswith(PREFETCH_MARK)


@attrs.frozen(slots=True)
class BadClaim:
    """A claimed payload that is not a job (malformed, foreign, forged, pickled).

    It is claimed like any job so exactly one worker deals with it; the worker
    dead-letters it as `decode-error`. Nothing in it is ever imported or unpickled.
    """

    job_id: str
    token: str
    queue: str
    payload: str = attrs.field(repr=False)  # may hold secrets; never shown
    reason: str
    locked_at: datetime


@attrs.frozen(slots=True)
class PriorityCounts:
    """The jobs of one priority in one queue. `scheduled` or `in_flight` is None where
    the backend cannot split that figure by priority within the same bounded read
    (Redis keeps its scheduled and in-flight sets per queue only)."""

    ready: int = 0
    scheduled: int | None = 0
    in_flight: int | None = 0


def _priority_map(
    value: Mapping[Priority, PriorityCounts],
) -> Mapping[Priority, PriorityCounts]:
    # Read-only, in claim order (critical first), whatever order the backend read it in.
    return MappingProxyType({p: value[p] for p in PRIORITY_ORDER if p in value})


@attrs.frozen(slots=True)
class QueueCounts:
    """Read-only figures for one queue, for `conveyor status` and the metrics.

    `by_priority` splits them per priority, for each priority that holds a job the
    backend counted (so an empty queue has an empty mapping); it comes from the same
    read as the totals. An adapter that does not split leaves it empty.
    """

    ready: int = 0
    scheduled: int = 0
    in_flight: int = 0
    oldest_ready_at: datetime | None = None
    by_priority: Mapping[Priority, PriorityCounts] = attrs.field(
        factory=dict, converter=_priority_map, hash=False
    )


#: How many index entries Redis examines at most for a history filter no one index
#: answers (a tenant with a queue or type, or a queue with a type).
HISTORY_FILTER_SCAN = 10_000


@attrs.frozen(slots=True)
class HistoryFilter:
    """Which records a history listing or count keeps: those matching every field
    given (None: any)."""

    status: JobStatus | None = None
    queue: str | None = None
    job_type: str | None = None
    tenant_id: str | None = None


@attrs.frozen(slots=True)
class FinishedPerMinute:
    """Completed and failed (dead-lettered) records per minute of their `finished_at`,
    one count per minute from `start` on, oldest first."""

    start: datetime
    completed: tuple[int, ...]
    failed: tuple[int, ...]


class Place(enum.Enum):
    """Which structure of the queue holds a job (in this order `JobQueue.scan` reads them)."""

    IN_FLIGHT = "in_flight"  # claimed: a token holds it until its lease runs out
    READY = "ready"  # waiting for a claim
    SCHEDULED = "scheduled"  # parked until its run_at (delayed, retrying, requeued)


@attrs.frozen(slots=True)
class QueuedJob:
    """A job still in the queue, as `JobQueue.find` and `JobQueue.scan` read it.

    `job` is None when the stored payload is not a job (`problem` says why; the
    payload itself is never shown). `token` and `locked_at` (the claim, or its last
    renewal) are set for an in-flight job only.
    """

    job_id: str
    queue: str
    place: Place
    job: Job | None
    problem: str | None = None
    token: str | None = None
    locked_at: datetime | None = None


@runtime_checkable
class JobQueue(Protocol):
    """Work still to do: ready queues, the scheduled set and the in-flight claims."""

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked. A parked job (`scheduled`/`retrying`) waits for its
        `run_at` in the scheduled set; any other goes to its ready queue."""

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """`enqueue` for several jobs in one round trip, ready ones in list order."""

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` as new work unless its job is already there, in one atomic step.

        Nothing is written, and the job already there comes back, when a job with
        `job.id` is queued or recorded in the store in any state (its args are never
        replaced), or when `job.unique` names a key another job holds
        (`core.uniqueness.lock_holds`, read in the same step). The job returned shows
        its state as it stands (`running` while claimed). None when `job` was written;
        it then holds its unique key. Of concurrent calls, exactly one writes. Unlike
        `enqueue`, this never replaces a job.
        """

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job, in list order, in one round trip where the
        backend allows: each answer sees the jobs of the list written before it."""

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` (priority, then FIFO), or None.

        In the same atomic step, parked jobs of `queue` whose `run_at <= now` become
        ready first, in the core's promotion order (`run_at`, then enqueue sequence),
        behind the jobs already ready: no promotion pass stands between `run_at` and the
        claim. The claim is started (a plain token). A re-sent claim (after a dropped
        connection) returns what its token already holds, never a second job.
        """

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Release the claim: remove the in-flight entry only if `claim.token` still
        holds it. True when something was removed."""

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Heartbeat: renew the lease to `now` if the claim is still held."""

    def replace(self, claim: Claim, job: Job) -> bool:
        """Fenced upsert of a claimed job's successor (ready or parked, unlocked),
        only if `claim.token` still holds it. The claim is no longer held afterwards."""

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move parked jobs whose `run_at <= now` to their ready queues, atomically per
        job, in the promotion order: of concurrent callers, only one moves each.
        Returns how many moved. (Claims promote their own queue's due jobs; this is
        for operators and tests.)"""

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked jobs, or None: how long an idle
        worker may sleep before a job comes due."""

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim | BadClaim]:
        """In-flight claims locked (or last extended) before `cutoff`. Read-only: a
        payload that does not decode comes back as a `BadClaim` for the caller to decide."""

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned claim to ready as `job`, re-checking inside the write that
        it is still held by `claim.token` and still locked before `cutoff`."""

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Figures per queue name."""

    def find(self, job_id: UUID) -> QueuedJob | None:
        """Read-only: where `job_id` is in the queue, or None when the queue does not
        hold it (finished, or never enqueued). Takes no write lock."""

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Read-only, lazily, `batch` at a time: the queued jobs (of `queue`, in
        `place`), in flight first (oldest claim first), then ready (per queue name,
        in claim order), then scheduled (in promotion order). Pages are separate
        reads, not one snapshot: a job that moves meanwhile may be missed or seen
        twice (callers drop repeats by id)."""

    def server_time(self) -> datetime | None:
        """The clock of the server that holds the leases, or None when this process's
        own clock is the one (memory, SQLite). Workers refuse to start when theirs is
        off by more than a quarter lease."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class JobStore(Protocol):
    """Outcome history and the dead letters, kept apart from work still to do."""

    def record(self, job: Job) -> None:
        """Upsert a job's latest record (completed, failed = dead letter, revived)."""

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None."""

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Dead letters, newest first; only `tenant_id`'s when given."""

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        """Recorded jobs, newest first, filtered by status and tenant."""

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        """Dead letters per queue name."""

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Up to `limit` records matching `where`, newest first, skipping the first
        `offset`: read through the store's indexes, not filtered after reading. Redis
        keeps one index per status and queue, type or tenant: two or more of those
        filters together are matched among the newest `HISTORY_FILTER_SCAN` entries
        of the smallest index that applies."""

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where` (bounded on Redis as `find_history` is)."""

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute of `finished_at`, for the `minutes`
        whole minutes from `start` (which is cut to its minute)."""

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them. Returns how many went."""

    def prune(self, order: PruneOrder) -> int:
        """Delete up to `order.limit` finished records the order lets go, oldest first,
        each only while (checked in the same atomic write) it is still completed or
        failed, still past its cutoff or count, and its job is not queued or in flight.
        Safe to race: a record two pruners pick is deleted once. Returns how many went."""

    def count_prunable(self, order: PruneOrder) -> int:
        """How many records `prune` would delete if called until it returns 0
        (`order.limit` aside). Read-only: for `conveyor prune --dry-run`."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class TransactionalJobQueue(JobQueue, Protocol):
    """A queue in the caller's own database: enqueue commits with the business change."""

    def enqueue_in_tx(self, conn: Any, job: Job) -> None:
        """Enqueue inside the caller's open transaction on `conn` (the queue row is the
        outbox row). Anything but a connection with a transaction begun is a
        `ValidationError`: it would autocommit and reopen the dual-write window."""

    def enqueue_new_in_tx(self, conn: Any, job: Job) -> Job | None:
        """`enqueue_new` inside the caller's open transaction on `conn`, with the same
        checks of `conn` as `enqueue_in_tx`. A job found already there leaves the
        caller's transaction as it was (its own writes roll back to a savepoint)."""


@runtime_checkable
class FinishingJobQueue(JobQueue, Protocol):
    """A queue that can write a job's final record and release its claim in one
    atomic step, when the store lives in the same database or server."""

    def finishes_with(self, store: JobStore) -> bool:
        """True when `finish` can write to `store` atomically with the release."""

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Fenced by `claim.token`: record `record` (completed or failed) in the store and
        release the claim, both or neither. With `abandoned_before`, the claim must also
        still be locked (or last renewed) before that instant, checked in the same
        atomic write: a holder that renewed since cannot be dead-lettered under its
        feet. False (nothing written) if the claim is lost or no longer abandoned."""

    def revive(self, dead: Job, fresh: Job) -> bool:
        """An operator's retry of a dead letter, as one atomic step: only while the store
        still records `dead.id` as a dead letter (status failed), put `fresh` in the
        queue (ready, or parked by its status) and record `fresh` in the store. False,
        with nothing written, when it is no longer a dead letter."""


@runtime_checkable
class BatchingJobQueue(FinishingJobQueue, Protocol):
    """A queue that claims and finishes several jobs per round trip."""

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> Sequence[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs, in claim order, each with its own
        fresh prefetched token (`prefetch_token`) and lease; due parked jobs are
        promoted first as in `dequeue`. A re-sent call returns what its tokens hold."""

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> Sequence[bool]:
        """`finish` for each (claim, record), each one atomic and fenced on its own."""

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Mark a prefetched claim started: swap its token for a plain one and renew its
        lease to `now`, fenced by the old token. The started claim, or None if lost."""


@attrs.frozen(slots=True)
class LimitedClaims:
    """What one claim of a limited queue took (`claims`, prefetched tokens, in claim
    order) and, when ready jobs were held back only by rate limits, the instant the
    first of them may start (`wait_until`; None otherwise)."""

    claims: Sequence[Claim | BadClaim]
    wait_until: datetime | None = None
    #: True when caps or rates held back some ready job: waiting for new work would
    #: wake at once, so a worker that took nothing sleeps instead.
    held_back: bool = False


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@attrs.frozen(slots=True)
class LimitUsage:
    """What a limited queue holds now, read in one consistent step: the inputs a claim
    would plan from, for `conveyor status` and the dashboard
    (`core.limit_report.describe`).

    `running`: claimed jobs (prefetched ones included) by (job type, partition).
    `ready`: ready jobs by partition. `candidates`: the first ready jobs of each
    partition, most urgent first (as a claim of one job reads them). `buckets` and
    `passes`: the stored limit state."""

    running: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    ready: Mapping[str, int] = attrs.field(factory=dict)
    candidates: Sequence[Candidate] = ()
    buckets: Mapping[str, Bucket] = attrs.field(factory=dict)
    passes: Mapping[str, float] = attrs.field(factory=dict)

    def describe(self, queue: str, limits: QueueLimits, now: datetime) -> LimitReport:
        """This usage of `queue` under `limits` at `now`, for a person
        (`core.limit_report.describe`)."""
        return describe(
            queue,
            limits,
            running=self.running,
            ready=self.ready,
            candidates=self.candidates,
            buckets=self.buckets,
            now_us=(now - _EPOCH) // timedelta(microseconds=1),
        )


@runtime_checkable
class LimitedJobQueue(BatchingJobQueue, Protocol):
    """A queue that claims under a queue's fair shares, caps and rates (see
    `conveyor.core.limits`), atomically across every worker that shares it."""

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """`dequeue_many` of up to `want` jobs, chosen by `core.limits.plan_claim` from
        the queue's ready jobs, running counts and stored limit state, all in one
        atomic step serialised with the other claimers of `queue`; the state the plan
        says is stored in the same step."""


@runtime_checkable
class LimitReportingJobQueue(LimitedJobQueue, Protocol):
    """A limited queue that also says what its limits hold now, for `conveyor
    status` and the dashboard (a queue without it still claims under limits)."""

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits (see `LimitUsage`); due parked jobs
        are counted where they are, not promoted. It changes no job; on Redis, the
        first read of a queue indexes its ready jobs, as its first limited claim
        would (docs/limits.md)."""


@runtime_checkable
class CancellingJobQueue(FinishingJobQueue, Protocol):
    """A queue that cancels jobs: at once while queued, by a request while claimed.

    While a cancel request stands for a job, every outcome write of its claim holder
    (`finish`, `finish_many`, `replace`, `reclaim`) is refused, checked in the same
    atomic write, so the holder records the job cancelled (`finish_cancelled`)
    instead of completed, retried or requeued. `ack` and `extend` are not refused.
    """

    def cancel(self, record: Job) -> bool:
        """Only while `record.id` is still ready or parked (no claim holds it), take it
        out of the queue and record `record` (cancelled) in the store, both or neither.
        False, with nothing written, when it was claimed or finished meanwhile."""

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        """Only while a claim holds `job_id`, mark it cancel-requested (at `now`). False
        when no claim holds it (it is queued, finished or unknown)."""

    def cancel_requested(self, job_id: UUID) -> bool:
        """True while a cancel request stands for `job_id`: one cheap read, for a
        handler that checks between steps whether to stop."""

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """`finish` for a cancel-requested claim: fenced by the token (and with
        `abandoned_before` by "still locked before it"), record `record` (cancelled),
        clear the request and release the claim, all or nothing."""


@runtime_checkable
class WakingJobQueue(JobQueue, Protocol):
    """A queue that can tell an idle worker when work may be ready, instead of being
    polled (a wake-up list on Redis, LISTEN/NOTIFY or a watch on SQL, a condition in
    memory)."""

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until work may be ready on `queue` (True: try a claim) or `timeout_s`
        passes (False)."""
        ...


@runtime_checkable
class ClaimOnWakeJobQueue(WakingJobQueue, Protocol):
    """A queue whose wake-up claims in the same round trip, so an idle worker picks a
    job up in one round trip."""

    def wait_and_dequeue(
        self, queue: str, now: datetime, limit: int, timeout_s: float
    ) -> Sequence[Claim | BadClaim]:
        """Wait up to `timeout_s` for work on `queue`, then claim up to `limit` jobs due
        at `now` (none when nothing came)."""
        ...


def is_transactional(queue: object) -> bool:
    """True when `queue` offers `enqueue_in_tx` (ask before calling it)."""
    return isinstance(queue, TransactionalJobQueue)


class Clock(Protocol):
    """Where the shell reads the time. The core never does."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


#: A jitter source: returns a sample in [0, 1).
Jitter = Callable[[], float]

#: A handler takes the job's args and returns a JSON value, a `returns` Result, or raises.
Handler = Callable[[Mapping[str, Any]], Any]


class HandlerRegistry(Protocol):
    """Job type -> handler, per process. Register before starting workers."""

    def register(self, job_type: str, handler: Handler) -> None: ...

    def lookup(self, job_type: str) -> Handler | None: ...

    def job_types(self) -> frozenset[str]: ...
