"""What was enqueued: read a runtime's backend, as a test asserts on it.

    job = send_receipt.enqueue({"to": "a@example.com"})
    assert_enqueued(runtime, send_receipt, {"to": "a@example.com"}, queue="emails")
    assert [j.args["to"] for j in enqueued_jobs(runtime, send_receipt)] == ["a@example.com"]

Both read the backend itself (`Runtime.list_jobs`), so they see jobs in every
state, whichever process enqueued them: waiting (`pending`, `scheduled`,
`retrying`), `running`, and finished (`completed`, `failed`). In inline mode a
job has usually finished by the time `enqueue` returns; filter by `state` to ask
about one state only. Each job's `status` is the state the backend reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..core import FieldError, Job, JobStatus, Priority, ValidationError
from ..core.frozen import thaw
from ..core.validation import check_name, parse_priority
from ..shell.lookup import parse_state
from ..shell.runtime import Runtime
from ..shell.tasks import Task

#: The most jobs `enqueued_jobs` reads; a test holding more should filter.
MAX_JOBS = 10_000


def _job_type(job_type: str | Task[Any, Any] | None) -> str | None:
    if isinstance(job_type, Task):
        return job_type.job_type
    if job_type is not None and not isinstance(job_type, str):
        # Else a filter no job matches: an assertion of "none" would pass on anything.
        what = type(job_type).__name__
        raise ValidationError.of("job_type", f"must be a job type or a Task, got {what}")
    return job_type


def enqueued_jobs(
    runtime: Runtime,
    job_type: str | Task[Any, Any] | None = None,
    *,
    queue: str | None = None,
    state: JobStatus | str | None = None,
    limit: int = MAX_JOBS,
) -> list[Job]:
    """The jobs `runtime`'s backend holds that match every filter given (a job type
    or a `Task`, a queue, a state: a `JobStatus` or its name), oldest `created_at`
    first. Jobs enqueued at one instant (a manual clock that did not move between
    them) come in no particular order among themselves. Reads only."""
    views = runtime.list_jobs(queue=queue, state=state, job_type=_job_type(job_type), limit=limit)
    jobs = [attrs.evolve(v.job, status=v.state) for v in views if v.job is not None]
    return sorted(jobs, key=lambda job: job.created_at)


def _describe(job: Job) -> str:
    return f"{job.job_type} {thaw(job.args)!r} on {job.queue!r} ({job.status.value})"


def _same_json(a: Any, b: Any) -> bool:
    """`a == b` as JSON values: `True` is not `1` (Python's == says it is), while `1`
    and `1.0` are the one JSON number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)


def assert_enqueued(
    runtime: Runtime,
    job_type: str | Task[Any, Any],
    args: Mapping[str, Any] | None = None,
    *,
    queue: str | None = None,
    state: JobStatus | str | None = None,
    priority: Priority | str | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that `runtime`'s backend holds a job of `job_type` (a name or a
    `Task`) matching every filter given, or exactly `count` of them (`count=0`: none);
    returns the matching jobs. `args` must equal the job's args. The failure message
    lists the jobs of that type that are there."""
    wanted_type = _job_type(job_type)
    if wanted_type is None:
        raise ValidationError.of("job_type", "must be a job type or a Task, got None")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValidationError.of("count", f"must be a whole number >= 0, got {count!r}")
    if args is not None and not isinstance(args, Mapping):
        # A job's args are a mapping: a list of pairs would never match, and its
        # failure message would show it as the dict it was read as.
        raise ValidationError.of("args", f"must be a mapping, got {type(args).__name__}")
    if queue is not None and (problem := check_name("queue", queue)) is not None:
        raise ValidationError((problem,))  # no job can be on it: count=0 would pass
    wanted_priority = None if priority is None else parse_priority(priority)
    if wanted_priority is not None and not isinstance(wanted_priority, Priority):
        raise ValidationError((wanted_priority,))
    wanted_state = parse_state(state) if isinstance(state, str) else state
    if isinstance(wanted_state, FieldError):
        raise ValidationError((wanted_state,))
    candidates = enqueued_jobs(runtime, wanted_type)
    matching = [
        job
        for job in candidates
        if (queue is None or job.queue == queue)
        and (wanted_state is None or job.status is wanted_state)
        and (wanted_priority is None or job.priority is wanted_priority)
        and (args is None or _same_json(thaw(job.args), thaw(args)))
    ]
    if (len(matching) > 0) if count is None else (len(matching) == count):
        return matching
    expected = f"{'at least 1' if count is None else count} {wanted_type!r} job(s)"
    filters = [
        f"{name} {value!r}"
        for name, value in (
            ("args", None if args is None else dict(args)),
            ("queue", queue),
            ("state", None if wanted_state is None else wanted_state.value),
            ("priority", None if wanted_priority is None else wanted_priority.value),
        )
        if value is not None
    ]
    where = f" with {', '.join(filters)}" if filters else ""
    held = "\n  ".join(_describe(job) for job in candidates) or "(none)"
    raise AssertionError(
        f"expected {expected}{where}; found {len(matching)}. "
        f"Jobs of type {wanted_type!r} held:\n  {held}"
    )
