"""Builders shared by the core tests: fixed clocks and ids, no wall clock anywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from conveyor.core import Job, ValidationError, create_job, start
from returns.result import Failure, Result, Success

NOW = datetime(2026, 1, 1, tzinfo=UTC)
JOB_ID = UUID("00000000-0000-4000-8000-000000000001")


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def make_job(**overrides: Any) -> Job:
    """A valid job (pending at NOW unless overridden); fails the test if invalid."""
    fields: dict[str, Any] = {"id": JOB_ID, "job_type": "email.send", "now": NOW}
    fields.update(overrides)
    result = create_job(**fields)
    assert isinstance(result, Success), result
    return result.unwrap()


def running_job(at: datetime = NOW, **overrides: Any) -> Job:
    """A valid job that a worker has claimed at `at`."""
    return start(make_job(**overrides), at).unwrap()


def rejection(result: Result[Job, ValidationError]) -> ValidationError:
    """The ValidationError inside a Failure; fails the test on a Success."""
    assert isinstance(result, Failure), f"expected a Failure, got {result}"
    error = result.failure()
    assert isinstance(error, ValidationError)
    return error


def reason_for(result: Result[Job, ValidationError], field: str) -> str:
    """The reason given for `field`, which must be the only rejected field."""
    error = rejection(result)
    assert error.fields == (field,), error.errors
    reason = error.errors[0].reason
    assert reason, "a rejection must say why"
    return reason
