"""What Conveyor stores about a job, read as Django's `TaskResult`, and back.

A Django task's call is stored as the job's args: `{"args": [...], "kwargs": {...},
"django": {...}}`, where `django` keeps what Conveyor's own fields cannot say exactly
(the task's Django priority, its backend alias, its `run_after`). The job type is the
task's module path. Everything a `TaskResult` shows is rebuilt from the job alone, so
any process reads the same result.

Priorities: Django's whole numbers from -100 to 100 fall into Conveyor's four claim
orders (`django_priority_order`); within one order, jobs run first in, first out.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..core import NO_HANDLER, Attempt, AttemptOutcome, ErrorInfo, Job, JobStatus, Priority, thaw
from .compat import InvalidTask, TaskError, TaskResult, TaskResultStatus

#: The lowest Django priority of each Conveyor order, most urgent first.
PRIORITY_BANDS: tuple[tuple[int, Priority], ...] = (
    (50, Priority.CRITICAL),
    (1, Priority.HIGH),
    (0, Priority.NORMAL),
    (-100, Priority.LOW),
)

#: Conveyor's states as Django's: waiting in any form is READY, every end but
#: success is FAILED (a cancelled job too: Django has no state for it).
STATUS_OF: Mapping[JobStatus, Any] = {
    JobStatus.SCHEDULED: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

#: Attempts that never ran the task (no handler on that worker): no worker id.
_NOT_RUN = frozenset({AttemptOutcome.REQUEUED})


def django_priority_order(priority: int) -> Priority:
    """The Conveyor order a Django priority (-100..100) is claimed in: 50 and above
    `critical`, 1 to 49 `high`, 0 (Django's default) `normal`, below 0 `low`."""
    for lowest, order in PRIORITY_BANDS:
        if priority >= lowest:
            return order
    return Priority.LOW


def pack_call(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    priority: int,
    backend: str,
    run_after: datetime | None,
) -> dict[str, Any]:
    """The job args that hold one call of a task."""
    django = {
        "priority": priority,
        "backend": backend,
        "run_after": None if run_after is None else run_after.isoformat(),
    }
    return {"args": list(args), "kwargs": dict(kwargs), "django": django}


def unpack_call(job: Job) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, the Django part) of a job `pack_call` made; empty parts for a
    job that something else enqueued under a task's name."""
    raw = thaw(job.args)
    raw = raw if isinstance(raw, dict) else {}
    args, kwargs, django = raw.get("args"), raw.get("kwargs"), raw.get("django")
    return (
        list(args) if isinstance(args, list) else [],
        dict(kwargs) if isinstance(kwargs, dict) else {},
        dict(django) if isinstance(django, dict) else {},
    )


