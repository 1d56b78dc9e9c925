"""When a worker process makes way for a fresh one: after its job budget, or at its
memory bound once it has done a job; never without a bound."""

from __future__ import annotations

import pytest
from conveyor.core import RecyclePolicy, ValidationError, recycle_reason
from hypothesis import given
from hypothesis import strategies as st


def test_no_bound_never_recycles() -> None:
    assert not RecyclePolicy().bounded
    assert recycle_reason(RecyclePolicy(), 10**9, 10.0**6) is None


def test_the_job_budget_recycles_once_reached_and_says_so() -> None:
    policy = RecyclePolicy(max_jobs=100)
    assert recycle_reason(policy, 99, None) is None
    reason = recycle_reason(policy, 100, None)
    assert reason is not None and "100 jobs" in reason and "--max-jobs-per-child 100" in reason


def test_the_memory_bound_recycles_a_process_that_has_done_a_job() -> None:
    policy = RecyclePolicy(max_memory_mb=512)
    assert recycle_reason(policy, 1, 511.9) is None
    reason = recycle_reason(policy, 1, 600.0)
    assert reason is not None and "600 MB" in reason and "--max-memory-per-child 512" in reason


def test_a_fresh_process_over_the_memory_bound_is_not_recycled_over_and_over() -> None:
    assert recycle_reason(RecyclePolicy(max_memory_mb=10), 0, 80.0) is None


def test_unknown_memory_recycles_only_by_jobs() -> None:
    policy = RecyclePolicy(max_jobs=3, max_memory_mb=1)
    assert recycle_reason(policy, 2, None) is None
    assert recycle_reason(policy, 3, None) is not None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_jobs": 0}, "RecyclePolicy.max_jobs"),
        ({"max_jobs": 1.5}, "RecyclePolicy.max_jobs"),
        ({"max_memory_mb": 0}, "RecyclePolicy.max_memory_mb"),
        ({"max_memory_mb": float("nan")}, "RecyclePolicy.max_memory_mb"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RecyclePolicy(**kwargs)  # type: ignore[arg-type]
    assert field in str(caught.value)


@given(
    max_jobs=st.none() | st.integers(1, 1000),
    max_mb=st.none() | st.floats(1, 10_000),
    done=st.integers(0, 2000),
    rss=st.none() | st.floats(0, 20_000),
)
def test_a_reason_is_given_exactly_when_a_bound_is_reached(
    max_jobs: int | None, max_mb: float | None, done: int, rss: float | None
) -> None:
    reason = recycle_reason(RecyclePolicy(max_jobs, max_mb), done, rss)
    by_jobs = max_jobs is not None and done >= max_jobs
    by_memory = max_mb is not None and done > 0 and rss is not None and rss >= max_mb
    assert (reason is not None) == (by_jobs or by_memory)
