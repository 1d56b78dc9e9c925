"""The legal moves of a job, as one table of data.

Theory of operation
-------------------
A job is a value; the table below is the whole state machine. `transition`
looks the move up and returns the next record or an `InvalidTransition`, so an
illegal move is an ordinary `Failure`, never an exception from deep inside a
worker. The docs render this same table (see `docs/core.md`).

Two moves are worth a word. `retrying -> pending` and `scheduled -> pending`
both happen on `PROMOTE`, when a parked job's `run_at` has passed. `running ->
scheduled` on `REQUEUE` is the missing-handler park: another node with the
handler may take the job once its requeue delay has passed. `running ->
pending` on `RECLAIM` is the lease keeper returning an abandoned claim.
`pending -> pending` on `HAND_BACK` is a claim given back before its job began
(a prefetched claim at shutdown, or one whose lease ran out while it waited):
no attempt is counted. `running -> pending` on `INTERRUPT` is a running claim
given back by a worker stopped by force (a second Ctrl-C): the job is ready again
at once instead of after its lease, its attempt recorded as interrupted.
`failed -> pending` on `REVIVE` is an operator retrying a dead letter by hand;
nothing automatic ever takes it.

`waiting -> pending` on `RELEASE` is a dependent job let go once every job it waits
for has finished (`core.dependencies` decides when). A waiting job is never claimed;
when a job it waits for fails, its policy may instead end it `cancelled` (the
record's error says which dependency, or that it was skipped).

`CANCEL` ends a job for good. A queued job (`scheduled`, `pending`, `retrying`)
is cancelled at once. A running one cannot be stopped from outside its worker,
so its cancel is first a *request* kept beside the claim; `running -> cancelled`
is the move made when its handler returns (whatever it returned) or its lease
runs out with the request standing. That is why `running` has no `COMPLETE`
guard of its own here: the adapters refuse an outcome write while a request
stands, and the worker then records this move instead (see `core.cancellation`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from operator import attrgetter
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from .errors import InvalidTransition
from .job import MAX_WORKER_CHARS, Job, JobStatus


class Event(enum.Enum):
    """What happened to a job."""

    PROMOTE = "promote"  # its run_at passed
    START = "start"  # a worker claimed it
    COMPLETE = "complete"  # the handler succeeded
    RETRY = "retry"  # the handler failed, a retry is left
    REQUEUE = "requeue"  # no handler here: park it for another node
    DEAD_LETTER = "dead_letter"  # give up: retries exhausted, non-retryable, no handler
    RECLAIM = "reclaim"  # the claim's lease expired
    REVIVE = "revive"  # an operator gives a dead letter a fresh start
    HAND_BACK = "hand_back"  # a claim returned before its job started
    INTERRUPT = "interrupt"  # a worker stopped by force gave back a running claim
    CANCEL = "cancel"  # an operator or the application gave up on the job
    RELEASE = "release"  # every job it waited for finished, and its policies let it run


S, E = JobStatus, Event

#: {status: {event: next status}}. Anything not listed is an InvalidTransition.
TABLE: Mapping[JobStatus, Mapping[Event, JobStatus]] = {
    S.SCHEDULED: {E.PROMOTE: S.PENDING, E.CANCEL: S.CANCELLED},
    S.WAITING: {E.RELEASE: S.PENDING, E.CANCEL: S.CANCELLED},
    S.PENDING: {E.START: S.RUNNING, E.HAND_BACK: S.PENDING, E.CANCEL: S.CANCELLED},
    S.RUNNING: {
        E.COMPLETE: S.COMPLETED,
        E.RETRY: S.RETRYING,
        E.REQUEUE: S.SCHEDULED,
        E.DEAD_LETTER: S.FAILED,
        E.RECLAIM: S.PENDING,
        E.INTERRUPT: S.PENDING,
        E.CANCEL: S.CANCELLED,
    },
    S.RETRYING: {E.PROMOTE: S.PENDING, E.CANCEL: S.CANCELLED},
    S.COMPLETED: {},
    S.FAILED: {E.REVIVE: S.PENDING},
    S.CANCELLED: {},
}


#: `TABLE` keyed by the values' text, whose hashes are cached: an enum member's hash
#: is a Python call, and this lookup runs on every claim and every outcome.
_MOVES = {
    (status.value, event.value): target
    for status, moves in TABLE.items()
    for event, target in moves.items()
}


def next_status(status: JobStatus, event: Event) -> JobStatus | None:
    """The status after `event`, or None when the table has no such move."""
    return _MOVES.get((status._value_, event._value_))


def replace(job: Job, **changes: Any) -> Job:
    """`job` with `changes`, the record `attrs.evolve` builds, in about half its time:
    the field list is read once, at import, not on every call (`Job`'s own
    `__init__` still builds the record). Every claim copies its job twice: when it
    starts and when its outcome is decided."""
    values = dict(zip(_INIT_NAMES, _init_values(job), strict=True))
    values.update(changes)
    return Job(**values)


_INIT_FIELDS = [field for field in attrs.fields(Job) if field.init]
_INIT_NAMES = tuple(field.alias or field.name for field in _INIT_FIELDS)
_init_values = attrgetter(*(field.name for field in _INIT_FIELDS))


def transition(
    job: Job, event: Event, now: datetime, **changes: Any
) -> Result[Job, InvalidTransition]:
    """Apply `event` to `job` at `now`: a new record, or the illegal move named.

    `changes` are other fields to set in the same new record (one copy, not two).
    """
    return _move(job, job.status, event, now, changes)


def _move(
    job: Job, status: JobStatus, event: Event, now: datetime, changes: dict[str, Any]
) -> Result[Job, InvalidTransition]:
    """`event` applied to `job` as if it were in `status`, in one copy."""
    target = next_status(status, event)
    if target is None:
        return Failure(InvalidTransition(str(job.id), status.value, event.value))
    if event is Event.START:
        changes.update(started_at=now, attempt=job.attempt + 1)
    elif target.is_terminal:
        changes["finished_at"] = now
    return Success(replace(job, status=target, **changes))


def _from_ready(
    job: Job, event: Event, now: datetime, changes: dict[str, Any]
) -> Result[Job, InvalidTransition]:
    """`event` applied to a claimed job as if pending: a parked one is promoted first,
    in the same copy (promoting changes nothing but the status).

    Backends move a due parked job to a ready queue without rewriting its
    document, so the record may still say `scheduled` or `retrying` when claimed.
    """
    status = job.status
    if status.is_parked:
        promoted = next_status(status, Event.PROMOTE)
        if promoted is None:
            return Failure(InvalidTransition(str(job.id), status.value, Event.PROMOTE.value))
        status = promoted
    return _move(job, status, event, now, changes)


def hand_back(job: Job, now: datetime, **changes: Any) -> Result[Job, InvalidTransition]:
    """A claimed job returned to ready before it started: pending, no attempt counted."""
    return _from_ready(job, Event.HAND_BACK, now, changes)


def start(job: Job, now: datetime, worker: str | None = None) -> Result[Job, InvalidTransition]:
    """A claimed job begins an attempt (a promoted parked job is made pending first),
    run by `worker` (None when the caller is not the worker running it; an id longer
    than `MAX_WORKER_CHARS` is cut)."""
    kept = None if worker is None else worker[:MAX_WORKER_CHARS]
    return _from_ready(job, Event.START, now, {"worker": kept})
