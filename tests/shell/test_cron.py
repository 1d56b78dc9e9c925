"""Periodic jobs on every backend: slots enqueued once across nodes, missed slots,
`cron list` and `cron run`, the ticker thread, config, and time zones."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import conveyor
import pytest
from backends import Backend
from cli_support import Ran, call_main
from conveyor.core import JobStatus, Priority, ValidationError
from conveyor.core.cron import CronEntry, Missed, slot_id
from conveyor.shell.config import Config, parse_config
from conveyor.shell.cron import CronSchedule
from conveyor.shell.ports import Place
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.testing.clock import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
RAN: list[dict[str, object]] = []


def report(args: object) -> str:
    RAN.append(dict(args))  # type: ignore[call-overload]
    return "ok"


def minutely(**fields: object) -> CronEntry:
    return CronEntry(
        **{"name": "report", "schedule": "* * * * *", "job_type": "report", **fields}  # type: ignore[arg-type]
    )


def node(queue: object, store: object, clock: ManualClock, *entries: CronEntry) -> Runtime:
    config = Config(provider="memory", cron=entries)
    return Runtime(config, queue, store, Registry({"report": report}), clock=clock)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def two_nodes(backend: Backend, clock: ManualClock) -> Iterator[tuple[Runtime, Runtime]]:
    """Two runtimes on one backend, each with its own connections where the backend
    crosses processes (memory: one process, so one queue)."""
    other = backend.peer() if backend.peer is not None else (backend.queue, backend.store)
    yield node(backend.queue, backend.store, clock), node(*other, clock)


def slot(minutes: int) -> datetime:
    """The slot `minutes` after 10:00 on T0's day."""
    return T0.replace(second=0) + minutes * MINUTE


def queued_ids(rt: Runtime) -> list[str]:
    return sorted(q.job_id for q in rt.queue.scan())


# ---- one node ----------------------------------------------------------------------


def test_a_starting_node_takes_the_slot_of_the_last_minute_then_enqueues_each_due_slot(
    backend: Backend, clock: ManualClock
) -> None:
    # Started 30 s after the 10:00 slot: it was let go, so a restart just after a
    # daily slot lost that day's run.
    rt = node(backend.queue, backend.store, clock, minutely())
    (first,) = rt.cron.tick()
    assert first.id == slot_id("report", slot(0))
    clock.set(slot(1))
    (job,) = rt.cron.tick()
    assert job.id == slot_id("report", slot(1))
    assert rt.cron.tick() == [], "a slot is enqueued by one check only"
    assert queued_ids(rt) == sorted([str(first.id), str(job.id)])


def test_a_starting_node_lets_a_slot_older_than_a_minute_go_under_skip(
    backend: Backend, clock: ManualClock
) -> None:
    clock.set(slot(5) + timedelta(seconds=61))
    rt = node(backend.queue, backend.store, clock, minutely(schedule="*/5 * * * *"))
    assert rt.cron.tick() == []
    assert queued_ids(rt) == []


def test_a_slot_job_carries_the_entry_s_type_args_queue_priority_and_retries(
    backend: Backend, clock: ManualClock
) -> None:
    entry = minutely(args={"day": "today"}, queue="reports", priority="high", max_retries=7)
    rt = node(backend.queue, backend.store, clock, entry)
    rt.cron.tick()
    clock.set(slot(1))
    rt.cron.tick()
    found = rt.queue.find(slot_id("report", slot(1)))
    assert found is not None and found.place is Place.READY and found.job is not None
    job = found.job
    assert (job.job_type, dict(job.args), job.queue) == ("report", {"day": "today"}, "reports")
    assert (job.priority, job.max_retries) == (Priority.HIGH, 7)


def test_catch_up_one_enqueues_the_latest_slot_missed_while_down_and_no_other(
    backend: Backend, clock: ManualClock
) -> None:
    clock.set(slot(5) + timedelta(seconds=90))
    every_five = minutely(schedule="*/5 * * * *", missed="catch_up_one")
    rt = node(backend.queue, backend.store, clock, every_five)
    (job,) = rt.cron.tick()
    assert job.id == slot_id("report", slot(5))
    assert queued_ids(rt) == [str(job.id)]


