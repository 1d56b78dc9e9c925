"""The cap on a result's size."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conveyor.core import (
    DEFAULT_MAX_RESULT_BYTES,
    RESULT_TOO_LARGE,
    Complete,
    DeadLetter,
    JobStatus,
    Policies,
    ResultPolicy,
    Succeeded,
    decide,
    oversized_result,
)
from core_support import NOW, ms, running_job

LATER = NOW + ms(5000)


def _capped(max_bytes: int) -> Policies:
    return Policies(result=ResultPolicy(max_bytes=max_bytes))


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


# ---- the cap on a result ---------------------------------------------------------


def test_the_default_cap_is_one_mebibyte() -> None:
    assert ResultPolicy().max_bytes == DEFAULT_MAX_RESULT_BYTES == 1_048_576


@pytest.mark.parametrize("result", [{"rows": list(range(20))}, "é" * 40, ["x" * 30, {"a": 1}]])
def test_a_result_of_exactly_the_cap_completes_and_one_byte_more_dead_letters(
    result: Any,
) -> None:
    size = _size(result)
    at_cap = decide(running_job(), Succeeded(result), LATER, _capped(size), 0.5)
    assert isinstance(at_cap, Complete)
    over = decide(running_job(), Succeeded(result), LATER, _capped(size - 1), 0.5)
    assert isinstance(over, DeadLetter)


def test_a_result_over_the_cap_dead_letters_naming_the_job_the_size_and_the_cap() -> None:
    job = running_job()
    decision = decide(job, Succeeded({"blob": "x" * 100}), LATER, _capped(50), 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.job.status is JobStatus.FAILED
    error = decision.error
    assert error.type == RESULT_TOO_LARGE
    assert error.retryable is False, "running it again returns as much"
    assert str(job.id) in error.message
    assert "111 bytes" in error.message and "limit is 50 bytes" in error.message
    assert "max_result_bytes" in error.message
    assert decision.job.result is None, "the oversized result is not kept"


def test_a_result_over_the_cap_is_not_retried_even_with_retries_left() -> None:
    job = running_job(max_retries=5)
    decision = decide(job, Succeeded("y" * 200), LATER, _capped(100), 0.5)
    assert isinstance(decision, DeadLetter)
    assert decision.job.retry_count == job.retry_count


@pytest.mark.parametrize("text", ["\x00" * 10, "\u2603" * 10, "plain text"])
def test_strings_are_measured_as_their_json_encoding(text: str) -> None:
    size = _size(text)
    assert oversized_result(running_job().id, text, ResultPolicy(size)) is None
    too_large = oversized_result(running_job().id, text, ResultPolicy(size - 1))
    assert too_large is not None and f"{size} bytes" in too_large.message


def test_numbers_and_none_always_fit() -> None:
    for value in (None, True, 10**300, 1.5e300):
        assert oversized_result(running_job().id, value, ResultPolicy(1)) is None


def test_a_cap_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        ResultPolicy(max_bytes=0)
