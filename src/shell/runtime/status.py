"""What `conveyor status` and the dashboard's overview report, read from the backend.

Per queue: ready, scheduled and in-flight jobs, dead letters, the oldest ready
job's age and the live workers polling it; a queue holding work that no live
worker polls is flagged. Per limited queue: its shares, caps in use and
throttled work (`conveyor.core.limit_report`). Reads only. `StatusMethods` are
`Runtime`'s methods for them (mixed into it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from ...core.limit_report import LimitReport
from ...core.limits import QueueLimits
from ..ports import JobQueue, JobStore, LimitReportingJobQueue, QueueCounts
from ..presence import Presence, WorkerInfo
from .presence_beat import PRESENCE_TTL
from .reads import check_tenant_filter

if TYPE_CHECKING:
    from ..config import Config
    from ..ports import Clock


@attrs.frozen(slots=True)
class QueueStatus:
    """One row of `conveyor status`."""

    queue: str
    ready: int
    scheduled: int
    in_flight: int
    dead: int
    oldest_ready_age_s: float | None
    pollers: tuple[str, ...]
    configured: bool
    #: Jobs waiting for the jobs they depend on to finish (never claimed).
    waiting: int = 0

    @property
    def flagged(self) -> bool:
        """Work is waiting and no live worker polls this queue."""
        return (self.ready + self.scheduled) > 0 and not self.pollers


@attrs.frozen(slots=True)
class Status:
    """What `Runtime.status` reports: a row per queue, and the live workers."""

    queues: tuple[QueueStatus, ...]
    workers: tuple[WorkerInfo, ...]
    #: Each limited queue's shares, caps in use and throttled work (docs/limits.md).
    limits: tuple[LimitReport, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `conveyor status --json` prints it."""
        return {
            "queues": [
                {**attrs.asdict(q), "pollers": list(q.pollers), "flagged": q.flagged}
                for q in self.queues
            ],
            "workers": [
                {**attrs.asdict(w), "queues": list(w.queues), "last_seen": w.last_seen.isoformat()}
                for w in self.workers
            ],
            "limits": [_limit_dict(report) for report in self.limits],
        }


def _limit_dict(report: LimitReport) -> dict[str, Any]:
    return {
        "queue": report.queue,
        "fair": report.fair,
        "running": report.running,
        "throttled": report.throttled,
        "partitions": [attrs.asdict(p) for p in report.partitions],
        "caps": [{**attrs.asdict(c), "full": c.full} for c in report.shown_caps],
        "rates": [{**attrs.asdict(r), "empty": r.empty} for r in report.shown_rates],
    }


def limit_reports(
    queue: JobQueue, limits: Mapping[str, QueueLimits], now: datetime
) -> tuple[LimitReport, ...]:
    """Each limited queue's shares, caps in use and throttled work at `now`, by queue
    name; none when the backend claims without limits."""
    if not isinstance(queue, LimitReportingJobQueue):
        return ()
    return tuple(
        queue.limit_usage(name, now).describe(name, queue_limits, now)
        for name, queue_limits in sorted(limits.items())
    )


def read_status(
    counts: Mapping[str, QueueCounts],
    now: datetime,
    *,
    store: JobStore,
    presence: Presence,
    configured: Sequence[str],
    reports: Callable[[], tuple[LimitReport, ...]] = tuple,
    tenant_id: str | None = None,
) -> Status:
    """The status from queue `counts` read at `now`, the store's dead letters (of
    `tenant_id` only, when given), the live workers and the limited queues'
    `reports()`; `configured` are the queues this config's pools poll."""
    dead = store.count_dead(tenant_id=tenant_id)
    live = tuple(presence.live(now, PRESENCE_TTL))
    names = sorted(set(counts) | set(dead) | set(configured))
    rows = []
    for name in names:
        c = counts.get(name)
        oldest = c.oldest_ready_at if c else None
        rows.append(
            QueueStatus(
                queue=name,
                ready=c.ready if c else 0,
                scheduled=c.scheduled if c else 0,
                in_flight=c.in_flight if c else 0,
                dead=dead.get(name, 0),
                oldest_ready_age_s=(now - oldest).total_seconds() if oldest else None,
                pollers=tuple(w.worker_id for w in live if name in w.queues),
                configured=name in configured,
                waiting=c.waiting if c else 0,
            )
        )
    return Status(tuple(rows), live, reports())


class StatusMethods:
    """`Runtime`'s status reports (mixed into it). Reads only."""

    config: Config
    queue: JobQueue
    store: JobStore
    presence: Presence
    clock: Clock
    limits: dict[str, QueueLimits]

    def status(self, *, tenant_id: str | None = None) -> Status:
        """Per queue: ready, scheduled, in flight, dead letters (of `tenant_id` only,
        when given), the oldest ready job's age, and the live workers polling it; queues
        that receive work but no configured pool polls are flagged. Reads only."""
        check_tenant_filter(tenant_id)
        now = self.clock.now()
        return self.status_of(self.queue.counts(now), now, tenant_id=tenant_id)

    def status_of(
        self, counts: Mapping[str, QueueCounts], now: datetime, *, tenant_id: str | None = None
    ) -> Status:
        """`status` from queue counts already read at `now` (`queue.counts(now)`), for a
        caller that shows them too and need not count the queues twice."""
        return read_status(
            counts,
            now,
            store=self.store,
            presence=self.presence,
            configured=self.config.workers.queues,
            reports=lambda: self.limit_reports(now),
            tenant_id=tenant_id,
        )

    def limit_reports(self, now: datetime) -> tuple[LimitReport, ...]:
        """Each limited queue's shares, caps in use and throttled work at `now` (see
        `conveyor.core.limit_report`); none when the backend claims without limits."""
        return limit_reports(self.queue, self.limits, now)
