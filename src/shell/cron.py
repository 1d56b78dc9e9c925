"""Periodic jobs in the shell: reading cron expressions, and the ticker.

Every worker process runs one ticker thread beside its pools. It sleeps until
the next slot of any entry, asks the core which slots are due
(`conveyor.core.cron.plan_slots`) and enqueues each with the slot's own id
(`slot_id`). An enqueue with an existing id returns the existing job, atomically
on every backend, so any number of processes enqueue each slot once and none of
them leads. The last run of an entry is read back from storage by those same
ids; no table of its own is kept.

Expressions are read by `cronsim` (Debian cron's rules, including its handling
of the hours the clocks skip or repeat), in an IANA time zone from `zoneinfo`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

from ..core import FieldError, Job, JobStatus, ValidationError
from ..core.cron import (
    DEFAULT_GRACE,
    CronEntry,
    Missed,
    check_entry,
    plan_slots,
    recent_slots,
    slot_id,
)
from . import outage

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("conveyor.cron")

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

#: The longest a ticker sleeps between checks, so a clock that jumps (or an entry
#: added while it sleeps) is noticed soon.
MAX_SLEEP_S = 5.0

#: How many past slots `Cron.list` looks back through for the last run.
LAST_RUN_LOOKBACK = 10


def _expanded(expression: str) -> str:
    text = expression.strip()
    return MACROS.get(text.lower(), text)


def expression_problem(expression: object) -> str | None:
    """Why `expression` is not a cron expression this parser reads, or None."""
    if not isinstance(expression, str):
        return f"must be a cron expression (a string), got {type(expression).__name__}"
    try:
        CronSim(_expanded(expression), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        reason = str(exc)
        return (
            f"{expression!r} is not a cron expression: {reason[:1].lower()}{reason[1:]} "
            "(five fields, or six with seconds first, or @hourly/@daily/@weekly/...)"
        )
    return None


def timezone_problem(name: object) -> str | None:
    """Why `name` is not an IANA time zone this machine knows, or None."""
    if not isinstance(name, str) or not name:
        return f"must be an IANA time zone name such as 'Europe/Berlin', got {name!r}"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'"
    return None


@attrs.frozen(slots=True)
class CronSchedule:
    """A cron expression in a time zone: the core's `Schedule`. Slots come back in UTC."""

    expression: str
    zone: ZoneInfo

    def next_after(self, moment: datetime) -> datetime:
        local = moment.astimezone(self.zone)
        return next(CronSim(_expanded(self.expression), local)).astimezone(UTC)

    def last_before(self, moment: datetime) -> datetime | None:
        local = moment.astimezone(self.zone)
        try:
            found = next(CronSim(_expanded(self.expression), local, reverse=True))
        except StopIteration:
            return None
        return found.astimezone(UTC)


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


