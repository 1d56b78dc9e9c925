"""Claim order: most urgent priority first, then first in, first out."""

from __future__ import annotations

import itertools

from conveyor.core import PRIORITY_ORDER, Priority, claim_order, ordering_key, promotion_key
from hypothesis import given
from hypothesis import strategies as st

priorities = st.sampled_from(Priority)
seqs = st.integers(min_value=0, max_value=10**12)
entries = st.tuples(priorities, seqs)
URGENCY = {Priority.CRITICAL: 4, Priority.HIGH: 3, Priority.NORMAL: 2, Priority.LOW: 1}


def claims_first(a: tuple[Priority, int], b: tuple[Priority, int]) -> bool:
    """The reference order, spelt independently of the code: urgency, then FIFO."""
    (pa, sa), (pb, sb) = a, b
    if URGENCY[pa] != URGENCY[pb]:
        return URGENCY[pa] > URGENCY[pb]
    return sa < sb


def test_critical_high_normal_low_at_any_seq() -> None:
    late_critical = ordering_key(Priority.CRITICAL, 10**9)
    early_high = ordering_key(Priority.HIGH, 0)
    early_normal = ordering_key(Priority.NORMAL, 0)
    early_low = ordering_key(Priority.LOW, 0)
    assert late_critical < early_high < early_normal < early_low


def test_within_one_priority_the_earlier_enqueue_claims_first() -> None:
    assert ordering_key(Priority.NORMAL, 1) < ordering_key(Priority.NORMAL, 2)


@given(a=entries, b=entries)
def test_the_key_agrees_with_the_reference_order(
    a: tuple[Priority, int], b: tuple[Priority, int]
) -> None:
    assert (ordering_key(*a) < ordering_key(*b)) == claims_first(a, b)


@given(a=entries, b=entries)
def test_the_key_is_total_and_antisymmetric(
    a: tuple[Priority, int], b: tuple[Priority, int]
) -> None:
    ka, kb = ordering_key(*a), ordering_key(*b)
    assert (ka < kb) + (kb < ka) + (ka == kb) == 1
    assert (ka == kb) == (a == b)


@given(a=entries, b=entries, c=entries)
def test_the_key_is_transitive(
    a: tuple[Priority, int], b: tuple[Priority, int], c: tuple[Priority, int]
) -> None:
    ka, kb, kc = ordering_key(*a), ordering_key(*b), ordering_key(*c)
    if ka <= kb and kb <= kc:
        assert ka <= kc


@given(st.lists(entries, unique_by=lambda e: e[1], max_size=50))
def test_claim_order_puts_every_pair_in_reference_order(
    given_entries: list[tuple[Priority, int]],
) -> None:
    ordered = claim_order((p, s, (p, s)) for p, s in given_entries)
    assert set(ordered) == set(given_entries)
    assert len(ordered) == len(given_entries)
    for earlier, later in itertools.pairwise(ordered):
        assert claims_first(earlier, later)


@given(st.lists(entries, unique_by=lambda e: e[1], max_size=50))
def test_claim_order_ignores_the_order_entries_arrive_in(
    given_entries: list[tuple[Priority, int]],
) -> None:
    forwards = claim_order((p, s, s) for p, s in given_entries)
    backwards = claim_order((p, s, s) for p, s in reversed(given_entries))
    assert forwards == backwards


def test_claim_order_returns_the_items() -> None:
    entries_given = [
        (Priority.LOW, 1, "low-1"),
        (Priority.NORMAL, 3, "normal-3"),
        (Priority.CRITICAL, 4, "critical-4"),
        (Priority.NORMAL, 2, "normal-2"),
        (Priority.HIGH, 5, "high-5"),
    ]
    assert claim_order(entries_given) == ["critical-4", "high-5", "normal-2", "normal-3", "low-1"]


def test_priority_order_is_the_order_claims_walk_the_priorities() -> None:
    ordered = claim_order((p, 0, p) for p in reversed(PRIORITY_ORDER))
    assert tuple(ordered) == PRIORITY_ORDER


def test_due_jobs_are_promoted_by_run_at_then_enqueue_order() -> None:
    entries = [(5, 3, "c"), (1, 9, "a"), (5, 2, "b"), (7, 1, "d")]
    ordered = sorted(entries, key=lambda e: promotion_key(e[0], e[1]))
    assert [e[2] for e in ordered] == ["a", "b", "c", "d"]
