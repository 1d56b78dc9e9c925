"""Job lookup: one job, or a listing, in whatever state each is in.

A job lives in one of two places. While there is work to do it is in the queue
(in flight, ready, or scheduled); once finished its record is in the store
(completed, or failed = a dead letter). A revived dead letter is in both for a
while: the queue holds the work, the store still holds the revived record.

`find_job` reads the queue first and the store second. In that order a job that
finishes between the two reads is still found (its record is in the store by the
time the second read looks); the other order could miss it in both.

The claim's token is not a worker's name: a claim is identified by a fresh token
(see `ports.Claim`), so a view shows the token, when it was claimed or last
renewed, and when its lease runs out, but not which worker process holds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from returns.result import Failure, Success

from ..core import MAX_ATTEMPTS_KEPT, Attempt, ErrorInfo, FieldError, Job, JobStatus, thaw
from .codec import decode
from .ports import (
    CancellingJobQueue,
    HistoryFilter,
    JobQueue,
    JobStore,
    Place,
    QueuedJob,
    is_prefetched,
)

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
}


def parse_state(value: str, field: str = "state") -> JobStatus | FieldError:
    """The state `value` names (`dead` is `failed`), or why it names none."""
    state = STATE_NAMES.get(value)
    if state is None:
        return FieldError(field, f"must be one of {', '.join(STATE_NAMES)}, got {value!r}")
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


@attrs.frozen(slots=True)
class JobView:
    """What is known about one job, wherever it is.

    `state` is one of the `JobStatus` values: `scheduled` and `retrying` (parked
    until `next_run_at`), `pending` (ready), `running` (claimed: `token`,
    `claimed_at`, `lease_expires_at`), `completed` (`job.result`) and `failed`
    (the dead letter: `job.last_error`). `job` is None only for a queued payload
    that does not decode; `problem` then says why. `attempts` are the job's
    finished attempts, oldest first (a running attempt is not among them yet).
    """

    job_id: str
    state: JobStatus
    queue: str
    job: Job | None
    problem: str | None = None
    token: str | None = None
    #: When the claim was taken or last renewed (a heartbeat moves it).
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    #: A running job whose cancel was requested: its worker records it cancelled.
    cancel_requested: bool = False

    @property
    def dead(self) -> bool:
        """True for a dead letter (state `failed`)."""
        return self.state is JobStatus.FAILED

    @property
    def prefetched(self) -> bool:
        """True for a claim whose job waits in a worker's prefetched batch, not begun."""
        return self.token is not None and is_prefetched(self.token)

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The newest finished attempts (see `conveyor.core.MAX_ATTEMPTS_KEPT`), oldest
        first: when each started and ended, on which worker, how, and its error."""
        return () if self.job is None else self.job.attempts

    @property
    def next_run_at(self) -> datetime | None:
        """When a parked job (`scheduled`, `retrying`) comes due; None otherwise."""
        return self.job.run_at if self.job is not None and self.state.is_parked else None

    def to_dict(self, *, show_args: bool = False, show_result: bool = False) -> dict[str, Any]:
        """A JSON-ready mapping, tracebacks in full. Args and result (they often hold
        secrets) only when asked."""
        job = self.job
        out: dict[str, Any] = {"id": self.job_id, "state": self.state.value, "dead": self.dead}
        out["queue"] = self.queue
        if job is not None:
            out |= {
                "job_type": job.job_type,
                "priority": job.priority.value,
                "tenant_id": job.tenant_id,
                "attempt": job.attempt,
                "retry_count": job.retry_count,
                "max_retries": job.max_retries,
                "created_at": _iso(job.created_at),
                "run_at": _iso(job.run_at),
                "next_run_at": _iso(self.next_run_at),
                "started_at": _iso(job.started_at),
                "finished_at": _iso(job.finished_at),
                "last_error": _error_dict(job.last_error),
                "attempts": [attempt_dict(attempt) for attempt in job.attempts],
            }
            if show_args:
                out["args"] = thaw(job.args)
            if show_result:
                out["result"] = job.result
        out["claim"] = (
            None
            if self.token is None
            else {
                "token": self.token,
                "prefetched": self.prefetched,
                "claimed_at": _iso(self.claimed_at),
                "lease_expires_at": _iso(self.lease_expires_at),
                "cancel_requested": self.cancel_requested,
            }
        )
        out["problem"] = self.problem
        return out


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _error_dict(error: ErrorInfo | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": error.type,
        "message": error.message,
        "retryable": error.retryable,
        "traceback": error.traceback,
    }


def attempt_dict(attempt: Attempt) -> dict[str, Any]:
    """One attempt as a JSON-ready mapping, its traceback in full."""
    return {
        "number": attempt.number,
        "outcome": attempt.outcome.value,
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "worker": attempt.worker,
        "error": _error_dict(attempt.error),
    }


def attempt_line(attempt: Attempt) -> str:
    """One attempt on one line: number, outcome, when it ended, how long it took, the
    worker and the error's type and first line."""
    parts = [f"#{attempt.number} {attempt.outcome.value} at {attempt.finished_at.isoformat()}"]
    if attempt.started_at is not None:
        took = (attempt.finished_at - attempt.started_at).total_seconds()
        parts.append(f"took {took:.3f} s")
    parts.append(f"worker {attempt.worker or 'unknown'}")
    line = ", ".join(parts)
    error = attempt.error
    if error is not None:
        first = error.message.splitlines()[0][:200] if error.message else ""
        line += f": {error.type}: {first}"
    return line


