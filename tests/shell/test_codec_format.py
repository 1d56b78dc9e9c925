"""The wire format, held fixed: every field of a job is written, in declaration order,
byte for byte as earlier releases wrote it, and any document at all decodes to a
job or a DecodeError (never an exception)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
import pytest
from conveyor.core import Attempt, ErrorInfo, Job, Metadata
from conveyor.core.job import UniqueLock
from conveyor.shell.codec import decode, encode, to_document
from conveyor.testing.strategies import jobs, json_values, names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

#: Documents as the previous encoder wrote them (the generic converter it replaced):
#: a new job with every default, and one with every field set, non-ASCII text included.
WRITTEN_BEFORE = [
    r"""{"id":"00000000-0000-4000-8000-000000000001","job_type":"work","args":{},"queue":"default","priority":"normal","status":"pending","created_at":"2026-01-01T00:00:00+00:00","run_at":"2026-01-01T00:00:00+00:00","max_retries":3,"retry_count":0,"attempt":0,"tenant_id":null,"started_at":null,"finished_at":null,"last_error":null,"result":null,"metadata":{"first_missing_at":null,"requeue_count":0,"reclaim_count":0,"prefetch_reclaims":0},"trace_context":null,"worker":null,"attempts":[],"unique":null,"timeout_ms":null,"partition_key":null,"v":1}""",
    r"""{"id":"12345678-1234-4678-9234-567812345678","job_type":"mail.send","args":{"to":"zo\u00eb@example.com","n":[1,2.5,null,true,{"k":"\u00e9\u2028"}],"big":1000000000000000000000000000000},"queue":"emails","priority":"high","status":"retrying","created_at":"2026-01-01T00:00:00+00:00","run_at":"2026-01-01T00:01:30+00:00","max_retries":5,"retry_count":2,"attempt":3,"tenant_id":"acme","started_at":"2026-01-01T00:00:05.123456+00:00","finished_at":"2026-01-01T00:00:06+00:00","last_error":{"type":"ValueError","message":"bad \"thing\"\nline","retryable":true,"traceback":"Traceback...\n  boom"},"result":{"ok":[1,"two"]},"metadata":{"first_missing_at":"2026-01-01T00:00:01+00:00","requeue_count":1,"reclaim_count":2,"prefetch_reclaims":3},"trace_context":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},"worker":"host:12:abcd","attempts":[{"number":1,"started_at":null,"finished_at":"2026-01-01T00:00:02+00:00","outcome":"reclaimed","worker":null,"error":null},{"number":2,"started_at":"2026-01-01T00:00:03+00:00","finished_at":"2026-01-01T00:00:04+00:00","outcome":"retried","worker":"host:12:abcd","error":{"type":"E","message":"m","retryable":false,"traceback":null}}],"unique":{"key":"k1","states":["pending","running"],"expires_at":"2026-01-01T00:01:00+00:00"},"timeout_ms":2500,"partition_key":null,"v":1}""",
]


#: Building a full job takes a while on a busy machine; that is not the code under test.
patient = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


def _names(cls: type) -> list[str]:
    return [field.name for field in attrs.fields(cls)]


@st.composite
def full_jobs(draw: Any) -> Job:
    """Any job, with the fields the shared strategy leaves at their defaults set too."""
    job = draw(jobs())
    lock = UniqueLock(
        draw(names),
        tuple(draw(st.sets(st.sampled_from(list(job.status.__class__)), min_size=1))),
        draw(st.none() | st.datetimes(timezones=st.just(UTC))),
    )
    return attrs.evolve(
        job,
        unique=draw(st.none() | st.just(lock)),
        timeout_ms=draw(st.none() | st.integers(1, 3_600_000)),
        partition_key=draw(st.none() | names),
        metadata=attrs.evolve(job.metadata, prefetch_reclaims=draw(st.integers(0, 5))),
    )


def test_every_field_of_a_job_is_written_in_declaration_order() -> None:
    job = decode(WRITTEN_BEFORE[1]).unwrap()
    assert list(to_document(job)) == [*_names(Job), "v"]


@pytest.mark.parametrize("cls", [ErrorInfo, Attempt, Metadata, UniqueLock])
def test_every_field_of_a_record_a_job_holds_is_written(cls: type) -> None:
    written = to_document(decode(WRITTEN_BEFORE[1]).unwrap())
    nested = {
        ErrorInfo: written["last_error"],
        Attempt: written["attempts"][1],
        Metadata: written["metadata"],
        UniqueLock: written["unique"],
    }[cls]
    assert list(nested) == _names(cls)


@pytest.mark.parametrize("text", WRITTEN_BEFORE, ids=["defaults", "every-field"])
def test_a_document_written_before_encodes_back_byte_for_byte(text: str) -> None:
    assert encode(decode(text).unwrap()) == text


def test_a_document_written_before_decodes_to_the_job_it_was() -> None:
    job = decode(WRITTEN_BEFORE[1]).unwrap()
    assert job.id == UUID("12345678-1234-4678-9234-567812345678")
    assert job.args["n"][4]["k"] == "\u00e9\u2028"
    assert job.run_at == datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=90)
    assert job.metadata.prefetch_reclaims == 3
    assert job.attempts[0].started_at is None and job.attempts[1].error == ErrorInfo(
        "E", "m", False
    )
    assert job.unique is not None and job.unique.key == "k1"
    assert job.timeout_ms == 2500


def test_a_document_without_a_field_added_later_decodes_to_its_default() -> None:
    doc = json.loads(WRITTEN_BEFORE[0])
    del doc["partition_key"], doc["timeout_ms"], doc["unique"], doc["metadata"]
    job = decode(json.dumps(doc)).unwrap()
    assert (job.partition_key, job.timeout_ms, job.unique) == (None, None, None)
    assert job.metadata == Metadata()


@patient
@given(full_jobs())
def test_a_job_with_every_field_set_round_trips(job: Job) -> None:
    assert decode(encode(job)) == Success(job)


@patient
@given(full_jobs())
def test_the_document_is_compact_json_with_the_version_last(job: Job) -> None:
    text = encode(job)
    assert text == json.dumps(json.loads(text), separators=(",", ":"))
    assert text.endswith(',"v":1}')


@patient
@given(full_jobs(), st.data())
def test_any_value_in_any_field_decodes_or_is_a_decode_error(job: Job, data: Any) -> None:
    doc = to_document(job)
    field = data.draw(st.sampled_from(sorted(doc)))
    doc[field] = data.draw(json_values)
    assert isinstance(decode(json.dumps(doc)), Success | Failure)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"status": ["pending"]}, "expected JobStatus @ $.status"),
        ({"priority": None}, "expected Priority @ $.priority"),
        ({"id": 7}, "expected UUID @ $.id"),
        ({"run_at": "0001-01-01T00:00:00+05:00"}, "$.run_at"),
        ({"attempts": "ab"}, "expected a list of Attempt @ $.attempts"),
        ({"metadata": []}, "expected Metadata @ $.metadata"),
        ({"unique": {"key": "k"}}, "required field missing @ $.unique.states"),
        ({"unique": {"key": "k", "states": ["gone"]}}, "$.unique.states[0]"),
        ({"partition_key": 3}, "$.partition_key"),
    ],
)
def test_a_field_of_the_wrong_shape_is_a_decode_error_naming_its_path(
    changes: dict[str, Any], reason: str
) -> None:
    doc = {**json.loads(WRITTEN_BEFORE[0]), **changes}
    result = decode(json.dumps(doc))
    assert isinstance(result, Failure)
    assert reason in str(result.failure())
