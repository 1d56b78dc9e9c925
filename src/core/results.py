"""Results: the cap on the size of a handler's return value, and when a record
carried by a finish signal ends a wait for the job's outcome.

A completed job's result is stored with its record and leaves the library as JSON
(`Runtime.result`, `JobView.to_dict`, `conveyor job show --json`). A result larger
than the cap would make every read of the record as large, so `decide` refuses it:
the job is dead-lettered with `result-too-large`, never retried (running it again
would return as much), and its error names the job, the size and the cap.

A caller waiting for an outcome is woken by the write of the job's record, and the
signal may carry that record. A waiter needs only what the record says of the
outcome (`CarriedOutcome`: read from the record's text without building the whole
job, which would cost a woken waiter more than everything else it does). Signals
arrive late and out of order with the reads: a record written before the caller's
last read (an earlier attempt's, before the job was revived or retried) must not end
the wait (`carried_record_settles`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import attrs

from .field_checks import integer_at_least
from .frozen import json_size, thaw
from .job import ErrorInfo, Job, JobStatus

#: The error type of a job whose result is larger than the cap.
RESULT_TOO_LARGE = "result-too-large"

#: The default cap: 1 MiB of compact UTF-8 JSON.
DEFAULT_MAX_RESULT_BYTES = 1_048_576


@attrs.frozen(slots=True)
class ResultPolicy:
    """`max_bytes`: the largest result a job may return, in bytes of compact UTF-8
    JSON (the config's `max_result_bytes`)."""

    max_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=integer_at_least(1))


#: Results of these types are far below any cap: they are not measured.
_SMALL = (type(None), bool, int, float)


def oversized_result(job_id: UUID, result: Any, policy: ResultPolicy) -> ErrorInfo | None:
    """The `result-too-large` error of job `job_id` when its (frozen) `result` is
    larger than `policy.max_bytes`; None when it fits."""
    if type(result) in _SMALL:
        return None
    if type(result) is str and len(result) * 6 + 2 <= policy.max_bytes:
        return None  # a character takes at most 6 bytes in JSON (an escaped control)
    size = json_size(result)
    if size <= policy.max_bytes:
        return None
    message = (
        f"job {job_id} returned a result of {size} bytes as JSON; the limit is "
        f"{policy.max_bytes} bytes (max_result_bytes)"
    )
    return ErrorInfo(RESULT_TOO_LARGE, message, retryable=False)


@attrs.frozen(slots=True)
class CarriedOutcome:
    """What a record carried by a finish signal says of its job's outcome: the job's
    `id`, its `status` and `attempt`, its `result` (plain JSON values) and its
    `last_error`."""

    id: UUID
    status: JobStatus
    attempt: int
    result: Any = None
    last_error: ErrorInfo | None = None


def carried_outcome_of(record: Job) -> CarriedOutcome:
    """The `CarriedOutcome` of a record already read as a job."""
    return CarriedOutcome(
        record.id, record.status, record.attempt, thaw(record.result), record.last_error
    )


def carried_record_settles(seen: Job | None, carried: CarriedOutcome) -> bool:
    """Whether `carried`, a record a finish signal brought, is the outcome a caller
    waits for, so that it need not read the store: the caller's last read showed the
    job unfinished as `seen` (None: it could not tell the attempt, its payload did not
    decode).

    It is when it is the same job, finished (completed, failed or cancelled), by an
    attempt after the one `seen` counted. Attempts only grow, and a queued or claimed
    job counts the attempts before the one to come (a worker starts the attempt in
    its own memory), so a record of the same attempt may be one written before the
    job was revived or re-enqueued: then, and whenever in doubt, the caller reads the
    store, which is never wrong, only slower."""
    if seen is None or carried.id != seen.id or not carried.status.is_terminal:
        return False
    return carried.attempt > seen.attempt
