"""Attempt timeouts, read as the specification: which applies, the deadline, the failure."""

from __future__ import annotations

from datetime import timedelta

import pytest
from conveyor.core import (
    TIMEOUT,
    Policies,
    Retry,
    RetryPolicy,
    attempt_deadline,
    create_job,
    decide,
    parse_timeout,
    timeout_error,
    timeout_for,
)
from conveyor.core.decisions import DeadLetter, Failed
from conveyor.core.errors import FieldError
from conveyor.core.timeouts import MAX_TIMEOUT_MS
from core_support import JOB_ID, NOW, make_job, ms, reason_for, running_job
from hypothesis import given
from hypothesis import strategies as st

# ---- validation: the enqueue option -----------------------------------------


def test_a_timeout_in_seconds_is_kept_on_the_job_in_milliseconds() -> None:
    assert make_job(timeout=1.5).timeout_ms == 1500


def test_a_timeout_may_be_a_timedelta() -> None:
    assert make_job(timeout=timedelta(minutes=2)).timeout_ms == 120_000


def test_a_job_without_a_timeout_has_none() -> None:
    assert make_job().timeout_ms is None


def test_a_fraction_of_a_millisecond_rounds_up_rather_than_to_zero() -> None:
    assert make_job(timeout=0.0001).timeout_ms == 1


@pytest.mark.parametrize("value", [0, 0.0, timedelta(0), -1, timedelta(seconds=-3)])
def test_a_timeout_that_is_not_positive_is_rejected(value: object) -> None:
    reason = reason_for(create_job(id=JOB_ID, job_type="a", now=NOW, timeout=value), "timeout")
    assert "more than zero" in reason


@pytest.mark.parametrize("value", ["30", True, [1]])
def test_a_timeout_that_is_not_seconds_or_a_timedelta_is_rejected(value: object) -> None:
    assert isinstance(parse_timeout("timeout", value), FieldError)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_timeout_that_is_not_finite_is_rejected(value: float) -> None:
    problem = parse_timeout("timeout", value)
    assert isinstance(problem, FieldError) and "finite" in problem.reason


def test_a_timeout_over_a_year_is_rejected() -> None:
    problem = parse_timeout("timeout", timedelta(days=367))
    assert isinstance(problem, FieldError) and problem.field == "timeout"
    assert isinstance(parse_timeout("timeout", 10**12), FieldError)


@given(st.integers(min_value=1, max_value=MAX_TIMEOUT_MS))
def test_any_whole_number_of_milliseconds_in_range_is_kept_exactly(n: int) -> None:
    assert parse_timeout("timeout", timedelta(milliseconds=n)) == n


# ---- which timeout applies ---------------------------------------------------


def test_no_timeout_anywhere_means_no_deadline() -> None:
    assert timeout_for(None) is None
    assert attempt_deadline(NOW, None) is None


def test_the_jobs_own_timeout_wins_over_the_job_types() -> None:
    assert timeout_for(100, configured_ms=200, registered_ms=300) == 100


def test_the_configured_timeout_wins_over_the_registered_one() -> None:
    assert timeout_for(None, configured_ms=200, registered_ms=300) == 200


def test_the_registered_timeout_applies_when_nothing_else_is_set() -> None:
    assert timeout_for(None, registered_ms=300) == 300


def test_the_deadline_is_the_start_of_the_attempt_plus_the_timeout() -> None:
    assert attempt_deadline(NOW, 2500) == NOW + ms(2500)


# ---- an overrun follows the retry policy ------------------------------------


def test_an_overrun_is_a_retryable_timeout_failure() -> None:
    error = timeout_error(1500)
    assert error.type == TIMEOUT == "Timeout"
    assert error.retryable
    assert error.message == "ran past its timeout of 1.5 s"


def test_a_timed_out_attempt_with_retries_left_is_retried_after_its_backoff() -> None:
    policies = Policies(retry=RetryPolicy(initial_delay_ms=1000, jitter=False))
    job = running_job(max_retries=2, timeout=1)
    decision = decide(job, Failed(timeout_error(1000)), NOW + ms(1000), policies, 0.5)
    assert isinstance(decision, Retry)
    assert decision.run_at == NOW + ms(2000)
    assert decision.job.last_error == timeout_error(1000)
    assert decision.job.timeout_ms == 1000, "a retry keeps the job's timeout"


def test_a_timed_out_attempt_without_retries_left_is_dead_lettered() -> None:
    job = running_job(max_retries=0, timeout=1)
    decision = decide(job, Failed(timeout_error(1000)), NOW + ms(1000), Policies(), 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == TIMEOUT