def test_no_slot_older_than_the_retention_of_finished_records_is_caught_up(
    clock: ManualClock,
) -> None:
    # Had the 10:00 slot run, its record could be pruned by now: it might run twice.
    from conveyor.core import RetentionPolicy
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    hourly = minutely(schedule="0 * * * *", missed="catch_up_one")
    clock.set(slot(30))
    store = MemoryJobStore()
    short = Config(provider="memory", retention=RetentionPolicy(completed_ms=600_000))
    rt = Runtime(short, MemoryJobQueue(store), store, Registry(), clock=clock)
    rt.cron.add(hourly)
    assert rt.cron.tick() == []
    kept = node(MemoryJobQueue(store), store, clock, hourly)
    assert [j.id for j in kept.cron.tick()] == [slot_id("report", slot(0))]


def test_a_tick_later_than_the_grace_treats_the_older_slots_as_missed(
    backend: Backend, clock: ManualClock
) -> None:
    rt = node(backend.queue, backend.store, clock, minutely())
    rt.cron.tick()
    clock.set(slot(10))  # asleep for ten slots; the grace is one minute
    jobs = rt.cron.tick()
    assert [j.id for j in jobs] == [slot_id("report", slot(9)), slot_id("report", slot(10))]


def test_an_enqueue_that_fails_is_retried_at_the_next_tick(
    backend: Backend, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = node(backend.queue, backend.store, clock, minutely())
    rt.cron.tick()
    clock.set(slot(1))
    real = rt.enqueue

    def down(*args: object, **kwargs: object) -> object:
        raise ConnectionError("server unreachable")

    monkeypatch.setattr(rt, "enqueue", down)
    assert rt.cron.tick() == []
    monkeypatch.setattr(rt, "enqueue", real)
    clock.advance(seconds=5)
    assert [j.id for j in rt.cron.tick()] == [slot_id("report", slot(1))]


# ---- many nodes ----------------------------------------------------------------------


def test_a_node_starting_while_another_runs_catches_up_no_slot_the_other_let_go(
    two_nodes: tuple[Runtime, Runtime], clock: ManualClock
) -> None:
    # Every node was down for an hour; A started at 10:00:00.5 and B 15 s later. B's
    # first check took the slot a grace before its own start (09:59:10), which A had
    # let go as missed, for its own catch-up: one stale run more per node started.
    every_ten = minutely(schedule="*/10 * * * * *", missed="catch_up_one")
    a, b = two_nodes
    start = T0.replace(second=0) + timedelta(milliseconds=500)
    clock.set(start)
    a.cron.add(every_ten)
    b.cron.add(every_ten)
    for second in range(31):
        clock.set(start + timedelta(seconds=second))
        a.cron.tick()
        if second >= 15:
            b.cron.tick()
    slots = [start.replace(microsecond=0) + timedelta(seconds=n) for n in (-60, 0, 10, 20, 30)]
    assert queued_ids(a) == sorted(str(slot_id("report", s)) for s in slots)


def test_two_nodes_ticking_through_the_same_slots_store_one_job_per_slot(
    two_nodes: tuple[Runtime, Runtime], clock: ManualClock
) -> None:
    a, b = two_nodes
    for rt in (a, b):
        rt.cron.add(minutely())
        rt.cron.tick()  # both take the 10:00 slot: one job
    assert queued_ids(a) == [str(slot_id("report", slot(0)))]
    for minutes in (1, 2, 3):
        clock.set(slot(minutes))
        (from_a,) = a.cron.tick()
        (from_b,) = b.cron.tick()
        assert from_b == from_a, "the second node gets the job the first one stored"
    assert queued_ids(a) == sorted(str(slot_id("report", slot(m))) for m in (0, 1, 2, 3))


def test_a_slot_whose_job_already_finished_is_not_enqueued_again(
    two_nodes: tuple[Runtime, Runtime], clock: ManualClock
) -> None:
    a, b = two_nodes
    a.cron.add(minutely())
    a.cron.tick()
    clock.set(slot(1))
    a.cron.tick()
    RAN.clear()
    assert a.drain().completed == 2
    # A node starting now takes the slot of the last minute: the one that already ran.
    b.cron.add(minutely())
    clock.advance(seconds=20)
    (job,) = b.cron.tick()
    assert job.status is JobStatus.COMPLETED
    assert queued_ids(b) == []
    assert b.drain().completed == 0
    assert RAN == [{}, {}]


def pruning_pair(
    backend: Backend, clock: ManualClock, retention: object
) -> tuple[Runtime, Runtime]:
    """Two nodes as in `two_nodes`, configured to prune finished records by `retention`."""
    config = Config(provider="memory", retention=retention)  # type: ignore[arg-type]
    other = backend.peer() if backend.peer is not None else (backend.queue, backend.store)
    return tuple(  # type: ignore[return-value]
        Runtime(config, q, s, Registry({"report": report}), clock=clock)  # type: ignore[arg-type]
        for q, s in ((backend.queue, backend.store), other)
    )


def test_a_slot_that_ran_is_not_enqueued_again_once_a_count_limit_pruned_its_record(
    backend: Backend, clock: ManualClock
) -> None:
    # A busy queue under `max_completed` prunes the slot's record within the minute in
    # which a starting node still takes that slot as on time: the tombstone keeps it.
    from conveyor.core import RetentionPolicy

    a, b = pruning_pair(backend, clock, RetentionPolicy(max_completed=1))
    a.cron.add(minutely())
    a.cron.tick()
    RAN.clear()
    a.enqueue("report", {"other": 1})
    assert a.drain().completed == 2
    assert a.prune() >= 1
    assert a.get(slot_id("report", slot(0))) is None, "the slot's record was pruned"
    clock.advance(seconds=10)
    b.cron.add(minutely())
    assert b.cron.tick() == []
    assert b.drain().completed == 0
    assert RAN.count({}) == 1, "the slot ran once"


def test_a_slot_is_on_time_no_longer_than_finished_records_are_kept(
    backend: Backend, clock: ManualClock
) -> None:
    # Under a 5 s retention, and no tombstones, a node starting 10 s after a slot
    # cannot tell whether it ran: it lets it go rather than risk running it twice.
    from conveyor.core import RetentionPolicy

    short = RetentionPolicy(completed_ms=5_000, remember_pruned_ms=0)
    a, b = pruning_pair(backend, clock, short)
    clock.set(slot(0) + timedelta(seconds=1))
    a.cron.add(minutely())
    a.cron.tick()
    RAN.clear()
    assert a.drain().completed == 1
    clock.advance(seconds=6)
    assert a.prune() == 1
    clock.advance(seconds=4)
    b.cron.add(minutely())
    assert b.cron.tick() == []
    assert b.drain().completed == 0
    assert RAN == [{}]


# ---- the operator's view --------------------------------------------------------------


def test_cron_list_shows_the_next_run_and_the_last_run_with_its_state(
    backend: Backend, clock: ManualClock
) -> None:
    rt = node(backend.queue, backend.store, clock, minutely(timezone="Europe/Berlin"))
    (before,) = rt.cron.list()
    assert before.next_run == slot(1)
    assert before.last_slot is None
    rt.cron.tick()
    clock.set(slot(1))
    rt.cron.tick()
    (queued,) = rt.cron.list()
    assert (queued.last_slot, queued.last_state) == (slot(1), JobStatus.PENDING)
    rt.drain()
    clock.advance(seconds=10)
    (done,) = rt.cron.list()
    assert done.last_state is JobStatus.COMPLETED
    assert done.to_dict()["last_run"] == {
        "slot": slot(1).isoformat(),
        "job_id": str(slot_id("report", slot(1))),
        "state": "completed",
    }
    assert done.to_dict()["next_run"] == slot(2).isoformat()


def test_cron_run_enqueues_the_entry_now_outside_its_schedule(
    backend: Backend, clock: ManualClock
) -> None:
    rt = node(backend.queue, backend.store, clock, minutely())
    job = rt.cron.run("report")
    again = rt.cron.run("report")
    assert job.id != again.id, "each manual run is a job of its own"
    assert job.id != slot_id("report", slot(1))
    assert job.status is JobStatus.PENDING
    with pytest.raises(ValidationError, match="no cron entry 'nightly'"):
        rt.cron.run("nightly")


# ---- entries and config ------------------------------------------------------------------


def test_adding_an_entry_checks_its_schedule_time_zone_and_name(clock: ManualClock) -> None:
    rt = node(None, None, clock, minutely())
    with pytest.raises(ValidationError) as info:
        rt.cron.add(minutely(name="other", schedule="every day", timezone="Mars/Olympus"))
    assert info.value.fields == ("cron.schedule", "cron.timezone")
    with pytest.raises(ValidationError, match="'report' is already an entry"):
        rt.cron.add(minutely())


def test_cron_tables_in_the_config_become_entries() -> None:
    config = parse_config(
        {
            "cron": [
                {"name": "nightly", "schedule": "0 2 * * *", "job_type": "report"},
                {
                    "name": "hourly",
                    "schedule": "@hourly",
                    "timezone": "Europe/Berlin",
                    "job_type": "sync",
                    "args": {"full": True},
                    "queue": "sync",
                    "priority": "low",
                    "max_retries": 0,
                    "missed": "catch_up_one",
                },
            ]
        }
    )
    nightly, hourly = config.cron
    assert nightly == CronEntry("nightly", "0 2 * * *", "report", {}, missed=Missed.SKIP)
    assert (hourly.timezone, hourly.queue, hourly.priority) == (
        "Europe/Berlin",
        "sync",
        Priority.LOW,
    )
    assert (dict(hourly.args), hourly.max_retries) == ({"full": True}, 0)
    assert hourly.missed is Missed.CATCH_UP_ONE


def test_a_bad_cron_table_is_named_by_its_index_and_field() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config(
            {
                "cron": [
                    {"name": "ok", "schedule": "* * * * *", "job_type": "a"},
                    {"name": "ok", "schedule": "61 * * * *", "job_type": "a", "missed": "all"},
                    {"schedule": "* * * * *", "job_type": "a", "timezone": "Nowhere"},
                ]
            }
        )
    assert str(info.value) == (
        "cron[1].schedule: '61 * * * *' is not a cron expression: bad minute "
        "(five fields, or six with seconds first, or @hourly/@daily/@weekly/...); "
        "cron[1].missed: must be one of skip, catch_up_one, got 'all'; "
        "cron[2].name: is required; "
        "cron[2].timezone: unknown time zone 'Nowhere'; use an IANA name such as "
        "'Europe/Berlin' or 'UTC'; "
        "cron[1].name: 'ok' is already cron[0]'s name"
    )


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("0 0 30 2 *", "day 30 of the month never comes in month 2"),
        ("0 0 0 31 4,6 *", "day 31 of the month never comes in month 4,6"),
    ],
)
def test_a_day_that_never_comes_in_its_months_is_named_as_such(
    expression: str, said: str
) -> None:
    # It was "bad day-of-month", as for day 32.
    from conveyor.shell.cron import expression_problem

    problem = expression_problem(expression)
    assert problem is not None and said in problem, problem
    assert "bad day-of-month" in str(expression_problem("0 0 32 * *"))
    assert "bad month" in str(expression_problem("0 0 1 13 *"))


