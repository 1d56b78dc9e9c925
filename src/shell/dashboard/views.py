"""What each dashboard page shows, read from a `Runtime`: plain data, no HTML.

Every function here reads only; the actions (retry, purge, cancel, run now) go
through the runtime's own methods, which carry out core decisions as the CLI does.
Each read is bounded, so a page answers in about the same time with a hundred
jobs stored or a hundred thousand.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from ...core import PRIORITY_ORDER, FieldError, Job, JobStatus, Priority, thaw
from ...core.validation import check_name
from ..lookup import JobView, parse_state
from ..presence import WorkerInfo
from ..runtime import PRESENCE_TTL, QueueStatus, Runtime

#: Jobs per page of the jobs and dead-letter listings.
PAGE_SIZE = 50

#: The highest page number a listing serves: listings are read from the newest, so a
#: deep page costs as much as all the pages before it.
MAX_PAGE = 200

#: How many of the newest finished records the throughput chart reads at most.
THROUGHPUT_SCAN = 2_000

#: The chart's span, in one-minute bars.
THROUGHPUT_MINUTES = 60

#: The most dead letters one bulk retry or purge acts on (a filter matching more is
#: acted on again for the rest).
BULK_LIMIT = 10_000


@attrs.frozen(slots=True)
class Filters:
    """The listing filters a page's query string holds (None: not filtered)."""

    queue: str | None = None
    state: JobStatus | None = None
    job_type: str | None = None
    tenant: str | None = None

    def query(self) -> dict[str, str]:
        """The filters as query parameters, for links that keep them."""
        out = {
            "queue": self.queue,
            "state": None if self.state is None else self.state.value,
            "type": self.job_type,
            "tenant": self.tenant,
        }
        return {key: value for key, value in out.items() if value is not None}

    def matches(self, job: Job | None) -> bool:
        """Whether a job passes the queue, type and tenant filters (state aside)."""
        if job is None:
            return self.job_type is None and self.tenant is None and self.queue is None
        return (
            (self.queue is None or job.queue == self.queue)
            and (self.job_type is None or job.job_type == self.job_type)
            and (self.tenant is None or job.tenant_id == self.tenant)
        )


def parse_filters(params: Mapping[str, str]) -> Filters | FieldError:
    """The filters of a query string (empty values are no filter), or the first bad one."""

    def given(name: str) -> str | None:
        value = params.get(name, "").strip()
        return value or None

    queue, job_type, tenant, state_name = (given(n) for n in ("queue", "type", "tenant", "state"))
    for field, value in (("queue", queue), ("type", job_type), ("tenant", tenant)):
        if value is not None and (problem := check_name(field, value)) is not None:
            return problem
    state = None if state_name is None else parse_state(state_name)
    if isinstance(state, FieldError):
        return state
    return Filters(queue, state, job_type, tenant)


def parse_page(value: str | None) -> int | FieldError:
    """A 1-based page number from the query string (default 1)."""
    if value is None or value == "":
        return 1
    if not value.isdigit() or not 1 <= int(value) <= MAX_PAGE:
        return FieldError("page", f"must be a whole number from 1 to {MAX_PAGE}, got {value!r}")
    return int(value)


# ---- overview -------------------------------------------------------------------


@attrs.frozen(slots=True)
class PriorityRow:
    """One priority's jobs in one queue; None where the backend does not split it."""

    priority: Priority
    ready: int
    scheduled: int | None
    in_flight: int | None


@attrs.frozen(slots=True)
class QueueRow:
    """One queue on the overview: `runtime.status()`'s row and its priority split."""

    status: QueueStatus
    priorities: tuple[PriorityRow, ...]


@attrs.frozen(slots=True)
class Throughput:
    """Finished jobs per minute over the last hour, oldest minute first."""

    start: datetime
    completed: tuple[int, ...]
    failed: tuple[int, ...]
    #: True when the scan stopped at `THROUGHPUT_SCAN` records before reaching an hour back.
    partial: bool

    @property
    def total(self) -> int:
        """Jobs finished in the span (completed and dead-lettered)."""
        return sum(self.completed) + sum(self.failed)


@attrs.frozen(slots=True)
class Overview:
    """Everything the overview page shows."""

    now: datetime
    queues: tuple[QueueRow, ...]
    workers: tuple[WorkerInfo, ...]
    throughput: Throughput


def overview(runtime: Runtime) -> Overview:
    """Per queue: counts by state and priority, oldest ready age, the unpolled-queue
    flag, live workers; and the last hour's throughput."""
    now = runtime.clock.now()
    status = runtime.status()
    counts = runtime.queue.counts(now)
    rows = []
    for row in status.queues:
        split = counts.get(row.queue)
        priorities = tuple(
            PriorityRow(p, c.ready, c.scheduled, c.in_flight)
            for p in PRIORITY_ORDER
            if split is not None and (c := split.by_priority.get(p)) is not None
        )
        rows.append(QueueRow(row, priorities))
    history = runtime.store.list_history(limit=THROUGHPUT_SCAN)
    return Overview(now, tuple(rows), status.workers, throughput(history, now, THROUGHPUT_SCAN))


