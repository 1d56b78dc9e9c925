"""Model-checking the core: random lives of a few jobs against a reference model.

The machine drives `create_job`, `start`, `decide`, `decide_reclaim` and the
promotion of due parked jobs with a manual clock. The model is deliberately plainer than
the code: per job a status, counters and a couple of times, updated by the
rules written out below, not by calling the core. Every step compares the two.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from conveyor.core import (
    INVALID_RESULT,
    LEASE_EXPIRED,
    MISSING_TENANT,
    NO_HANDLER,
    TABLE,
    TENANT_NOT_FOUND,
    Complete,
    DeadLetter,
    ErrorInfo,
    Event,
    Failed,
    Job,
    JobStatus,
    LeasePolicy,
    MissingTenant,
    NoHandler,
    Policies,
    Reclaim,
    Requeue,
    RequeuePolicy,
    Retry,
    RetryPolicy,
    Succeeded,
    TenantNotFound,
    create_job,
    decide,
    decide_reclaim,
    start,
    transition,
)
from core_support import NOW, ms
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from returns.result import Failure

S = JobStatus
# Small numbers so a few ticks cross every boundary.
MAX_RECLAIMS = 2
POLICIES = Policies(
    retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000),
    requeue=RequeuePolicy(requeue_delay_ms=500, max_requeue_age_ms=5000),
    lease=LeasePolicy(lease_ms=1000, max_reclaims=MAX_RECLAIMS),
)
LEGAL_MOVES = {(status, target) for status, row in TABLE.items() for target in row.values()}

picks = st.integers(min_value=0, max_value=7)
samples = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
ticks = st.sampled_from([1, 99, 100, 500, 1000, 2999, 3000, 3001, 4999, 5000, 20_000])
delays = st.sampled_from([0, 0, 400, 2500])


@dataclasses.dataclass
class Expected:
    """What the model believes about one job."""

    status: JobStatus
    max_retries: int
    run_at: datetime
    retry_count: int = 0
    attempts: int = 0
    reclaims: int = 0
    requeues: int = 0
    locked_at: datetime | None = None
    first_missing_at: datetime | None = None


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.jobs: dict[UUID, Job] = {}
        self.model: dict[UUID, Expected] = {}
        self.dead_errors: dict[UUID, ErrorInfo] = {}
        self.no_handler_ages_ms: list[int] = []

    # ---- helpers -------------------------------------------------------------

    def ids_where(self, predicate: Any) -> list[UUID]:
        return [job_id for job_id, m in self.model.items() if predicate(m)]

    def parked(self) -> list[UUID]:
        return self.ids_where(lambda m: m.status in (S.SCHEDULED, S.RETRYING))

    def running(self) -> list[UUID]:
        return self.ids_where(lambda m: m.status is S.RUNNING)

    def claimable(self) -> list[UUID]:
        """Ready jobs, and parked ones whose run_at passed (a backend may claim those)."""
        return self.ids_where(
            lambda m: (
                m.status is S.PENDING
                or (m.status in (S.SCHEDULED, S.RETRYING) and m.run_at <= self.now)
            )
        )

    def abandoned(self) -> list[UUID]:
        lease = timedelta(milliseconds=POLICIES.lease.lease_ms)
        return self.ids_where(
            lambda m: (
                m.status is S.RUNNING and m.locked_at is not None and m.locked_at + lease < self.now
            )
        )

    def attempts(self) -> int:
        return sum(m.attempts for m in self.model.values())

    def choose(self, ids: list[UUID], pick: int) -> UUID:
        return ids[pick % len(ids)]

    def store(self, job_id: UUID, new: Job, *path: JobStatus) -> None:
        """Keep `new`, checking each status step on the way is a move in the table."""
        statuses = [self.jobs[job_id].status, *path, new.status]
        for before, after in itertools.pairwise(statuses):
            assert (before, after) in LEGAL_MOVES, f"illegal move {before} -> {after}"
        self.jobs[job_id] = new

    def dead_lettered(self, job_id: UUID, decision: Any, error_type: str | None) -> None:
        assert isinstance(decision, DeadLetter), decision
        if error_type is not None:
            assert decision.error.type == error_type
        assert decision.job.last_error == decision.error
        event(f"dead letter: {decision.error.type}")
        self.store(job_id, decision.job)
        self.model[job_id].status = S.FAILED
        self.dead_errors[job_id] = decision.error

    # ---- rules ---------------------------------------------------------------

    def add_job(self, max_retries: int, delay_ms: int) -> None:
        job_id = UUID(int=len(self.jobs) + 1)
        job = create_job(
            id=job_id,
            job_type="report.build",
            args={"n": len(self.jobs)},
            now=self.now,
            max_retries=max_retries,
            delay=ms(delay_ms),
        ).unwrap()
        status = S.SCHEDULED if delay_ms > 0 else S.PENDING
        note(f"create {job_id.int}: max_retries={max_retries} delay={delay_ms} -> {status}")
        assert job.status is status
        self.jobs[job_id] = job
        self.model[job_id] = Expected(status, max_retries, self.now + ms(delay_ms))

    @initialize(
        specs=st.lists(st.tuples(st.integers(0, 3), delays), min_size=1, max_size=3),
    )
    def create_jobs(self, specs: list[tuple[int, int]]) -> None:
        for max_retries, delay_ms in specs:
            self.add_job(max_retries, delay_ms)

    @precondition(lambda self: len(self.jobs) < 8)
    @rule(max_retries=st.integers(0, 3), delay_ms=delays)
    def enqueue(self, max_retries: int, delay_ms: int) -> None:
        self.add_job(max_retries, delay_ms)

    @rule(step_ms=ticks)
    def tick(self, step_ms: int) -> None:
        self.now += ms(step_ms)
        note(f"tick +{step_ms} ms -> t={(self.now - NOW) // ms(1)} ms")

    @precondition(lambda self: bool(self.parked()))
    @rule(pick=picks)
    def promote(self, pick: int) -> None:
        job_id = self.choose(self.parked(), pick)
        due = self.model[job_id].run_at <= self.now
        note(f"promote {job_id.int}: due={due}")
        if not due:
            return
        promoted = transition(self.jobs[job_id], Event.PROMOTE, self.now).unwrap()
        self.store(job_id, promoted)
        self.model[job_id].status = S.PENDING

    @precondition(lambda self: bool(self.claimable()))
    @rule(pick=picks)
    def claim(self, pick: int) -> None:
        job_id = self.choose(self.claimable(), pick)
        before = self.jobs[job_id]
        note(f"claim {job_id.int} ({before.status.value})")
        started = start(before, self.now).unwrap()
        path = (S.PENDING,) if before.status.is_parked else ()
        self.store(job_id, started, *path)
        m = self.model[job_id]
        m.status, m.locked_at, m.attempts = S.RUNNING, self.now, m.attempts + 1

    @precondition(lambda self: bool(self.running()))
    @rule(pick=picks, result=st.sampled_from([None, 7, "ok", {"rows": [1, 2]}]))
    def succeed(self, pick: int, result: Any) -> None:
        job_id = self.choose(self.running(), pick)
        note(f"succeed {job_id.int} with {result!r}")
        decision = decide(self.jobs[job_id], Succeeded(result), self.now, POLICIES, 0.5)
        assert isinstance(decision, Complete), decision
        assert decision.job.metadata.first_missing_at is None
        event("complete")
        self.store(job_id, decision.job)
        m = self.model[job_id]
        m.status, m.first_missing_at = S.COMPLETED, None

    @precondition(lambda self: bool(self.running()))
    @rule(pick=picks, retryable=st.sampled_from([True, True, True, False]), sample=samples)
    def fail(self, pick: int, retryable: bool, sample: float) -> None:
        job_id = self.choose(self.running(), pick)
        m = self.model[job_id]
        error = ErrorInfo("RuntimeError", f"attempt {m.attempts} failed", retryable)
        decision = decide(self.jobs[job_id], Failed(error), self.now, POLICIES, sample)
        note(f"fail {job_id.int} retryable={retryable} -> {type(decision).__name__}")
        m.first_missing_at = None
        if retryable and m.retry_count < m.max_retries:
            assert isinstance(decision, Retry), decision
            event("retry")
            base = min(100 * 2**m.retry_count, 1000)
            waited = (decision.run_at - self.now) / ms(1)
            assert abs(waited - base * (0.9 + 0.2 * sample)) <= 1
            assert decision.job.last_error == error
            self.store(job_id, decision.job)
            m.status, m.retry_count, m.run_at = S.RETRYING, m.retry_count + 1, decision.run_at
        else:
            self.dead_lettered(job_id, decision, None)
            assert decision.error == error

    @precondition(lambda self: bool(self.running()))
    @rule(pick=picks)
    def no_handler(self, pick: int) -> None:
        job_id = self.choose(self.running(), pick)
        m = self.model[job_id]
        first = m.first_missing_at or self.now
        age_ms = int((self.now - first) / ms(1))
        decision = decide(self.jobs[job_id], NoHandler(), self.now, POLICIES, 0.5)
        note(f"no handler for {job_id.int}, unhandled {age_ms} ms -> {type(decision).__name__}")
        if age_ms >= POLICIES.requeue.max_requeue_age_ms:
            self.dead_lettered(job_id, decision, NO_HANDLER)
            self.no_handler_ages_ms.append(age_ms)
            return
        assert isinstance(decision, Requeue), decision
        event("requeue")
        assert decision.run_at == self.now + ms(POLICIES.requeue.requeue_delay_ms)
        assert decision.job.metadata.first_missing_at == first
        self.store(job_id, decision.job)
        m.status, m.run_at, m.first_missing_at = S.SCHEDULED, decision.run_at, first
        m.requeues += 1

    # Rarer than the other outcomes, so that jobs live long enough to be reclaimed
    # and to run out their missing-handler window.
    @precondition(lambda self: bool(self.running()) and self.attempts() % 4 == 3)
    @rule(
        pick=picks,
        problem=st.sampled_from(
            [
                (TenantNotFound(), TENANT_NOT_FOUND),
                (MissingTenant(), MISSING_TENANT),
                (Succeeded(b"not json"), INVALID_RESULT),
            ]
        ),
    )
    def unrecoverable(self, pick: int, problem: tuple[Any, str]) -> None:
        outcome, error_type = problem
        job_id = self.choose(self.running(), pick)
        note(f"{type(outcome).__name__} for {job_id.int}")
        decision = decide(self.jobs[job_id], outcome, self.now, POLICIES, 0.5)
        self.dead_lettered(job_id, decision, error_type)
        assert decision.error.retryable is False

    @precondition(lambda self: bool(self.abandoned()))
    @rule(pick=picks)
    def reclaim(self, pick: int) -> None:
        job_id = self.choose(self.abandoned(), pick)
        m = self.model[job_id]
        cutoff = self.now - ms(POLICIES.lease.lease_ms)
        decision = decide_reclaim(self.jobs[job_id], self.now, POLICIES.lease, cutoff)
        note(f"reclaim {job_id.int} (reclaims so far {m.reclaims}) -> {type(decision).__name__}")
        m.reclaims += 1
        assert decision.abandoned_before == cutoff
        if m.reclaims > MAX_RECLAIMS:
            self.dead_lettered(job_id, decision, LEASE_EXPIRED)
            return
        assert isinstance(decision, Reclaim), decision
        event("reclaim")
        self.store(job_id, decision.job)
        m.status, m.locked_at = S.PENDING, None

    @precondition(lambda self: bool(self.jobs))
    @rule(pick=picks, event=st.sampled_from(Event))
    def a_move_outside_the_table_is_refused(self, pick: int, event: Event) -> None:
        job_id = self.choose(list(self.jobs), pick)
        job = self.jobs[job_id]
        result = transition(job, event, self.now)
        legal = event in TABLE[job.status]
        note(f"try {event.value} on {job_id.int} ({job.status.value}): legal={legal}")
        assert isinstance(result, Failure) == (not legal)
        # A probe only: the record kept by the machine is not replaced.

    # ---- invariants ----------------------------------------------------------

    @invariant()
    def the_code_agrees_with_the_model(self) -> None:
        for job_id, job in self.jobs.items():
            m = self.model[job_id]
            assert job.status is m.status, (job_id, job.status, m.status)
            assert job.retry_count == m.retry_count
            assert job.attempt == m.attempts
            assert job.metadata.reclaim_count == m.reclaims
            assert job.metadata.requeue_count == m.requeues
            if job.status.is_parked:
                assert job.run_at == m.run_at

    @invariant()
    def retries_never_exceed_max_retries(self) -> None:
        for job in self.jobs.values():
            assert 0 <= job.retry_count <= job.max_retries

    @invariant()
    def every_terminal_job_is_completed_or_dead_lettered_with_a_reason(self) -> None:
        for job_id, job in self.jobs.items():
            if not job.status.is_terminal:
                assert job.finished_at is None
                continue
            assert job.finished_at is not None
            if job.status is S.FAILED:
                assert job.last_error is not None
                assert job.last_error.type
                assert job.last_error == self.dead_errors[job_id]
            else:
                assert job.status is S.COMPLETED
                assert job_id not in self.dead_errors

    @invariant()
    def a_no_handler_job_is_dead_lettered_only_after_the_window(self) -> None:
        for age_ms in self.no_handler_ages_ms:
            assert age_ms >= POLICIES.requeue.max_requeue_age_ms


CoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoreMachine = CoreMachine.TestCase
