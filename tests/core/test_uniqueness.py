"""Unique keys and caller-chosen ids in the core: the lock's verdict and the
validation of the enqueue options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from conveyor.core import JobStatus, create_job
from conveyor.core.job import UniqueLock
from conveyor.core.uniqueness import (
    DEFAULT_UNIQUE_STATES,
    MAX_UNIQUE_KEY_CHARS,
    lock_holds,
    make_lock,
    state_names,
)
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _error(**options: object) -> str:
    options.setdefault("id", uuid4())
    result = create_job(job_type="report", now=NOW, **options)  # type: ignore[arg-type]
    return str(result.failure())


def test_the_default_states_are_the_unfinished_ones() -> None:
    assert set(DEFAULT_UNIQUE_STATES) == {s for s in JobStatus if not s.is_terminal}


def test_a_lock_holds_while_its_holder_is_in_a_counted_state() -> None:
    lock = UniqueLock("k", DEFAULT_UNIQUE_STATES)
    assert all(lock_holds(lock, state, NOW) for state in DEFAULT_UNIQUE_STATES)
    assert not lock_holds(lock, JobStatus.COMPLETED, NOW)
    assert not lock_holds(lock, JobStatus.FAILED, NOW)


def test_a_lock_whose_holder_is_gone_does_not_hold() -> None:
    assert not lock_holds(UniqueLock("k", DEFAULT_UNIQUE_STATES), None, NOW)


def test_a_lock_holds_until_it_expires_and_not_at_the_instant() -> None:
    lock = UniqueLock("k", DEFAULT_UNIQUE_STATES, NOW + timedelta(seconds=5))
    assert lock_holds(lock, JobStatus.PENDING, NOW + timedelta(seconds=4, microseconds=999999))
    assert not lock_holds(lock, JobStatus.PENDING, NOW + timedelta(seconds=5))


def test_a_lock_counting_completed_holds_for_a_finished_holder() -> None:
    lock = UniqueLock("k", [JobStatus.COMPLETED], NOW + timedelta(minutes=1))
    assert lock_holds(lock, JobStatus.COMPLETED, NOW)
    assert not lock_holds(lock, JobStatus.PENDING, NOW)


@given(st.lists(st.sampled_from(list(JobStatus))))
def test_lock_states_are_kept_in_one_order_without_repeats(states: list[JobStatus]) -> None:
    lock = UniqueLock("k", states)
    assert lock.states == tuple(s for s in JobStatus if s in states)
    assert lock == UniqueLock("k", list(reversed(states)))


def test_state_names_are_comma_separated_values() -> None:
    lock = UniqueLock("k", [JobStatus.RUNNING, JobStatus.PENDING])
    assert state_names(lock) == "pending,running"


def test_make_lock_without_a_key_is_none() -> None:
    assert make_lock(None, NOW) is None


def test_unique_for_sets_the_expiry_from_now() -> None:
    lock = make_lock("k", NOW, unique_for=90)
    assert isinstance(lock, UniqueLock)
    assert lock.expires_at == NOW + timedelta(seconds=90)
    assert lock.states == DEFAULT_UNIQUE_STATES


def test_unique_states_may_be_names() -> None:
    lock = make_lock("k", NOW, unique_states=["completed", JobStatus.PENDING])
    assert isinstance(lock, UniqueLock)
    assert lock.states == (JobStatus.PENDING, JobStatus.COMPLETED)


def test_create_job_gives_the_job_its_lock() -> None:
    job = create_job(
        id=uuid4(), job_type="report", now=NOW, unique_key="daily", unique_for=timedelta(hours=1)
    ).unwrap()
    assert job.unique == UniqueLock("daily", DEFAULT_UNIQUE_STATES, NOW + timedelta(hours=1))


def test_create_job_without_a_key_holds_no_lock() -> None:
    assert create_job(id=uuid4(), job_type="report", now=NOW).unwrap().unique is None


def test_create_job_accepts_an_id_as_text() -> None:
    text = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
    assert create_job(id=text, job_type="report", now=NOW).unwrap().id == UUID(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"id": "order-42"}, "id: 'order-42' is not a job id (a UUID)"),
        ({"id": 42}, "id: must be a job id (a UUID), got int"),
        ({"unique_key": ""}, "unique_key: must not be empty"),
        ({"unique_key": 7}, "unique_key: must be a string, got int"),
        (
            {"unique_key": "k" * (MAX_UNIQUE_KEY_CHARS + 1)},
            f"unique_key: is {MAX_UNIQUE_KEY_CHARS + 1} characters; "
            f"the limit is {MAX_UNIQUE_KEY_CHARS}",
        ),
        ({"unique_key": "a\nb"}, "unique_key: must not hold control characters or lone surrogates"),
        (
            {"unique_key": "a\ud800"},
            "unique_key: must not hold control characters or lone surrogates",
        ),
        ({"unique_for": 5}, "unique_for: needs unique_key: it shapes the key's lock"),
        (
            {"unique_states": ["pending"]},
            "unique_states: needs unique_key: it shapes the key's lock",
        ),
        ({"unique_key": "k", "unique_for": 0}, "unique_for: must be more than zero"),
        ({"unique_key": "k", "unique_for": -1}, "unique_for: must not be negative"),
        (
            {"unique_key": "k", "unique_for": "soon"},
            "unique_for: must be seconds or a timedelta, got str",
        ),
        ({"unique_key": "k", "unique_states": []}, "unique_states: must name at least one state"),
        (
            {"unique_key": "k", "unique_states": "pending"},
            "unique_states: must be a list of job states, such as ['pending', 'running']",
        ),
        (
            {"unique_key": "k", "unique_states": ["queued"]},
            "unique_states: unknown state 'queued'; use some of "
            + ", ".join(s.value for s in JobStatus),
        ),
    ],
)
def test_bad_options_are_one_line_naming_the_field(options: dict, message: str) -> None:
    assert _error(**options) == message
