"""The finished-per-minute counts: which records count, the minute each counts in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from conveyor.core import JobStatus
from conveyor.core.throughput import (
    COUNTED_STATUSES,
    FINISH_COUNT_RETENTION_S,
    counted_minute,
    minute_key,
)
from core_support import NOW


def test_a_minute_is_named_by_its_utc_digits() -> None:
    assert minute_key(datetime(2026, 3, 4, 5, 6, 59, 999_999, tzinfo=UTC)) == "202603040506"
    assert minute_key(datetime(2026, 3, 4, 5, 7, tzinfo=UTC)) == "202603040507"


def test_a_time_in_another_zone_counts_in_its_utc_minute() -> None:
    east = timezone(timedelta(hours=5, minutes=30))
    assert minute_key(datetime(2026, 1, 1, 5, 29, 30, tzinfo=east)) == "202512312359"


def test_a_time_before_1970_or_in_an_early_year_keeps_four_digits_of_year() -> None:
    assert minute_key(datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)) == "196912312359"
    assert minute_key(datetime(999, 1, 1, tzinfo=UTC)) == "099901010000"


def _us(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize("status", list(JobStatus))
def test_only_completed_and_failed_records_count(status: JobStatus) -> None:
    expected = "202601010001" if status in COUNTED_STATUSES else ""
    assert counted_minute(status, _us(NOW + timedelta(seconds=90))) == expected
    assert (status in COUNTED_STATUSES) == (status in (JobStatus.COMPLETED, JobStatus.FAILED))


@pytest.mark.parametrize("seconds", [0, 59.999_999, 60, 3599.5, -0.000_001])
def test_a_record_counts_in_the_minute_its_finish_falls_in(seconds: float) -> None:
    at = NOW + timedelta(seconds=seconds)
    assert counted_minute(JobStatus.FAILED, _us(at)) == minute_key(at)


def test_a_record_without_a_finish_time_does_not_count() -> None:
    assert counted_minute(JobStatus.COMPLETED, None) == ""


def test_a_count_outlives_the_hour_the_dashboard_charts() -> None:
    assert FINISH_COUNT_RETENTION_S >= 3600
