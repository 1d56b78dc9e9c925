"""Durations given at the edge: a delay as seconds or a `timedelta`, and the instant
it leads to, each checked the way every other field is (a `FieldError` naming it).

Their own module so that `validation` and `uniqueness`, which both read durations,
need not import each other.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from .errors import FieldError


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
