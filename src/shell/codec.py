"""The wire format: one JSON document per job, the same on every backend.

One private cattrs converter, configured once, here. The document carries a
format version `v`; decoding returns a `Result`, so a malformed, foreign or
hostile payload is a `DecodeError` value (dead-lettered as `decode-error`),
never a crash and never anything imported or unpickled.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs
import cattrs
from cattrs.v import format_exception
from returns.result import Failure, Result, Success

from ..core import (
    MAX_ATTEMPTS_KEPT,
    MAX_WORKER_CHARS,
    FrozenMap,
    Job,
    freeze,
    thaw,
)
from ..core.frozen import NotJson
from ..core.timeouts import MAX_TIMEOUT_MS
from ..core.validation import Limits, check_name

#: Fields added with defaults (`worker`, `attempts`, an error's `traceback`) keep the
#: version: a document without them decodes to the defaults, and a worker of the
#: previous release still reads a newer document (ignoring them) during an upgrade.
FORMAT_VERSION = 1


@attrs.frozen(slots=True)
class DecodeError:
    """Why a payload is not a job."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def _parse_time(value: Any, _: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO-8601 string, got {type(value).__name__}")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no timezone")
    return parsed.astimezone(UTC)


def _parse_frozen_map(value: Any, _: Any) -> FrozenMap:
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    frozen = freeze(value)
    assert isinstance(frozen, FrozenMap)
    return frozen


def _parse_strict(kind: type) -> Any:
    def parse(value: Any, _: Any) -> Any:
        # bool is an int in Python; a forged `"attempt": true` is not a count.
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return parse


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=False)
    conv.register_unstructure_hook(datetime, lambda d: d.isoformat())
    conv.register_structure_hook(datetime, _parse_time)
    conv.register_unstructure_hook(UUID, str)
    conv.register_structure_hook(UUID, lambda v, _: UUID(_parse_strict(str)(v, None)))
    conv.register_unstructure_hook(FrozenMap, thaw)
    conv.register_structure_hook(FrozenMap, _parse_frozen_map)
    conv.register_structure_hook(int, _parse_strict(int))
    conv.register_structure_hook(str, _parse_strict(str))
    conv.register_structure_hook(bool, _parse_strict(bool))
    conv.register_structure_hook(Any, lambda v, _: freeze(v))
    return conv


_CONVERTER = _make_converter()


def to_document(job: Job) -> dict[str, Any]:
    """The job as a plain JSON-ready dict, with the format version."""
    doc: dict[str, Any] = _CONVERTER.unstructure(job)
    doc["result"] = thaw(job.result)
    doc["v"] = FORMAT_VERSION
    return doc


def encode(job: Job) -> str:
    """The job's wire form: compact JSON text."""
    return json.dumps(to_document(job), separators=(",", ":"), allow_nan=False)


def _check(job: Job) -> str | None:
    for field, name in (("job_type", job.job_type), ("queue", job.queue)):
        problem = check_name(field, name, Limits())
        if problem is not None:
            return str(problem)
    if job.tenant_id is not None and check_name("tenant_id", job.tenant_id) is not None:
        return "tenant_id: not a valid name"
    for field in ("max_retries", "retry_count", "attempt"):
        if getattr(job, field) < 0:
            return f"{field}: must be >= 0"
    if job.metadata.requeue_count < 0 or job.metadata.reclaim_count < 0:
        return "metadata: counters must be >= 0"
    if job.timeout_ms is not None and not 0 < job.timeout_ms <= MAX_TIMEOUT_MS:
        return f"timeout_ms: must be between 1 and {MAX_TIMEOUT_MS}"
    return _check_attempts(job) or _check_trace_context(job.trace_context)


def _check_attempts(job: Job) -> str | None:
    # The core never writes more than these bounds; a document that does was not
    # written by it. (A traceback needs no check: `ErrorInfo` cuts it to its end.)
    if len(job.attempts) > MAX_ATTEMPTS_KEPT:
        return f"attempts: more than {MAX_ATTEMPTS_KEPT}"
    workers = [job.worker]
    for attempt in job.attempts:
        if attempt.number < 0:
            return "attempts: number must be >= 0"
        workers.append(attempt.worker)
    if any(worker is not None and len(worker) > MAX_WORKER_CHARS for worker in workers):
        return f"worker: longer than {MAX_WORKER_CHARS} characters"
    return None


#: Bounds on a carried trace context: W3C `traceparent` is 55 characters and
#: `tracestate` at most 32 entries of a few hundred; a propagator may add a few more.
MAX_TRACE_HEADERS = 8
MAX_TRACE_VALUE = 1024


def _check_trace_context(context: FrozenMap | None) -> str | None:
    # The worker hands these to a propagator as HTTP-like headers: strings only, bounded.
    if context is None:
        return None
    if len(context) > MAX_TRACE_HEADERS:
        return f"trace_context: more than {MAX_TRACE_HEADERS} headers"
    for key, value in context.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > MAX_TRACE_VALUE:
            return "trace_context: headers must be short strings"
    return None


def from_document(doc: Any) -> Result[Job, DecodeError]:
    """A job from a decoded JSON document, or why not."""
    if not isinstance(doc, dict):
        return Failure(DecodeError(f"expected a JSON object, got {type(doc).__name__}"))
    version = doc.get("v")
    if version != FORMAT_VERSION:
        return Failure(DecodeError(f"unknown format version {version!r}"))
    try:
        job = _CONVERTER.structure(doc, Job)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        return Failure(DecodeError(f"not a job document: {_describe(exc)}"))
    problem = _check(job)
    if problem is not None:
        return Failure(DecodeError(f"forged or corrupt field: {problem}"))
    return Success(job)


def decode(payload: str | bytes) -> Result[Job, DecodeError]:
    """A job from its wire form, or a `DecodeError` (never an exception)."""
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        doc = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Failure(DecodeError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}"))
    return from_document(doc)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _explain(exc: BaseException, type_: Any) -> str:
    # cattrs would say only "invalid value"; the path inside the args is the useful part.
    if isinstance(exc, NotJson):
        return f"not JSON at {exc.path}: {exc.reason}"
    return format_exception(exc, type_)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        parts = cattrs.transform_error(exc, format_exception=_explain)
        return "; ".join(parts)[:500]
    return f"{type(exc).__name__}: {str(exc)[:300]}"


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