@pytest.mark.parametrize("shorthand", ["@reboot", "@Every_minute"])
def test_a_shorthand_not_read_here_is_named_with_those_that_are(shorthand: str) -> None:
    # It said "wrong number of fields", as if the shorthand were a misspelt expression.
    with pytest.raises(ValidationError) as info:
        parse_config({"cron": [{"name": "a", "schedule": shorthand, "job_type": "a"}]})
    assert str(info.value) == (
        f"cron[0].schedule: {shorthand!r} is not a shorthand read here; use one of "
        "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
    )


# ---- time zones --------------------------------------------------------------------------


def berlin(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo("Europe/Berlin"))  # type: ignore[misc]


def test_a_slot_in_the_hour_the_clocks_skip_runs_when_that_hour_ends() -> None:
    # 29 March 2026: Berlin's clocks jump from 02:00 to 03:00; 02:30 never happens.
    schedule = CronSchedule("30 2 * * *", ZoneInfo("Europe/Berlin"))
    slot_of_the_day = schedule.next_after(berlin(2026, 3, 29, 0, 0))
    assert slot_of_the_day == berlin(2026, 3, 29, 3, 0).astimezone(UTC)
    assert schedule.next_after(slot_of_the_day) == berlin(2026, 3, 30, 2, 30).astimezone(UTC)


