"""attrs validators that refuse a bad value the way every other edge does.

A value given in Python (`Cap(0)`, `RetryPolicy(initial_delay_ms=-1)`) is refused
with the same `ValidationError` as a bad config key or enqueue option: one
`FieldError` whose field is the class and attribute (`Cap.max_running`), and whose
reason says what was expected and what came. The config names its own paths
(`limits.payments.caps[0].max_running`); these name the Python ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from .errors import ValidationError

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def field_path(instance: object, attribute: attrs.Attribute[Any], tail: str = "") -> str:
    """`Class.attribute` (and `tail`, such as `.key` or `[0]`) for `instance`."""
    return f"{type(instance).__name__}.{attribute.name}{tail}"


def refuse(instance: object, attribute: attrs.Attribute[Any], reason: str, tail: str = "") -> None:
    """Raise the `ValidationError` for one bad attribute of `instance`."""
    raise ValidationError.of(field_path(instance, attribute, tail), reason)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer_at_least(minimum: int) -> Validator:
    """An integer no smaller than `minimum`."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not _is_int(value):
            refuse(instance, attribute, f"must be an integer, got {value!r}")
        elif value < minimum:  # type: ignore[operator]
            refuse(instance, attribute, f"must be >= {minimum}, got {value!r}")

    return check


def optional_integer_at_least(minimum: int) -> Validator:
    """None, or an integer no smaller than `minimum`."""
    check = integer_at_least(minimum)

    def optional(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(instance, attribute, value)

    return optional


def switch(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """True or False, nothing that merely reads as one (0, None, "no")."""
    if not isinstance(value, bool):
        refuse(instance, attribute, f"must be True or False, got {value!r}")


def instance_of(kind: type) -> Validator:
    """An instance of `kind` (a policy inside `Policies`, say)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            refuse(instance, attribute, f"must be a {kind.__name__}, got {value!r}")

    return check


def number_at_least(minimum: float) -> Validator:
    """A number (int or float) no smaller than `minimum`."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not _is_number(value) or not value >= minimum:  # type: ignore[operator]
            refuse(instance, attribute, f"must be >= {minimum}, got {value!r}")

    return check


#: The longest duration any `*_ms` setting may give: 100 years. Longer ones mean
#: "never" in practice, and past a few thousand years a date computed from one is
#: out of `datetime`'s range.
MAX_DURATION_MS = 36_525 * 24 * 3600 * 1000  # 36,525 days


def duration_ms(*, positive: bool = False) -> Validator:
    """A duration in ms: a finite number from 0 (above 0 when `positive`) to
    `MAX_DURATION_MS`."""
    low = "> 0" if positive else ">= 0"

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not _is_number(value) or not (value > 0 if positive else value >= 0):  # type: ignore[operator]
            refuse(instance, attribute, f"must be a number {low}, got {value!r}")
        elif not value <= MAX_DURATION_MS:  # type: ignore[operator]
            refuse(
                instance, attribute, f"must be at most {MAX_DURATION_MS} (100 years), got {value!r}"
            )

    return check


def positive_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A finite number above zero."""
    if not _is_number(value) or not 0 < value < math.inf:  # type: ignore[operator]
        refuse(instance, attribute, f"must be a finite number > 0, got {value!r}")


def positive_or_infinite(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A number above zero; infinity allowed (no bound)."""
    if not _is_number(value) or not value > 0:  # type: ignore[operator]
        refuse(instance, attribute, f"must be a number > 0, got {value!r}")


def optional_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """None, or a non-empty string."""
    if value is not None and (not isinstance(value, str) or not value):
        refuse(instance, attribute, f"must be a non-empty string, got {value!r}")
