"""The wire format: every job round-trips; anything else is a DecodeError, never a crash."""

from __future__ import annotations

import json
import pickle
import uuid

import attrs
import pytest
from conveyor.core import (
    MAX_ATTEMPTS_KEPT,
    MAX_TRACEBACK_CHARS,
    MAX_WORKER_CHARS,
    ErrorInfo,
    freeze,
)
from conveyor.shell.codec import FORMAT_VERSION, decode, encode, encode_many
from conveyor.testing.strategies import jobs
from helpers import make_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

#: Drawing a job takes a while on a busy machine; that is not the code under test.
patient = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


@patient
@given(jobs())
def test_every_job_round_trips(job) -> None:
    assert decode(encode(job)) == Success(job)


@patient
@given(jobs())
def test_bytes_round_trip_too(job) -> None:
    assert decode(encode(job).encode()) == Success(job)


def test_the_document_carries_its_format_version() -> None:
    assert json.loads(encode(make_job()))["v"] == FORMAT_VERSION


def _doc(**changes: object) -> str:
    doc = json.loads(encode(make_job()))
    doc.update(changes)
    return json.dumps(doc)


def test_a_document_written_without_a_trace_context_decodes_to_none() -> None:
    doc = json.loads(encode(make_job()))
    del doc["trace_context"]
    decoded = decode(json.dumps(doc))
    assert isinstance(decoded, Success)
    assert decoded.unwrap().trace_context is None


def test_a_document_written_before_attempts_were_kept_decodes_to_the_defaults() -> None:
    doc = json.loads(encode(make_job()))
    del doc["worker"], doc["attempts"]
    doc["last_error"] = {"type": "ValueError", "message": "boom", "retryable": True}
    decoded = decode(json.dumps(doc)).unwrap()
    assert decoded.worker is None
    assert decoded.attempts == ()
    assert decoded.last_error == ErrorInfo("ValueError", "boom", True, traceback=None)


def test_an_oversized_traceback_in_a_document_is_cut_to_its_end() -> None:
    error = {"type": "E", "message": "m", "retryable": True, "traceback": "x" * 50_000 + "END"}
    decoded = decode(_doc(last_error=error)).unwrap()
    assert decoded.last_error is not None and decoded.last_error.traceback is not None
    assert len(decoded.last_error.traceback) <= MAX_TRACEBACK_CHARS
    assert decoded.last_error.traceback.endswith("END")


_ATTEMPT = {
    "number": 1,
    "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": "2026-01-01T00:00:01+00:00",
    "outcome": "retried",
    "worker": "host:1:abc",
    "error": None,
}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (pickle.dumps({"job_type": "x"}), "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"v": 99}', "unknown format version"),
        ('{"v": 1}', "required field missing"),
        (_doc(status="zombie"), "status"),
        (_doc(attempt=-1), "attempt"),
        (_doc(attempt=True), "attempt"),
        (_doc(retry_count="3"), "retry_count"),
        (_doc(created_at="2026-01-01T00:00:00"), "created_at"),
        (_doc(job_type="a;drop table"), "job_type"),
        (_doc(args=[1]), "args"),
        (_doc(trace_context={"traceparent": 1}), "trace_context"),
        (_doc(trace_context={f"h{i}": "x" for i in range(9)}), "trace_context"),
        (_doc(trace_context={"traceparent": "x" * 2000}), "trace_context"),
        (_doc(trace_context=["00-abc"]), "trace_context"),
        (_doc(attempts=[_ATTEMPT] * (MAX_ATTEMPTS_KEPT + 1)), "attempts"),
        (_doc(attempts=[_ATTEMPT | {"outcome": "exploded"}]), "attempts"),
        (_doc(attempts=[_ATTEMPT | {"number": -1}]), "attempts"),
        (_doc(attempts=[_ATTEMPT | {"finished_at": "yesterday"}]), "attempts"),
        (_doc(attempts=[_ATTEMPT | {"started_at": "2026-01-01T00:00:00"}]), "attempts"),
        (_doc(attempts=[_ATTEMPT | {"worker": "w" * (MAX_WORKER_CHARS + 1)}]), "worker"),
        (_doc(attempts={"0": _ATTEMPT}), "attempts"),
        (_doc(worker=7), "worker"),
        (_doc(last_error={"type": "E", "message": "m", "traceback": 1}), "traceback"),
        ('{"v": 1, "x": NaN}', "not JSON"),
        ("[" * 50_000, "not JSON"),
    ],
)
def test_bad_payloads_are_decode_errors_naming_the_problem(payload, reason) -> None:
    result = decode(payload)
    assert isinstance(result, Failure)
    assert reason in str(result.failure())


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    assert isinstance(decode(data), Success | Failure)


@pytest.mark.parametrize(
    ("args", "path"),
    [({"\ud800": 1}, "$['\\ud800']"), ({"n": 10**5000}, "$.n")],
    ids=["surrogate-key", "int-5000-digits"],
)
def test_a_document_whose_args_no_job_may_hold_is_a_decode_error(args, path) -> None:
    from conveyor.shell.codec import from_document, to_document

    doc = {**to_document(make_job()), "args": args}
    result = from_document(doc)
    assert isinstance(result, Failure), result
    assert path in str(result.failure())


def test_a_payload_with_a_surrogate_key_is_a_decode_error_not_a_crash() -> None:
    doc = json.loads(encode(make_job()))
    text = json.dumps(doc).replace('"args": {}', '"args": {"\\ud800": 1}')
    assert "\\ud800" in text
    assert isinstance(decode(text), Failure)


@given(st.lists(jobs(), min_size=1, max_size=4), st.lists(st.integers(0, 3), max_size=6))
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_jobs_encoded_together_are_each_encoded_as_alone(picked, siblings) -> None:
    """The jobs of one call share the writing of their tail: the text is the same."""
    batch = list(picked)
    for n in siblings:  # jobs differing from one of them only in id and args
        base = picked[n % len(picked)]
        batch.append(attrs.evolve(base, id=uuid.uuid4(), args=freeze({"n": n, "s": "é"})))
    assert encode_many(batch) == [encode(job) for job in batch]


def test_a_sibling_shares_the_first_jobs_tail_and_keeps_its_own_args() -> None:
    first = make_job(args={"a": 1})
    sibling = attrs.evolve(first, id=uuid.uuid4(), args=freeze({"b": [2, "x"]}))
    other = attrs.evolve(first, id=uuid.uuid4(), queue="elsewhere")
    texts = encode_many([first, sibling, other])
    assert texts == [encode(first), encode(sibling), encode(other)]
    assert [decode(t).unwrap() for t in texts] == [first, sibling, other]
    assert encode_many([]) == []
