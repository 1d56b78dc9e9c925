"""The converter's hooks for single values: a key's value as written in, the value
`Config` keeps out, or `Bad` with the reason it is refused.

`checked` turns a check (`conveyor.shell.config.checks`) into a hook that keeps the
value as given; the others also change its shape (a TOML array into a tuple, a
table into pairs, a priority's name into the `Priority`). The tables that hold
these values are the converter's (`conveyor.shell.config.converter`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    IterableValidationError,
    IterableValidationNote,
)

from ...core import FieldError, Priority
from ...core.cron import Missed, parse_missed
from ...core.frozen import FrozenMap
from ...core.queue_limits import period_problem, weight_problem
from ...core.timeouts import MAX_TIMEOUT_MS
from ...core.validation import check_name, freeze_args, parse_priority
from .checks import Check

#: A cattrs structure hook: (value as written, the type asked for) -> value kept.
Hook = Callable[[Any, Any], Any]


class Bad(ValueError):
    """A value a hook refuses; `reason` is the message after the key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def checked(check: Check) -> Hook:
    """The value as given, once `check` finds nothing wrong with it."""

    def structure(value: Any, _: Any) -> Any:
        reason = check(value)
        if reason is not None:
            raise Bad(reason)
        return value

    return structure


def string(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise Bad(f"must be a string, got {type(value).__name__}")
    return value


def flag(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise Bad("must be true or false")
    return value


def list_of(check: Check, reason: str, empty: bool, distinct: bool = False) -> Hook:
    """A TOML array as a tuple: refused as a whole with `reason` (a string, not an
    array, or empty unless `empty`), else item by item, each bad item named by its
    index (with `distinct`, an item listed before is a bad one)."""

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if isinstance(value, str) or not isinstance(value, list | tuple) or not (value or empty):
            raise Bad(reason)
        bad = []
        for index, item in enumerate(value):
            why = check(item)
            if why is None and distinct and item in value[:index]:
                why = f"{item!r} is listed twice"
            if why is not None:
                problem = Bad(why)
                problem.__notes__ = [IterableValidationNote(f"item {index}", index, str)]
                bad.append(problem)
        if bad:
            raise IterableValidationError("invalid items", bad, tuple)
        return tuple(value)

    return structure


def timeouts(value: Any, _: Any) -> tuple[tuple[str, int], ...]:
    """`[timeouts_ms]`: job type = milliseconds, each more than zero."""
    if not isinstance(value, Mapping):
        raise Bad(f"must be a table of job type = milliseconds, got {type(value).__name__}")
    pairs, bad = [], []
    for job_type, ms in value.items():
        problem = check_name("", job_type)
        if problem is not None:
            bad.append(Bad(f"{job_type!r} is not a job type: {problem.reason}"))
        elif isinstance(ms, bool) or not isinstance(ms, int) or not 0 < ms <= MAX_TIMEOUT_MS:
            # Named under its job type (`timeouts_ms.reports`), every bad one at once.
            wrong = Bad(f"must be milliseconds from 1 to {MAX_TIMEOUT_MS}, got {ms!r}")
            wrong.__notes__ = [AttributeValidationNote(job_type, job_type, int)]
            bad.append(wrong)
        else:
            pairs.append((job_type, ms))
    if bad:
        raise ClassValidationError("invalid timeouts", bad, dict)
    return tuple(pairs)


def priority(value: Any, _: Any) -> Priority:
    parsed = parse_priority(value)
    if not isinstance(parsed, Priority):
        raise Bad(parsed.reason)
    return parsed


def missed(value: Any, _: Any) -> Missed:
    parsed = parse_missed(value)
    if isinstance(parsed, FieldError):
        raise Bad(parsed.reason)
    return parsed


def args(value: Any, _: Any) -> FrozenMap:
    """A periodic job's args, frozen as an enqueued job's are."""
    if not isinstance(value, Mapping):
        raise Bad(f"must be a table, got {type(value).__name__}")
    frozen = freeze_args(value)
    if isinstance(frozen, FieldError):
        raise Bad(frozen.reason)
    return frozen


def seconds(value: Any, _: Any) -> float:
    if (problem := period_problem(value)) is not None:
        raise Bad(problem)
    return float(value)


def weights(value: Any, _: Any) -> dict[str, float]:
    """`weights`: partition = weight."""
    if not isinstance(value, Mapping):
        raise Bad(f"must be a table of partition = weight, got {type(value).__name__}")
    bad = []
    for key, weight in value.items():
        if (problem := weight_problem(weight)) is not None:
            # Named under its partition (`weights.acme`), every bad one at once.
            wrong = Bad(problem)
            wrong.__notes__ = [AttributeValidationNote(str(key), str(key), float)]
            bad.append(wrong)
    if bad:
        raise ClassValidationError("invalid weights", bad, dict)
    return {str(key): float(weight) for key, weight in value.items()}
