"""Reading what a carried record says of its job's outcome (`codec.read_outcome`): the
same as the whole job says, read without building it, and None for anything the codec
did not write (the waiter then reads the store)."""

from __future__ import annotations

import json

import attrs
import pytest
from conveyor.core import ErrorInfo, JobStatus, carried_outcome_of
from conveyor.shell.codec import decode, encode, read_outcome
from conveyor.testing.strategies import jobs
from helpers import make_job
from hypothesis import given
from hypothesis import strategies as st


@given(jobs())
def test_a_records_outcome_reads_as_the_whole_job_says_it(job) -> None:
    body = encode(job)
    assert read_outcome(body) == carried_outcome_of(decode(body).unwrap())
    assert read_outcome(body.encode()) == carried_outcome_of(job)


def test_a_failed_records_outcome_holds_its_last_error() -> None:
    error = ErrorInfo("ValueError", "bad input", retryable=False, traceback="Traceback ...")
    dead = attrs.evolve(make_job(), status=JobStatus.FAILED, attempt=2, last_error=error)
    carried = read_outcome(encode(dead))
    assert carried is not None
    assert (carried.status, carried.attempt, carried.last_error) == (JobStatus.FAILED, 2, error)


def test_a_completed_records_result_comes_back_as_plain_json() -> None:
    done = attrs.evolve(make_job(), status=JobStatus.COMPLETED, result={"rows": [1, {"k": None}]})
    carried = read_outcome(encode(done))
    assert carried is not None
    assert carried.result == {"rows": [1, {"k": None}]}
    assert type(carried.result["rows"]) is list


def _doc(**changes: object) -> str:
    return json.dumps({**json.loads(encode(make_job())), **changes})


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        '{"v": 1, "x": NaN}',
        _doc(v=99),
        _doc(id="not-a-uuid"),
        _doc(id=None),
        _doc(status="zombie"),
        _doc(attempt=-1),
        _doc(attempt=True),
        _doc(attempt="1"),
        _doc(last_error={"type": "E"}),
        _doc(last_error={"type": "E", "message": "m", "traceback": 1}),
        json.dumps({k: v for k, v in json.loads(encode(make_job())).items() if k != "status"}),
        b"\xff\xfe",
        "[" * 50_000,
    ],
)
def test_a_payload_the_codec_did_not_write_reads_as_none(payload: str | bytes) -> None:
    assert read_outcome(payload) is None


@given(st.binary(max_size=200))
def test_arbitrary_bytes_read_as_none_never_as_an_error(data: bytes) -> None:
    assert read_outcome(data) is None
