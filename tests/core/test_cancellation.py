"""Cancellation decisions: one test per rule."""

from __future__ import annotations

import attrs
import pytest
from conveyor.core import (
    AttemptOutcome,
    Cancel,
    CancelClaim,
    ErrorInfo,
    Failed,
    JobStatus,
    NoHandler,
    RequestCancel,
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