def throughput(records: Sequence[Job], now: datetime, scanned: int) -> Throughput:
    """Completed and failed records per minute over the `THROUGHPUT_MINUTES` before
    `now`, from `records` (newest first, as `list_history` gives them)."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    completed = [0] * THROUGHPUT_MINUTES
    failed = [0] * THROUGHPUT_MINUTES
    for job in records:
        when = job.finished_at
        if when is None or when < start:
            continue
        minute = int((when - start).total_seconds() // 60)
        if minute >= THROUGHPUT_MINUTES:
            continue
        if job.status is JobStatus.COMPLETED:
            completed[minute] += 1
        elif job.status is JobStatus.FAILED:
            failed[minute] += 1
    oldest = records[-1].finished_at if records else None
    partial = len(records) >= scanned and oldest is not None and oldest >= start
    return Throughput(start, tuple(completed), tuple(failed), partial)


@attrs.frozen(slots=True)
class Bar:
    """One bar of the throughput chart, in SVG user units."""

    x: float
    width: float
    y: float
    height: float
    kind: str
    title: str


CHART_WIDTH = 600
CHART_HEIGHT = 120


def chart_bars(chart: Throughput) -> tuple[list[Bar], int]:
    """The chart's bars (completed below, failed stacked on top) and the scale's top."""
    peak = max((c + f for c, f in zip(chart.completed, chart.failed, strict=True)), default=0)
    top = max(peak, 1)
    width = CHART_WIDTH / THROUGHPUT_MINUTES
    bars = []
    for minute, (done, dead) in enumerate(zip(chart.completed, chart.failed, strict=True)):
        at = chart.start + timedelta(minutes=minute)
        label = at.strftime("%H:%M")
        x = minute * width
        done_h = CHART_HEIGHT * done / top
        dead_h = CHART_HEIGHT * dead / top
        if done:
            title = f"{label}: {done} completed"
            bars.append(Bar(x, width - 1, CHART_HEIGHT - done_h, done_h, "completed", title))
        if dead:
            title = f"{label}: {dead} failed"
            y = CHART_HEIGHT - done_h - dead_h
            bars.append(Bar(x, width - 1, y, dead_h, "failed", title))
    return bars, top


# ---- listings -------------------------------------------------------------------


@attrs.frozen(slots=True)
class Page:
    """One page of a listing: its rows, and whether a next page exists."""

    number: int
    rows: tuple[Any, ...]
    has_next: bool


def _paged(items: Iterable[Any], number: int) -> Page:
    skip = (number - 1) * PAGE_SIZE
    rows: list[Any] = []
    more = False
    for n, item in enumerate(items):
        if n < skip:
            continue
        if len(rows) == PAGE_SIZE:
            more = True
            break
        rows.append(item)
    return Page(number, tuple(rows), more)


def jobs_page(runtime: Runtime, filters: Filters, number: int) -> Page:
    """Page `number` of the jobs matching `filters`: queued work first, then finished
    jobs, newest first (as `Runtime.list_jobs` orders them)."""
    views = runtime.list_jobs(
        queue=filters.queue,
        state=filters.state,
        job_type=filters.job_type,
        tenant_id=filters.tenant,
        limit=number * PAGE_SIZE + 1,
    )
    return _paged(views, number)


def _dead_letters(runtime: Runtime, filters: Filters, limit: int) -> Iterable[Job]:
    for job in runtime.store.list_dead(tenant_id=filters.tenant, limit=limit):
        if filters.matches(job):
            yield job


def dead_page(runtime: Runtime, filters: Filters, number: int) -> Page:
    """Page `number` of the dead letters matching `filters`, newest first. Filtered by
    queue or type, they are looked for among the newest `BULK_LIMIT` dead letters."""
    narrowed = filters.queue is not None or filters.job_type is not None
    limit = BULK_LIMIT if narrowed else number * PAGE_SIZE + 1
    return _paged(_dead_letters(runtime, filters, limit), number)


def dead_listing(runtime: Runtime, filters: Filters, number: int) -> tuple[Page, int]:
    """Page `number` of the dead letters matching `filters`, and how many match. A type
    filter is applied in one scan of the newest `BULK_LIMIT` dead letters."""
    if filters.job_type is None:
        return dead_page(runtime, filters, number), count_dead(runtime, filters)
    matching = matching_dead(runtime, filters)
    return _paged(matching, number), len(matching)


def matching_dead(runtime: Runtime, filters: Filters) -> list[Job]:
    """The dead letters a bulk action on `filters` acts on: at most `BULK_LIMIT`."""
    return list(_dead_letters(runtime, filters, BULK_LIMIT))


def count_dead(runtime: Runtime, filters: Filters) -> int:
    """How many dead letters match `filters` (at most `BULK_LIMIT` when filtered by type)."""
    if filters.job_type is None:
        per_queue = runtime.store.count_dead(tenant_id=filters.tenant)
        if filters.queue is None:
            return sum(per_queue.values())
        return per_queue.get(filters.queue, 0)
    return len(matching_dead(runtime, filters))


# ---- one job --------------------------------------------------------------------


def pretty(value: Any) -> str:
    """A JSON rendering of args or a result, for a <pre> block."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def args_text(view: JobView) -> str:
    """The job's args as indented JSON (the page shows them only when asked)."""
    return "" if view.job is None else pretty(thaw(view.job.args))


# ---- workers --------------------------------------------------------------------


@attrs.frozen(slots=True)
class WorkerRow:
    """One live worker process and how long ago it last beat."""

    info: WorkerInfo
    seen_ago_s: float


def workers(runtime: Runtime) -> tuple[list[WorkerRow], list[JobView]]:
    """The live worker processes (newest heartbeat first) and the jobs running now."""
    now = runtime.clock.now()
    live = sorted(runtime.presence.live(now, PRESENCE_TTL), key=lambda w: w.worker_id)
    rows = [WorkerRow(w, max(0.0, (now - w.last_seen).total_seconds())) for w in live]
    running = runtime.list_jobs(state=JobStatus.RUNNING, limit=PAGE_SIZE)
    return rows, running
