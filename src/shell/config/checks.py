"""What a good value of a config key looks like, each rule written once.

A check is a function that says why a value is wrong, or None when it is right.
`Rule` makes one the attrs validator of a field of the public config classes, so a
`WorkersConfig(count=-1)` built in Python is refused as the core's classes refuse
theirs (`WorkersConfig.count: must be >= 0, got -1`). The converter
(`conveyor.shell.config.converter`) runs the same check on the value a file gives
that field and names the problem by the file's key (`workers.count: ...`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import attrs

from ...core.field_checks import MAX_DURATION_MS, refuse
from ...core.validation import MAX_RETRIES_LIMIT, check_name
from ..cron_schedule import expression_problem, timezone_problem

#: The schemes of a Redis server's URL.
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

#: Why a value is wrong, or None when it is right.
Check = Callable[[Any], str | None]


@attrs.frozen(slots=True)
class Rule:
    """The attrs validator of a field whose values `check` judges."""

    check: Check

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        reason = self.check(value)
        if reason is not None:
            refuse(instance, attribute, reason)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer_at_least(minimum: int) -> Check:
    def check(value: object) -> str | None:
        if not _is_int(value):
            return f"must be an integer, got {value!r}"
        if value < minimum:  # type: ignore[operator]
            return f"must be >= {minimum}, got {value}"
        return None

    return check


def integer_between(minimum: int, maximum: int, most: str | None = None) -> Check:
    """An integer from `minimum` to `maximum` (`most` says the maximum in its message)."""
    at_least = integer_at_least(minimum)
    too_big = f"must be <= {maximum}" if most is None else f"must be at most {most}"

    def check(value: object) -> str | None:
        reason = at_least(value)
        if reason is None and value > maximum:  # type: ignore[operator]
            return f"{too_big}, got {value}"
        return reason

    return check


def duration_ms(minimum: int) -> Check:
    """A duration in ms: an integer from `minimum` to the core's `MAX_DURATION_MS`."""
    return integer_between(minimum, MAX_DURATION_MS, f"{MAX_DURATION_MS} (100 years)")


def integer_up_to(maximum: int) -> Check:
    """An integer from 0 to `maximum`."""
    return integer_between(0, maximum)


#: A periodic job's schedule and time zone, judged by the parser that reads them.
schedule = expression_problem
timezone = timezone_problem
#: A periodic job's `max_retries`: as many as a job may have.
retries = integer_up_to(MAX_RETRIES_LIMIT)
_at_least_one = integer_at_least(1)


def port(value: object) -> str | None:
    reason = _at_least_one(value)
    if reason is None and value > 65535:  # type: ignore[operator]
        return f"must be from 1 to 65535, got {value}"
    return reason


def prefetch(value: object) -> str | None:
    """Jobs per claim: "auto", or a fixed number."""
    if value == "auto" or (_is_int(value) and value >= 1):  # type: ignore[operator]
        return None
    return f'must be "auto" or an integer >= 1, got {value!r}'


def one_of(choices: tuple[str, ...]) -> Check:
    def check(value: object) -> str | None:
        if value not in choices:
            return f"must be one of {', '.join(choices)}, got {value!r}"
        return None

    return check


def optional(check: Check) -> Check:
    """`check`, or None (the key's "not set")."""

    def either(value: object) -> str | None:
        return None if value is None else check(value)

    return either


def name(value: object) -> str | None:
    """A queue, table, column or job type name."""
    problem = check_name("", value)
    return None if problem is None else problem.reason


def resolver(value: object) -> str | None:
    if not isinstance(value, str) or (value != "table" and value.count(":") != 1):
        return 'must be "table" or "package.module:attr"'
    return None


def database_url(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a database URL such as sqlite:///conveyor.db"
    return None


def redis_server(value: object) -> str | None:
    if not isinstance(value, str) or not value.startswith(REDIS_SCHEMES):
        return "must start with redis://, rediss:// or unix://"
    return None


def handler_spec(value: object) -> str | None:
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        return f'must look like "package.module:attr", got {value!r}'
    return None


def host_names(value: object) -> str | None:
    """Names a dashboard answers to: host names or addresses, or `*`."""
    if not isinstance(value, tuple | list) or not all(isinstance(v, str) and v for v in value):
        return 'must be a list of host names, such as ["jobs.example.com"], or ["*"]'
    for given in value:
        problem = host_name_problem(given)
        if problem is not None:
            return problem
    return None


def host_name_problem(given: str) -> str | None:
    """Why `given` is not a host name, an address (IPv6 with or without brackets) or
    `*`; None when it is one."""
    try:
        ipaddress.ip_address(given.strip("[]"))
        return None
    except ValueError:
        pass
    if not given or any(c.isspace() or c in "/:@[]" for c in given):
        return f"{given!r} is not a host name (give it without scheme, port or path)"
    return None


def credentials(value: object) -> str | None:
    """ "USER:PASSWORD". The password is not repeated: it may be a real one mistyped."""
    if not isinstance(value, str):
        return 'must be a string "USER:PASSWORD"'
    user, colon, password = value.partition(":")
    if not colon or not user or not password:
        return 'must be "USER:PASSWORD", both parts non-empty'
    return None