def test_a_daily_slot_in_the_hour_the_clocks_repeat_runs_once() -> None:
    # 25 October 2026: Berlin's 02:00-03:00 happens twice; a 02:30 job runs once.
    schedule = CronSchedule("30 2 * * *", ZoneInfo("Europe/Berlin"))
    first = schedule.next_after(berlin(2026, 10, 25, 0, 0))
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert schedule.next_after(first) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


# Every minute of a night the clocks go back (the repeated hour in both of its passes,
# and the hours around it), for schedules at a fixed hour and at every hour.
REPEATED_NIGHTS = [
    ("Europe/Berlin", datetime(2026, 10, 24, 23, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 4, 0, tzinfo=UTC)),
]


@pytest.mark.parametrize("zone, start", REPEATED_NIGHTS)
@pytest.mark.parametrize(
    "expression",
    ["30 2 * * *", "59 1 * * *", "30 1 * * *", "*/20 * * * *", "0 30 1 * * *", "*/15 30 2 * * *"],
)
def test_each_slot_is_strictly_after_or_before_the_moment_asked_even_in_a_repeated_hour(
    zone: str, start: datetime, expression: str
) -> None:
    # In the second pass of a repeated hour the parser's next slot at a fixed hour is
    # the first pass's, already past: a ticker sleeping until it woke at once, for up
    # to an hour, enqueueing the same slot thousands of times a second.
    schedule = CronSchedule(expression, ZoneInfo(zone))
    for minute in range(4 * 60):
        moment = start + timedelta(minutes=minute, seconds=7)
        assert schedule.next_after(moment) > moment, (expression, zone, moment)
        before = schedule.last_before(moment)
        assert before is not None and before < moment, (expression, zone, moment)