def exception_class_path(error_type: str) -> str:
    """Where an error's class lives: the task's exceptions are stored by their full
    path already; a built-in exception's bare name gets `builtins.`, and Conveyor's
    own failure types (`Timeout`, `no-handler`, ...) are kept as they are."""
    if "." in error_type:
        return error_type
    found = getattr(builtins, error_type, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{error_type}"
    return error_type


def _task_error(error: ErrorInfo) -> Any:
    trace = error.traceback or f"{error.type}: {error.message}\n"
    return TaskError(exception_class_path=exception_class_path(error.type), traceback=trace)


def errors_of(job: Job) -> list[Any]:
    """One `TaskError` per failed attempt, oldest first; a dead letter whose reason
    no attempt carries (a poison pill, an undecodable result) gets that reason last."""
    errors = [_task_error(a.error) for a in job.attempts if a.error is not None]
    if job.status is JobStatus.FAILED and job.last_error is not None and not errors:
        errors.append(_task_error(job.last_error))
    return errors


def _ran(attempt: Attempt) -> bool:
    """Whether an attempt ran the task: not one parked for want of a handler, nor the
    dead letter that ends a job no worker had a handler for."""
    if attempt.outcome in _NOT_RUN:
        return False
    return attempt.error is None or attempt.error.type != NO_HANDLER


def worker_ids_of(job: Job, state: JobStatus, running_worker: str | None = None) -> list[str]:
    """One worker id per attempt that ran the task, the running one last.

    The running attempt's id is `running_worker` when the caller knows it, else the
    record's `worker` when the record is the started one; else "" (not known yet: the
    SQL store records an attempt's worker when it ends). A record written before the
    start (the SQL store's, while a job runs) names the worker of the attempt before,
    if any: never shown as this attempt's."""
    ids = [a.worker or "" for a in job.attempts if _ran(a)]
    if state is JobStatus.RUNNING:
        started = job.worker if job.status is JobStatus.RUNNING else None
        ids.append(running_worker or started or "")
    return ids


def build_result(
    job: Job,
    state: JobStatus,
    task: Any,
    *,
    backend: str,
    running_worker: str | None = None,
) -> Any:
    """The `TaskResult` of `job`, seen in `state`, for `task` (the Django task the job
    type names, with the priority, queue and run_after the job was enqueued with)."""
    args, kwargs, _ = unpack_call(job)
    starts = [a.started_at for a in job.attempts if a.started_at is not None and _ran(a)]
    current = job.started_at
    if state is not JobStatus.RUNNING and job.attempts and not _ran(job.attempts[-1]):
        current = None  # the start of an attempt that found no handler
    last_start = current if current is not None else max(starts, default=None)
    first_start = min([*starts, *([current] if current else [])], default=None)
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=STATUS_OF[state],
        enqueued_at=_as_django(job.created_at),
        started_at=_as_django(first_start),
        finished_at=_as_django(job.finished_at if state.is_terminal else None),
        last_attempted_at=_as_django(last_start),
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=errors_of(job),
        worker_ids=worker_ids_of(job, state, running_worker),
    )
    if state is JobStatus.COMPLETED:
        # TaskResult is frozen and takes no return value in its constructor; Django's
        # own backends set it the same way.
        object.__setattr__(result, "_return_value", thaw(job.result))
    return result


def aware(moment: datetime | None) -> datetime | None:
    """A time a task gives (`run_after`) as Conveyor takes times, aware: a naive one,
    which Django allows under `USE_TZ = False`, is read in the current time zone."""
    from django.utils import timezone

    if moment is None or not timezone.is_naive(moment):
        return moment
    made: datetime = timezone.make_aware(moment)
    return made


def _as_django(moment: datetime | None) -> datetime | None:
    """A stored time (aware, UTC) as Django shows times: naive in the current time
    zone under `USE_TZ = False`, as its own fields read."""
    from django.conf import settings
    from django.utils import timezone

    if moment is None or settings.USE_TZ:
        return moment
    local: datetime = timezone.make_naive(moment)
    return local


def task_for(job: Job, resolve: Callable[[str], Any]) -> Any:
    """The Django task of `job`: the task its type names (`resolve`), with the
    priority, queue, run_after and backend it was enqueued with."""
    _, _, django = unpack_call(job)
    task = resolve(job.job_type)
    changes: dict[str, Any] = {"queue_name": job.queue}
    if isinstance(django.get("priority"), int):
        changes["priority"] = django["priority"]
    if isinstance(django.get("backend"), str):
        changes["backend"] = django["backend"]
    if isinstance(django.get("run_after"), str):
        changes["run_after"] = datetime.fromisoformat(django["run_after"])
    try:
        return task.using(**changes)
    except InvalidTask:
        if job.queue == task.queue_name:
            raise
    # The job's queue is no longer in the backend's QUEUES (the settings changed since
    # it was enqueued): the task is still shown as it was enqueued, past the check
    # that only a new enqueue needs.
    rebuilt = task.using(**{k: v for k, v in changes.items() if k != "queue_name"})
    object.__setattr__(rebuilt, "queue_name", job.queue)
    return rebuilt
