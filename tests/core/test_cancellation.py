"""Cancellation decisions: one test per rule."""

from __future__ import annotations

import attrs
import pytest
from conveyor.core import (
    DEFAULT_MAX_RESULT_BYTES,
    AttemptOutcome,
    Cancel,
    CancelClaim,
    ErrorInfo,
    Failed,
    JobStatus,
    NoHandler,
    RequestCancel,
    ResultPolicy,
    Succeeded,
    cancel_claimed,
    decide_cancel,
    start,
)
from core_support import NOW, make_job, ms, running_job

LATER = NOW + ms(5000)


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.RETRYING])
def test_a_queued_job_is_cancelled_at_once(status: JobStatus) -> None:
    job = attrs.evolve(make_job(), status=status)
    decision = decide_cancel(job, LATER, in_flight=False)
    assert isinstance(decision, Cancel)
    assert decision.job.status is JobStatus.CANCELLED
    assert decision.job.finished_at == LATER
    assert decision.job.attempts == () and decision.job.id == job.id


def test_a_claimed_job_gets_a_request_not_a_cancel() -> None:
    job = make_job()
    assert decide_cancel(job, LATER, in_flight=True) == RequestCancel(job, LATER)


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_a_finished_job_has_nothing_to_cancel(status: JobStatus) -> None:
    job = attrs.evolve(make_job(), status=status)
    assert decide_cancel(job, LATER, in_flight=False) is None


def test_a_running_job_that_succeeded_after_a_request_is_recorded_cancelled_with_its_result() -> (
    None
):
    job = running_job()
    decision = cancel_claimed(job, LATER, Succeeded({"rows": 3}))
    assert isinstance(decision, CancelClaim) and decision.abandoned_before is None
    record = decision.job
    assert record.status is JobStatus.CANCELLED and record.finished_at == LATER
    assert record.result == {"rows": 3}
    [attempt] = record.attempts
    assert attempt.outcome is AttemptOutcome.CANCELLED
    assert attempt.started_at == job.started_at and attempt.error is None


def test_a_running_job_that_failed_after_a_request_keeps_the_error_and_is_not_retried() -> None:
    error = ErrorInfo("Boom", "interrupted", retryable=True)
    record = cancel_claimed(running_job(), LATER, Failed(error)).job
    assert record.status is JobStatus.CANCELLED
    assert record.retry_count == 0, "a cancelled job is never retried"
    assert record.last_error == error and record.attempts[-1].error == error


def test_a_result_that_is_not_json_is_dropped_not_fatal() -> None:
    record = cancel_claimed(running_job(), LATER, Succeeded(object())).job
    assert record.status is JobStatus.CANCELLED and record.result is None


def test_a_result_over_the_cap_is_dropped_as_a_finished_job_would_refuse_it() -> None:
    policy = ResultPolicy(max_bytes=100)
    kept = cancel_claimed(running_job(), LATER, Succeeded("x" * 50), result_policy=policy).job
    dropped = cancel_claimed(running_job(), LATER, Succeeded("x" * 200), result_policy=policy).job
    assert kept.result == "x" * 50
    assert dropped.status is JobStatus.CANCELLED and dropped.result is None


def test_without_a_policy_the_default_cap_holds() -> None:
    big = "x" * (DEFAULT_MAX_RESULT_BYTES + 1)
    record = cancel_claimed(running_job(), LATER, Succeeded(big)).job
    assert record.status is JobStatus.CANCELLED and record.result is None


def test_a_claim_that_never_started_is_cancelled_without_an_attempt() -> None:
    claimed = attrs.evolve(make_job(), status=JobStatus.RETRYING)
    record = cancel_claimed(claimed, LATER).job
    assert record.status is JobStatus.CANCELLED and record.attempts == ()
    assert record.attempt == claimed.attempt


def test_an_abandoned_claim_with_a_request_is_cancelled_under_the_lease_guard() -> None:
    job = start(make_job(), NOW).unwrap()
    decision = cancel_claimed(job, LATER, NoHandler(), abandoned_before=NOW + ms(1))
    assert decision.abandoned_before == NOW + ms(1)
    [attempt] = decision.job.attempts
    assert attempt.outcome is AttemptOutcome.CANCELLED
    assert attempt.started_at is None and attempt.worker is None, "its worker vanished"
