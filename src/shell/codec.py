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
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Union
from uuid import UUID

import attrs
from returns.result import Failure, Result, Success

from ..core import (
    MAX_ATTEMPTS_KEPT,
    MAX_WORKER_CHARS,
    Attempt,
    ErrorInfo,
    FrozenMap,
    Job,
    Metadata,
    freeze,
    thaw,
)
from ..core.frozen import NotJson
from ..core.job import UniqueLock
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


# ---- encoding --------------------------------------------------------------------

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
    inner = _optional_of(kind)
    if inner is not None:
        encode = _encoder(inner)
        return None if encode is None else _optional(encode)
    item = _items_of(kind)
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


def _optional_of(kind: Any) -> Any:
    """`X` for `X | None`, else None."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(rest) == 1 and len(typing.get_args(kind)) == 2:
            return rest[0]
    return None


def _items_of(kind: Any) -> Any:
    """`X` for `tuple[X, ...]`, else None."""
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


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


def encode(job: Job) -> str:
    """The job's wire form: compact JSON text."""
    return _JSON_OUT(to_document(job))


# ---- decoding --------------------------------------------------------------------


class _Invalid(Exception):
    """A value its field cannot hold; `path` grows as the error leaves nested values."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def __str__(self) -> str:
        return f"{self.reason} @ $" + "".join(reversed(self.path))


#: Turns a decoded JSON value into a field's value, or raises `_Invalid`.
Parse = Callable[[Any], Any]

_MISSING = object()


def _shown(kind: Any) -> str:
    inner = _optional_of(kind)
    if inner is not None:
        return f"{_shown(inner)} | None"
    item = _items_of(kind)
    if item is not None:
        return f"a list of {_shown(item)}"
    return getattr(kind, "__name__", None) or repr(kind)


def _wrong(kind: Any) -> _Invalid:
    return _Invalid(f"invalid value for type, expected {_shown(kind)}")


def _strict(kind: type) -> Parse:
    def parse(value: Any) -> Any:
        # bool is an int in Python; a forged `"attempt": true` is not a count.
        if type(value) is not kind:
            raise _wrong(kind)
        return value

    return parse


def _parse_float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise _wrong(float)


def _parse_uuid(value: Any) -> UUID:
    if type(value) is not str:
        raise _wrong(UUID)
    try:
        return UUID(value)
    except ValueError:
        raise _wrong(UUID) from None


def _parse_time(value: Any) -> datetime:
    if type(value) is not str:
        raise _wrong(datetime)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _wrong(datetime) from None
    if parsed.tzinfo is None:
        raise _Invalid(f"invalid value for type, expected datetime: {value[:40]!r} has no timezone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise _Invalid("invalid value for type, expected datetime: out of range in UTC") from None


def _parse_json(value: Any) -> Any:
    try:
        return freeze(value)
    except NotJson as exc:
        raise _Invalid(f"not JSON at {exc.path}: {exc.reason}") from None
    except RecursionError:
        raise _Invalid("nested too deeply") from None


def _parse_frozen_map(value: Any) -> FrozenMap:
    if type(value) is not dict:
        raise _wrong(FrozenMap)
    frozen = _parse_json(value)
    assert isinstance(frozen, FrozenMap)
    return frozen


def _enum_parser(kind: type[enum.Enum]) -> Parse:
    members = {member.value: member for member in kind}

    def parse(value: Any) -> Any:
        try:
            return members[value]
        except (KeyError, TypeError):  # TypeError: an unhashable value (an array)
            raise _wrong(kind) from None

    return parse


def _optional_parser(inner: Parse) -> Parse:
    return lambda value: None if value is None else inner(value)


def _tuple_parser(kind: Any, item: Parse) -> Parse:
    def parse(values: Any) -> tuple[Any, ...]:
        if type(values) is not list and type(values) is not tuple:
            raise _wrong(kind)
        out = []
        for i, value in enumerate(values):
            try:
                out.append(item(value))
            except _Invalid as bad:
                bad.path.append(f"[{i}]")
                raise
        return tuple(out)

    return parse


def _decoder(kind: Any) -> Parse:
    """How a value of type `kind` is read from its JSON form."""
    if kind in (str, int, bool):
        return _strict(kind)
    if kind is float:
        return _parse_float
    if kind is UUID:
        return _parse_uuid
    if kind is datetime:
        return _parse_time
    if kind is FrozenMap:
        return _parse_frozen_map
    if kind is Any:
        return _parse_json
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _enum_parser(kind)
    if isinstance(kind, type) and attrs.has(kind):
        return _record_decoder(kind)
    inner = _optional_of(kind)
    if inner is not None:
        return _optional_parser(_decoder(inner))
    item = _items_of(kind)
    if item is not None:
        return _tuple_parser(kind, _decoder(item))
    raise TypeError(f"the job codec has no rule for reading {kind!r}")


def _record_decoder(cls: type) -> Parse:
    hints = typing.get_type_hints(cls)
    # Per field: name, required, nullable, the exact type of a plain value (checked
    # inline, the common case) or else its parser, and its type as errors name it.
    specs: list[tuple[str, bool, bool, type | None, Parse | None, str]] = []
    for field in attrs.fields(cls):
        kind = hints[field.name]
        inner = _optional_of(kind)
        base = kind if inner is None else inner
        exact = base if base in (str, int, bool) else None
        parse = None if exact is not None else _decoder(base)
        required = field.default is attrs.NOTHING
        specs.append((field.name, required, inner is not None, exact, parse, _shown(kind)))

    def read_record(doc: Any) -> Any:
        if type(doc) is not dict:
            raise _wrong(cls)
        values: dict[str, Any] = {}
        name = ""
        try:
            for name, required, nullable, exact, parse, shown in specs:
                value = doc.get(name, _MISSING)
                if value is _MISSING:
                    if required:
                        raise _Invalid("required field missing")
                    continue  # the field's default applies
                if value is None and nullable:
                    values[name] = None
                elif exact is not None:
                    if type(value) is not exact:
                        raise _Invalid(f"invalid value for type, expected {shown}")
                    values[name] = value
                else:
                    assert parse is not None
                    values[name] = parse(value)
        except _Invalid as bad:
            bad.path.append(f".{name}")
            raise
        return cls(**values)

    return read_record


_encode_error = _record_encoder(ErrorInfo)
_encode_metadata = _record_encoder(Metadata)
_encode_attempt = _record_encoder(Attempt)
_encode_unique = _record_encoder(UniqueLock)
_decode_job = _record_decoder(Job)
#: One encoder and one decoder, configured once (`json.dumps` with options builds one per call).
_JSON_OUT = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_JSON_IN = json.JSONDecoder(parse_constant=_reject_constant).decode


_LIMITS = Limits()


def _check(job: Job) -> str | None:
    for field, name in (("job_type", job.job_type), ("queue", job.queue)):
        problem = check_name(field, name, _LIMITS)
        if problem is not None:
            return str(problem)
    if job.tenant_id is not None and check_name("tenant_id", job.tenant_id) is not None:
        return "tenant_id: not a valid name"
    if job.max_retries < 0 or job.retry_count < 0 or job.attempt < 0:
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
        job: Job = _decode_job(doc)
    except _Invalid as exc:
        return Failure(DecodeError(f"not a job document: {str(exc)[:500]}"))
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return Failure(DecodeError(f"not a job document: {type(exc).__name__}: {str(exc)[:300]}"))
    problem = _check(job)
    if problem is not None:
        return Failure(DecodeError(f"forged or corrupt field: {problem}"))
    return Success(job)


def decode(payload: str | bytes) -> Result[Job, DecodeError]:
    """A job from its wire form, or a `DecodeError` (never an exception)."""
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        doc = _JSON_IN(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Failure(DecodeError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}"))
    return from_document(doc)


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
