"""Reading cron expressions: the check a config makes, and a schedule's slots.

Expressions are read by `cronsim` (Debian cron's rules, including its handling
of the hours the clocks skip or repeat), in an IANA time zone from `zoneinfo`.
The config checks each `[[cron]]` entry with `expression_problem` and
`timezone_problem`; the ticker (`conveyor.shell.cron`) plans slots with
`CronSchedule`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from ..core import FieldError, ValidationError
from ..core.cron import CronEntry, check_entry

#: The shorthands cron users write, spelt out for the parser.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _expanded(expression: str) -> str:
    text = expression.strip()
    return MACROS.get(text.lower(), text)


def expression_problem(expression: object) -> str | None:
    """Why `expression` is not a cron expression this parser reads, or None."""
    if not isinstance(expression, str):
        return f"must be a cron expression (a string), got {type(expression).__name__}"
    text = expression.strip()
    if text.startswith("@") and text.lower() not in MACROS:
        # `@reboot` means "when the machine starts": no slot this schedule could key.
        return f"{expression!r} is not a shorthand read here; use one of {', '.join(MACROS)}"
    try:
        CronSim(_expanded(expression), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        reason = str(exc)
        if "day-of-month" in reason.lower():
            reason = _never_comes(_expanded(expression)) or reason
        return (
            f"{expression!r} is not a cron expression: {reason[:1].lower()}{reason[1:]} "
            "(five fields, or six with seconds first, or @hourly/@daily/@weekly/...)"
        )
    return None


def _never_comes(expression: str) -> str | None:
    """"Day D of the month never comes in month M" for an expression that is valid but
    for that (30 February), which the parser calls a bad day-of-month, as it does 32."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return None
    day, month = fields[-3], fields[-2]
    anywhere = " ".join([*fields[:-2], "*", fields[-1]])
    try:
        CronSim(anywhere, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return None
    return f"day {day} of the month never comes in month {month}"


def timezone_problem(name: object) -> str | None:
    """Why `name` is not an IANA time zone this machine knows, or None."""
    if not isinstance(name, str) or not name:
        return f"must be an IANA time zone name such as 'Europe/Berlin', got {name!r}"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'"
    return None


#: How far back of a moment `last_before` also looks forward when the clocks changed
#: in between (a change moves them one hour; two covers any zone's).
_NEAR_A_CHANGE = timedelta(hours=2)


def _seconds_of(field: str) -> tuple[int, ...]:
    """The seconds of a minute a six-field expression's first field names, ascending."""
    start = datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)
    found: list[int] = []
    for moment in CronSim(f"{field} * * * * *", start):
        if moment.minute != 0:
            break
        found.append(moment.second)
    return tuple(found)


@attrs.frozen(slots=True)
class CronSchedule:
    """A cron expression in a time zone: the core's `Schedule`. Slots come back in UTC.

    A six-field expression is read as its last five fields (the minutes it runs in,
    with Debian's handling of the hours the clocks skip or repeat, as a five-field
    one) and, in each such minute, the seconds its first field names: the parser
    alone would read it as wall-clock times with no such handling, and a `0 30 2 * *
    *` would run twice the night the clocks go back and not at all the night they go
    forward."""

    expression: str
    zone: ZoneInfo
    minutes: str = attrs.field(init=False)
    seconds: tuple[int, ...] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        fields = _expanded(self.expression).split()
        if len(fields) == 6:
            minutes, seconds = " ".join(fields[1:]), _seconds_of(fields[0])
        else:
            minutes, seconds = " ".join(fields), (0,)
        object.__setattr__(self, "minutes", minutes)
        object.__setattr__(self, "seconds", seconds)

    def _in(self, minute: datetime) -> list[datetime]:
        start = minute.astimezone(UTC)
        return [start + timedelta(seconds=second) for second in self.seconds]

    def next_after(self, moment: datetime) -> datetime:
        # The parser reads wall-clock times: from the second pass of an hour the clocks
        # repeat, its next slot at a fixed hour is the first pass's, already past.
        # Slots are instants here, so such a slot is passed over, never handed back.
        # The search starts a minute early, so the minute `moment` is in is looked at.
        local = (moment - timedelta(minutes=1)).astimezone(self.zone)
        for found in CronSim(self.minutes, local):
            for slot in self._in(found):
                if slot > moment:
                    return slot
        raise AssertionError("unreachable: a cron schedule's slots never run out")

    def last_before(self, moment: datetime) -> datetime | None:
        local = (moment + timedelta(minutes=1)).astimezone(self.zone)
        latest = None
        for found in CronSim(self.minutes, local, reverse=True):
            latest = next((slot for slot in reversed(self._in(found)) if slot < moment), None)
            if latest is not None:
                break
        since = moment - _NEAR_A_CHANGE
        # The search above starts a minute on: a change in that minute counts too.
        ahead = moment + timedelta(minutes=1)
        if len({at.astimezone(self.zone).utcoffset() for at in (since, ahead)}) > 1:
            # Searching back from the second pass of an hour the clocks repeat, the
            # parser reads wall-clock times and passes over the first pass's slot
            # (later on the wall, earlier in time): look forward over the change too.
            slot = self.next_after(max(since, latest) if latest else since)
            while slot < moment:
                latest, slot = slot, self.next_after(slot)
        return latest


def parse_entry(entry: CronEntry, prefix: str = "cron") -> tuple[CronEntry, CronSchedule]:
    """`entry` checked and normalized, with its schedule; a `ValidationError` naming
    every bad field (`prefix.schedule`, `prefix.timezone`, ...) otherwise."""
    checked, errors = check_entry(entry, prefix)
    for field, problem in (
        ("schedule", expression_problem(entry.schedule)),
        ("timezone", timezone_problem(entry.timezone)),
    ):
        if problem is not None:
            errors.append(FieldError(f"{prefix}.{field}", problem))
    if errors:
        raise ValidationError(errors)
    return checked, CronSchedule(entry.schedule, ZoneInfo(entry.timezone))
