"""Times and delays given by a caller, checked at the edge: aware datetimes in UTC,
delays that are not negative, and their sums within the calendar. Each answer is the
value or a `FieldError` naming the field and why."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from .errors import FieldError


def as_utc(field: str, value: object) -> datetime | FieldError:
    """Accept only timezone-aware datetimes, returned in UTC."""
    if not isinstance(value, datetime):
        return FieldError(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        return FieldError(field, "must be timezone-aware (UTC); got a naive datetime")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return FieldError(field, "is outside the years 1 to 9999 once converted to UTC")


def as_delay(field: str, value: object) -> timedelta | FieldError:
    """Accept a non-negative `timedelta`, or a finite number of seconds."""
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, float) and not math.isfinite(value):
        return FieldError(field, f"must be a finite number of seconds, got {value}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            delay = timedelta(seconds=value)
        except OverflowError:
            return FieldError(field, "is too far in the future (more than 999999999 days)")
    else:
        return FieldError(field, f"must be seconds or a timedelta, got {type(value).__name__}")
    if delay < timedelta(0):
        return FieldError(field, "must not be negative")
    return delay


def later(field: str, start: datetime, delay: timedelta) -> datetime | FieldError:
    """`start + delay`, or why that is past the last representable time."""
    try:
        return start + delay
    except OverflowError:
        return FieldError(field, f"{delay.days} days from now is after the year 9999")
