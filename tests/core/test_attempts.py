"""The attempt history: every decision about a running job appends the attempt it
ends to the record it returns, with its start, end, worker, outcome and error."""

from __future__ import annotations

import attrs
from conveyor.core import (
    LEASE_EXPIRED,
    MAX_ATTEMPTS_KEPT,
    MAX_TRACEBACK_CHARS,
    MAX_WORKER_CHARS,
    Attempt,
    AttemptOutcome,
    Complete,
    DeadLetter,
    ErrorInfo,
    Failed,
    LeasePolicy,
    NoHandler,
    Policies,
    Reclaim,
    Requeue,
    Retry,
    Succeeded,
    TenantNotFound,
    cap_traceback,
    decide,
    decide_reclaim,
    decide_revive,
    start,
)
from core_support import NOW, make_job, ms

WORKER = "host:42:abcd"
LATER = NOW + ms(1500)
CUTOFF = LATER - ms(30_000)
BOOM = ErrorInfo("ValueError", "boom", True, "Traceback ...\nValueError: boom\n")


def running(**overrides: object):
    return start(make_job(**overrides), NOW, WORKER).unwrap()


def test_start_records_the_worker_running_the_attempt() -> None:
    assert running().worker == WORKER


def test_start_without_a_worker_clears_the_previous_attempts_worker() -> None:
    again = attrs.evolve(running(), status=make_job().status)
    assert start(again, LATER).unwrap().worker is None


def test_start_cuts_an_overlong_worker_id() -> None:
    job = start(make_job(), NOW, "w" * (MAX_WORKER_CHARS + 5)).unwrap()
    assert job.worker == "w" * MAX_WORKER_CHARS


def test_a_new_job_has_no_attempts() -> None:
    assert make_job().attempts == ()


def test_a_success_appends_a_completed_attempt() -> None:
    decision = decide(running(), Succeeded(1), LATER, Policies(), 0.5)
    assert isinstance(decision, Complete)
    assert decision.job.attempts == (
        Attempt(1, NOW, LATER, AttemptOutcome.COMPLETED, WORKER, None),
    )


def test_a_retried_failure_appends_a_retried_attempt_with_its_error() -> None:
    decision = decide(running(), Failed(BOOM), LATER, Policies(), 0.5)
    assert isinstance(decision, Retry)
    assert decision.job.attempts == (Attempt(1, NOW, LATER, AttemptOutcome.RETRIED, WORKER, BOOM),)


def test_a_final_failure_appends_a_dead_lettered_attempt_with_its_error() -> None:
    decision = decide(running(max_retries=0), Failed(BOOM), LATER, Policies(), 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.job.attempts == (
        Attempt(1, NOW, LATER, AttemptOutcome.DEAD_LETTERED, WORKER, BOOM),
    )


def test_a_core_assigned_dead_letter_records_its_error_without_a_traceback() -> None:
    decision = decide(running(tenant_id="acme"), TenantNotFound(), LATER, Policies(), 0.5)
    (attempt,) = decision.job.attempts
    assert attempt.outcome is AttemptOutcome.DEAD_LETTERED
    assert attempt.error == decision.job.last_error
    assert attempt.error is not None and attempt.error.traceback is None


def test_a_missing_handler_appends_a_requeued_attempt() -> None:
    decision = decide(running(), NoHandler(), LATER, Policies(), 0.5)
    assert isinstance(decision, Requeue)
    assert decision.job.attempts == (Attempt(1, NOW, LATER, AttemptOutcome.REQUEUED, WORKER, None),)


def test_a_reclaim_appends_a_reclaimed_attempt_with_no_known_start_or_worker() -> None:
    job = start(make_job(), LATER).unwrap()
    decision = decide_reclaim(job, LATER, LeasePolicy(30_000), CUTOFF)
    assert isinstance(decision, Reclaim)
    assert decision.job.attempts == (Attempt(1, None, LATER, AttemptOutcome.RECLAIMED, None, None),)


def test_a_poison_pill_appends_a_dead_lettered_attempt_with_the_lease_error() -> None:
    job = start(make_job(), LATER).unwrap()
    decision = decide_reclaim(job, LATER, LeasePolicy(30_000, max_reclaims=0), CUTOFF)
    assert isinstance(decision, DeadLetter)
    (attempt,) = decision.job.attempts
    assert attempt.outcome is AttemptOutcome.DEAD_LETTERED
    assert (attempt.started_at, attempt.worker) == (None, None)
    assert attempt.error is not None and attempt.error.type == LEASE_EXPIRED


def test_a_prefetched_claims_reclaim_appends_no_attempt() -> None:
    decision = decide_reclaim(make_job(), LATER, LeasePolicy(30_000), CUTOFF, started=False)
    assert decision.job.attempts == ()


def test_attempts_accumulate_oldest_first_across_retries() -> None:
    first = decide(running(), Failed(BOOM), LATER, Policies(), 0.5).job
    second = start(first, LATER + ms(10), "other").unwrap()
    done = decide(second, Succeeded(None), LATER + ms(20), Policies(), 0.5).job
    assert [(a.number, a.outcome, a.worker) for a in done.attempts] == [
        (1, AttemptOutcome.RETRIED, WORKER),
        (2, AttemptOutcome.COMPLETED, "other"),
    ]


def test_only_the_newest_attempts_are_kept() -> None:
    job = make_job(max_retries=MAX_ATTEMPTS_KEPT + 5)
    for _ in range(MAX_ATTEMPTS_KEPT + 3):
        job = decide(start(job, NOW, WORKER).unwrap(), Failed(BOOM), NOW, Policies(), 0.5).job
    numbers = [a.number for a in job.attempts]
    assert numbers == list(range(4, MAX_ATTEMPTS_KEPT + 4))


def test_a_revive_keeps_the_attempt_history() -> None:
    dead = decide(running(max_retries=0), Failed(BOOM), LATER, Policies(), 0.5).job
    revival = decide_revive(dead, LATER + ms(1))
    assert revival is not None
    assert revival.job.attempts == dead.attempts


def test_a_short_traceback_is_kept_whole() -> None:
    text = "Traceback (most recent call last):\n  ...\nValueError: boom\n"
    assert ErrorInfo("ValueError", "boom", True, text).traceback == text


def test_a_long_traceback_keeps_its_end_within_the_cap() -> None:
    text = "".join(f'  File "app.py", line {i}, in step\n' for i in range(500))
    text += "ValueError: the raising line\n"
    kept = ErrorInfo("ValueError", "boom", True, text).traceback
    assert kept is not None and len(kept) <= MAX_TRACEBACK_CHARS
    assert kept.endswith("ValueError: the raising line\n")


def test_a_cut_traceback_says_how_much_was_cut_and_starts_on_a_whole_line() -> None:
    text = "".join(f"line {i:05}\n" for i in range(1000))
    kept = cap_traceback(text)
    assert kept is not None
    marker, first, *_ = kept.splitlines()
    cut = len(text) - len(kept) + len(marker) + 1
    assert marker == f"[... the first {cut} of {len(text)} characters cut ...]"
    assert first.startswith("line ") and len(first) == len("line 00000")
