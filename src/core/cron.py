"""Periodic jobs: which cron slots are due, and the job id each slot gets.

A cron entry names a schedule (a cron expression in a time zone) and the job to
enqueue at each of its instants, its *slots*. Every worker process checks the
entries on its own; there is no leader. What keeps a slot from running twice is
its id: `slot_id(name, slot)` is the same on every node, so however many nodes
enqueue a slot, the queue holds one job for it (an enqueue with an existing id
returns the existing job).

What is pure here: the slot id, and `plan_slots`, which says which slots a check
at `now` should enqueue given when this process last checked. Reading the
expression and the time zone is left to the caller, behind `Schedule`: the core
takes "the next slot after t" and "the last slot before t" as a value.

Missed slots. A slot is *on time* when the check that sees it comes at most
`grace` after it. Slots older than that were missed: the process was down,
asleep or stuck. `Missed.SKIP` lets them go; `Missed.CATCH_UP_ONE` enqueues
the latest of them, once (if the record that would show it already ran is still
kept: see `plan_slots`). A process that starts has never checked: the newest slot
of the last `grace` before its start is on time (a restart just after a slot keeps
it; the slot's job id holds it to one job however many processes start), and the
older ones count as missed: starting ten workers never replays a day.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID, uuid5

import attrs

from .errors import FieldError
from .frozen import FrozenMap
from .job import Priority
from .validation import MAX_RETRIES_LIMIT, check_name, freeze_args, parse_priority

#: The namespace of slot ids (a constant: every node must derive the same ids).
CRON_NAMESPACE = UUID("6f1d2c1e-3b0a-5c55-9a43-2e0f4c7d8b19")

#: How late a check may see a slot and still enqueue it as on time.
DEFAULT_GRACE = timedelta(seconds=60)

#: The most on-time slots one check enqueues for one entry (a backstop for a
#: schedule far denser than the grace, e.g. every second with a grace of hours).
MAX_SLOTS_PER_CHECK = 100
#: How many slots after a catch-up are looked up to tell whether it is still owed:
#: a process that ran through them wrote the newest ones.
LOOK_AFTER_CATCH_UP = 10


class Missed(enum.Enum):
    """What a check does with the slots it comes too late for."""

    SKIP = "skip"
    CATCH_UP_ONE = "catch_up_one"


class Schedule(Protocol):
    """A parsed cron schedule. Both methods take and return timezone-aware instants."""

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after `moment`."""
        ...

    def last_before(self, moment: datetime) -> datetime | None:
        """The last slot strictly before `moment`, or None when there is none."""
        ...


@attrs.frozen(slots=True)
class CronEntry:
    """One periodic job: enqueue `job_type` with `args` at every slot of `schedule`
    (a cron expression, five fields or six with seconds first) read in `timezone`
    (an IANA name such as "Europe/Berlin").

    `name` identifies the entry across nodes and restarts: slot ids derive from it,
    so renaming an entry starts a new series."""

    name: str
    schedule: str
    job_type: str
    args: Mapping[str, Any] = attrs.field(factory=FrozenMap)
    timezone: str = "UTC"
    queue: str = "default"
    priority: Priority | str = Priority.NORMAL
    max_retries: int = 3
    missed: Missed | str = Missed.SKIP


def parse_missed(value: object, field: str = "missed") -> Missed | FieldError:
    """A `Missed` from itself or its name ("skip", "catch_up_one")."""
    if isinstance(value, Missed):
        return value
    try:
        return Missed(value)
    except ValueError:
        names = ", ".join(m.value for m in Missed)
        return FieldError(field, f"must be one of {names}, got {value!r}")


def check_entry(entry: CronEntry, prefix: str = "cron") -> tuple[CronEntry, list[FieldError]]:
    """`entry` with its args frozen and its priority and missed policy parsed, and the
    problems of the fields the core can judge (all but `schedule` and `timezone`,
    which need a parser and the time zone database), each named `prefix.field`."""
    errors: list[FieldError] = []
    for field, value in (("name", entry.name), ("job_type", entry.job_type)):
        problem = check_name(f"{prefix}.{field}", value)
        if problem is not None:
            errors.append(problem)
    problem = check_name(f"{prefix}.queue", entry.queue)
    if problem is not None:
        errors.append(problem)
    args = freeze_args(entry.args, field=f"{prefix}.args")
    priority = parse_priority(entry.priority)
    missed = parse_missed(entry.missed, f"{prefix}.missed")
    retries = entry.max_retries
    if isinstance(retries, bool) or not isinstance(retries, int):
        errors.append(FieldError(f"{prefix}.max_retries", "must be an integer"))
    elif not 0 <= retries <= MAX_RETRIES_LIMIT:
        errors.append(
            FieldError(f"{prefix}.max_retries", f"must be 0 to {MAX_RETRIES_LIMIT}, got {retries}")
        )
    for outcome in (args, missed):
        if isinstance(outcome, FieldError):
            errors.append(outcome)
    if isinstance(priority, FieldError):
        errors.append(FieldError(f"{prefix}.priority", priority.reason))
    if errors:
        return entry, errors
    assert isinstance(args, FrozenMap) and isinstance(priority, Priority)
    assert isinstance(missed, Missed)
    return attrs.evolve(entry, args=args, priority=priority, missed=missed), []


