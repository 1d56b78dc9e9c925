"""Reading a job's wire document (see `codec`): decoders derived once, at import,
from the `attrs.fields` and types of `Job` and the records it holds, so a field added
to them is read without a change here, and a field of a type with no rule here stops
the import rather than being dropped. A value its field cannot hold raises `Invalid`,
which names where in the document it sits."""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs

from ...core import ErrorInfo, FrozenMap, Job, JobStatus, freeze
from ...core.frozen import NotJson
from .types import items_of, optional_of


class Invalid(Exception):
    """A value its field cannot hold; `path` grows as the error leaves nested values."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def __str__(self) -> str:
        return f"{self.reason} @ $" + "".join(reversed(self.path))


#: Turns a decoded JSON value into a field's value, or raises `Invalid`.
Parse = Callable[[Any], Any]

_MISSING = object()


def _shown(kind: Any) -> str:
    inner = optional_of(kind)
    if inner is not None:
        return f"{_shown(inner)} | None"
    item = items_of(kind)
    if item is not None:
        return f"a list of {_shown(item)}"
    return getattr(kind, "__name__", None) or repr(kind)


def _wrong(kind: Any) -> Invalid:
    return Invalid(f"invalid value for type, expected {_shown(kind)}")


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
        raise Invalid(f"invalid value for type, expected datetime: {value[:40]!r} has no timezone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise Invalid("invalid value for type, expected datetime: out of range in UTC") from None


def _parse_json(value: Any) -> Any:
    try:
        return freeze(value)
    except NotJson as exc:
        raise Invalid(f"not JSON at {exc.path}: {exc.reason}") from None
    except RecursionError:
        raise Invalid("nested too deeply") from None


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
            except Invalid as bad:
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
    inner = optional_of(kind)
    if inner is not None:
        return _optional_parser(_decoder(inner))
    item = items_of(kind)
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
        inner = optional_of(kind)
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
                        raise Invalid("required field missing")
                    continue  # the field's default applies
                if value is None and nullable:
                    values[name] = None
                elif exact is not None:
                    if type(value) is not exact:
                        raise Invalid(f"invalid value for type, expected {shown}")
                    values[name] = value
                else:
                    assert parse is not None
                    values[name] = parse(value)
        except Invalid as bad:
            bad.path.append(f".{name}")
            raise
        return cls(**values)

    return read_record


read_job = _record_decoder(Job)
read_error = _record_decoder(ErrorInfo)
read_status = _enum_parser(JobStatus)
read_id = _parse_uuid


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: One decoder, configured once: NaN and Infinity are not JSON.
read_json = json.JSONDecoder(parse_constant=_reject_constant).decode