@attrs.frozen(slots=True)
class CronStatus:
    """One row of `conveyor cron list`: an entry, its next slot, and its last run
    (the newest of its recent slots that has a job, and that job's state)."""

    name: str
    schedule: str
    timezone: str
    job_type: str
    queue: str
    next_run: datetime
    last_slot: datetime | None = None
    last_job_id: str | None = None
    last_state: JobStatus | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `conveyor cron list --json` prints it."""
        return {
            "name": self.name,
            "schedule": self.schedule,
            "timezone": self.timezone,
            "job_type": self.job_type,
            "queue": self.queue,
            "next_run": self.next_run.isoformat(),
            "last_run": None
            if self.last_slot is None
            else {
                "slot": self.last_slot.isoformat(),
                "job_id": self.last_job_id,
                "state": None if self.last_state is None else self.last_state.value,
            },
        }


class Cron:
    """The periodic jobs of one runtime (`runtime.cron`): its entries, the ticker
    that enqueues their slots while the runtime's workers run, and the operator's
    view and manual run.

    `tick()` is one check, done by the ticker thread at each slot; tests with a
    manual clock call it themselves."""

    def __init__(
        self,
        runtime: Runtime,
        entries: Iterable[CronEntry] = (),
        *,
        grace: timedelta = DEFAULT_GRACE,
    ) -> None:
        self._runtime = runtime
        self.grace = grace
        self._entries: dict[str, tuple[CronEntry, CronSchedule]] = {}
        #: Per entry, the instant of this process's last check (none yet: a start).
        self._since: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._ticking = threading.Lock()  # one check at a time: the thread, or a caller
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Errors other than an outage, each logged with its traceback once a minute.
        self._bugs = outage.Throttle()
        for n, entry in enumerate(entries):
            self._add(entry, f"cron[{n}]")

    # ---- entries ------------------------------------------------------------

    def add(self, entry: CronEntry) -> CronEntry:
        """Add a periodic job; a `ValidationError` names each bad field (`cron.schedule`,
        ...) and a name already taken. A running ticker picks it up at once."""
        checked = self._add(entry, "cron")
        self._wake.set()
        return checked

    def _add(self, entry: CronEntry, prefix: str) -> CronEntry:
        checked, schedule = parse_entry(entry, prefix)
        with self._lock:
            if checked.name in self._entries:
                raise ValidationError.of(f"{prefix}.name", f"{checked.name!r} is already an entry")
            self._entries[checked.name] = (checked, schedule)
        return checked

    @property
    def entries(self) -> tuple[CronEntry, ...]:
        """The entries, in the order they were added."""
        with self._lock:
            return tuple(entry for entry, _ in self._entries.values())

    def _entry(self, name: str) -> tuple[CronEntry, CronSchedule]:
        with self._lock:
            found = self._entries.get(name)
        if found is None:
            known = ", ".join(self._entries) or "none configured"
            raise ValidationError.of("name", f"no cron entry {name!r} (entries: {known})")
        return found

    # ---- enqueueing ---------------------------------------------------------

    def tick(self) -> list[Job]:
        """Check every entry once: enqueue the slots due since the last check (and,
        on the first check, the latest missed one under `catch_up_one`). Returns the
        jobs the enqueues gave back (an existing job for a slot another node took).
        An entry whose enqueue fails keeps its last check, so the next tick retries."""
        with self._ticking:
            now = self._runtime.clock.now()
            with self._lock:
                entries = list(self._entries.values())
            return [job for entry, schedule in entries for job in self._check(entry, schedule, now)]

    def _check(self, entry: CronEntry, schedule: CronSchedule, now: datetime) -> list[Job]:
        assert isinstance(entry.missed, Missed)
        since = self._since.get(entry.name)
        plan = plan_slots(
            schedule,
            since=since,
            now=now,
            missed=entry.missed,
            grace=self.grace,
            catch_up_within=self._records_kept(),
        )
        if since is not None and plan.missed is not None and plan.missed not in plan.slots:
            # A running process fell behind (paused, or its enqueues failed for long).
            log.warning(
                "cron %r: slot %s came more than %s ago; skipped (missed = %s)",
                entry.name,
                plan.missed.isoformat(),
                self.grace,
                entry.missed.value,
            )
        jobs: list[Job] = []
        try:
            for slot in plan.slots:
                jobs.append(self._enqueue(entry, slot_id(entry.name, slot)))
        except Exception as exc:
            # A server outage is told once for the process, not once per tick.
            message = "cron %r: could not enqueue; retrying next tick"
            outage.report(self._server(), self._bugs, exc, log, message, entry.name)
            return jobs
        if jobs:
            self._server().ok()
        self._since[entry.name] = now
        return jobs

    def _server(self) -> outage.ConnectionState:
        return outage.for_queue(self._runtime.queue)

    def _records_kept(self) -> timedelta | None:
        """How long every finished record is surely kept (None: for ever): a missed
        slot older than this may have run without a trace left, so it is not caught up."""
        keep = self._runtime.config.retention
        ages = [ms for ms in (keep.completed_ms, keep.dead_ms) if ms > 0]
        return timedelta(milliseconds=min(ages)) if ages else None

    def _enqueue(self, entry: CronEntry, job_id: uuid.UUID | None) -> Job:
        options: dict[str, Any] = {
            "queue": entry.queue,
            "priority": entry.priority,
            "max_retries": entry.max_retries,
        }
        if job_id is not None:
            options["id"] = job_id
        return self._runtime.enqueue(entry.job_type, entry.args, **options)

    def run(self, name: str) -> Job:
        """Enqueue entry `name`'s job now, outside its schedule (a fresh job id)."""
        entry, _ = self._entry(name)
        return self._enqueue(entry, None)

    def next_run(self, now: datetime | None = None) -> datetime | None:
        """The earliest next slot of any entry after `now`, or None without entries."""
        moment = now or self._runtime.clock.now()
        with self._lock:
            schedules = [schedule for _, schedule in self._entries.values()]
        return min((s.next_after(moment) for s in schedules), default=None)

    # ---- operator view ------------------------------------------------------

    def list(self) -> list[CronStatus]:
        """Each entry with its next slot and its last run, read back from storage by
        slot id (looking back `LAST_RUN_LOOKBACK` slots). Reads only."""
        now = self._runtime.clock.now()
        with self._lock:
            entries = list(self._entries.values())
        rows = []
        for entry, schedule in entries:
            row = CronStatus(
                name=entry.name,
                schedule=entry.schedule,
                timezone=entry.timezone,
                job_type=entry.job_type,
                queue=entry.queue,
                next_run=schedule.next_after(now),
            )
            for slot in recent_slots(schedule, now, LAST_RUN_LOOKBACK):
                job_id = slot_id(entry.name, slot)
                view = self._runtime.get(job_id)
                if view is not None:
                    row = attrs.evolve(
                        row, last_slot=slot, last_job_id=str(job_id), last_state=view.state
                    )
                    break
            rows.append(row)
        return rows

    # ---- the ticker thread --------------------------------------------------

    def start(self) -> None:
        """Start the ticker thread (nothing to do without entries until one is added)."""
        if self._thread is not None:
            return
        self._stop.clear()
        if self._entries:
            log.info("cron: enqueueing the slots of %s", ", ".join(map(repr, self._entries)))
        self._thread = threading.Thread(target=self._loop, daemon=True, name="conveyor-cron")
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the ticker thread; a check in progress finishes first."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                outage.report(self._server(), self._bugs, exc, log, "cron tick failed")
            clock = self._runtime.clock
            wake = self.next_run(clock.now())
            wait = MAX_SLEEP_S
            if wake is not None:
                wait = min(MAX_SLEEP_S, max(0.0, (wake - clock.now()).total_seconds()))
            self._wake.wait(wait)
            self._wake.clear()