def slot_id(name: str, slot: datetime) -> UUID:
    """The job id of entry `name`'s slot at `slot`: the same on every node.

    Keyed by the instant in UTC, so the same slot seen in two time zones is one
    slot, and the two 01:30s of a night the clocks go back are two."""
    instant = slot.astimezone(UTC).replace(microsecond=0)
    return uuid5(CRON_NAMESPACE, f"{name}\n{instant.isoformat()}")


@attrs.frozen(slots=True)
class CronPlan:
    """What one check of one entry does: enqueue `slots` (oldest first). `missed` is
    the latest slot it came too late for (None when none), enqueued among `slots`
    under `Missed.CATCH_UP_ONE` and let go under `Missed.SKIP`."""

    slots: tuple[datetime, ...]
    missed: datetime | None = None


def plan_slots(
    schedule: Schedule,
    *,
    since: datetime | None,
    now: datetime,
    missed: Missed,
    grace: timedelta = DEFAULT_GRACE,
    limit: int = MAX_SLOTS_PER_CHECK,
    catch_up_within: timedelta | None = None,
) -> CronPlan:
    """The slots a check at `now` enqueues, when this process last checked at `since`
    (None: it never has).

    On time: the slots in `(since, now]` that are at most `grace` old (the newest
    `limit` of them; on a first check, the newest slot that young). Missed: the
    older ones; only the latest of them matters, and `missed` says whether it runs.

    `catch_up_within` bounds how old an enqueued slot may be, on time or caught up:
    the slot's own job is what tells whether it already ran, and a finished job's
    record is kept only so long (the retention of completed records), so an older
    slot is let go rather than risk a second run. Under a retention shorter than
    `grace` it is the grace too."""
    tick = timedelta(microseconds=1)  # the resolution of a datetime
    if catch_up_within is not None:
        grace = min(grace, catch_up_within)
    # Slots strictly after this instant are on time: `grace` old at most. A first
    # check takes them too: a restart just after a slot must not lose it (its job id
    # is the slot's, so a slot already written by a process before is not again).
    on_time_after = now - grace - tick if since is None else max(since, now - grace - tick)
    on_time: list[datetime] = []
    slot = schedule.next_after(on_time_after)
    while slot <= now:
        on_time.append(slot)
        slot = schedule.next_after(slot)
    # A first check takes the newest only: the older ones of the grace were the
    # business of whichever process ran then (a dense schedule is not replayed).
    on_time = on_time[-(1 if since is None else limit) :] if limit > 0 else []

    latest_missed = schedule.last_before(on_time_after + tick)
    if latest_missed is not None and since is not None and latest_missed <= since:
        latest_missed = None  # seen by an earlier check, not missed
    too_old = (
        latest_missed is not None
        and catch_up_within is not None
        and latest_missed < now - catch_up_within
    )
    if latest_missed is None or missed is Missed.SKIP or too_old:
        return CronPlan(tuple(on_time), latest_missed)
    return CronPlan((latest_missed, *on_time), latest_missed)


def slots_after_catch_up(
    plan: CronPlan, schedule: Schedule, now: datetime, limit: int = LOOK_AFTER_CATCH_UP
) -> tuple[datetime, ...]:
    """The slots whose jobs tell whether `plan`'s catch-up is still owed: those after
    it up to `now` (the newest `limit`), none when the plan catches nothing up.

    A catch-up is the latest slot this process came too late for, as seen from its
    own last check (or its start). When a slot after it was written (another process
    ran through them), the deployment was not down then: that process let the slot
    go, or caught up its own, and a second process starting later would otherwise
    catch up one more stale slot each. `slots_to_write` drops it then."""
    if plan.missed is None or plan.missed not in plan.slots:
        return ()
    return tuple(slot for slot in recent_slots(schedule, now, limit) if slot > plan.missed)


def slots_to_write(
    plan: CronPlan, pruned: Collection[datetime], written_after: bool = False
) -> tuple[datetime, ...]:
    """The slots of `plan` to enqueue, given those of them whose record retention has
    pruned (its tombstone says so): such a slot ran, and enqueueing it again would
    repeat it, since its job id is free once its record is gone. `written_after`
    says that a slot after the plan's catch-up was written (of those
    `slots_after_catch_up` names): the catch-up is then not owed."""
    owed = [s for s in plan.slots if not (written_after and s == plan.missed)]
    return tuple(slot for slot in owed if slot not in pruned)


def recent_slots(schedule: Schedule, now: datetime, count: int) -> tuple[datetime, ...]:
    """Up to `count` slots at or before `now`, newest first (where to look for the
    last run: each slot's job has the id `slot_id` gives it)."""
    found: list[datetime] = []
    moment = now + timedelta(microseconds=1)
    while len(found) < count:
        slot = schedule.last_before(moment)
        if slot is None:
            break
        found.append(slot)
        moment = slot
    return tuple(found)
