"""A decision builds its record in one copy of the job, and a copy is the same record
`attrs.evolve` would build."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
from conveyor.core import (
    ErrorInfo,
    Failed,
    Job,
    JobStatus,
    LeasePolicy,
    Metadata,
    NoHandler,
    Policies,
    RequeuePolicy,
    Succeeded,
    decide,
    decide_reclaim,
    decide_revive,
    start,
)
from conveyor.core.transitions import replace
from conveyor.testing.strategies import jobs
from core_support import NOW, make_job, running_job
from hypothesis import HealthCheck, given, settings

LATER = NOW + timedelta(seconds=5)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Job]]:
    """Every `Job` built while the test runs, whatever builds it."""
    built: list[Job] = []
    original = Job.__init__

    def counting(self: Job, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Job, "__init__", counting)
    yield built


def _unhandled_running() -> Job:
    job = running_job()
    return attrs.evolve(job, metadata=Metadata(first_missing_at=NOW, requeue_count=1))


@pytest.mark.parametrize(
    "outcome",
    [
        Succeeded({"ok": True}),
        Succeeded(object()),
        Failed(ErrorInfo("E", "boom", retryable=True)),
        Failed(ErrorInfo("E", "boom", retryable=False)),
    ],
    ids=["complete", "invalid-result", "retry", "dead-letter"],
)
def test_a_decision_after_a_handler_ran_is_one_copy_even_after_a_missing_handler(
    outcome: Any, copies: list[Job]
) -> None:
    job = _unhandled_running()
    copies.clear()
    decision = decide(job, outcome, LATER, Policies(), 0.5)
    assert len(copies) == 1
    assert decision.job.metadata.first_missing_at is None


def test_a_requeue_for_another_node_is_one_copy_beyond_the_unhandled_mark(
    copies: list[Job],
) -> None:
    job = running_job()
    copies.clear()
    decision = decide(job, NoHandler(), LATER, Policies(requeue=RequeuePolicy()), 0.5)
    assert decision.job.status is JobStatus.SCHEDULED
    assert len(copies) == 2  # the job as seen unhandled (the policy reads it), then the record


def test_starting_a_parked_job_is_one_copy(copies: list[Job]) -> None:
    parked = make_job(delay=timedelta(seconds=1))
    assert parked.status is JobStatus.SCHEDULED
    copies.clear()
    started = start(parked, LATER, "w1").unwrap()
    assert len(copies) == 1
    assert (started.status, started.attempt, started.worker) == (JobStatus.RUNNING, 1, "w1")


def test_a_poison_pill_is_dead_lettered_in_one_copy(copies: list[Job]) -> None:
    job = attrs.evolve(running_job(), metadata=Metadata(reclaim_count=5))
    copies.clear()
    decision = decide_reclaim(job, LATER, LeasePolicy(max_reclaims=1), LATER)
    assert len(copies) == 1
    assert decision.job.metadata.reclaim_count == 6


def test_a_revive_is_one_copy(copies: list[Job]) -> None:
    dead = decide(running_job(), Failed(ErrorInfo("E", "x", False)), LATER, Policies(), 0.5).job
    copies.clear()
    revive = decide_revive(dead, LATER)
    assert revive is not None and len(copies) == 1
    assert (revive.job.retry_count, revive.job.finished_at) == (0, None)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(jobs())
def test_a_copy_is_the_record_evolve_would_build(job: Job) -> None:
    changes = {"attempt": job.attempt + 1, "worker": "w", "result": None}
    assert replace(job, **changes) == attrs.evolve(job, **changes)
    assert replace(job) == job
