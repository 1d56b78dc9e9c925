"""Per-attempt timeouts: which one applies, when the attempt's deadline is, and the
failure an overrun is recorded as.

A timeout is set per job (an enqueue option, kept on the job as `timeout_ms`)
or per job type (when the handler is registered, or in the config). The job's
own wins; then the configured one; then the registered one; else the attempt
has no deadline. An overrun is an ordinary retryable failure of type `Timeout`,
so the job's retry policy applies to it like to any other failure.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from .errors import FieldError
from .job import ErrorInfo

#: The error type an attempt that ran past its deadline is recorded with.
TIMEOUT = "Timeout"

#: The longest timeout accepted: a year, far past any lease, and far from the
#: last representable datetime.
MAX_TIMEOUT_MS = 366 * 24 * 3600 * 1000


def parse_timeout(field: str, value: object) -> int | FieldError:
    """A timeout in whole milliseconds from seconds (int or float) or a `timedelta`,
    or why not: it must be more than zero and at most a year. A fraction of a
    millisecond rounds up, so a tiny positive timeout never becomes zero."""
    if isinstance(value, timedelta):
        span = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            return FieldError(field, f"must be a finite number of seconds, got {value}")
        if value > MAX_TIMEOUT_MS / 1000:
            return FieldError(field, "must be at most 366 days")
        span = timedelta(seconds=value)
    else:
        return FieldError(field, f"must be seconds or a timedelta, got {type(value).__name__}")
    if span <= timedelta(0):
        return FieldError(field, "must be more than zero seconds")
    if span > timedelta(milliseconds=MAX_TIMEOUT_MS):
        return FieldError(field, "must be at most 366 days")
    return -(-span // timedelta(microseconds=1) // 1000)


def timeout_for(
    job_timeout_ms: int | None,
    *,
    configured_ms: int | None = None,
    registered_ms: int | None = None,
) -> int | None:
    """The timeout that applies to an attempt: the job's own, else the job type's
    from the config, else the one given when its handler was registered; None when
    none is set (the attempt runs as long as it takes)."""
    for candidate in (job_timeout_ms, configured_ms, registered_ms):
        if candidate is not None:
            return candidate
    return None


def attempt_deadline(started_at: datetime, timeout_ms: int | None) -> datetime | None:
    """When an attempt that began at `started_at` must be over; None without a timeout."""
    if timeout_ms is None:
        return None
    return started_at + timedelta(milliseconds=timeout_ms)


def timeout_error(timeout_ms: int) -> ErrorInfo:
    """The failure an attempt that ran past its timeout is recorded as: retryable, so
    the retry policy decides between another attempt and the dead letters."""
    return ErrorInfo(TIMEOUT, f"ran past its timeout of {_seconds(timeout_ms)}", retryable=True)


def _seconds(ms: int) -> str:
    text = f"{ms / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{text} s"