def slots_between(schedule: CronSchedule, start: datetime, hours: int) -> list[datetime]:
    found, moment = [], start
    while (moment := schedule.next_after(moment)) <= start + timedelta(hours=hours):
        found.append(moment)
    return found


CHANGING_NIGHTS = [
    ("Europe/Berlin", datetime(2026, 3, 28, 22, 0, tzinfo=UTC), "30 2 * * *"),
    ("Europe/Berlin", datetime(2026, 10, 24, 22, 0, tzinfo=UTC), "30 2 * * *"),
    ("America/New_York", datetime(2026, 3, 8, 4, 0, tzinfo=UTC), "30 2 * * *"),
    ("America/New_York", datetime(2026, 11, 1, 3, 0, tzinfo=UTC), "30 1 * * *"),
]


@pytest.mark.parametrize("zone, start, five", CHANGING_NIGHTS)
@pytest.mark.parametrize("seconds", [(0,), (15,), (0, 20, 40)])
def test_a_six_field_schedule_keeps_the_five_field_rules_where_the_clocks_change(
    zone: str, start: datetime, five: str, seconds: tuple[int, ...]
) -> None:
    # Read alone by the parser, `0 30 2 * * *` ran twice the night the clocks go back
    # and not at all the night they go forward.
    field = ",".join(map(str, seconds))
    daily = slots_between(CronSchedule(five, ZoneInfo(zone)), start, 8)
    assert len(daily) == 1
    six = CronSchedule(f"{field} {five}", ZoneInfo(zone))
    assert slots_between(six, start, 8) == [daily[0] + timedelta(seconds=s) for s in seconds]
    last = daily[0] + timedelta(seconds=seconds[-1])
    assert six.last_before(last + timedelta(hours=4)) == last


