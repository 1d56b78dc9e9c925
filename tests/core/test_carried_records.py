"""When a record carried by a finish signal ends a wait for the job's outcome."""

from __future__ import annotations

import uuid

import attrs
from conveyor.core import CarriedOutcome, Job, JobStatus, carried_outcome_of, carried_record_settles
from core_support import make_job
from hypothesis import given
from hypothesis import strategies as st

FINAL = [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED]
UNFINISHED = [s for s in JobStatus if not s.is_terminal]


def _carried(job: Job, **changes: object) -> CarriedOutcome:
    """What a finish signal carrying `job`, changed by `changes`, says."""
    return carried_outcome_of(attrs.evolve(job, **changes))


def _seen(state: JobStatus = JobStatus.RUNNING, attempt: int = 0) -> Job:
    return attrs.evolve(make_job(), status=state, attempt=attempt)


def test_the_finish_of_the_attempt_after_the_one_seen_settles_the_wait() -> None:
    seen = _seen(JobStatus.RUNNING, attempt=2)
    done = _carried(seen, status=JobStatus.COMPLETED, attempt=3, result={"n": 1})
    assert carried_record_settles(seen, done)


@given(
    seen_attempt=st.integers(0, 50),
    ahead=st.integers(1, 50),
    state=st.sampled_from(UNFINISHED),
    final=st.sampled_from(FINAL),
)
def test_any_final_record_of_a_later_attempt_settles(
    seen_attempt: int, ahead: int, state: JobStatus, final: JobStatus
) -> None:
    seen = _seen(state, seen_attempt)
    later = _carried(seen, status=final, attempt=seen_attempt + ahead)
    assert carried_record_settles(seen, later)


@given(
    seen_attempt=st.integers(0, 50),
    behind=st.integers(0, 50),
    state=st.sampled_from(UNFINISHED),
    final=st.sampled_from(FINAL),
)
def test_a_record_of_the_attempt_seen_or_an_earlier_one_does_not_settle(
    seen_attempt: int, behind: int, state: JobStatus, final: JobStatus
) -> None:
    # A signal of the finish before the job was revived or re-enqueued, heard late.
    seen = _seen(state, seen_attempt)
    stale = _carried(seen, status=final, attempt=max(0, seen_attempt - behind))
    assert not carried_record_settles(seen, stale)


@given(state=st.sampled_from(UNFINISHED), attempt=st.integers(0, 50))
def test_an_unfinished_record_does_not_settle(state: JobStatus, attempt: int) -> None:
    seen = _seen(JobStatus.RUNNING, attempt)
    assert not carried_record_settles(seen, _carried(seen, status=state, attempt=attempt + 1))


def test_another_jobs_record_does_not_settle() -> None:
    seen = _seen(JobStatus.RUNNING, 1)
    other = _carried(seen, id=uuid.uuid4(), status=JobStatus.COMPLETED, attempt=2)
    assert not carried_record_settles(seen, other)


def test_a_job_whose_attempt_could_not_be_read_does_not_settle() -> None:
    done = _carried(make_job(), status=JobStatus.COMPLETED, attempt=1)
    assert not carried_record_settles(None, done)


def test_the_outcome_of_a_record_holds_its_result_as_plain_json() -> None:
    done = attrs.evolve(make_job(), status=JobStatus.COMPLETED, result={"n": [1, {"k": 2}]})
    carried = carried_outcome_of(done)
    assert carried.result == {"n": [1, {"k": 2}]}
    assert type(carried.result) is dict and type(carried.result["n"]) is list
