"""decide and its siblings: one test per rule."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
import pytest
from conveyor.core import (
    DECODE_ERROR,
    INVALID_RESULT,
    LEASE_EXPIRED,
    MISSING_TENANT,
    NO_HANDLER,
    TENANT_NOT_FOUND,
    Complete,
    DeadLetter,
    ErrorInfo,
    Failed,
    FrozenMap,
    HandBack,
    Job,
    JobStatus,
    LeasePolicy,
    Metadata,
    MissingTenant,
    NoHandler,
    Policies,
    Reclaim,
    Requeue,
    RequeuePolicy,
    Retry,
    RetryPolicy,
    Revive,
    Succeeded,
    TenantNotFound,
    ValidationError,
    decide,
    decide_hand_back,
    decide_interrupt,
    decide_reclaim,
    decide_revive,
    revive,
    start,
    tenant_verdict,
    undecodable,
)
from core_support import NOW, make_job, ms, running_job

LATER = NOW + ms(5000)
POLICIES = Policies()
BOOM = ErrorInfo("ValueError", "boom", retryable=True)
FATAL = ErrorInfo("PermissionError", "denied", retryable=False)


# ---- success -------------------------------------------------------------------


def test_success_completes_the_job_with_its_frozen_result() -> None:
    decision = decide(running_job(), Succeeded({"rows": [1, 2], "ok": True}), LATER, POLICIES, 0.5)
    assert isinstance(decision, Complete)
    done = decision.job
    assert done.status is JobStatus.COMPLETED
    assert done.finished_at == LATER
    assert isinstance(done.result, FrozenMap)
    assert done.result == FrozenMap({"rows": (1, 2), "ok": True})


def test_a_result_of_none_completes_the_job() -> None:
    decision = decide(running_job(), Succeeded(), LATER, POLICIES, 0.5)
    assert isinstance(decision, Complete)
    assert decision.job.result is None


class _RaisesWhenRead(list[Any]):
    def __iter__(self) -> Any:
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    "result", [b"bytes", {1, 2}, object(), {"x": float("nan")}, {"rows": _RaisesWhenRead([1])}]
)
def test_a_result_that_is_not_json_dead_letters_as_invalid_result(result: Any) -> None:
    decision = decide(running_job(), Succeeded(result), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == INVALID_RESULT
    assert decision.error.retryable is False
    assert decision.job.status is JobStatus.FAILED
    assert decision.job.last_error == decision.error


# ---- failure ---------------------------------------------------------------------


def test_a_retryable_failure_with_retries_left_is_retried_after_the_backoff() -> None:
    decision = decide(running_job(), Failed(BOOM), LATER, POLICIES, 0.5)
    assert isinstance(decision, Retry)
    assert decision.run_at == LATER + ms(1000)
    retrying = decision.job
    assert retrying.status is JobStatus.RETRYING
    assert retrying.run_at == decision.run_at
    assert retrying.retry_count == 1
    assert retrying.last_error == BOOM
    assert retrying.finished_at is None


def test_each_retry_waits_by_the_backoff_of_its_retry_count() -> None:
    job = attrs.evolve(running_job(max_retries=5), retry_count=3)
    decision = decide(job, Failed(BOOM), LATER, POLICIES, 0.0)
    assert isinstance(decision, Retry)
    assert decision.run_at == LATER + ms(7200)  # 1000 * 2**3, minus 10 % jitter
    assert decision.job.retry_count == 4


def test_the_retry_delay_follows_the_retry_policy() -> None:
    policies = Policies(retry=RetryPolicy(initial_delay_ms=250, jitter=False))
    decision = decide(running_job(), Failed(BOOM), LATER, policies, 0.99)
    assert isinstance(decision, Retry)
    assert decision.run_at == LATER + ms(250)


def test_the_last_allowed_retry_is_still_a_retry() -> None:
    job = attrs.evolve(running_job(max_retries=3), retry_count=2)
    decision = decide(job, Failed(BOOM), LATER, POLICIES, 0.5)
    assert isinstance(decision, Retry)
    assert decision.job.retry_count == 3


def test_a_failure_with_retries_exhausted_is_dead_lettered_with_that_error() -> None:
    job = attrs.evolve(running_job(max_retries=3), retry_count=3)
    decision = decide(job, Failed(BOOM), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error == BOOM
    assert decision.job.last_error == BOOM
    assert decision.job.status is JobStatus.FAILED
    assert decision.job.finished_at == LATER
    assert decision.job.retry_count == 3


def test_a_job_with_no_retries_is_dead_lettered_on_its_first_failure() -> None:
    decision = decide(running_job(max_retries=0), Failed(BOOM), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error == BOOM


def test_a_non_retryable_failure_is_dead_lettered_immediately() -> None:
    decision = decide(running_job(max_retries=10), Failed(FATAL), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error == FATAL
    assert decision.job.last_error == FATAL
    assert decision.job.retry_count == 0


# ---- no handler ----------------------------------------------------------------------


def missed_since(first_missing_at: datetime, requeue_count: int = 1) -> Job:
    """A running job that has already gone unhandled since `first_missing_at`."""
    metadata = Metadata(first_missing_at=first_missing_at, requeue_count=requeue_count)
    return attrs.evolve(running_job(), metadata=metadata)


def test_a_first_missing_handler_parks_the_job_a_requeue_delay_ahead() -> None:
    decision = decide(running_job(), NoHandler(), LATER, POLICIES, 0.5)
    assert isinstance(decision, Requeue)
    assert decision.run_at == LATER + ms(1000)
    parked = decision.job
    assert parked.status is JobStatus.SCHEDULED
    assert parked.run_at == decision.run_at
    assert parked.metadata.first_missing_at == LATER
    assert parked.metadata.requeue_count == 1
    assert parked.retry_count == 0


def test_a_missing_handler_never_goes_straight_back_to_ready() -> None:
    policies = Policies(requeue=RequeuePolicy(requeue_delay_ms=0))
    decision = decide(running_job(), NoHandler(), LATER, policies, 0.5)
    assert isinstance(decision, Requeue)
    assert decision.job.status.is_parked


def test_a_later_miss_keeps_the_first_missing_at() -> None:
    first = decide(running_job(), NoHandler(), NOW, POLICIES, 0.5).job
    again = start(first, NOW + ms(1000)).unwrap()
    decision = decide(again, NoHandler(), NOW + ms(2000), POLICIES, 0.5)
    assert isinstance(decision, Requeue)
    assert decision.job.metadata.first_missing_at == NOW
    assert decision.job.metadata.requeue_count == 2


def test_a_missing_handler_just_inside_the_window_is_requeued() -> None:
    decision = decide(missed_since(NOW), NoHandler(), NOW + ms(299_999), POLICIES, 0.5)
    assert isinstance(decision, Requeue)


def test_a_missing_handler_for_max_requeue_age_is_dead_lettered_as_no_handler() -> None:
    decision = decide(missed_since(NOW), NoHandler(), NOW + ms(300_000), POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == NO_HANDLER
    assert decision.error.retryable is False
    assert "email.send" in decision.error.message
    assert decision.job.status is JobStatus.FAILED
    assert decision.job.last_error == decision.error


def test_the_requeue_backstop_dead_letters_a_runaway_job() -> None:
    policies = Policies(requeue=RequeuePolicy(max_requeues=3))
    decision = decide(missed_since(NOW, requeue_count=3), NoHandler(), NOW, policies, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == NO_HANDLER


def test_success_after_a_miss_clears_first_missing_at() -> None:
    decision = decide(missed_since(NOW), Succeeded(1), LATER, POLICIES, 0.5)
    assert isinstance(decision, Complete)
    assert decision.job.metadata.first_missing_at is None


def test_a_failure_after_a_miss_clears_first_missing_at() -> None:
    decision = decide(missed_since(NOW), Failed(BOOM), LATER, POLICIES, 0.5)
    assert isinstance(decision, Retry)
    assert decision.job.metadata.first_missing_at is None


# ---- tenants -----------------------------------------------------------------------------


def test_a_tenant_that_does_not_exist_is_dead_lettered_never_retried() -> None:
    job = running_job(tenant_id="acme", max_retries=10)
    decision = decide(job, TenantNotFound(), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == TENANT_NOT_FOUND
    assert decision.error.retryable is False
    assert "acme" in decision.error.message
    assert decision.job.last_error == decision.error


def test_a_tenant_whose_scope_is_missing_is_dead_lettered_saying_so() -> None:
    job = running_job(tenant_id="acme", max_retries=10)
    why = "tenant 'acme': schema 'tenant_acme' does not exist"
    decision = decide(job, TenantNotFound(why), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert (decision.error.type, decision.error.message) == (TENANT_NOT_FOUND, why)
    assert decision.error.retryable is False


def test_a_tenant_scoped_job_without_a_tenant_is_dead_lettered_as_missing_tenant() -> None:
    decision = decide(running_job(max_retries=10), MissingTenant(), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == MISSING_TENANT
    assert decision.error.retryable is False
    assert decision.job.status is JobStatus.FAILED


@pytest.mark.parametrize(
    ("scoped", "tenant_id", "exists", "verdict"),
    [
        (False, None, True, None),
        (False, None, False, None),
        (False, "acme", True, None),
        (False, "acme", False, TenantNotFound()),
        (True, None, True, MissingTenant()),
        (True, None, False, MissingTenant()),
        (True, "acme", True, None),
        (True, "acme", False, TenantNotFound()),
    ],
)
def test_tenant_verdict(scoped: bool, tenant_id: str | None, exists: bool, verdict: Any) -> None:
    job = make_job(tenant_id=tenant_id)
    assert tenant_verdict(job, tenant_scoped=scoped, tenant_exists=exists) == verdict


# ---- reclaim -----------------------------------------------------------------------------

CUTOFF = LATER - ms(60_000)


def test_an_abandoned_claim_is_reclaimed_to_pending_and_counted() -> None:
    decision = decide_reclaim(running_job(), LATER, LeasePolicy(), CUTOFF)
    assert isinstance(decision, Reclaim)
    assert decision.job.status is JobStatus.PENDING
    assert decision.job.metadata.reclaim_count == 1
    assert decision.job.retry_count == 0


def test_a_reclaim_carries_its_still_abandoned_guard() -> None:
    decision = decide_reclaim(running_job(), LATER, LeasePolicy(), CUTOFF)
    assert decision.abandoned_before == CUTOFF


def test_a_reclaim_keeps_counting() -> None:
    job = attrs.evolve(running_job(), metadata=Metadata(reclaim_count=2))
    decision = decide_reclaim(job, LATER, LeasePolicy(), CUTOFF)
    assert isinstance(decision, Reclaim)
    assert decision.job.metadata.reclaim_count == 3


def test_a_poison_pill_is_dead_lettered_as_lease_expired_with_the_guard() -> None:
    job = attrs.evolve(running_job(max_retries=3), metadata=Metadata(reclaim_count=3))
    decision = decide_reclaim(job, LATER, LeasePolicy(), CUTOFF)
    assert isinstance(decision, DeadLetter)
    assert decision.error.type == LEASE_EXPIRED
    assert decision.error.retryable is False
    assert decision.job.status is JobStatus.FAILED
    assert decision.job.last_error == decision.error
    assert decision.job.metadata.reclaim_count == 4
    assert decision.job.finished_at == LATER
    # The keeper's give-up is written only while the claim is still abandoned.
    assert decision.abandoned_before == CUTOFF


def test_a_poison_pills_error_counts_the_expired_leases_in_words() -> None:
    def said(reclaims: int, budget: int) -> str:
        job = attrs.evolve(running_job(), metadata=Metadata(reclaim_count=reclaims))
        decision = decide_reclaim(job, LATER, LeasePolicy(max_reclaims=budget), CUTOFF)
        assert isinstance(decision, DeadLetter)
        return decision.error.message

    assert said(0, 0).startswith("lease expired once while running (budget 0)")
    assert said(3, 3).startswith("lease expired 4 times while running (budget 3)")


def test_a_handlers_dead_letter_has_no_abandoned_guard() -> None:
    decision = decide(running_job(), Failed(FATAL), LATER, POLICIES, 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.abandoned_before is None


def test_max_reclaims_sets_the_poison_pill_budget() -> None:
    job = attrs.evolve(running_job(max_retries=10), metadata=Metadata(reclaim_count=1))
    assert isinstance(decide_reclaim(job, LATER, LeasePolicy(max_reclaims=1), CUTOFF), DeadLetter)
    assert isinstance(decide_reclaim(job, LATER, LeasePolicy(max_reclaims=2), CUTOFF), Reclaim)


def test_the_reclaim_budget_has_its_own_default_apart_from_retries() -> None:
    # A job with no retries is not a poison pill after one crash of its worker.
    job = running_job(max_retries=0)
    assert LeasePolicy().max_reclaims == 3
    assert isinstance(decide_reclaim(job, LATER, LeasePolicy(), CUTOFF), Reclaim)


def test_max_reclaims_none_falls_back_to_the_jobs_retries() -> None:
    job = running_job(max_retries=0)
    policy = LeasePolicy(max_reclaims=None)
    assert isinstance(decide_reclaim(job, LATER, policy, CUTOFF), DeadLetter)


def test_a_claim_that_never_started_is_returned_without_charge() -> None:
    waiting = make_job(max_retries=0)  # claimed in a batch, never started
    decision = decide_reclaim(waiting, LATER, LeasePolicy(max_reclaims=0), CUTOFF, started=False)
    assert isinstance(decision, Reclaim)
    assert decision.job.status is JobStatus.PENDING
    assert decision.job.attempt == waiting.attempt
    assert decision.job.metadata.reclaim_count == 0
    assert decision.job.metadata.prefetch_reclaims == 1
    assert decision.abandoned_before == CUTOFF


def test_a_promoted_claim_that_never_started_is_returned_pending() -> None:
    parked = attrs.evolve(make_job(), status=JobStatus.RETRYING, run_at=NOW)
    decision = decide_reclaim(parked, LATER, LeasePolicy(), CUTOFF, started=False)
    assert decision.job.status is JobStatus.PENDING


# ---- hand back --------------------------------------------------------------------------------


def test_a_claim_handed_back_is_pending_with_no_attempt_counted() -> None:
    waiting = make_job()
    decision = decide_hand_back(waiting, LATER)
    assert isinstance(decision, HandBack)
    assert decision.job.status is JobStatus.PENDING
    assert decision.job.attempt == waiting.attempt
    assert decision.job.metadata == waiting.metadata


def test_an_interrupted_running_job_is_pending_again_with_its_attempt_recorded() -> None:
    running = running_job()
    decision = decide_interrupt(running, LATER)
    assert isinstance(decision, HandBack)
    job = decision.job
    assert job.status is JobStatus.PENDING
    assert (job.retry_count, job.metadata) == (running.retry_count, running.metadata)
    assert job.attempt == running.attempt, "the start is counted, nothing more"
    (attempt,) = job.attempts
    assert attempt.outcome.value == "interrupted"
    assert (attempt.number, attempt.started_at, attempt.worker, attempt.error) == (
        running.attempt,
        running.started_at,
        running.worker,
        None,
    )
    assert attempt.finished_at == LATER


# ---- revive -----------------------------------------------------------------------------------


def test_only_a_dead_letter_can_be_revived() -> None:
    dead = decide(running_job(), Failed(FATAL), NOW, POLICIES, 0.5).job
    decision = decide_revive(dead, LATER)
    assert isinstance(decision, Revive)
    assert decision.dead == dead
    assert decision.job.status is JobStatus.PENDING
    assert decision.job.retry_count == 0
    done = decide(running_job(), Succeeded(1), NOW, POLICIES, 0.5).job
    assert decide_revive(done, LATER) is None
    assert decide_revive(running_job(), LATER) is None


# ---- operator helpers --------------------------------------------------------------------------


def test_revive_gives_a_dead_letter_a_fresh_pending_start() -> None:
    job = attrs.evolve(running_job(max_retries=1), retry_count=1)
    dead = decide(job, Failed(BOOM), NOW, POLICIES, 0.5).job
    revived = revive(dead, LATER)
    assert revived.status is JobStatus.PENDING
    assert revived.retry_count == 0
    assert revived.run_at == LATER
    assert revived.finished_at is None
    assert revived.metadata == Metadata()


def test_an_undecodable_payload_is_a_non_retryable_decode_error() -> None:
    error = undecodable("abc", "bad json")
    assert error.type == DECODE_ERROR
    assert error.retryable is False
    assert "abc" in error.message


def test_decide_leaves_the_input_record_unchanged() -> None:
    job = running_job()
    before = attrs.evolve(job)
    decide(job, Failed(BOOM), LATER, POLICIES, 0.5)
    decide(job, NoHandler(), LATER, POLICIES, 0.5)
    assert job == before


@pytest.mark.parametrize("outcome", [NoHandler, None, "failed"])
def test_an_outcome_that_is_none_of_the_outcomes_is_refused_naming_it(outcome: Any) -> None:
    # It returned None, which the caller then took for a decision.
    with pytest.raises(ValidationError) as refused:
        decide(running_job(), outcome, LATER, POLICIES, 0.5)
    assert refused.value.fields == ("outcome",), refused.value


def test_deciding_for_a_job_that_is_not_running_says_so() -> None:
    # It raised returns' UnwrapFailedError with no message at all.
    pending = make_job()
    with pytest.raises(ValueError, match=r"is for a running job.*'pending'"):
        decide(pending, Succeeded(1), LATER, POLICIES, 0.5)
