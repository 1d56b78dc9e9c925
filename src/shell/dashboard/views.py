"""What each dashboard page shows, read from a `Runtime`: plain data, no HTML.

Every function here reads only; the actions (retry, purge, cancel, run now) go
through the runtime's own methods, which carry out core decisions as the CLI does.
Each read is bounded: a page answers as soon with 100 jobs stored as with 100,000.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from ...core import PRIORITY_ORDER, FieldError, Job, JobStatus, Priority, thaw
from ...core.limit_report import LimitReport
from ...core.validation import check_name
from ..job_view import JobView, view_of_record
from ..lookup import parse_state
from ..ports import HistoryFilter
from ..presence import WorkerInfo
from ..runtime import Runtime
from ..runtime.presence_beat import PRESENCE_TTL
from ..runtime.status import QueueStatus
from ..terminal import shown

#: Jobs per page of the jobs and dead-letter listings.
PAGE_SIZE = 50

#: The highest page number a listing serves (read from the newest, a deep page costs
#: as much as all the pages before it).
MAX_PAGE = 200

#: The chart's span, in one-minute bars.
THROUGHPUT_MINUTES = 60

#: The most dead letters one bulk retry or purge acts on (then again for the rest).
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


def parse_filters(params: Mapping[str, str], *, with_state: bool = True) -> Filters | FieldError:
    """The filters of a query string (empty values are no filter), or the first bad one.
    Without `with_state` (the dead-letter pages) a state is refused, not ignored, so
    that no page describes, and no bulk action seems to obey, a filter not applied."""

    def given(name: str) -> str | None:
        value = params.get(name, "").strip()
        return value or None

    queue, job_type, tenant, state_name = (given(n) for n in ("queue", "type", "tenant", "state"))
    for field, value in (("queue", queue), ("type", job_type), ("tenant", tenant)):
        if value is not None and (problem := check_name(field, value)) is not None:
            return problem
    if state_name is not None and not with_state:
        why = "dead letters take no state filter: every one has failed (/jobs filters by state)"
        return FieldError("state", why)
    state = None if state_name is None else parse_state(state_name)
    if isinstance(state, FieldError):
        return state
    return Filters(queue, state, job_type, tenant)


def whole_number(value: str) -> int | None:
    """`value` as a number when it is 1 to 9 ASCII digits, else None (`isdigit()` passes
    `²`; `int()` takes signs, spaces, underscores and other scripts' digits)."""
    if value.isascii() and value.isdigit() and len(value) <= 9:
        return int(value)
    return None


def parse_page(value: str | None) -> int | FieldError:
    """A 1-based page number from the query string (default 1)."""
    if value is None or value == "":
        return 1
    number = whole_number(value)
    if number is None or not 1 <= number <= MAX_PAGE:
        why = f"must be a whole number from 1 to {MAX_PAGE}, got {shown(value)}"
        return FieldError("page", why)
    return number


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
    #: Each limited queue's shares, caps and throttled work (the Limits page's figures).
    limits: tuple[LimitReport, ...] = ()


def overview(runtime: Runtime, chart: ThroughputCounts | None = None) -> Overview:
    """Per queue: counts by state and priority, oldest ready age, the unpolled-queue
    flag, live workers; and the last hour's throughput (through `chart`, which keeps
    settled minutes between refreshes, when given)."""
    now = runtime.clock.now()
    counts = runtime.queue.counts(now)
    status = runtime.status_of(counts, now)
    rows = []
    for row in status.queues:
        split = counts.get(row.queue)
        priorities = tuple(
            PriorityRow(p, c.ready, c.scheduled, c.in_flight)
            for p in PRIORITY_ORDER
            if split is not None and (c := split.by_priority.get(p)) is not None
        )
        rows.append(QueueRow(row, priorities))
    chart_now = throughput(runtime, now) if chart is None else chart.read(now)
    return Overview(now, tuple(rows), status.workers, chart_now, status.limits)


def throughput(runtime: Runtime, now: datetime) -> Throughput:
    """Completed and failed records per minute over the `THROUGHPUT_MINUTES` up to
    `now` (the current minute last), counted by the store."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    counts = runtime.store.finished_per_minute(start, THROUGHPUT_MINUTES)
    return Throughput(counts.start, counts.completed, counts.failed)


#: A minute this long past is settled: the records finished in it have been written
#: (a worker writes its outcome at once; this leaves room for clocks a little apart).
SETTLED_AFTER = timedelta(minutes=2)

#: How long settled minutes' counts are reused before they are counted again, so
#: records pruned, purged or retried by another process show within this time.
THROUGHPUT_REUSE = timedelta(minutes=5)

_MINUTE = timedelta(minutes=1)


class ThroughputCounts:
    """The chart's counts, with the settled minutes kept between refreshes: a live
    refresh counts only the records of the last few minutes, not of the whole hour.
    The dashboard clears it after each of its own actions."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._kept: dict[datetime, tuple[int, int]] = {}
        self._since: datetime | None = None

    def clear(self) -> None:
        """Forget the kept minutes: the next read counts the whole hour."""
        with self._lock:
            self._kept = {}
            self._since = None

    def read(self, now: datetime) -> Throughput:
        """The `THROUGHPUT_MINUTES` up to `now`, as `throughput` counts them."""
        start = now.replace(second=0, microsecond=0) - (THROUGHPUT_MINUTES - 1) * _MINUTE
        with self._lock:
            since = self._since
            if since is None or now < since or now - since > THROUGHPUT_REUSE:
                self._kept, self._since = {}, now
            kept = {minute: n for minute, n in self._kept.items() if minute >= start}
        first = start
        while first in kept:
            first += _MINUTE
        span = THROUGHPUT_MINUTES - (first - start) // _MINUTE
        fresh = self._runtime.store.finished_per_minute(first, span)
        settled = now - SETTLED_AFTER
        for n, pair in enumerate(zip(fresh.completed, fresh.failed, strict=True)):
            minute = first + n * _MINUTE
            if minute + _MINUTE <= settled:
                kept[minute] = pair
            else:
                kept.pop(minute, None)
        with self._lock:
            if self._since is not None:  # not cleared meanwhile
                self._kept = kept
        old = [kept[start + n * _MINUTE] for n in range(THROUGHPUT_MINUTES - span)]
        completed = tuple(done for done, _ in old) + tuple(fresh.completed)
        failed = tuple(dead for _, dead in old) + tuple(fresh.failed)
        return Throughput(start, completed, failed)


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

    @property
    def past_reach(self) -> bool:
        """More rows than `MAX_PAGE` pages hold: a narrower filter shows them."""
        return self.has_next and self.number >= MAX_PAGE


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
    if filters.state is not None and filters.state.is_terminal:
        # Only records: the store reads just this page along its indexes.
        where = HistoryFilter(filters.state, filters.queue, filters.job_type, filters.tenant)
        skip = (number - 1) * PAGE_SIZE
        found = runtime.store.find_history(where, offset=skip, limit=PAGE_SIZE + 1)
        rows = tuple(view_of_record(job) for job in found[:PAGE_SIZE])
        return Page(number, rows, len(found) > PAGE_SIZE)
    views = runtime.list_jobs(
        queue=filters.queue,
        state=filters.state,
        job_type=filters.job_type,
        tenant_id=filters.tenant,
        limit=number * PAGE_SIZE + 1,
    )
    return _paged(views, number)


def _dead_filter(filters: Filters) -> HistoryFilter:
    return HistoryFilter(JobStatus.FAILED, filters.queue, filters.job_type, filters.tenant)


def dead_page(runtime: Runtime, filters: Filters, number: int) -> Page:
    """Page `number` of the dead letters matching `filters`, newest first: one page
    (and one more row, to know whether a next page exists) read by the store."""
    offset = (number - 1) * PAGE_SIZE
    found = runtime.store.find_history(_dead_filter(filters), offset=offset, limit=PAGE_SIZE + 1)
    return Page(number, tuple(found[:PAGE_SIZE]), len(found) > PAGE_SIZE)


def dead_listing(runtime: Runtime, filters: Filters, number: int) -> tuple[Page, int]:
    """Page `number` of the dead letters matching `filters`, and how many match."""
    return dead_page(runtime, filters, number), count_dead(runtime, filters)


def matching_dead(runtime: Runtime, filters: Filters) -> list[Job]:
    """The dead letters a bulk action on `filters` acts on: at most `BULK_LIMIT`."""
    return list(runtime.store.find_history(_dead_filter(filters), limit=BULK_LIMIT))


def count_dead(runtime: Runtime, filters: Filters) -> int:
    """How many dead letters match `filters`."""
    if filters.job_type is None:
        # Kept per queue beside the index on every backend: no count over the rows.
        per_queue = runtime.store.count_dead(tenant_id=filters.tenant)
        if filters.queue is None:
            return sum(per_queue.values())
        return per_queue.get(filters.queue, 0)
    return runtime.store.count_history(_dead_filter(filters))


# ---- one job --------------------------------------------------------------------


def pretty(value: Any) -> str:
    """A JSON rendering of args or a result, frozen or not, for a <pre> block."""
    return json.dumps(thaw(value), indent=2, sort_keys=True, default=str, ensure_ascii=False)


def args_text(view: JobView) -> str:
    """The job's args as indented JSON (the page shows them only when asked)."""
    return "" if view.job is None else pretty(view.job.args)


# ---- workers --------------------------------------------------------------------


@attrs.frozen(slots=True)
class WorkerRow:
    """One live worker process and how long ago it last beat."""

    info: WorkerInfo
    seen_ago_s: float


@attrs.frozen(slots=True)
class RunningRow:
    """A job running now, and the worker process whose last heartbeat named it (None
    when no live worker's did: it began since, or its worker stopped beating)."""

    view: JobView
    worker: WorkerInfo | None


def workers(runtime: Runtime) -> tuple[list[WorkerRow], list[RunningRow]]:
    """The live worker processes (by id), each with the jobs it was running at its
    last heartbeat, and the jobs running now with the worker running each."""
    now = runtime.clock.now()
    live = sorted(runtime.presence.live(now, PRESENCE_TTL), key=lambda w: w.worker_id)
    rows = [WorkerRow(w, max(0.0, (now - w.last_seen).total_seconds())) for w in live]
    runs = {job: w for w in live for job in w.jobs}
    running = runtime.list_jobs(state=JobStatus.RUNNING, limit=PAGE_SIZE)
    return rows, [RunningRow(view, runs.get(view.job_id)) for view in running]
