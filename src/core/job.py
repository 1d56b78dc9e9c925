"""The job record: an immutable value, changed only by building a new one.

Times are timezone-aware UTC `datetime`s. Every field of a `Job` is immutable,
including the args (a `FrozenMap`) and the result, so a record can be shared
between threads and stored without defensive copies.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from .error_text import cap_message, cap_traceback
from .frozen import FrozenMap


class Priority(enum.Enum):
    """How urgent a job is. Claims take `critical` first, then `high`, `normal`, `low`."""

    CRITICAL = "critical"
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for the most urgent: the priority's place in `PRIORITY_ORDER`, which the
        ordering key sorts on and the backends store (the Redis partition index)."""
        return _RANK[self]


#: Every priority, most urgent first: the order every backend claims in.
PRIORITY_ORDER: tuple[Priority, ...] = (
    Priority.CRITICAL,
    Priority.HIGH,
    Priority.NORMAL,
    Priority.LOW,
)

_RANK = {priority: rank for rank, priority in enumerate(PRIORITY_ORDER)}


class JobStatus(enum.Enum):
    """Where a job is in its life. `transitions.TABLE` lists the legal moves."""

    SCHEDULED = "scheduled"  # parked until run_at (delayed, or requeued for another node)
    WAITING = "waiting"  # held back until the jobs it depends on finish (never claimed)
    PENDING = "pending"  # ready to be claimed
    RUNNING = "running"  # claimed by a worker
    RETRYING = "retrying"  # failed, waiting for its backoff to pass
    COMPLETED = "completed"  # done (terminal)
    FAILED = "failed"  # dead-lettered (terminal)
    CANCELLED = "cancelled"  # cancelled by an operator or the application (terminal)

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)

    @property
    def is_parked(self) -> bool:
        """Waiting for its `run_at`: it lives in the scheduled set, not a ready queue."""
        return self in (JobStatus.SCHEDULED, JobStatus.RETRYING)


#: The longest worker id a job record keeps (`transitions.start` cuts a longer one).
MAX_WORKER_CHARS = 200

#: How many attempts a job record keeps (the newest): enough for a full retry
#: budget at the default, bounded so a job requeued for hours stays small.
MAX_ATTEMPTS_KEPT = 10


@attrs.frozen(slots=True)
class ErrorInfo:
    """Why an attempt failed. `type` is a short machine-readable tag.

    `message` is cut to `MAX_MESSAGE_CHARS` by `cap_message`, behind a marker.
    `traceback` is the formatted exception behind a handler's failure, when there
    was one (the shell fills it in; errors the core assigns have none), cut to
    `MAX_TRACEBACK_CHARS` by `cap_traceback`, which shortens the exception messages
    inside it before any frame (see `conveyor.core.error_text`).
    """

    type: str
    message: str = attrs.field(converter=cap_message)
    retryable: bool = True
    traceback: str | None = attrs.field(default=None, converter=cap_traceback)


class AttemptOutcome(enum.Enum):
    """How one attempt ended."""

    COMPLETED = "completed"  # the handler succeeded
    RETRIED = "retried"  # it failed; a retry was scheduled
    DEAD_LETTERED = "dead_lettered"  # it failed for good (or the job was a poison pill)
    REQUEUED = "requeued"  # no handler on that worker: parked for another node
    RECLAIMED = "reclaimed"  # its lease ran out; the lease keeper put the job back
    CANCELLED = "cancelled"  # its cancel was requested while it ran: recorded cancelled
    INTERRUPTED = "interrupted"  # its worker was stopped by force and gave the job back


@attrs.frozen(slots=True)
class Attempt:
    """One finished attempt, as the job's history keeps it.

    `number` is the job's `attempt` count when it ran. `started_at` and `worker`
    are None when no process recorded them: a reclaimed attempt's worker vanished
    without writing anything, and the lease keeper only knows when it gave up.
    """

    number: int
    started_at: datetime | None
    finished_at: datetime
    outcome: AttemptOutcome
    worker: str | None = None
    error: ErrorInfo | None = None


@attrs.frozen(slots=True)
class Metadata:
    """Bookkeeping the policies read: missing-handler age and counters.

    `reclaim_count` counts expired leases of started attempts (the poison-pill
    budget); `prefetch_reclaims` counts claims that expired while the job waited in
    a worker's prefetched batch, never started: they cost the job nothing, but such
    a job is started explicitly (and so counted) the next time it is prefetched.
    """

    first_missing_at: datetime | None = None
    requeue_count: int = 0
    reclaim_count: int = 0
    prefetch_reclaims: int = 0


def _canonical_states(states: object) -> tuple[JobStatus, ...]:
    # One order (the enum's) and no repeats, so equal locks compare and encode equal.
    chosen = set(states)  # type: ignore[call-overload]
    return tuple(s for s in JobStatus if s in chosen)


@attrs.frozen(slots=True)
class UniqueLock:
    """A unique key a job holds (see `core.uniqueness`): while the job is in one of
    `states`, and until `expires_at` when set, enqueueing another job with the same
    `key` returns this job instead of writing a second one."""

    key: str
    states: tuple[JobStatus, ...] = attrs.field(converter=_canonical_states)
    expires_at: datetime | None = None


@attrs.frozen(slots=True, repr=False)
class Job:
    """One unit of background work.

    Build one with `create_job` (which validates); change one with
    `attrs.evolve` or, for status changes, `transitions.transition`.
    `repr` hides `args` and `result` (they often hold secrets); see `reveal`.
    """

    id: UUID
    job_type: str
    args: FrozenMap
    queue: str
    priority: Priority
    status: JobStatus
    created_at: datetime
    run_at: datetime
    max_retries: int = 3
    retry_count: int = 0
    attempt: int = 0
    tenant_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: ErrorInfo | None = None
    result: Any = None
    metadata: Metadata = attrs.field(factory=Metadata)
    #: The trace context of the span that enqueued the job (W3C `traceparent` and
    #: `tracestate` headers), so the worker's span joins the producer's trace; None
    #: when the producer did not trace. Copied, like every field, into retries.
    trace_context: FrozenMap | None = None
    #: The worker running the current attempt, or that ran the latest one (set by
    #: `transitions.start`); None when none did, or it is not known.
    worker: str | None = None
    #: The newest `MAX_ATTEMPTS_KEPT` finished attempts, oldest first (see `Attempt`).
    attempts: tuple[Attempt, ...] = ()
    #: The unique key this job holds, when it was enqueued with one (`UniqueLock`).
    unique: UniqueLock | None = None
    #: How long one attempt may run, in milliseconds, before it is recorded as a
    #: `Timeout` failure (see `core.timeouts`); None: the job type's timeout applies.
    timeout_ms: int | None = None
    #: The partition the job is scheduled and limited in (see `core.limits`); None:
    #: its tenant's, or the default partition.
    partition_key: str | None = None

    def __repr__(self) -> str:
        return (
            f"Job(id={self.id}, job_type={self.job_type!r}, queue={self.queue!r}, "
            f"priority={self.priority.value}, status={self.status.value}, "
            f"attempt={self.attempt}, retry_count={self.retry_count}/{self.max_retries}, "
            f"tenant_id={self.tenant_id!r}, args=<{len(self.args)} keys hidden>)"
        )

    def reveal(self) -> str:
        """`repr` with args and result shown: an explicit opt-in for debugging."""
        return f"{self!r}[args={dict(self.args)!r}, result={self.result!r}]"
