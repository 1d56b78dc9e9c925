"""The prefetch policy: batch while jobs are short, one at a time while they are long."""

from __future__ import annotations

from typing import get_args

import attrs
import pytest
from conveyor.core import Decision, Job, Metadata
from conveyor.core.prefetch import (
    MEAN_WEIGHT,
    PrefetchPolicy,
    StartClaim,
    batch_size,
    decide_start,
    observe,
    should_hand_back,
)
from core_support import NOW, make_job
from hypothesis import given
from hypothesis import strategies as st

AUTO = PrefetchPolicy()


def test_before_any_job_is_timed_a_worker_claims_one() -> None:
    assert batch_size(AUTO, None) == 1


def test_short_jobs_are_claimed_up_to_the_largest_batch() -> None:
    assert batch_size(AUTO, 0.2) == 100
    assert batch_size(AUTO, 0.0) == 100


def test_a_batch_is_sized_to_run_in_about_the_budget() -> None:
    assert batch_size(AUTO, 10.0) == 10
    assert batch_size(AUTO, 33.0) == 3


def test_jobs_longer_than_the_budget_are_claimed_one_at_a_time() -> None:
    assert batch_size(AUTO, 100.0) == 1
    assert batch_size(AUTO, 5000.0) == 1


def test_a_fixed_policy_always_claims_its_size() -> None:
    for mean in (None, 0.1, 10_000.0):
        assert batch_size(PrefetchPolicy.fixed(7), mean) == 7


def test_the_first_timing_becomes_the_mean_and_later_ones_move_it_part_way() -> None:
    first = observe(None, batch_ms=50.0, jobs=10)
    assert first == 5.0
    assert observe(first, batch_ms=150.0, jobs=10) == pytest.approx(5.0 + MEAN_WEIGHT * 10.0)


def test_an_empty_batch_leaves_the_mean_alone() -> None:
    assert observe(4.0, batch_ms=100.0, jobs=0) == 4.0
    assert observe(None, batch_ms=100.0, jobs=0) is None


def test_a_batch_that_overruns_hands_back_what_it_has_not_started() -> None:
    assert should_hand_back(AUTO, elapsed_ms=1500.0, unstarted=3)
    assert not should_hand_back(AUTO, elapsed_ms=900.0, unstarted=3)
    assert not should_hand_back(AUTO, elapsed_ms=1500.0, unstarted=0)
    assert not should_hand_back(PrefetchPolicy.fixed(10), elapsed_ms=10_000.0, unstarted=3)


def test_bad_settings_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        PrefetchPolicy(max_batch=0)
    with pytest.raises(ValueError, match="budget_ms"):
        PrefetchPolicy(budget_ms=0)


@given(
    mean=st.none() | st.floats(min_value=0, max_value=1e9, allow_nan=False),
    max_batch=st.integers(1, 1000),
    budget=st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
)
def test_the_batch_is_always_between_one_and_the_largest(
    mean: float | None, max_batch: int, budget: float
) -> None:
    policy = PrefetchPolicy(max_batch=max_batch, budget_ms=budget)
    assert 1 <= batch_size(policy, mean) <= max_batch


@given(
    mean=st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
    longer=st.floats(min_value=1.0, max_value=1e3, allow_nan=False),
)
def test_longer_jobs_never_get_larger_batches(mean: float, longer: float) -> None:
    assert batch_size(AUTO, mean * longer) <= batch_size(AUTO, mean)


# --- starting a prefetched claim ----------------------------------------------------


def _came_back(times: int) -> Job:
    """A job whose prefetched claims expired `times` times in dead workers' batches."""
    return attrs.evolve(make_job(), metadata=Metadata(prefetch_reclaims=times))


def test_a_prefetched_claim_of_a_job_back_from_a_dead_workers_batch_is_started_first() -> None:
    job = _came_back(1)
    assert decide_start(job, False, NOW) == StartClaim(job, NOW)


def test_a_prefetched_claim_of_a_fresh_job_runs_as_claimed() -> None:
    assert decide_start(_came_back(0), False, NOW) is None


def test_a_claim_taken_started_is_never_started_again() -> None:
    assert decide_start(_came_back(3), True, NOW) is None


@given(times=st.integers(0, 50), started=st.booleans())
def test_a_claim_is_started_first_exactly_when_prefetched_and_back_before(
    times: int, started: bool
) -> None:
    decision = decide_start(_came_back(times), started, NOW)
    assert (decision is not None) == (not started and times > 0)


def test_starting_a_claim_is_one_of_the_decisions_the_executor_carries_out() -> None:
    assert StartClaim in get_args(Decision)
