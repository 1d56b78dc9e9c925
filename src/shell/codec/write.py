"""Writing a job's wire document (see `codec`): `Job`'s own fields spelt out, and
the records it holds written by encoders derived once, at import, from their
`attrs.fields` and types."""

from __future__ import annotations

import enum
import json
import operator
import typing
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any
from uuid import UUID

import attrs

from ...core import Attempt, ErrorInfo, FrozenMap, Job, Metadata, thaw
from ...core.job import UniqueLock
from .types import items_of, optional_of

#: Fields added with defaults (`worker`, `attempts`, an error's `traceback`) keep the
#: version: a document without them decodes to the defaults, and a worker of the
#: previous release still reads a newer document (ignoring them) during an upgrade.
FORMAT_VERSION = 1

#: Turns a field's value into its JSON form; None where the value is its own form.
Encode = Callable[[Any], Any] | None


def _optional(encode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else encode(value)


def _list_of(encode: Encode) -> Callable[[Any], Any]:
    if encode is None:
        return list
    return lambda values: [encode(value) for value in values]


def _encoder(kind: Any) -> Encode:
    """How a value of type `kind` is written."""
    if kind in (str, int, bool, float):
        return None
    if kind is UUID:
        return str
    if kind is datetime:
        return datetime.isoformat
    if kind is FrozenMap or kind is Any:
        return thaw
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return attrgetter("value")
    if isinstance(kind, type) and attrs.has(kind):
        return _record_encoder(kind)
    inner = optional_of(kind)
    if inner is not None:
        encode = _encoder(inner)
        return None if encode is None else _optional(encode)
    item = items_of(kind)
    if item is not None:
        return _list_of(_encoder(item))
    raise TypeError(f"the job codec has no rule for writing {kind!r}")


def _record_encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    names = tuple(field.name for field in attrs.fields(cls))
    encoders = tuple(_encoder(hints[name]) for name in names)
    values_of = attrgetter(*names) if len(names) > 1 else (lambda obj: (getattr(obj, names[0]),))

    def write_record(obj: Any) -> dict[str, Any]:
        return {
            name: value if write is None else write(value)
            for name, write, value in zip(names, encoders, values_of(obj), strict=True)
        }

    return write_record


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def to_document(job: Job) -> dict[str, Any]:
    """The job as a plain JSON-ready dict, with the format version.

    `Job`'s own fields are spelt out (every claimed job is written back once);
    `test_codec_format` fails when a field of `Job` is missing here. The records it
    holds are written by the derived encoders.
    """
    created = job.created_at.isoformat()
    return {
        "id": str(job.id),
        "job_type": job.job_type,
        "args": thaw(job.args),
        "queue": job.queue,
        "priority": job.priority.value,
        "status": job.status.value,
        "created_at": created,
        # A job due at once is due when it was created: the same instant, written once.
        "run_at": created if job.run_at is job.created_at else job.run_at.isoformat(),
        "max_retries": job.max_retries,
        "retry_count": job.retry_count,
        "attempt": job.attempt,
        "tenant_id": job.tenant_id,
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "last_error": None if job.last_error is None else _encode_error(job.last_error),
        "result": thaw(job.result),
        "metadata": _encode_metadata(job.metadata),
        "trace_context": None if job.trace_context is None else thaw(job.trace_context),
        "worker": job.worker,
        "attempts": [_encode_attempt(attempt) for attempt in job.attempts],
        "unique": None if job.unique is None else _encode_unique(job.unique),
        "timeout_ms": job.timeout_ms,
        "partition_key": job.partition_key,
        "v": FORMAT_VERSION,
    }


_encode_error = _record_encoder(ErrorInfo)
_encode_metadata = _record_encoder(Metadata)
_encode_attempt = _record_encoder(Attempt)
_encode_unique = _record_encoder(UniqueLock)

#: One encoder, configured once (`json.dumps` with options builds one per call).
write_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


#: The document's leading fields, the ones jobs of one enqueue call differ in; every
#: other field of `Job` (derived here, so a new field is never left out) is its tail.
_HEAD = ("id", "job_type", "args")
_tail_of = attrgetter(*(f.name for f in attrs.fields(Job) if f.name not in _HEAD))


def _head_text(job: Job) -> str:
    """The document's text up to its tail: `{"id":...,"job_type":...,"args":{...}`."""
    return write_json({"id": str(job.id), "job_type": job.job_type, "args": thaw(job.args)})[:-1]


def write_jobs(jobs: Sequence[Job]) -> list[str]:
    """`write_json(to_document(job))` for each job, the same text, with the tail of the
    document written once for the jobs whose tail fields are the very objects of the
    first job's (an enqueue call's jobs, made from one validated job): each of those
    costs only its head."""
    if not jobs:
        return []
    first = jobs[0]
    whole = write_json(to_document(first))
    head = _head_text(first)
    if not whole.startswith(head):  # cannot happen for a dict written in field order
        return [whole, *(write_json(to_document(job)) for job in jobs[1:])]
    tail, shared = whole[len(head) :], _tail_of(first)
    texts = [whole]
    for job in jobs[1:]:
        if all(map(operator.is_, _tail_of(job), shared)):
            texts.append(_head_text(job) + tail)
        else:
            texts.append(write_json(to_document(job)))
    return texts
