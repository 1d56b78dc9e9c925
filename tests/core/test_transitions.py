"""The transition table, checked exhaustively: every (status, event) pair."""

from __future__ import annotations

import itertools

import attrs
import pytest
from conveyor.core import (
    TABLE,
    Event,
    InvalidTransition,
    Job,
    JobStatus,
    next_status,
    start,
    transition,
)
from core_support import NOW, make_job, ms
from returns.result import Failure, Success

LATER = NOW + ms(1500)
ALL_PAIRS = list(itertools.product(JobStatus, Event))
LEGAL = [(s, e) for s, e in ALL_PAIRS if e in TABLE[s]]
ILLEGAL = [(s, e) for s, e in ALL_PAIRS if e not in TABLE[s]]


def in_status(status: JobStatus) -> Job:
    return attrs.evolve(make_job(), status=status)


def labels(pairs: list[tuple[JobStatus, Event]]) -> list[str]:
    return [f"{status.value}-{event.value}" for status, event in pairs]


TO_TERMINAL = [(s, e) for s, e in LEGAL if TABLE[s][e].is_terminal]
TO_OTHER = [(s, e) for s, e in LEGAL if not TABLE[s][e].is_terminal and e is not Event.START]


def test_the_table_has_a_row_for_every_status() -> None:
    assert set(TABLE) == set(JobStatus)


def test_the_table_lists_exactly_the_documented_moves() -> None:
    S, E = JobStatus, Event
    moves = {(s, e, t) for s, row in TABLE.items() for e, t in row.items()}
    assert moves == {
        (S.SCHEDULED, E.PROMOTE, S.PENDING),
        (S.PENDING, E.START, S.RUNNING),
        (S.PENDING, E.HAND_BACK, S.PENDING),
        (S.RUNNING, E.COMPLETE, S.COMPLETED),
        (S.RUNNING, E.RETRY, S.RETRYING),
        (S.RUNNING, E.REQUEUE, S.SCHEDULED),
        (S.RUNNING, E.DEAD_LETTER, S.FAILED),
        (S.RUNNING, E.RECLAIM, S.PENDING),
        (S.RUNNING, E.INTERRUPT, S.PENDING),
        (S.RETRYING, E.PROMOTE, S.PENDING),
        (S.FAILED, E.REVIVE, S.PENDING),
        (S.SCHEDULED, E.CANCEL, S.CANCELLED),
        (S.PENDING, E.CANCEL, S.CANCELLED),
        (S.RETRYING, E.CANCEL, S.CANCELLED),
        (S.RUNNING, E.CANCEL, S.CANCELLED),
        (S.WAITING, E.RELEASE, S.PENDING),
        (S.WAITING, E.CANCEL, S.CANCELLED),
    }


def test_terminal_statuses_have_no_automatic_moves_out() -> None:
    assert TABLE[JobStatus.COMPLETED] == {}
    assert TABLE[JobStatus.FAILED] == {Event.REVIVE: JobStatus.PENDING}


def test_a_cancelled_job_has_no_move_out_at_all() -> None:
    assert TABLE[JobStatus.CANCELLED] == {}


@pytest.mark.parametrize("status", [s for s in JobStatus if not s.is_terminal])
def test_every_unfinished_status_can_be_cancelled(status: JobStatus) -> None:
    assert next_status(status, Event.CANCEL) is JobStatus.CANCELLED


@pytest.mark.parametrize("status", [s for s in JobStatus if s.is_terminal])
def test_a_finished_job_cannot_be_cancelled(status: JobStatus) -> None:
    assert next_status(status, Event.CANCEL) is None


@pytest.mark.parametrize(("status", "event"), LEGAL, ids=labels(LEGAL))
def test_a_legal_move_reaches_the_tables_target(status: JobStatus, event: Event) -> None:
    before = in_status(status)
    result = transition(before, event, LATER)
    assert isinstance(result, Success)
    after = result.unwrap()
    assert after.status is TABLE[status][event]
    assert next_status(status, event) is TABLE[status][event]
    assert before.status is status, "the original record is never changed"


@pytest.mark.parametrize(("status", "event"), ILLEGAL, ids=labels(ILLEGAL))
def test_every_other_move_is_an_invalid_transition(status: JobStatus, event: Event) -> None:
    job = in_status(status)
    result = transition(job, event, LATER)
    assert isinstance(result, Failure)
    assert result.failure() == InvalidTransition(str(job.id), status.value, event.value)
    assert next_status(status, event) is None


def test_an_invalid_transition_says_what_was_refused() -> None:
    job = in_status(JobStatus.COMPLETED)
    text = str(transition(job, Event.START, LATER).failure())
    assert str(job.id) in text
    assert "'completed'" in text
    assert "'start'" in text


def test_start_counts_an_attempt_and_records_when() -> None:
    job = make_job()
    once = transition(job, Event.START, LATER).unwrap()
    assert once.attempt == job.attempt + 1
    assert once.started_at == LATER
    assert once.finished_at is None


@pytest.mark.parametrize(("status", "event"), TO_TERMINAL, ids=labels(TO_TERMINAL))
def test_reaching_a_terminal_status_records_finished_at(status: JobStatus, event: Event) -> None:
    after = transition(in_status(status), event, LATER).unwrap()
    assert after.finished_at == LATER


@pytest.mark.parametrize(("status", "event"), TO_OTHER, ids=labels(TO_OTHER))
def test_other_moves_change_only_the_status(status: JobStatus, event: Event) -> None:
    before = in_status(status)
    after = transition(before, event, LATER).unwrap()
    assert attrs.evolve(after, status=before.status) == before


def test_start_of_a_pending_job_runs_it() -> None:
    running = start(make_job(), LATER).unwrap()
    assert running.status is JobStatus.RUNNING
    assert (running.attempt, running.started_at) == (1, LATER)


@pytest.mark.parametrize("parked", [JobStatus.SCHEDULED, JobStatus.RETRYING])
def test_start_promotes_a_parked_job_first(parked: JobStatus) -> None:
    job = attrs.evolve(make_job(), status=parked)
    running = start(job, LATER).unwrap()
    assert running.status is JobStatus.RUNNING
    assert (running.attempt, running.started_at) == (1, LATER)


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.FAILED])
def test_start_refuses_a_job_that_is_not_ready_or_parked(status: JobStatus) -> None:
    job = in_status(status)
    assert start(job, LATER).failure() == InvalidTransition(str(job.id), status.value, "start")


def test_a_second_attempt_counts_two() -> None:
    first = start(make_job(), NOW).unwrap()
    retrying = transition(first, Event.RETRY, NOW).unwrap()
    second = start(retrying, LATER).unwrap()
    assert second.attempt == 2
    assert second.started_at == LATER
