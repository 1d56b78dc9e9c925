"""Validation at the edge: `create_job` and the name rules every backend relies on."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from returns.result import Failure, Result, Success

from .errors import FieldError, ValidationError
from .frozen import FrozenMap, NotJson, freeze, json_size
from .job import Job, JobStatus, Priority
from .partitions import check_partition
from .timeouts import parse_timeout

# Named here too (the shell imports `as_delay` from this module); they live in `times`.
from .times import as_delay as as_delay
from .times import as_utc as as_utc
from .times import later as later
from .uniqueness import make_lock

#: Names (job types, queues, tenants) are short and safe to embed in keys and logs.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
MAX_NAME_LENGTH = 128
DEFAULT_MAX_ARGS_BYTES = 64 * 1024
MAX_RETRIES_LIMIT = 1000


@attrs.frozen(slots=True)
class Limits:
    """Size limits applied by `create_job`. `max_args_bytes` counts compact UTF-8 JSON."""

    max_args_bytes: int = DEFAULT_MAX_ARGS_BYTES
    max_name_length: int = MAX_NAME_LENGTH
    max_depth: int = 32


def check_name(field: str, value: object, limits: Limits = Limits()) -> FieldError | None:
    """Return why `value` is not a valid name, or None when it is."""
    if not isinstance(value, str):
        return FieldError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        return FieldError(field, "must not be empty")
    if len(value) > limits.max_name_length:
        return FieldError(
            field, f"is {len(value)} characters; the limit is {limits.max_name_length}"
        )
    if NAME_PATTERN.fullmatch(value) is None:
        return FieldError(
            field,
            "may hold only ASCII letters, digits, '_', '.', '-' and must start with a letter "
            "or digit",
        )
    return None


def parse_priority(value: object) -> Priority | FieldError:
    """Accept a `Priority` or its name (`"high"`)."""
    if isinstance(value, Priority):
        return value
    if isinstance(value, str):
        try:
            return Priority(value.lower())
        except ValueError:
            pass
    names = ", ".join(p.value for p in Priority)
    return FieldError("priority", f"unknown priority {value!r}; use one of {names}")


def parse_job_id(value: object, field: str = "job_id") -> UUID | FieldError:
    """A job id from a `UUID` or its text (as typed on a command line)."""
    if isinstance(value, UUID):
        return value
    if not isinstance(value, str):
        return FieldError(field, f"must be a job id (a UUID), got {type(value).__name__}")
    try:
        return UUID(value)
    except ValueError:
        # ascii() keeps a control character or a lone surrogate from breaking the line.
        shown = ascii(value if len(value) <= 60 else value[:60] + "...")
        noun = "workflow id" if field == "workflow_id" else "job id"
        return FieldError(field, f"{shown} is not a {noun} (a UUID)")


def freeze_args(
    value: object, limits: Limits = Limits(), field: str = "args"
) -> FrozenMap | FieldError:
    """Check that args are a JSON object under the size limit, and freeze them."""
    if not isinstance(value, Mapping):
        return FieldError(field, f"must be a JSON object (a mapping), got {type(value).__name__}")
    try:
        frozen = freeze(value, max_depth=limits.max_depth)
        size = json_size(frozen)
    except NotJson as exc:
        return FieldError(field, f"not JSON at {exc.path}: {exc.reason}")
    except RecursionError:
        return FieldError(field, "is nested too deeply to encode")
    except ValueError:
        # The interpreter may be set to convert fewer integer digits than MAX_INT_DIGITS.
        return FieldError(field, "holds an integer with too many digits to encode")
    if size > limits.max_args_bytes:
        return FieldError(
            field, f"is {size} bytes as JSON; the limit is {limits.max_args_bytes} bytes"
        )
    assert isinstance(frozen, FrozenMap)
    return frozen


def create_job(
    *,
    id: UUID | str,
    job_type: str,
    args: Mapping[str, Any] | None = None,
    now: datetime,
    queue: str = "default",
    priority: Priority | str = Priority.NORMAL,
    max_retries: int = 3,
    run_at: datetime | None = None,
    delay: timedelta | float | None = None,
    tenant_id: str | None = None,
    limits: Limits = Limits(),
    timeout: timedelta | float | None = None,
    unique_key: str | None = None,
    unique_for: timedelta | float | None = None,
    unique_states: Iterable[JobStatus | str] | None = None,
    partition: str | None = None,
) -> Result[Job, ValidationError]:
    """Validate input and build a new job, or say which fields are wrong and why.

    The caller supplies `id` and `now`, so this function is pure. A job with a
    `run_at` (or `delay`, a timedelta or seconds) later than `now` starts
    `scheduled`; otherwise `pending`. `timeout` (seconds or a timedelta, more than
    zero) bounds each attempt; see `core.timeouts`. `id` may be a UUID's text (a
    caller-chosen id). `unique_key`, `unique_for` and `unique_states` make the job
    hold a `UniqueLock`; see `core.uniqueness`. `partition` (a one-line string of
    at most 200 characters) is the job's partition for fair shares and limits; see
    `core.limits`.
    Every problem is reported at once, not only the first.
    """
    errors: list[FieldError] = []

    def keep(outcome: Any) -> Any:
        if isinstance(outcome, FieldError):
            errors.append(outcome)
            return None
        return outcome

    job_id = keep(parse_job_id(id, field="id"))
    for field, name in (("job_type", job_type), ("queue", queue)):
        keep(check_name(field, name, limits))
    if tenant_id is not None:
        keep(check_name("tenant_id", tenant_id, limits))
    frozen_args = keep(freeze_args({} if args is None else args, limits))
    prio = keep(parse_priority(priority))
    if isinstance(max_retries, bool) or not isinstance(max_retries, int):
        errors.append(FieldError("max_retries", "must be an integer"))
    elif max_retries < 0:
        errors.append(FieldError("max_retries", f"must be >= 0, got {max_retries}"))
    elif max_retries > MAX_RETRIES_LIMIT:
        errors.append(FieldError("max_retries", f"must be <= {MAX_RETRIES_LIMIT}"))
    created = keep(as_utc("now", now))
    due = created
    if run_at is not None and delay is not None:
        errors.append(FieldError("run_at", "give run_at or delay, not both"))
    elif run_at is not None:
        due = keep(as_utc("run_at", run_at))
    elif delay is not None:
        span = keep(as_delay("delay", delay))
        if span is not None and created is not None:
            due = keep(later("delay", created, span))
    timeout_ms = None if timeout is None else keep(parse_timeout("timeout", timeout))
    if partition is not None:
        keep(check_partition(partition))
    lock = None
    if created is not None:
        lock = keep(make_lock(unique_key, created, unique_for, unique_states))

    if errors:
        return Failure(ValidationError(errors))
    assert created is not None and due is not None and job_id is not None
    status = JobStatus.SCHEDULED if due > created else JobStatus.PENDING
    return Success(
        Job(
            id=job_id,
            job_type=job_type,
            args=frozen_args,
            queue=queue,
            priority=prio,
            status=status,
            created_at=created,
            run_at=due,
            max_retries=max_retries,
            tenant_id=tenant_id,
            timeout_ms=timeout_ms,
            unique=lock,
            partition_key=partition,
        )
    )
