"""Periodic jobs in the shell: the ticker, and the operator's view of the entries.

Every worker process runs one ticker thread beside its pools. It sleeps until
the next slot of any entry, asks the core which slots are due
(`conveyor.core.cron.plan_slots`) and enqueues each with the slot's own id
(`slot_id`). An enqueue with an existing id returns the existing job, atomically
on every backend, so any number of processes enqueue each slot once and none of
them leads. The last run of an entry is read back from storage by those same
ids; no table of its own is kept.

The ticker takes what it needs as values (an enqueue, a look-up of a slot's job,
the clock, the server's shared state, the retention policy), not the runtime that
owns it. Reading expressions is `conveyor.shell.cron_schedule`'s job; its names
are importable from here too.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import attrs

from ..core import Job, JobStatus, RetentionPolicy, ValidationError
from ..core.cron import (
    DEFAULT_GRACE,
    CronEntry,
    Missed,
    plan_slots,
    recent_slots,
    slot_id,
    slots_after_catch_up,
    slots_to_write,
)
from ..core.dependencies import WorkflowOutcome
from . import outage
from .cron_schedule import (
    MACROS,
    CronSchedule,
    expression_problem,
    parse_entry,
    timezone_problem,
)
from .ports import Clock

__all__ = [
    "MACROS",
    "Cron",
    "CronSchedule",
    "CronStatus",
    "expression_problem",
    "parse_entry",
    "timezone_problem",
]

log = logging.getLogger("conveyor.cron")

#: The longest a ticker sleeps between checks, so a clock that jumps (or an entry
#: added while it sleeps) is noticed soon.
MAX_SLEEP_S = 5.0

#: How many past slots `Cron.list` looks back through for the last run.
LAST_RUN_LOOKBACK = 10


#: A slot's state: its job's, or for a workflow entry its workflow's as a whole.
SlotState = JobStatus | WorkflowOutcome


@attrs.frozen(slots=True)
class CronStatus:
    """One row of `conveyor cron list`: an entry, its next slot, and its last run
    (the newest of its recent slots that has a job, and that job's state; for an entry
    that starts workflows, the workflow's state as a whole)."""

    name: str
    schedule: str
    timezone: str
    job_type: str
    queue: str
    next_run: datetime
    last_slot: datetime | None = None
    last_job_id: str | None = None
    last_state: SlotState | None = None

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


#: Enqueues a job: `Runtime.enqueue`'s signature (job type, args, keyword options).
Enqueue = Callable[..., Job]
#: Fills a workflow entry's workflow for a slot: `build(workflow, slot)` adds its steps.
BuildWorkflow = Callable[[Any, datetime], None]
#: Writes a workflow entry's slot (its builder, the workflow id, the slot) and returns
#: the workflow's jobs as stored; a workflow id already stored writes nothing.
StartWorkflow = Callable[[BuildWorkflow, uuid.UUID, datetime], list[Job]]


class Cron:
    """The periodic jobs of one runtime (`runtime.cron`): its entries, the ticker
    that enqueues their slots while the runtime's workers run, and the operator's
    view and manual run.

    `enqueue` writes a slot's job (`Runtime.enqueue`); `state_of` reads the state of
    the job with an id, None when there is none (for the last run); `server` is the
    state of the queue's server shared with the process's other loops; `retention`
    says how long finished records are kept (a missed slot older than that is not
    caught up); `pruned` says whether retention pruned the record of an id (its
    tombstone), so a slot that ran is not enqueued again once its record is gone.
    `tick()` is one check, done by the ticker thread at each slot; tests with a
    manual clock call it themselves."""

    def __init__(
        self,
        entries: Iterable[CronEntry] = (),
        *,
        enqueue: Enqueue,
        state_of: Callable[[uuid.UUID], JobStatus | None],
        clock: Clock,
        server: outage.ConnectionState,
        retention: RetentionPolicy | None = None,
        grace: timedelta = DEFAULT_GRACE,
        start_workflow: StartWorkflow | None = None,
        workflow_state_of: Callable[[uuid.UUID], WorkflowOutcome | None] | None = None,
        pruned: Callable[[uuid.UUID], bool] | None = None,
    ) -> None:
        self._enqueue_job, self._state_of = enqueue, state_of
        self._pruned = pruned or (lambda _: False)
        self._start_workflow, self._workflow_state_of = start_workflow, workflow_state_of
        #: The builders of the entries that start a workflow, by entry name.
        self._builders: dict[str, BuildWorkflow] = {}
        self._clock, self._server_state = clock, server
        self._retention = retention or RetentionPolicy()
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

    def add_workflow(
        self,
        name: str,
        schedule: str,
        build: BuildWorkflow,
        *,
        timezone: str = "UTC",
        missed: Missed | str = Missed.SKIP,
    ) -> CronEntry:
        """Start a workflow at every slot of `schedule`: `build(workflow, slot)` adds the
        steps to an empty `Workflow` whose id is the slot's (`slot_id`), so each slot's
        workflow is written once however many nodes tick (a workflow id already stored
        writes nothing). Checked as `add` checks an entry."""
        if self._start_workflow is None:
            raise ValidationError.of("cron.workflow", "this runtime cannot start workflows")
        if not callable(build):
            raise ValidationError.of("cron.build", f"must be callable, got {build!r}")
        label = getattr(build, "__qualname__", "")
        # A lambda's `<lambda>` would make a job type that starts with `_`, refused.
        spelt = "".join(c if c.isalnum() or c in "._-" else "_" for c in label).strip("._-")
        job_type = spelt or "workflow"
        entry = CronEntry(name, schedule, job_type, timezone=timezone, missed=missed)
        checked, parsed = parse_entry(entry, "cron")
        with self._lock:
            if checked.name in self._entries:
                raise ValidationError.of("cron.name", f"{checked.name!r} is already an entry")
            self._entries[checked.name] = (checked, parsed)
            self._builders[checked.name] = build
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
            now = self._clock.now()
            with self._lock:
                entries = list(self._entries.values())
            return [job for entry, schedule in entries for job in self._check(entry, schedule, now)]

    def _check(self, entry: CronEntry, schedule: CronSchedule, now: datetime) -> list[Job]:
        assert isinstance(entry.missed, Missed)
        since = self._since.get(entry.name)
        kept = self._records_kept()
        plan = plan_slots(
            schedule,
            since=since,
            now=now,
            missed=entry.missed,
            grace=self.grace,
            catch_up_within=kept,
        )
        if since is not None and plan.missed is not None and plan.missed not in plan.slots:
            # A running process fell behind (paused, or its enqueues failed for long).
            log.warning(
                "cron %r: slot %s came more than %s ago; skipped (missed = %s)",
                entry.name,
                plan.missed.isoformat(),
                self.grace if kept is None else min(self.grace, kept),
                entry.missed.value,
            )
        jobs: list[Job] = []
        try:
            later = slots_after_catch_up(plan, schedule, now)
            written_after = any(self._written(entry.name, slot_id(entry.name, s)) for s in later)
            pruned = {slot for slot in plan.slots if self._pruned(slot_id(entry.name, slot))}
            for slot in slots_to_write(plan, pruned, written_after):
                jobs.extend(self._start(entry, slot_id(entry.name, slot), slot))
        except Exception as exc:
            # A server outage is told once for the process, not once per tick.
            message = "cron %r: could not enqueue; retrying next tick"
            outage.report(self._server(), self._bugs, exc, log, message, entry.name)
            return jobs
        if jobs:
            self._server().ok()
        self._since[entry.name] = now
        return jobs

    def _written(self, name: str, job_id: uuid.UUID) -> bool:
        """Whether a slot's job (or workflow) was written: it is there, or its record
        was pruned."""
        return self._state_reader(name)(job_id) is not None or self._pruned(job_id)

    def _state_reader(self, name: str) -> Callable[[uuid.UUID], SlotState | None]:
        """How the state of entry `name`'s slot is read: a workflow entry's slot id
        is its workflow's, and its state the workflow's."""
        if name in self._builders and self._workflow_state_of is not None:
            return self._workflow_state_of
        return self._state_of

    def _server(self) -> outage.ConnectionState:
        return self._server_state

    def _records_kept(self) -> timedelta | None:
        """How long every finished record is surely kept (None: for ever): a missed
        slot older than this may have run without a trace left, so it is not caught up."""
        keep = self._retention
        ages = [ms for ms in (keep.completed_ms, keep.dead_ms) if ms > 0]
        return timedelta(milliseconds=min(ages)) if ages else None

    def _start(self, entry: CronEntry, slot_id: uuid.UUID, slot: datetime) -> list[Job]:
        """Write a slot: the entry's job, or the workflow its builder makes."""
        build = self._builders.get(entry.name)
        if build is None:
            return [self._enqueue(entry, slot_id)]
        assert self._start_workflow is not None
        return self._start_workflow(build, slot_id, slot)

    def _enqueue(self, entry: CronEntry, job_id: uuid.UUID | None) -> Job:
        options: dict[str, Any] = {
            "queue": entry.queue,
            "priority": entry.priority,
            "max_retries": entry.max_retries,
        }
        if job_id is not None:
            options["id"] = job_id
        return self._enqueue_job(entry.job_type, entry.args, **options)

    def run(self, name: str) -> Job:
        """Enqueue entry `name`'s job now, outside its schedule (a fresh job id); for an
        entry that starts a workflow, start one now (a fresh workflow id) and return
        its first job."""
        entry, _ = self._entry(name)
        if entry.name not in self._builders:
            return self._enqueue(entry, None)
        return self._start(entry, uuid.uuid4(), self._clock.now())[0]

    def next_run(self, now: datetime | None = None) -> datetime | None:
        """The earliest next slot of any entry after `now`, or None without entries."""
        moment = now or self._clock.now()
        with self._lock:
            schedules = [schedule for _, schedule in self._entries.values()]
        return min((s.next_after(moment) for s in schedules), default=None)

    # ---- operator view ------------------------------------------------------

    def list(self) -> list[CronStatus]:
        """Each entry with its next slot and its last run, read back from storage by
        slot id (looking back `LAST_RUN_LOOKBACK` slots). Reads only."""
        now = self._clock.now()
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
            state_of = self._state_reader(entry.name)
            for slot in recent_slots(schedule, now, LAST_RUN_LOOKBACK):
                job_id = slot_id(entry.name, slot)
                state = state_of(job_id)
                if state is not None:
                    row = attrs.evolve(
                        row, last_slot=slot, last_job_id=str(job_id), last_state=state
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
            clock = self._clock
            wake = self.next_run(clock.now())
            wait = MAX_SLEEP_S
            if wake is not None:
                wait = min(MAX_SLEEP_S, max(0.0, (wake - clock.now()).total_seconds()))
            self._wake.wait(wait)
            self._wake.clear()
