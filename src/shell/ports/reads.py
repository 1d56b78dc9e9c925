"""What the read-only operations of the ports answer: counts, history filters,
where a queued job is."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType

import attrs

from ...core import PRIORITY_ORDER, Job, JobStatus, Priority


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

    `waiting` counts the jobs held back until the jobs they depend on finish.
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
    #: Jobs waiting for other jobs to finish (`core.dependencies`): never claimed.
    waiting: int = 0


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
    WAITING = "waiting"  # held back until the jobs it depends on finish (never claimed)


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