def view_of_entry(entry: QueuedJob, lease: timedelta) -> JobView:
    """The view of a queued job; `lease` turns its claim time into the lease's end."""
    if entry.place is Place.IN_FLIGHT:
        state = JobStatus.RUNNING
    elif entry.place is Place.READY:
        state = JobStatus.PENDING
    elif entry.job is not None and entry.job.status.is_parked:
        state = entry.job.status
    else:
        state = JobStatus.SCHEDULED
    expires = None if entry.locked_at is None else entry.locked_at + lease
    return JobView(
        entry.job_id,
        state,
        entry.queue,
        entry.job,
        entry.problem,
        entry.token,
        entry.locked_at,
        expires,
    )


def view_of_record(record: Job) -> JobView:
    """The view of a recorded job (completed, failed, or a revived record)."""
    return JobView(str(record.id), record.status, record.queue, record)


def find_job(queue: JobQueue, store: JobStore, job_id: UUID, lease: timedelta) -> JobView | None:
    """The job `job_id` wherever it is, or None when neither queue nor store knows it."""
    entry = queue.find(job_id)
    if entry is not None:
        view = view_of_entry(entry, lease)
        if (
            view.token is not None
            and isinstance(queue, CancellingJobQueue)
            and queue.cancel_requested(job_id)
        ):
            view = attrs.evolve(view, cancel_requested=True)
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


def describe(
    view: JobView,
    *,
    show_args: bool = False,
    show_result: bool = False,
    show_traceback: bool = False,
) -> list[str]:
    """`conveyor job show`'s lines: one `field: value` each, for the state at hand,
    then one line per attempt (each followed by its traceback when asked)."""
    data = view.to_dict(show_args=show_args, show_result=show_result)
    state = view.state.value + (" (dead letter)" if view.dead else "")
    lines = [f"id: {view.job_id}", f"state: {state}", f"queue: {view.queue}"]
    job = view.job
    if job is None:
        return [*lines, f"problem: the stored payload is not a job: {view.problem}"]
    lines += [
        f"job type: {job.job_type}",
        f"priority: {job.priority.value}",
        f"tenant: {job.tenant_id or '-'}",
        f"attempt: {job.attempt} (retries {job.retry_count} of {job.max_retries})",
        f"created at: {data['created_at']}",
    ]
    if view.next_run_at is not None:
        lines.append(f"next run at: {data['next_run_at']}")
    if view.token is not None:
        claim = data["claim"]
        waiting = " (prefetched, not begun)" if view.prefetched else ""
        lines += [
            f"claim token: {view.token}{waiting}",
            f"claimed or renewed at: {claim['claimed_at']}",
            f"lease expires at: {claim['lease_expires_at']}",
        ]
        if view.cancel_requested:
            lines.append("cancel: requested (recorded cancelled when the handler returns)")
    if job.started_at is not None:
        lines.append(f"started at: {data['started_at']}")
    if job.finished_at is not None:
        lines.append(f"finished at: {data['finished_at']}")
    if job.last_error is not None:
        error = job.last_error
        lines.append(f"last error: {error.type}: {error.message}")
    lines += _attempt_lines(job.attempts, show_traceback)
    if show_args:
        lines.append(f"args: {json.dumps(data['args'], default=str)}")
    if show_result:
        lines.append(f"result: {json.dumps(data['result'], default=str)}")
    elif job.result is not None:
        lines.append("result: hidden (--show-result shows it)")
    return lines


def _attempt_lines(attempts: tuple[Attempt, ...], show_traceback: bool) -> list[str]:
    if not attempts:
        return ["attempts: none finished"]
    kept = f"the newest {MAX_ATTEMPTS_KEPT}, " if len(attempts) >= MAX_ATTEMPTS_KEPT else ""
    lines = [f"attempts ({kept}oldest first):"]
    traced = False
    for attempt in attempts:
        lines.append(f"  {attempt_line(attempt)}")
        trace = None if attempt.error is None else attempt.error.traceback
        traced = traced or trace is not None
        if show_traceback and trace is not None:
            lines += [f"    {line}" for line in trace.rstrip("\n").splitlines()]
    if traced and not show_traceback:
        lines.append("tracebacks: hidden (--traceback shows them)")
    return lines


def summary_row(view: JobView) -> tuple[object, ...]:
    """One row of `conveyor jobs list`."""
    job = view.job
    note: str | None
    if view.token is not None and view.lease_expires_at is not None:
        note = f"lease until {view.lease_expires_at.isoformat(timespec='seconds')}"
    elif view.next_run_at is not None:
        note = f"due {view.next_run_at.isoformat(timespec='seconds')}"
    elif job is not None and job.last_error is not None and view.state.is_terminal:
        note = f"{job.last_error.type}: {job.last_error.message[:60]}"
    else:
        note = view.problem
    return (
        view.job_id,
        view.state.value,
        view.queue,
        None if job is None else job.job_type,
        None if job is None else job.priority.value,
        None if job is None else job.attempt,
        note,
    )


#: The columns of `summary_row`.
SUMMARY_HEADERS = ("id", "state", "queue", "job type", "priority", "attempt", "note")
