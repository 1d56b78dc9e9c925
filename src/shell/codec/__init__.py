"""The wire format: one JSON document per job, the same on every backend.

The document is the job's attrs fields in declaration order (nested records as
objects, times as ISO-8601 text, enums as their values), plus a format version
`v`. It is written and read by hand here rather than by a generic converter, which
cost a large share of a job's Python per claim:

* `to_document` spells out `Job`'s own fields (a test holds it to `attrs.fields`,
  so a new field cannot be left out); the records a job holds are written by
  encoders derived from their `attrs.fields` and types, once, at import.
* Decoding is driven by tables derived the same way: a field added to `Job` or
  to a record it holds is read without a change here, and a field of a type with
  no rule here stops the import rather than being dropped.

Decoding returns a `Result`, so a malformed, foreign or hostile payload is a
`DecodeError` value (dead-lettered as `decode-error`), never a crash and never
anything imported or unpickled.

This module is the codec's face; the writing is in `codec_write`, the reading in
`codec_read`, and the checks of a decoded job against what the core writes in
`codec_checks`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from ...core import CarriedOutcome, Job
from .checks import forged_field
from .read import Invalid, read_error, read_id, read_job, read_json, read_status
from .write import FORMAT_VERSION, to_document, write_jobs, write_json

__all__ = [
    "FORMAT_VERSION",
    "DecodeError",
    "decode",
    "encode",
    "encode_many",
    "from_document",
    "peek_id",
    "read_outcome",
    "to_document",
]


@attrs.frozen(slots=True)
class DecodeError:
    """Why a payload is not a job."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def encode(job: Job) -> str:
    """The job's wire form: compact JSON text."""
    return write_json(to_document(job))


def encode_many(jobs: Sequence[Job]) -> list[str]:
    """`encode` of each job, in order; the jobs of one enqueue call share the cost of
    everything but their ids and args."""
    return write_jobs(jobs)


def from_document(doc: Any) -> Result[Job, DecodeError]:
    """A job from a decoded JSON document, or why not."""
    if not isinstance(doc, dict):
        return Failure(DecodeError(f"expected a JSON object, got {type(doc).__name__}"))
    version = doc.get("v")
    if version != FORMAT_VERSION:
        return Failure(DecodeError(f"unknown format version {version!r}"))
    try:
        job: Job = read_job(doc)
    except Invalid as exc:
        return Failure(DecodeError(f"not a job document: {str(exc)[:500]}"))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return Failure(DecodeError(f"not a job document: {type(exc).__name__}: {str(exc)[:300]}"))
    problem = forged_field(job)
    if problem is not None:
        return Failure(DecodeError(f"forged or corrupt field: {problem}"))
    return Success(job)


def decode(payload: str | bytes) -> Result[Job, DecodeError]:
    """A job from its wire form, or a `DecodeError` (never an exception)."""
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        doc = read_json(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Failure(DecodeError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}"))
    return from_document(doc)


def read_outcome(payload: str | bytes) -> CarriedOutcome | None:
    """What a record's wire form says of its job's outcome (`CarriedOutcome`), read
    without building the job; None when it is not a record this codec wrote (the
    caller then reads the store, which says what went wrong). The result comes back
    as the plain JSON values it was written as."""
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        doc = read_json(text)
        if type(doc) is not dict or doc.get("v") != FORMAT_VERSION:
            return None
        attempt, error = doc["attempt"], doc.get("last_error")
        if type(attempt) is not int or attempt < 0:
            return None
        return CarriedOutcome(
            read_id(doc["id"]),
            read_status(doc["status"]),
            attempt,
            doc.get("result"),
            None if error is None else read_error(error),
        )
    except (Invalid, KeyError, UnicodeDecodeError, ValueError, TypeError, RecursionError):
        return None


def peek_id(payload: str | bytes) -> str:
    """Best-effort id of an undecodable payload, for the dead-letter record."""
    try:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            return str(doc["id"])[:64]
    except (ValueError, RecursionError):
        pass
    return "unknown"
