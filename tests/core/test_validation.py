"""create_job, read as the specification of what a job may be."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conveyor.core import JobStatus, Limits, Metadata, Priority, create_job
from conveyor.core.errors import FieldError
from conveyor.core.frozen import MAX_INT_DIGITS, json_size
from conveyor.core.validation import parse_job_id
from core_support import JOB_ID, NOW, make_job, reason_for, rejection
from returns.result import Success


def build(**overrides: Any) -> Any:
    fields: dict[str, Any] = {"id": JOB_ID, "job_type": "email.send", "now": NOW}
    fields.update(overrides)
    return create_job(**fields)


# ---- names: job_type, queue, tenant_id ------------------------------------

NAME_FIELDS = ["job_type", "queue", "tenant_id"]


@pytest.mark.parametrize("field", NAME_FIELDS)
def test_an_empty_name_is_rejected(field: str) -> None:
    reason = reason_for(build(**{field: ""}), field)
    assert "empty" in reason


@pytest.mark.parametrize("field", NAME_FIELDS)
def test_a_name_over_the_length_limit_is_rejected(field: str) -> None:
    limit = Limits().max_name_length
    reason = reason_for(build(**{field: "a" * (limit + 1)}), field)
    assert str(limit) in reason


@pytest.mark.parametrize("field", NAME_FIELDS)
def test_a_name_exactly_at_the_length_limit_is_accepted(field: str) -> None:
    name = "a" * Limits().max_name_length
    assert getattr(make_job(**{field: name}), field) == name


@pytest.mark.parametrize("field", NAME_FIELDS)
@pytest.mark.parametrize(
    "name", ["has space", "-leading-dash", ".leading-dot", "a/b", "a:b", "caf\u00e9", "tab\t"]
)
def test_a_name_outside_the_charset_is_rejected(field: str, name: str) -> None:
    reason = reason_for(build(**{field: name}), field)
    assert "letters" in reason


@pytest.mark.parametrize("field", NAME_FIELDS)
def test_a_name_that_is_not_a_string_is_rejected(field: str) -> None:
    reason = reason_for(build(**{field: 42}), field)
    assert "string" in reason


@pytest.mark.parametrize("name", ["a", "Email.Send", "v2_report-daily", "0day"])
def test_names_of_letters_digits_dots_dashes_underscores_are_accepted(name: str) -> None:
    job = make_job(job_type=name, queue=name, tenant_id=name)
    assert (job.job_type, job.queue, job.tenant_id) == (name, name, name)


def test_tenant_id_is_optional() -> None:
    assert make_job().tenant_id is None


# ---- args -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        ({"blob": b"bytes"}, "bytes"),
        ({"tags": {"a", "b"}}, "set"),
        ({"ratio": float("nan")}, "NaN"),
        ({"ratio": float("inf")}, "NaN and infinities"),
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime"),
        ({"obj": object()}, "object"),
        ({"nested": {1: "int key"}}, "keys must be strings"),
        ({"deep": [{"x": (1, b"no")}]}, "bytes"),
    ],
)
def test_args_that_are_not_json_are_rejected(args: dict[str, Any], hint: str) -> None:
    reason = reason_for(build(args=args), "args")
    assert hint in reason


def test_a_rejection_of_args_names_the_path_to_the_bad_value() -> None:
    reason = reason_for(build(args={"user": {"tags": [1, {2, 3}]}}), "args")
    assert "$.user.tags[1]" in reason


def test_args_must_be_an_object_not_a_list() -> None:
    reason = reason_for(build(args=[1, 2]), "args")
    assert "mapping" in reason


def test_args_nested_too_deep_are_rejected() -> None:
    limits = Limits()
    deep: Any = "leaf"
    for _ in range(limits.max_depth + 5):
        deep = [deep]
    reason = reason_for(build(args={"deep": deep}), "args")
    assert "deeper" in reason


def test_args_nested_up_to_the_depth_limit_are_accepted() -> None:
    limits = Limits(max_depth=4)
    # The args object is depth 0; three more levels put the leaf at depth 4.
    args = {"a": {"b": {"c": {"d": 1}}}}
    assert isinstance(build(args=args, limits=limits), Success)
    assert rejection(build(args={"a": {"b": {"c": {"d": [1]}}}}, limits=limits)).fields == ("args",)


def args_of_size(size: int) -> dict[str, str]:
    """Args whose compact UTF-8 JSON is exactly `size` bytes."""
    overhead = len(json.dumps({"k": ""}, separators=(",", ":")))
    args = {"k": "x" * (size - overhead)}
    assert json_size(args) == size
    return args


def test_args_exactly_at_the_size_limit_are_accepted() -> None:
    limit = Limits().max_args_bytes
    job = make_job(args=args_of_size(limit))
    assert json_size(job.args) == limit


def test_args_one_byte_over_the_size_limit_are_rejected() -> None:
    limit = Limits().max_args_bytes
    reason = reason_for(build(args=args_of_size(limit + 1)), "args")
    assert str(limit) in reason
    assert str(limit + 1) in reason


def test_the_size_limit_counts_utf8_bytes_not_characters() -> None:
    limits = Limits(max_args_bytes=20)
    # {"k":"éééééé"} is 14 characters but 20 bytes: accepted; one more é is over.
    assert isinstance(build(args={"k": "\u00e9" * 6}, limits=limits), Success)
    assert rejection(build(args={"k": "\u00e9" * 7}, limits=limits)).fields == ("args",)


def test_missing_args_mean_an_empty_object() -> None:
    assert dict(make_job().args) == {}


def test_args_with_a_lone_surrogate_are_rejected_not_raised() -> None:
    assert rejection(build(args={"text": "\ud800"})).fields == ("args",)


# ---- priority ---------------------------------------------------------------


@pytest.mark.parametrize("priority", ["urgent", "", 1, None])
def test_an_unknown_priority_is_rejected(priority: object) -> None:
    reason = reason_for(build(priority=priority), "priority")
    assert "critical, high, normal, low" in reason


@pytest.mark.parametrize(
    ("given", "expected"),
    [("high", Priority.HIGH), ("LOW", Priority.LOW), (Priority.CRITICAL, Priority.CRITICAL)],
)
def test_a_priority_is_given_by_enum_or_by_name(given: object, expected: Priority) -> None:
    assert make_job(priority=given).priority is expected


def test_the_default_priority_is_normal() -> None:
    assert make_job().priority is Priority.NORMAL


# ---- max_retries --------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, -100])
def test_negative_max_retries_are_rejected(value: int) -> None:
    reason = reason_for(build(max_retries=value), "max_retries")
    assert ">= 0" in reason


@pytest.mark.parametrize("value", [True, False, 1.5, "3", None])
def test_max_retries_that_are_not_an_integer_are_rejected(value: object) -> None:
    reason = reason_for(build(max_retries=value), "max_retries")
    assert "integer" in reason


def test_max_retries_over_the_ceiling_are_rejected() -> None:
    reason_for(build(max_retries=1001), "max_retries")


@pytest.mark.parametrize("value", [0, 3, 1000])
def test_max_retries_from_zero_to_the_ceiling_are_accepted(value: int) -> None:
    assert make_job(max_retries=value).max_retries == value


def test_the_default_is_three_retries() -> None:
    assert make_job().max_retries == 3


# ---- times --------------------------------------------------------------------


def test_a_naive_run_at_is_rejected() -> None:
    reason = reason_for(build(run_at=datetime(2026, 1, 2)), "run_at")
    assert "timezone-aware" in reason


def test_a_naive_now_is_rejected() -> None:
    reason = reason_for(build(now=datetime(2026, 1, 1)), "now")
    assert "timezone-aware" in reason


def test_run_at_and_delay_together_are_rejected() -> None:
    reason = reason_for(build(run_at=NOW, delay=timedelta(seconds=1)), "run_at")
    assert "not both" in reason


def test_a_negative_delay_is_rejected() -> None:
    reason_for(build(delay=timedelta(seconds=-1)), "delay")


def test_times_in_another_zone_are_stored_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    job = make_job(now=datetime(2026, 1, 1, 2, tzinfo=plus_two))
    assert job.created_at == NOW
    assert job.created_at.tzinfo is UTC


# ---- many errors at once -------------------------------------------------------


def test_every_bad_field_is_reported_at_once() -> None:
    error = rejection(
        build(
            job_type="",
            queue="bad queue",
            tenant_id="x" * 500,
            args={"b": b"x"},
            priority="urgent",
            max_retries=-1,
            run_at=datetime(2026, 1, 2),
        )
    )
    assert set(error.fields) == {
        "job_type",
        "queue",
        "tenant_id",
        "args",
        "priority",
        "max_retries",
        "run_at",
    }
    assert all(e.reason for e in error.errors)
    message = str(error)
    for field in error.fields:
        assert f"{field}:" in message


def test_a_validation_error_is_a_value_error_usable_as_an_exception() -> None:
    error = rejection(build(job_type=""))
    assert isinstance(error, ValueError)
    with pytest.raises(ValueError, match="job_type: must not be empty"):
        raise error


# ---- a valid job -----------------------------------------------------------------


def test_a_valid_job_without_run_at_is_pending_and_due_now() -> None:
    job = make_job(args={"to": "a@example.com"}, queue="mail")
    assert job.id == JOB_ID
    assert job.status is JobStatus.PENDING
    assert job.created_at == NOW
    assert job.run_at == NOW
    assert (job.attempt, job.retry_count) == (0, 0)
    assert (job.started_at, job.finished_at, job.last_error, job.result) == (None,) * 4
    assert job.metadata == Metadata()


def test_a_future_run_at_gives_a_scheduled_job() -> None:
    later = NOW + timedelta(minutes=5)
    job = make_job(run_at=later)
    assert job.status is JobStatus.SCHEDULED
    assert job.run_at == later


def test_a_delay_gives_a_scheduled_job_due_that_much_later() -> None:
    job = make_job(delay=timedelta(seconds=30))
    assert job.status is JobStatus.SCHEDULED
    assert job.run_at == NOW + timedelta(seconds=30)


@pytest.mark.parametrize("run_at", [NOW, NOW - timedelta(hours=1)])
def test_a_run_at_now_or_in_the_past_gives_a_pending_job(run_at: datetime) -> None:
    job = make_job(run_at=run_at)
    assert job.status is JobStatus.PENDING
    assert job.run_at == run_at


def test_a_zero_delay_gives_a_pending_job() -> None:
    assert make_job(delay=timedelta(0)).status is JobStatus.PENDING


# ---- input no encoder or clock can take --------------------------------------------
#
# Each of these raised from deep inside json or datetime instead of naming the field.


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"n": 10**5000}, "$.n"),
        ({"n": -(10**5000)}, "$.n"),
        ({"list": [1, 10**4300]}, "$.list[1]"),
    ],
)
def test_an_integer_too_long_to_encode_as_json_is_rejected_naming_its_path(
    args: dict[str, Any], path: str
) -> None:
    reason = reason_for(build(args=args), "args")
    assert path in reason and "digits" in reason


def test_an_integer_of_the_most_digits_json_reads_back_is_accepted() -> None:
    largest = 10**MAX_INT_DIGITS - 1
    job = make_job(args={"n": largest})
    assert json.loads(json.dumps(dict(job.args)))["n"] == largest


@pytest.mark.parametrize(
    "args",
    [{"\ud800": 1}, {"ok": {"\udfff tail": "x"}}, {"k": "\udc00"}, {"k": ["a", "\ud83d"]}],
    ids=["key", "nested-key", "value", "list-item"],
)
def test_a_lone_surrogate_in_a_key_or_value_is_rejected_in_a_printable_message(
    args: dict[str, Any],
) -> None:
    reason = reason_for(build(args=args), "args")
    assert "surrogate" in reason
    reason.encode("utf-8")  # the message itself can be printed and logged


def test_a_rejected_key_is_quoted_on_one_line_and_shortened_in_the_path() -> None:
    reason = reason_for(build(args={"line\nbreak": b"x", "k" * 10_000: {1}}), "args")
    assert "\n" not in reason and len(reason) < 300


def test_args_nested_past_the_interpreter_stack_are_rejected_not_raised() -> None:
    deep: Any = 1
    for _ in range(10_000):
        deep = [deep]
    reason = reason_for(build(args={"deep": deep}, limits=Limits(max_depth=20_000)), "args")
    assert "deep" in reason


UNUSABLE_DELAYS = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "1e20-seconds": 1e20,
    "10**5000-seconds": 10**5000,
    "9999-years-in-seconds": 9999 * 365.25 * 86400,
    "9999-years": timedelta(days=9999 * 365),
    "max-timedelta": timedelta.max,
    "bool": True,
    "text": "30",
    "negative-seconds": -1.0,
}


@pytest.mark.parametrize("delay", UNUSABLE_DELAYS.values(), ids=UNUSABLE_DELAYS.keys())
def test_a_delay_that_is_no_usable_time_span_is_rejected_naming_delay(delay: Any) -> None:
    reason_for(build(delay=delay), "delay")


@pytest.mark.parametrize("delay", [30, 30.0, timedelta(seconds=30)])
def test_a_delay_may_be_given_in_seconds_or_as_a_timedelta(delay: Any) -> None:
    assert make_job(delay=delay).run_at == NOW + timedelta(seconds=30)


@pytest.mark.parametrize(
    "run_at",
    [
        datetime.max.replace(tzinfo=timezone(-timedelta(hours=5))),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=5))),
    ],
    ids=["after-year-9999-in-utc", "before-year-1-in-utc"],
)
def test_a_run_at_outside_the_datetime_range_in_utc_is_rejected(run_at: datetime) -> None:
    reason_for(build(run_at=run_at), "run_at")


def test_a_job_id_is_parsed_from_its_text() -> None:
    assert parse_job_id(str(JOB_ID)) == JOB_ID
    assert parse_job_id(JOB_ID) == JOB_ID


@pytest.mark.parametrize("text", ["not-a-uuid", "", "../x", "a\nb", "\ud800", 42, None])
def test_a_malformed_job_id_is_a_field_error_on_one_line(text: Any) -> None:
    error = parse_job_id(text)
    assert isinstance(error, FieldError) and error.field == "job_id"
    assert "\n" not in str(error)
    str(error).encode("utf-8")