@pytest.mark.parametrize(
    ("zone", "moment", "expression", "last"),
    [
        # In the second pass of Berlin's repeated 02:xx: today's 02:30 (first pass).
        ("Europe/Berlin", datetime(2024, 10, 27, 1, 0, 16, tzinfo=UTC), "30 2 * * *",
         datetime(2024, 10, 27, 0, 30, tzinfo=UTC)),
        ("Europe/Berlin", datetime(2024, 10, 27, 1, 0, 16, tzinfo=UTC), "0 30 2 * * *",
         datetime(2024, 10, 27, 0, 30, tzinfo=UTC)),
        # A moment just before New York's clocks go back, the search starting after it.
        ("America/New_York", datetime(2024, 11, 3, 5, 59, 43, tzinfo=UTC), "*/20 30 1 * * *",
         datetime(2024, 11, 3, 5, 30, 40, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_the_last_slot_before_a_moment_near_the_clocks_going_back_is_that_day_s(
    zone: str, moment: datetime, expression: str, last: datetime
) -> None:
    # It was the day before's: searching back in wall-clock time from the second pass
    # passed over the first pass's slot, later on the wall, earlier in time. A first
    # check under catch_up_one then caught up yesterday's slot, not today's.
    assert CronSchedule(expression, ZoneInfo(zone)).last_before(moment) == last


@pytest.mark.parametrize(
    "zone, day",
    [("Europe/Berlin", (2024, 10, 27)), ("America/New_York", (2024, 11, 3)), ("Europe/Berlin", (2024, 3, 31))],
)
@pytest.mark.parametrize(
    "expression", ["30 2 * * *", "0 30 2 * * *", "*/20 30 1 * * *", "0 */30 * * * *"]
)
def test_next_after_and_last_before_agree_with_the_slots_in_order_around_a_change(
    zone: str, day: tuple[int, int, int], expression: str
) -> None:
    schedule = CronSchedule(expression, ZoneInfo(zone))
    start = datetime(*day, tzinfo=UTC) - timedelta(hours=28)
    slots, moment = [], start
    while (moment := schedule.next_after(moment)) < start + timedelta(hours=40):
        slots.append(moment)
    # Every 3 min 17 s from three hours before the day's start (UTC) to eight after:
    # each change, in both zones, falls in that window.
    probe = datetime(*day, tzinfo=UTC) - timedelta(hours=3)
    while probe < datetime(*day, tzinfo=UTC) + timedelta(hours=8):
        before = [slot for slot in slots if slot < probe]
        assert schedule.last_before(probe) == before[-1], probe
        probe += timedelta(minutes=3, seconds=17)


def test_in_the_second_pass_of_a_repeated_hour_a_daily_slot_is_next_due_the_day_after(
    clock: ManualClock,
) -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    rt = node(
        MemoryJobQueue(store),
        store,
        clock,
        minutely(schedule="30 2 * * *", timezone="Europe/Berlin"),
    )
    clock.set(datetime(2026, 10, 25, 0, 29, tzinfo=UTC))  # 02:29 in the first pass
    assert rt.cron.tick() == []
    clock.set(datetime(2026, 10, 25, 0, 31, tzinfo=UTC))  # 02:31, first pass: the slot runs
    assert len(rt.cron.tick()) == 1
    clock.set(datetime(2026, 10, 25, 1, 5, tzinfo=UTC))  # 02:05 again, in the second pass
    assert rt.cron.next_run() == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert rt.cron.tick() == []


def test_slots_are_read_in_the_entry_s_time_zone_and_come_back_in_utc() -> None:
    schedule = CronSchedule("0 9 * * MON-FRI", ZoneInfo("America/New_York"))
    after = datetime(2026, 6, 5, 14, 0, tzinfo=UTC)  # a Friday, 10:00 in New York
    assert schedule.next_after(after) == datetime(2026, 6, 8, 13, 0, tzinfo=UTC)
    assert schedule.last_before(after) == datetime(2026, 6, 5, 13, 0, tzinfo=UTC)


def test_a_tick_on_the_night_the_clocks_go_forward_enqueues_the_skipped_slot_at_three(
    clock: ManualClock,
) -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    entry = minutely(schedule="30 2 * * *", timezone="Europe/Berlin")
    rt = node(MemoryJobQueue(store), store, clock, entry)
    clock.set(berlin(2026, 3, 29, 1, 59).astimezone(UTC))
    assert rt.cron.tick() == []
    clock.set(berlin(2026, 3, 29, 3, 0).astimezone(UTC))
    (job,) = rt.cron.tick()
    assert job.id == slot_id("report", datetime(2026, 3, 29, 1, 0, tzinfo=UTC))


def test_a_running_ticker_that_fell_behind_says_which_slot_it_skipped(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    rt = node(MemoryJobQueue(store), store, clock, minutely())
    rt.cron.tick()
    clock.set(slot(5))
    with caplog.at_level("WARNING", logger="conveyor.cron"):
        rt.cron.tick()
    assert [r.getMessage() for r in caplog.records] == [
        f"cron 'report': slot {slot(3).isoformat()} came more than 0:01:00 ago; "
        "skipped (missed = skip)"
    ]


# ---- the ticker thread -------------------------------------------------------------------


def test_a_started_worker_process_enqueues_slots_on_its_own(tmp_path: object) -> None:
    rt = conveyor.build(
        {
            "provider": "memory",
            "entry_points": False,
            "workers": {"count": 1, "poll_interval_ms": 50},
            "cron": [{"name": "tick", "schedule": "* * * * * *", "job_type": "report"}],
        },
        handlers={"report": report},
    )
    with rt:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and rt.cron.list()[0].last_state is None:
            time.sleep(0.1)
        row = rt.cron.list()[0]
    assert row.last_state is not None, "no slot was enqueued within 5 s"

    def counts() -> list[tuple[int, int, int]]:  # not the ages, which go on growing
        return [(q.ready, q.scheduled, q.in_flight) for q in rt.status().queues]

    stopped = counts()
    time.sleep(1.5)
    assert counts() == stopped, "a stopped runtime enqueues no more slots"


def test_a_web_node_with_no_workers_enqueues_no_slots() -> None:
    rt = conveyor.build(
        {
            "provider": "memory",
            "entry_points": False,
            "workers": {"count": 0},
            "cron": [{"name": "tick", "schedule": "* * * * * *", "job_type": "report"}],
        },
        handlers={"report": report},
    )
    with rt:
        time.sleep(1.5)
        assert rt.cron.list()[0].last_state is None


# ---- the command line ----------------------------------------------------------------------

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "conveyor.toml").write_text(
        textwrap.dedent(f"""
        provider = "db"
        url = "sqlite:///{tmp_path / "jobs.db"}"
        entry_points = false

        [[cron]]
        name = "every-second"
        schedule = "* * * * * *"
        job_type = "report"

        [[cron]]
        name = "nightly"
        schedule = "30 2 * * *"
        timezone = "Europe/Berlin"
        job_type = "report"
        args = {{ full = true }}
        """)
    )
    return tmp_path


def conveyor_cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`conveyor *args` in `folder`, in a process of its own, as a user runs it."""
    return subprocess.run(
        [*CONVEYOR, *args], cwd=folder, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def cron_cli(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """`cron_cli(*args)`: `conveyor *args` in the project folder, in this process."""
    monkeypatch.chdir(project)
    return lambda *args: call_main(capsys, *args)


def test_cron_list_prints_each_entry_with_its_next_and_last_run(
    project: Path, cron_cli: Callable[..., Ran]
) -> None:
    rt = conveyor.build(project / "conveyor.toml")
    rt.cron.tick()
    deadline = time.monotonic() + 3
    while not rt.cron.tick() and time.monotonic() < deadline:
        time.sleep(0.2)
    rt.close()
    done = conveyor_cli(project, "cron", "list", "--json")
    assert done.returncode == 0, done.stderr
    every, nightly = json.loads(done.stdout)
    assert every["last_run"]["state"] == "pending"
    assert nightly["name"] == "nightly" and nightly["timezone"] == "Europe/Berlin"
    assert nightly["last_run"] is None
    assert datetime.fromisoformat(nightly["next_run"]).astimezone(
        ZoneInfo("Europe/Berlin")
    ).strftime("%H:%M") in ("02:30", "03:00")
    table = cron_cli("cron", "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "name",
        "schedule",
        "timezone",
        "job",
        "type",
        "next",
        "run",
        "last",
        "run",
        "state",
    ]
    assert "every-second" in table.stdout and "pending" in table.stdout


def test_cron_run_enqueues_the_entry_now_and_prints_the_job_id(
    project: Path, cron_cli: Callable[..., Ran]
) -> None:
    done = cron_cli("cron", "run", "nightly")
    assert done.returncode == 0, done.stderr
    rt = conveyor.build(project / "conveyor.toml")
    view = rt.get(done.stdout.strip())
    rt.close()
    assert view is not None and view.job is not None
    assert view.state is JobStatus.PENDING and dict(view.job.args) == {"full": True}


def test_cron_run_of_an_unknown_entry_is_bad_input(cron_cli: Callable[..., Ran]) -> None:
    done = cron_cli("cron", "run", "weekly")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "conveyor: invalid input: name: no cron entry 'weekly' (entries: every-second, nightly)"
    )


def test_a_bad_cron_table_stops_the_command_with_one_line_naming_it(
    project: Path, cron_cli: Callable[..., Ran]
) -> None:
    config = project / "conveyor.toml"
    config.write_text(config.read_text().replace('"30 2 * * *"', '"30 25 * * *"'))
    done = cron_cli("cron", "list")
    assert done.returncode == 2
    assert done.stderr.strip().startswith(
        "conveyor: invalid input: cron[1].schedule: '30 25 * * *' is not a cron expression: "
        "bad hour"
    )
