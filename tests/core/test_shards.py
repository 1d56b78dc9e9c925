"""Shards: a queue's shard, the slot of a key, and the tags chosen over a slot map."""

from __future__ import annotations

from collections import Counter

import pytest
from conveyor.core.shards import (
    SLOTS,
    Placed,
    ShardMap,
    SlotRange,
    candidate_tags,
    choose_tags,
    crc16,
    cross_shard,
    key_slot,
    stranded_by_sharding,
    tag_slot,
)
from hypothesis import given
from hypothesis import strategies as st

#: The slot map of a cluster of three masters splitting the slots evenly.
THREE = (
    SlotRange(0, 5460, "a"),
    SlotRange(5461, 10922, "b"),
    SlotRange(10923, SLOTS - 1, "c"),
)


def _master(tag: str, ranges: tuple[SlotRange, ...] = THREE) -> str:
    slot = tag_slot(tag)
    return next(r.master for r in ranges if r.first <= slot <= r.last)


def test_crc16_is_the_xmodem_checksum_redis_uses() -> None:
    assert crc16(b"123456789") == 0x31C3
    assert crc16(b"") == 0


def test_a_key_slot_is_what_cluster_keyslot_answers() -> None:
    # Figures from Redis's own documentation and `CLUSTER KEYSLOT`.
    assert key_slot("foo") == 12182
    assert key_slot("somekey") == 11058
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("foo{}{bar}") == crc16(b"foo{}{bar}") % SLOTS
    assert key_slot("{conveyor}:job:1") == tag_slot("conveyor")


@given(st.text(max_size=20), st.text(min_size=1, max_size=20).filter(lambda t: "}" not in t))
def test_every_key_under_a_tag_shares_its_slot(rest: str, tag: str) -> None:
    assert key_slot("{" + tag + "}" + rest) == tag_slot(tag)


def test_one_shard_keeps_every_queue_in_shard_zero() -> None:
    assert ShardMap().shard_of("mail") == 0
    assert ShardMap(1, {"mail": 0}).shard_of("billing") == 0


def test_a_pin_decides_before_the_hash() -> None:
    pins = {"mail": 2, "billing": 0}
    shards = ShardMap(3, pins)
    assert shards.shard_of("mail") == 2
    assert shards.shard_of("billing") == 0


@given(st.integers(1, 16), st.text(max_size=30))
def test_a_queue_s_shard_is_in_range_and_stable(count: int, queue: str) -> None:
    found = ShardMap(count).shard_of(queue)
    assert 0 <= found < count
    assert ShardMap(count).shard_of(queue) == found


def test_the_hash_does_not_change_between_releases() -> None:
    # Queues already written under a shard must be found there by the next release.
    assert [ShardMap(3).shard_of(q) for q in ("default", "mail", "billing", "q1")] == [
        crc16(q.encode()) % 3 for q in ("default", "mail", "billing", "q1")
    ]


def test_the_hash_spreads_many_queues_over_every_shard() -> None:
    spread = Counter(ShardMap(3).shard_of(f"queue-{n}") for n in range(300))
    assert set(spread) == {0, 1, 2}
    assert min(spread.values()) > 60


def test_pins_to_missing_shards_are_named() -> None:
    problems = ShardMap(2, {"mail": 2, "ok": 1}).problems()
    assert problems == [("redis.queue_shards.mail", "pins to shard 2, but shards run 0..1")]
    assert ShardMap(0).problems()[0][0] == "redis.shards"


def test_shard_zero_keeps_the_prefix_as_its_tag() -> None:
    assert choose_tags("conveyor", 1, THREE) == ("conveyor",)
    assert choose_tags("conveyor", 3, THREE)[0] == "conveyor"


def test_on_one_server_each_shard_takes_its_first_candidate() -> None:
    assert choose_tags("app", 3) == ("app", "app:1", "app:2")


@given(st.text(min_size=1, max_size=12).filter(lambda p: "{" not in p and "}" not in p))
def test_three_shards_land_on_three_masters(prefix: str) -> None:
    tags = choose_tags(prefix, 3, THREE)
    assert len({_master(tag) for tag in tags}) == 3
    for shard, tag in enumerate(tags):
        assert tag in set(candidate_tags(prefix, shard))


@given(st.integers(1, 9))
def test_more_shards_than_masters_spread_evenly(count: int) -> None:
    load = Counter(_master(tag) for tag in choose_tags("conveyor", count, THREE))
    assert max(load.values()) - min(load.get(m, 0) for m in "abc") <= 1


def test_an_uneven_slot_map_is_followed() -> None:
    ranges = (SlotRange(0, 100, "small"), SlotRange(101, SLOTS - 1, "big"))
    tags = choose_tags("conveyor", 2, ranges)
    assert {_master(tag, ranges) for tag in tags} == {"small", "big"}


@pytest.mark.parametrize("count", [2, 3])
def test_the_chosen_tags_are_distinct(count: int) -> None:
    assert len(set(choose_tags("conveyor", count, THREE))) == count


def test_a_graph_in_one_shard_is_accepted() -> None:
    assert cross_shard([Placed(1, "after", "job a"), Placed(1, "steps[1].after", "job b")]) is None
    assert cross_shard([]) is None


def test_a_graph_over_two_shards_names_the_first_field_outside() -> None:
    placed = [
        Placed(0, "after", "queue 'mail'"),
        Placed(0, "steps[1].after", "queue 'mail'"),
        Placed(2, "steps[2].after", "queue 'billing'"),
    ]
    found = cross_shard(placed)
    assert found is not None
    field, reason = found
    assert field == "steps[2].after"
    assert "queue 'billing' is in shard 2" in reason
    assert "redis.queue_shards" in reason


def test_opening_one_shard_in_several_strands_only_the_queues_that_move_and_hold_jobs() -> None:
    shards = ShardMap(3, {"a": 0, "b": 1, "c": 2})
    assert stranded_by_sharding(shards, {"a": 5, "b": 0}) is None, "a stays; b is empty"
    reason = stranded_by_sharding(shards, {"a": 5, "c": 2, "b": 1})
    assert reason is not None
    assert "queue b (1), queue c (2)" in reason and "queue a" not in reason
    assert stranded_by_sharding(ShardMap(1), {"a": 5, "b": 1}) is None, "one shard moves none"


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 3), max_size=12))
def test_a_queue_is_named_stranded_exactly_when_it_holds_jobs_and_leaves_shard_0(
    queued: dict[str, int],
) -> None:
    shards = ShardMap(4)
    reason = stranded_by_sharding(shards, queued) or ""
    moving = [q for q, n in queued.items() if n > 0 and shards.shard_of(q) != 0]
    for name in moving:
        assert f"queue {name} ({queued[name]})" in reason
    assert (reason == "") == (not moving)
