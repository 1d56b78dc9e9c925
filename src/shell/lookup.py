"""Job lookup: one job, or a listing, in whatever state each is in.

A job lives in one of two places. While there is work to do it is in the queue
(in flight, ready, or scheduled); once finished its record is in the store
(completed, or failed = a dead letter). A revived dead letter is in both for a
while: the queue holds the work, the store still holds the revived record.

`find_job` reads the queue first and the store second. In that order a job that
finishes between the two reads is still found (its record is in the store by the
time the second read looks); the other order could miss it in both.

What is found is a `JobView` (`job_view`); `job_text` prints it for the CLI.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from uuid import UUID

import attrs
from returns.result import Failure, Success

from ..core import FieldError, JobStatus
from .codec import decode
from .job_text import SUMMARY_HEADERS, attempt_line, describe, summary_row
from .job_view import JobView, attempt_dict, view_of_entry, view_of_record
from .ports import (
    CancellingJobQueue,
    FindingManyJobQueue,
    HistoryFilter,
    JobQueue,
    JobStore,
    Place,
    ProgressJobQueue,
    QueuedJob,
    records_of,
)
from .progress_notes import report_of
from .terminal import shown

# The view and its text are named here too, where the CLI and the runtime import them.
__all__ = [
    "STATE_NAMES",
    "SUMMARY_HEADERS",
    "JobView",
    "attempt_dict",
    "attempt_line",
    "describe",
    "find_job",
    "list_jobs",
    "parse_state",
    "queued_entry",
    "summary_row",
    "view_of_entry",
    "view_of_record",
]

#: Names `--state` accepts: the `JobStatus` values, and `dead` for `failed`.
STATE_NAMES: dict[str, JobStatus] = {s.value: s for s in JobStatus} | {"dead": JobStatus.FAILED}

#: Extra records a listing not filtered by state reads, for the revived records it
#: skips (their queued selves are listed instead).
_REVIVED_SLACK = 50

#: The most queued jobs a listing reads per round trip.
_SCAN_BATCH = 500

_PLACE_OF: dict[JobStatus, Place] = {
    JobStatus.RUNNING: Place.IN_FLIGHT,
    JobStatus.PENDING: Place.READY,
    JobStatus.SCHEDULED: Place.SCHEDULED,
    JobStatus.RETRYING: Place.SCHEDULED,
    JobStatus.WAITING: Place.WAITING,
}


def parse_state(value: str, field: str = "state") -> JobStatus | FieldError:
    """The state `value` names (`dead` is `failed`), or why it names none."""
    state = STATE_NAMES.get(value)
    if state is None:
        return FieldError(field, f"must be one of {', '.join(STATE_NAMES)}, got {shown(value)}")
    return state


def queued_entry(
    job_id: str,
    queue: str,
    place: Place,
    payload: str | bytes,
    token: str | None = None,
    locked_at: datetime | None = None,
) -> QueuedJob:
    """A `QueuedJob` from a stored payload; one that is not this job's says why."""
    problem: str
    match decode(payload):
        case Success(job) if str(job.id) == job_id:
            return QueuedJob(job_id, queue, place, job, None, token, locked_at)
        case Success(job):
            problem = f"payload names job {job.id}, but it is stored as {job_id}"
        case Failure(error):
            problem = str(error)
    return QueuedJob(job_id, queue, place, None, problem, token, locked_at)


def find_job(queue: JobQueue, store: JobStore, job_id: UUID, lease: timedelta) -> JobView | None:
    """The job `job_id` wherever it is, or None when neither queue nor store knows it."""
    entry = queue.find(job_id)
    if entry is not None:
        view = view_of_entry(entry, lease)
        view = _with_claim_notes(queue, view, job_id)
        return view
    record = store.get(job_id)
    if record is None:
        return None
    if not record.status.is_terminal:
        # A revived record: its work is queued, and may have moved between the reads.
        entry = queue.find(job_id)
        if entry is not None:
            return view_of_entry(entry, lease)
    return view_of_record(record)


