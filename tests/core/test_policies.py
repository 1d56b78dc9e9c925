"""The policies: exact backoff values, the missing-handler window, the lease."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from conveyor.core import (
    Job,
    LeasePolicy,
    Metadata,
    Policies,
    RequeuePolicy,
    RetentionPolicy,
    RetryPolicy,
    ValidationError,
    WriteRetryPolicy,
    backoff_ms,
    is_abandoned,
    is_poison_pill,
    lease_deadline,
    reclaim_cutoff,
    should_give_up_unhandled,
    unhandled_for_ms,
    write_retry_delay_s,
)
from conveyor.core.prefetch import PrefetchPolicy
from core_support import NOW, make_job, ms
from hypothesis import given
from hypothesis import strategies as st

samples = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
retry_counts = st.integers(min_value=0, max_value=200)
retry_policies = st.builds(
    RetryPolicy,
    initial_delay_ms=st.integers(min_value=0, max_value=10**7),
    max_delay_ms=st.integers(min_value=0, max_value=10**8),
    jitter=st.booleans(),
)


# ---- backoff --------------------------------------------------------------------


def test_retry_policy_defaults() -> None:
    assert RetryPolicy() == RetryPolicy(initial_delay_ms=1000, max_delay_ms=60_000, jitter=True)


@pytest.mark.parametrize(
    ("retry_count", "expected"),
    [(0, 1000), (1, 2000), (2, 4000), (3, 8000), (4, 16_000), (5, 32_000), (6, 60_000)],
)
def test_a_middle_sample_gives_exactly_the_exponential_base(
    retry_count: int, expected: int
) -> None:
    assert backoff_ms(RetryPolicy(), retry_count, 0.5) == expected


@pytest.mark.parametrize(
    ("retry_count", "expected"), [(0, 900), (1, 1800), (3, 7200), (10, 54_000)]
)
def test_a_zero_sample_takes_ten_percent_off(retry_count: int, expected: int) -> None:
    assert backoff_ms(RetryPolicy(), retry_count, 0.0) == expected


def test_a_sample_just_under_one_adds_almost_ten_percent() -> None:
    assert backoff_ms(RetryPolicy(), 0, 0.999_999) == 1100
    assert backoff_ms(RetryPolicy(), 0, 0.75) == 1050


@pytest.mark.parametrize("sample", [0.0, 0.25, 0.5, 0.999])
def test_without_jitter_the_sample_is_ignored(sample: float) -> None:
    policy = RetryPolicy(jitter=False)
    assert [backoff_ms(policy, n, sample) for n in range(8)] == [
        1000,
        2000,
        4000,
        8000,
        16_000,
        32_000,
        60_000,
        60_000,
    ]


def test_the_delay_is_capped_at_max_delay_before_jitter() -> None:
    policy = RetryPolicy(initial_delay_ms=500, max_delay_ms=3000)
    assert backoff_ms(policy, 10, 0.5) == 3000
    assert backoff_ms(policy, 10, 0.0) == 2700
    assert backoff_ms(policy, 10_000, 0.5) == 3000


def test_a_huge_retry_count_is_still_capped() -> None:
    assert backoff_ms(RetryPolicy(jitter=False), 10**9, 0.5) == 60_000


@pytest.mark.parametrize("sample", [-0.1, 1.0, 1.5, math.nan, math.inf])
def test_a_sample_outside_zero_to_one_raises(sample: float) -> None:
    with pytest.raises(ValueError, match="jitter_sample"):
        backoff_ms(RetryPolicy(), 0, sample)


@pytest.mark.parametrize("field", ["initial_delay_ms", "max_delay_ms"])
def test_a_negative_delay_setting_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: -1})


@given(policy=retry_policies, retry_count=retry_counts, sample=samples)
def test_backoff_never_shrinks_as_retries_grow(
    policy: RetryPolicy, retry_count: int, sample: float
) -> None:
    assert backoff_ms(policy, retry_count, sample) <= backoff_ms(policy, retry_count + 1, sample)


@given(policy=retry_policies, retry_count=retry_counts, sample=samples)
def test_backoff_never_exceeds_max_delay_plus_ten_percent(
    policy: RetryPolicy, retry_count: int, sample: float
) -> None:
    delay = backoff_ms(policy, retry_count, sample)
    assert 0 <= delay <= policy.max_delay_ms * 1.1 + 1


@given(policy=retry_policies, retry_count=retry_counts, sample=samples)
def test_jitter_stays_within_ten_percent_of_the_base(
    policy: RetryPolicy, retry_count: int, sample: float
) -> None:
    base = min(policy.initial_delay_ms * 2**retry_count, policy.max_delay_ms)
    delay = backoff_ms(attrs.evolve(policy, jitter=True), retry_count, sample)
    assert base * 0.9 - 1 <= delay <= base * 1.1 + 1


@given(policy=retry_policies, retry_count=retry_counts, sample=samples)
def test_without_jitter_backoff_is_exactly_the_capped_exponential(
    policy: RetryPolicy, retry_count: int, sample: float
) -> None:
    exact = min(policy.initial_delay_ms * 2**retry_count, policy.max_delay_ms)
    assert backoff_ms(attrs.evolve(policy, jitter=False), retry_count, sample) == exact


@given(policy=retry_policies, retry_count=retry_counts, low=samples, high=samples)
def test_a_larger_sample_never_gives_a_shorter_delay(
    policy: RetryPolicy, retry_count: int, low: float, high: float
) -> None:
    low, high = sorted((low, high))
    assert backoff_ms(policy, retry_count, low) <= backoff_ms(policy, retry_count, high)


# ---- missing handler: requeue -----------------------------------------------------


def unhandled_since(first: datetime | None, requeue_count: int = 0) -> Job:
    return attrs.evolve(
        make_job(), metadata=Metadata(first_missing_at=first, requeue_count=requeue_count)
    )


def test_requeue_policy_defaults() -> None:
    assert RequeuePolicy() == RequeuePolicy(
        requeue_delay_ms=1000, max_requeue_age_ms=300_000, max_requeues=10_000
    )


def test_a_first_miss_has_been_unhandled_for_zero_ms() -> None:
    assert unhandled_for_ms(unhandled_since(None), NOW) == 0


def test_unhandled_time_is_measured_from_first_missing_at() -> None:
    assert unhandled_for_ms(unhandled_since(NOW), NOW + ms(2500)) == 2500


def test_a_clock_behind_first_missing_at_counts_as_zero() -> None:
    assert unhandled_for_ms(unhandled_since(NOW), NOW - ms(10)) == 0


def test_give_up_happens_exactly_at_max_requeue_age() -> None:
    policy = RequeuePolicy()
    job = unhandled_since(NOW)
    assert not should_give_up_unhandled(policy, job, NOW + ms(299_999))
    assert should_give_up_unhandled(policy, job, NOW + ms(300_000))


def test_a_fraction_of_a_millisecond_short_of_the_window_is_not_yet_give_up() -> None:
    job = unhandled_since(NOW)
    just_short = NOW + ms(300_000) - timedelta(microseconds=1)
    assert not should_give_up_unhandled(RequeuePolicy(), job, just_short)


def test_a_first_miss_never_gives_up_under_the_defaults() -> None:
    assert not should_give_up_unhandled(RequeuePolicy(), unhandled_since(None), NOW)


def test_the_requeue_count_backstop_gives_up_regardless_of_age() -> None:
    policy = RequeuePolicy(max_requeues=5)
    assert not should_give_up_unhandled(policy, unhandled_since(NOW, requeue_count=4), NOW)
    assert should_give_up_unhandled(policy, unhandled_since(NOW, requeue_count=5), NOW)


@given(
    max_age=st.integers(min_value=0, max_value=10**7),
    age_a=st.integers(min_value=0, max_value=2 * 10**7),
    extra=st.integers(min_value=0, max_value=10**7),
    requeues=st.integers(min_value=0, max_value=100),
)
def test_once_it_gives_up_at_some_age_it_gives_up_at_every_later_age(
    max_age: int, age_a: int, extra: int, requeues: int
) -> None:
    policy = RequeuePolicy(max_requeue_age_ms=max_age, max_requeues=50)
    job = unhandled_since(NOW, requeue_count=requeues)
    if should_give_up_unhandled(policy, job, NOW + ms(age_a)):
        assert should_give_up_unhandled(policy, job, NOW + ms(age_a + extra))


@given(max_age=st.integers(min_value=0, max_value=10**7), age=st.integers(0, 2 * 10**7))
def test_give_up_by_age_is_exactly_age_at_least_the_window(max_age: int, age: int) -> None:
    policy = RequeuePolicy(max_requeue_age_ms=max_age)
    job = unhandled_since(NOW)
    assert should_give_up_unhandled(policy, job, NOW + ms(age)) == (age >= max_age)


@pytest.mark.parametrize("field", ["requeue_delay_ms", "max_requeue_age_ms", "max_requeues"])
def test_a_negative_requeue_setting_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RequeuePolicy(**{field: -1})


# ---- lease ------------------------------------------------------------------------


def test_lease_policy_defaults() -> None:
    assert LeasePolicy() == LeasePolicy(lease_ms=60_000, max_reclaims=3)


def test_policies_bundle_the_three_defaults() -> None:
    assert Policies() == Policies(RetryPolicy(), RequeuePolicy(), LeasePolicy())


@pytest.mark.parametrize("lease_ms", [0, -1])
def test_a_lease_must_be_positive(lease_ms: int) -> None:
    with pytest.raises(ValueError, match="lease_ms"):
        LeasePolicy(lease_ms=lease_ms)


def test_the_lease_deadline_is_locked_at_plus_the_lease() -> None:
    assert lease_deadline(NOW, 60_000) == NOW + timedelta(minutes=1)


def test_a_claim_exactly_at_its_deadline_is_not_abandoned() -> None:
    assert not is_abandoned(NOW, 60_000, NOW + ms(60_000))


def test_a_claim_one_microsecond_past_its_deadline_is_abandoned() -> None:
    assert is_abandoned(NOW, 60_000, NOW + ms(60_000) + timedelta(microseconds=1))


def test_a_fresh_claim_is_not_abandoned() -> None:
    assert not is_abandoned(NOW, 60_000, NOW)


@given(
    locked_offset_us=st.integers(min_value=-(10**11), max_value=10**11),
    lease_ms=st.integers(min_value=1, max_value=10**8),
)
def test_the_reclaim_cutoff_agrees_with_is_abandoned(locked_offset_us: int, lease_ms: int) -> None:
    locked_at = NOW + timedelta(microseconds=locked_offset_us)
    assert is_abandoned(locked_at, lease_ms, NOW) == (locked_at < reclaim_cutoff(NOW, lease_ms))


def reclaimed(times: int, max_retries: int = 3) -> Job:
    return attrs.evolve(make_job(max_retries=max_retries), metadata=Metadata(reclaim_count=times))


def test_the_poison_pill_budget_is_three_started_reclaims_by_default() -> None:
    policy = LeasePolicy()
    assert not is_poison_pill(policy, reclaimed(2, max_retries=0))
    assert is_poison_pill(policy, reclaimed(3, max_retries=10))


def test_without_max_reclaims_the_budget_is_the_jobs_max_retries() -> None:
    policy = LeasePolicy(max_reclaims=None)
    assert not is_poison_pill(policy, reclaimed(2, max_retries=3))
    assert is_poison_pill(policy, reclaimed(3, max_retries=3))
    assert is_poison_pill(policy, reclaimed(0, max_retries=0))


def test_max_reclaims_overrides_the_jobs_retry_budget() -> None:
    assert is_poison_pill(LeasePolicy(max_reclaims=1), reclaimed(1, max_retries=3))
    assert not is_poison_pill(LeasePolicy(max_reclaims=5), reclaimed(4, max_retries=0))
    assert is_poison_pill(LeasePolicy(max_reclaims=5), reclaimed(5, max_retries=10))


def test_a_claim_needs_renewal_only_after_half_its_lease() -> None:
    from datetime import UTC, datetime, timedelta

    from conveyor.core import needs_renewal

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert not needs_renewal(t0, 1000, t0 + timedelta(milliseconds=500))
    assert needs_renewal(t0, 1000, t0 + timedelta(milliseconds=501))


def test_a_holder_renews_its_claims_every_third_of_the_lease() -> None:
    assert LeasePolicy(lease_ms=60_000).renew_every_ms == 20_000
    assert LeasePolicy(lease_ms=1000).renew_every_ms == 333
    assert LeasePolicy(lease_ms=2).renew_every_ms == 1, "never a zero interval"


def test_abandoned_claims_are_looked_for_every_half_lease() -> None:
    assert LeasePolicy(lease_ms=60_000).reclaim_every_ms == 30_000
    assert LeasePolicy(lease_ms=1001).reclaim_every_ms == 500
    assert LeasePolicy(lease_ms=1).reclaim_every_ms == 1, "never a zero interval"


def test_a_claim_renewed_more_than_half_a_lease_ago_is_stale() -> None:
    assert LeasePolicy(lease_ms=1000).stale_after_ms == 500
    assert LeasePolicy(lease_ms=1001).stale_after_ms == 500.5


def test_a_clock_may_be_a_quarter_lease_off_the_lease_server() -> None:
    assert LeasePolicy(lease_ms=60_000).max_clock_skew_ms == 15_000
    assert LeasePolicy(lease_ms=1000).max_clock_skew_ms == 250


@given(st.integers(min_value=1, max_value=10**9))
def test_renewals_come_before_reclaims_and_both_well_inside_the_lease(lease_ms: int) -> None:
    policy = LeasePolicy(lease_ms=lease_ms)
    assert 1 <= policy.renew_every_ms <= policy.reclaim_every_ms <= max(lease_ms, 1)
    assert policy.max_clock_skew_ms < policy.stale_after_ms < lease_ms


# --- retrying a storage write that failed transiently -------------------------------


def test_write_retries_double_and_stop_after_the_attempts() -> None:
    policy = WriteRetryPolicy(initial_s=0.05, max_attempts=5)
    waits = [write_retry_delay_s(policy, n, 0.0, 0.9) for n in range(1, 6)]
    assert waits == [0.05, 0.1, 0.2, 0.4, None], "jitter off: the sample changes nothing"


def test_write_retries_are_capped_and_give_up_when_the_next_wait_would_overrun() -> None:
    policy = WriteRetryPolicy(initial_s=0.002, max_s=0.2, max_attempts=None, give_up_after_s=1.0)
    assert write_retry_delay_s(policy, 30, 0.5, 0.5) == 0.2
    assert write_retry_delay_s(policy, 30, 0.8, 0.5) == 0.2, "ends exactly at the limit"
    assert write_retry_delay_s(policy, 30, 0.81, 0.5) is None
    assert write_retry_delay_s(WriteRetryPolicy(give_up_after_s=0.0), 1, 0.0, 0.5) is None


def test_a_deadline_budget_cuts_the_last_wait_short_for_one_try_at_the_deadline() -> None:
    policy = WriteRetryPolicy(
        initial_s=0.05,
        max_s=1.0,
        max_attempts=None,
        give_up_after_s=15.0,
        last_try_at_deadline=True,
    )
    assert write_retry_delay_s(policy, 3, 14.0, 0.5) == 0.2
    assert write_retry_delay_s(policy, 30, 14.75, 0.5) == pytest.approx(0.25)
    assert write_retry_delay_s(policy, 30, 15.0, 0.5) is None, "the deadline has passed"


@given(failures=st.integers(min_value=1, max_value=500), sample=samples)
def test_jittered_write_retries_stay_within_half_and_one_and_a_half_times(
    failures: int, sample: float
) -> None:
    policy = WriteRetryPolicy(initial_s=0.002, max_s=0.2, jitter=True, max_attempts=None)
    wait = write_retry_delay_s(policy, failures, 0.0, sample)
    base = min(0.002 * 2.0 ** (failures - 1), 0.2) if failures < 60 else 0.2
    assert wait is not None and 0.5 * base <= wait <= 1.5 * base


def test_a_write_retry_policy_refuses_non_positive_waits() -> None:
    with pytest.raises(ValueError, match="initial_s"):
        WriteRetryPolicy(initial_s=0.0)


# ---- every policy refuses a value of the wrong kind where it is made ---------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda v: LeasePolicy(max_reclaims=v), "LeasePolicy.max_reclaims"),
        (lambda v: RequeuePolicy(max_requeues=v), "RequeuePolicy.max_requeues"),
        (lambda v: WriteRetryPolicy(max_attempts=v), "WriteRetryPolicy.max_attempts"),
        (lambda v: PrefetchPolicy(max_batch=v), "PrefetchPolicy.max_batch"),
        (lambda v: PrefetchPolicy(first_batch=v), "PrefetchPolicy.first_batch"),
        (lambda v: RetentionPolicy(batch=v), "RetentionPolicy.batch"),
        (lambda v: RetentionPolicy(max_completed=v), "RetentionPolicy.max_completed"),
    ],
)
@pytest.mark.parametrize("value", ["3", 2.5, float("nan"), float("inf"), True, -1])
def test_a_count_is_a_whole_number_named_when_it_is_not(make: Any, field: str, value: Any) -> None:
    # max_reclaims took anything ("3" failed at the first reclaim; nan never gave up;
    # -1 gave up at once); the others took fractions, and a prefetch of inf or 2.5
    # failed in the worker naming no field.
    with pytest.raises(ValidationError) as refused:
        make(value)
    assert refused.value.fields == (field,), refused.value


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda v: RetryPolicy(jitter=v), "RetryPolicy.jitter"),
        (lambda v: WriteRetryPolicy(jitter=v), "WriteRetryPolicy.jitter"),
        (
            lambda v: WriteRetryPolicy(last_try_at_deadline=v),
            "WriteRetryPolicy.last_try_at_deadline",
        ),
        (lambda v: PrefetchPolicy(adaptive=v), "PrefetchPolicy.adaptive"),
    ],
)
@pytest.mark.parametrize("value", [0, None, "no"])
def test_a_switch_is_true_or_false(make: Any, field: str, value: Any) -> None:
    # jitter=0 or None turned jitter off and "no" left it on, silently.
    with pytest.raises(ValidationError) as refused:
        make(value)
    assert refused.value.fields == (field,), refused.value


@pytest.mark.parametrize("member", ["retry", "requeue", "lease", "result"])
@pytest.mark.parametrize("value", [None, {"lease_ms": 5}])
def test_policies_refuse_a_member_that_is_no_policy(member: str, value: Any) -> None:
    # Policies(retry=None) was built, and failed later with an AttributeError.
    with pytest.raises(ValidationError) as refused:
        Policies(**{member: value})
    assert refused.value.fields == (f"Policies.{member}",), refused.value


def test_a_none_budget_keeps_meaning_the_jobs_own_retries() -> None:
    assert LeasePolicy(max_reclaims=None).max_reclaims is None
    assert WriteRetryPolicy(max_attempts=None, give_up_after_s=None).max_attempts is None


def test_a_fractional_delay_still_gives_whole_milliseconds() -> None:
    assert backoff_ms(RetryPolicy(initial_delay_ms=1.5, jitter=False), 0, 0.5) == 2


def test_no_retry_wait_ends_past_the_time_the_caller_must_answer_in() -> None:
    # A result wait with a timeout: the storage call's own budget (15 s) is longer.
    policy = WriteRetryPolicy(initial_s=0.1, max_s=1.0, max_attempts=None, give_up_after_s=15.0)
    assert write_retry_delay_s(policy, 3, 0.3, 0.5, answer_in_s=1.0) == 0.4
    assert write_retry_delay_s(policy, 3, 0.3, 0.5, answer_in_s=0.3) is None
    assert write_retry_delay_s(policy, 3, 0.3, 0.5) == 0.4
