"""Periodic jobs in the core: which slots a check enqueues, missed slots, slot ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import attrs
from conveyor.core import FrozenMap, Priority
from conveyor.core.cron import (
    CronEntry,
    CronPlan,
    Missed,
    check_entry,
    parse_missed,
    plan_slots,
    recent_slots,
    slot_id,
    slots_after_catch_up,
    slots_to_write,
)
from conveyor.core.errors import FieldError
from hypothesis import given
from hypothesis import strategies as st

ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return ORIGIN + timedelta(seconds=seconds)


@attrs.frozen
class Every:
    """A schedule with a slot every `seconds` seconds from ORIGIN (a stand-in for a
    parsed cron expression: the core only asks for the next and the last slot)."""

    seconds: int

    def _index(self, moment: datetime) -> tuple[int, int]:
        step = self.seconds * 1_000_000
        offset = (moment - ORIGIN) // timedelta(microseconds=1)
        return offset // step, offset % step

    def next_after(self, moment: datetime) -> datetime:
        index, _ = self._index(moment)
        return at((index + 1) * self.seconds)

    def last_before(self, moment: datetime) -> datetime | None:
        index, rest = self._index(moment)
        previous = index if rest else index - 1
        return at(previous * self.seconds)


@attrs.frozen
class Once:
    """A schedule with one slot only."""

    slot: datetime

    def next_after(self, moment: datetime) -> datetime:
        return self.slot if moment < self.slot else datetime.max.replace(tzinfo=UTC)

    def last_before(self, moment: datetime) -> datetime | None:
        return self.slot if self.slot < moment else None


MINUTELY = Every(60)


# ---- a process's first check: everything before its start was missed ---------


def test_a_first_check_takes_the_slots_of_the_last_grace_as_on_time() -> None:
    # A restart 30 s after a slot keeps it (it was counted missed, and lost under skip);
    # the slot's job id keeps it to one job however many processes start.
    plan = plan_slots(MINUTELY, since=None, now=at(150), missed=Missed.SKIP)
    assert plan == CronPlan(slots=(at(120),), missed=at(60))


def test_a_first_check_takes_only_the_newest_slot_of_a_dense_schedule() -> None:
    plan = plan_slots(Every(10), since=None, now=at(100), missed=Missed.SKIP)
    assert plan == CronPlan(slots=(at(100),), missed=at(30))


def test_a_first_check_under_skip_enqueues_no_slot_older_than_the_grace() -> None:
    plan = plan_slots(Every(100), since=None, now=at(170), missed=Missed.SKIP)
    assert plan == CronPlan(slots=(), missed=at(100))


def test_a_first_check_under_catch_up_one_enqueues_only_the_latest_missed_slot() -> None:
    plan = plan_slots(Every(100), since=None, now=at(370), missed=Missed.CATCH_UP_ONE)
    assert plan == CronPlan(slots=(at(300),), missed=at(300))
    both = plan_slots(MINUTELY, since=None, now=at(150), missed=Missed.CATCH_UP_ONE)
    assert both == CronPlan(slots=(at(60), at(120)), missed=at(60))


def test_a_catch_up_is_owed_only_while_no_slot_after_it_was_written() -> None:
    # Every 10 s, a start at 115 s: 50 s is the catch-up, 110 s on time. Whether a
    # process ran through the slots between them is told by their jobs.
    plan = plan_slots(Every(10), since=None, now=at(115), missed=Missed.CATCH_UP_ONE)
    assert plan == CronPlan(slots=(at(50), at(110)), missed=at(50))
    later = slots_after_catch_up(plan, Every(10), at(115))
    assert later == (at(110), at(100), at(90), at(80), at(70), at(60))
    assert slots_to_write(plan, (), written_after=True) == (at(110),)
    assert slots_to_write(plan, ()) == (at(50), at(110))
    assert slots_after_catch_up(plan, Every(10), at(115), limit=2) == (at(110), at(100))


def test_a_plan_that_catches_nothing_up_looks_nothing_up() -> None:
    skip = plan_slots(Every(10), since=None, now=at(115), missed=Missed.SKIP)
    assert skip.missed == at(50) and slots_after_catch_up(skip, Every(10), at(115)) == ()
    quiet = plan_slots(Every(10), since=at(105), now=at(115), missed=Missed.CATCH_UP_ONE)
    assert quiet.missed is None and slots_after_catch_up(quiet, Every(10), at(115)) == ()


def test_a_first_check_exactly_at_a_slot_takes_that_slot_as_on_time() -> None:
    hourly = Every(100)
    assert plan_slots(hourly, since=None, now=at(300), missed=Missed.SKIP).slots == (at(300),)
    caught = plan_slots(hourly, since=None, now=at(300), missed=Missed.CATCH_UP_ONE)
    assert caught.slots == (at(200), at(300))


def test_a_first_check_before_the_first_slot_misses_nothing() -> None:
    plan = plan_slots(Once(at(500)), since=None, now=at(100), missed=Missed.CATCH_UP_ONE)
    assert plan == CronPlan(slots=(), missed=None)


# ---- later checks: the slots since the last one ---------------------------------


def test_a_check_enqueues_every_slot_since_the_last_check_oldest_first() -> None:
    plan = plan_slots(Every(10), since=at(5), now=at(40), missed=Missed.SKIP)
    assert plan == CronPlan(slots=(at(10), at(20), at(30), at(40)), missed=None)


def test_a_slot_at_the_last_check_is_not_enqueued_again() -> None:
    plan = plan_slots(Every(10), since=at(10), now=at(15), missed=Missed.CATCH_UP_ONE)
    assert plan == CronPlan(slots=(), missed=None)


def test_slots_older_than_the_grace_are_skipped_under_skip() -> None:
    plan = plan_slots(
        Every(10), since=at(0), now=at(100), missed=Missed.SKIP, grace=timedelta(seconds=25)
    )
    assert plan == CronPlan(slots=(at(80), at(90), at(100)), missed=at(70))


def test_only_the_latest_slot_older_than_the_grace_is_caught_up() -> None:
    plan = plan_slots(
        Every(10),
        since=at(0),
        now=at(100),
        missed=Missed.CATCH_UP_ONE,
        grace=timedelta(seconds=25),
    )
    assert plan == CronPlan(slots=(at(70), at(80), at(90), at(100)), missed=at(70))


def test_a_missed_slot_older_than_the_catch_up_bound_is_let_go() -> None:
    # Its record, had it run, might have been pruned: running it again could repeat it.
    plan = plan_slots(
        Every(3600),
        since=None,
        now=at(7 * 3600 + 100),
        missed=Missed.CATCH_UP_ONE,
        catch_up_within=timedelta(seconds=95),
    )
    assert plan == CronPlan(slots=(), missed=at(7 * 3600))
    within = plan_slots(
        Every(3600),
        since=None,
        now=at(7 * 3600 + 100),
        missed=Missed.CATCH_UP_ONE,
        catch_up_within=timedelta(seconds=100),
    )
    assert within.slots == (at(7 * 3600),)


def test_a_retention_shorter_than_the_grace_shortens_the_on_time_window() -> None:
    # A slot older than its record is surely kept may have run and been pruned.
    plan = plan_slots(
        Every(60), since=None, now=at(70), missed=Missed.SKIP, catch_up_within=timedelta(seconds=5)
    )
    assert plan == CronPlan(slots=(), missed=at(60))
    kept = plan_slots(
        Every(60), since=None, now=at(70), missed=Missed.SKIP, catch_up_within=timedelta(seconds=10)
    )
    assert kept == CronPlan(slots=(at(60),), missed=at(0))


def test_a_slot_whose_record_was_pruned_is_not_written_again() -> None:
    # It ran: its tombstone outlives its record, whose id an enqueue would take anew.
    plan = CronPlan(slots=(at(60), at(120), at(180)))
    assert slots_to_write(plan, {at(120)}) == (at(60), at(180))
    assert slots_to_write(plan, set()) == plan.slots


def test_a_slot_exactly_the_grace_old_is_still_on_time() -> None:
    plan = plan_slots(
        Every(10), since=at(0), now=at(100), missed=Missed.SKIP, grace=timedelta(seconds=30)
    )
    assert plan == CronPlan(slots=(at(70), at(80), at(90), at(100)), missed=at(60))


def test_on_time_slots_are_capped_to_the_newest_few() -> None:
    plan = plan_slots(Every(1), since=at(0), now=at(30), missed=Missed.SKIP, limit=3)
    assert plan.slots == (at(28), at(29), at(30))


@given(
    gaps=st.lists(st.integers(min_value=0, max_value=25_000), min_size=1, max_size=40),
    missed=st.sampled_from(Missed),
)
def test_checks_at_most_a_grace_apart_enqueue_each_slot_once_and_miss_none(
    gaps: list[int], missed: Missed
) -> None:
    schedule, grace = Every(7), timedelta(seconds=30)
    since, now, enqueued = at(0), at(0), []
    for gap_ms in gaps:
        now = since + timedelta(milliseconds=gap_ms)
        enqueued.extend(
            plan_slots(schedule, since=since, now=now, missed=missed, grace=grace).slots
        )
        since = now
    expected = [at(7 * k) for k in range(1, 10_000) if at(7 * k) <= now]
    assert enqueued == expected


# ---- slot ids --------------------------------------------------------------------


def test_a_slot_id_is_the_same_wherever_it_is_computed() -> None:
    first = slot_id("nightly", datetime(2026, 3, 1, 2, 0, tzinfo=UTC))
    again = slot_id("nightly", datetime(2026, 3, 1, 2, 0, tzinfo=UTC))
    assert first == again
    # Pinned: nodes of two versions side by side must derive the same id for a slot.
    assert first == UUID("d8517a98-cc43-5c78-91d1-36736c21212f")


def test_a_slot_id_depends_on_the_instant_not_the_time_zone_it_is_written_in() -> None:
    utc = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)
    berlin = utc.astimezone(timezone(timedelta(hours=1)))
    assert slot_id("nightly", utc) == slot_id("nightly", berlin)


def test_two_entries_or_two_instants_get_different_slot_ids() -> None:
    slot = datetime(2026, 3, 1, tzinfo=UTC)
    assert slot_id("a", slot) != slot_id("b", slot)
    assert slot_id("a", slot) != slot_id("a", slot + timedelta(seconds=1))


def test_the_two_half_past_ones_of_a_night_the_clocks_go_back_are_two_slots() -> None:
    # 01:30 on 1 Nov 2026 happens twice in New York: at -04:00 (EDT), then at -05:00.
    first = datetime(2026, 11, 1, 1, 30, tzinfo=timezone(timedelta(hours=-4)))
    second = datetime(2026, 11, 1, 1, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert slot_id("report", first) != slot_id("report", second)


# ---- looking back for the last run --------------------------------------------


def test_recent_slots_are_newest_first_and_include_one_at_now() -> None:
    assert recent_slots(Every(10), at(30), 3) == (at(30), at(20), at(10))


def test_recent_slots_stop_where_the_schedule_begins() -> None:
    assert recent_slots(Once(at(10)), at(100), 5) == (at(10),)


# ---- entries ---------------------------------------------------------------------


def test_a_valid_entry_comes_back_with_frozen_args_and_parsed_names() -> None:
    entry = CronEntry("nightly", "0 2 * * *", "report", {"k": [1]}, priority="high")
    checked, errors = check_entry(entry)
    assert errors == []
    assert isinstance(checked.args, FrozenMap)
    assert checked.priority is Priority.HIGH
    assert checked.missed is Missed.SKIP


def test_every_bad_field_of_an_entry_is_named_under_its_prefix() -> None:
    entry = CronEntry(
        "", "* * * * *", "bad type", {"x": object()}, queue="", priority="soon", max_retries=-1
    )
    _, errors = check_entry(entry, "cron[2]")
    assert [e.field for e in errors] == [
        "cron[2].name",
        "cron[2].job_type",
        "cron[2].queue",
        "cron[2].max_retries",
        "cron[2].args",
        "cron[2].priority",
    ]


def test_the_missed_policy_is_read_from_its_name() -> None:
    assert parse_missed("catch_up_one") is Missed.CATCH_UP_ONE
    problem = parse_missed("all")
    assert isinstance(problem, FieldError)
    assert str(problem) == "missed: must be one of skip, catch_up_one, got 'all'"