def find_jobs(
    queue: JobQueue, store: JobStore, job_ids: Sequence[UUID], lease: timedelta
) -> dict[UUID, JobView | None]:
    """`find_job` of each of `job_ids`: the finished ones read from the store together
    (one round trip where the store can), then the others from the queue together
    where it can find many at once; one not found there (finished since, or revived)
    is looked for on its own."""
    records = records_of(store, job_ids)
    finished = {i for i, record in records.items() if record.status.is_terminal}
    rest = [job_id for job_id in job_ids if job_id not in finished]
    entries = queue.find_many(rest) if isinstance(queue, FindingManyJobQueue) and rest else {}
    found: dict[UUID, JobView | None] = {}
    for job_id in job_ids:
        entry = entries.get(job_id)
        if job_id in finished:
            found[job_id] = view_of_record(records[job_id])
        elif entry is not None:
            found[job_id] = _with_claim_notes(queue, view_of_entry(entry, lease), job_id)
        else:
            found[job_id] = find_job(queue, store, job_id, lease)
    return found


def _with_claim_notes(queue: JobQueue, view: JobView, job_id: UUID) -> JobView:
    """`view` of a queued job with what its claim's holder noted beside it: a cancel
    request standing, the newest progress report of the running attempt."""
    if (
        view.token is not None
        and isinstance(queue, CancellingJobQueue)
        and queue.cancel_requested(job_id)
    ):
        view = attrs.evolve(view, cancel_requested=True)
    if view.state is JobStatus.RUNNING and isinstance(queue, ProgressJobQueue):
        report = report_of(queue.progress_note(job_id), view.token)
        if report is not None:
            view = attrs.evolve(view, progress=report)
    return view


def list_jobs(
    queue: JobQueue,
    store: JobStore,
    *,
    lease: timedelta,
    queue_name: str | None = None,
    state: JobStatus | None = None,
    job_type: str | None = None,
    tenant_id: str | None = None,
    limit: int = 100,
) -> list[JobView]:
    """Up to `limit` jobs matching every filter given: queued work first (running,
    pending, then parked, as `JobQueue.scan` orders it), then finished records,
    newest first, read from the store already filtered (`JobStore.find_history`)."""
    if limit <= 0:
        return []
    out: list[JobView] = []
    seen: set[str] = set()

    def wanted(view: JobView) -> bool:
        if view.job_id in seen or (state is not None and view.state is not state):
            return False
        if queue_name is not None and view.queue != queue_name:
            return False
        if tenant_id is not None and (view.job is None or view.job.tenant_id != tenant_id):
            return False
        return job_type is None or (view.job is not None and view.job.job_type == job_type)

    # Queue and state are filtered by the scan itself, type and tenant only here: with
    # neither, the first `limit` jobs read are the ones listed.
    batch = limit + 1 if job_type is None and tenant_id is None else _SCAN_BATCH
    for view in _queued_views(queue, queue_name, state, lease, batch):
        if wanted(view):
            seen.add(view.job_id)
            # One read more per claimed job listed: they are as many as the workers.
            if view.token is not None and view.job is not None:
                view = _with_claim_notes(queue, view, view.job.id)
            out.append(view)
            if len(out) >= limit:
                return out
    if state is not None and not state.is_terminal:
        return out
    where = HistoryFilter(state, queue_name, job_type, tenant_id)
    slack = 0 if state is not None else _REVIVED_SLACK
    records = store.find_history(where, limit=limit + slack)
    for record in records:
        view = view_of_record(record)
        # A record that is not final belongs to a revived job: its queued self is listed.
        if record.status.is_terminal and wanted(view):
            seen.add(view.job_id)
            out.append(view)
            if len(out) >= limit:
                break
    return out


def _queued_views(
    queue: JobQueue,
    queue_name: str | None,
    state: JobStatus | None,
    lease: timedelta,
    batch: int,
) -> Iterator[JobView]:
    if state is not None and state.is_terminal:
        return
    place = None if state is None else _PLACE_OF[state]
    # Read no more than a short listing needs: each job read is decoded.
    for entry in queue.scan(queue_name, place, batch=min(_SCAN_BATCH, batch)):
        yield view_of_entry(entry, lease)
