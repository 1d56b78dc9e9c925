"""Deeply immutable JSON values.

A `Job` is frozen, and frozen outside must mean frozen inside: a handler or a
middleware that could mutate a job's args in place would change a record every
other reader shares. JSON objects become `FrozenMap`, arrays become tuples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | tuple[JsonValue, ...] | FrozenMap | None"

#: The most digits an integer may have: what Python's `json` reads back by default
#: (`sys.get_int_max_str_digits()`), so whatever one process encodes, another decodes.
MAX_INT_DIGITS = 4300
_INT_BOUND = 10**MAX_INT_DIGITS
#: Longer keys are shortened in error paths, which end up on one line of a terminal.
_PATH_KEY_CHARS = 40


class FrozenMap(Mapping[str, Any]):
    """A read-only, hashable mapping with string keys (a frozen JSON object)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})
        self._hash: int | None = None

    @classmethod
    def _adopt(cls, data: dict[str, Any]) -> FrozenMap:
        """A map over `data` itself, not a copy: for a dict nobody else holds."""
        frozen = cls.__new__(cls)
        frozen._data = data
        frozen._hash = None
        return frozen

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


class NotJson(ValueError):
    """A value that has no JSON form (with the path to the offending part)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _key_path(path: str, key: str) -> str:
    """`path.key`, with a key that is long or not plainly printable quoted in escapes."""
    if key.isprintable() and len(key) <= _PATH_KEY_CHARS and "." not in key and "[" not in key:
        return f"{path}.{key}"
    shown = key if len(key) <= _PATH_KEY_CHARS else key[:_PATH_KEY_CHARS] + "..."
    return f"{path}[{shown!a}]"


def _check_int(value: int, path: str) -> int:
    if -_INT_BOUND < value < _INT_BOUND:
        return value
    raise NotJson(path, f"integer has more than {MAX_INT_DIGITS} digits")


def _check_text(value: str, path: str, what: str = "string") -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise NotJson(path, f"{what} is not valid Unicode (a lone surrogate)") from None
    return value


class _Unusual(Exception):
    """A value `_freeze_plain` leaves to `freeze`'s careful walk."""


#: Integers this small need no digit count (the careful walk checks the rest).
_PLAIN_INT = 10**18


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _freeze_plain(value: Any, depth: int, max_depth: int) -> Any:
    """`freeze` for the common case, plain `dict`/`list` JSON of ordinary values,
    without building an error path per key; raises `_Unusual` for anything else,
    which `freeze` then walks carefully (and names the path of a bad value)."""
    kind = type(value)
    if depth > max_depth:
        raise _Unusual
    if kind is str:
        if value.isascii() or _encodes(value):  # ASCII text holds no lone surrogate
            return value
        raise _Unusual
    if kind is int:
        if -_PLAIN_INT < value < _PLAIN_INT:
            return value
        raise _Unusual
    if value is None or kind is bool:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise _Unusual
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _encodes(key)):
                raise _Unusual
            out[key] = _freeze_plain(item, depth + 1, max_depth)
        return FrozenMap._adopt(out)
    if kind is list or kind is tuple:
        return tuple([_freeze_plain(item, depth + 1, max_depth) for item in value])
    raise _Unusual


def freeze(value: Any, *, path: str = "$", depth: int = 0, max_depth: int = 32) -> Any:
    """Return a deeply immutable copy of a JSON value, or raise `NotJson`.

    Only JSON types are accepted: `dict` with `str` keys, `list`/`tuple`, `str`,
    `int`, finite `float`, `bool` and `None`. Anything else (bytes, sets, objects,
    NaN, infinities) is rejected with the path to it, so a payload can never carry
    something that needs code to rebuild.
    """
    try:
        return _freeze_plain(value, depth, max_depth)
    except _Unusual:
        return _freeze(value, path, depth, max_depth)


def _freeze(value: Any, path: str, depth: int, max_depth: int) -> Any:
    try:
        return _walk(value, path, depth, max_depth)
    except NotJson:
        raise
    except Exception as exc:
        # An object of the caller's that raises as it is read (its items(), iteration
        # or str()) has no JSON form: said at the deepest path that raised, never left
        # to escape as the caller's own error (a worker would then record nothing).
        raise NotJson(path, f"reading it raised {type(exc).__name__}{_said(exc)}") from exc


def _said(exc: Exception) -> str:
    try:
        text = str(exc)
    except Exception:
        return ""
    return f": {text[:200]}" if text else ""


def _walk(value: Any, path: str, depth: int, max_depth: int) -> Any:
    if depth > max_depth:
        raise NotJson(path, f"nested deeper than {max_depth} levels")
    if value is None or type(value) is bool:
        return value
    if type(value) is int:
        return _check_int(value, path)
    if type(value) is str:
        return _check_text(value, path)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _check_int(int(value), path)  # an IntEnum and friends become plain JSON numbers
    if isinstance(value, str):
        return _freeze(str(value), path, depth, max_depth)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(path, "NaN and infinities are not JSON")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJson(path, f"object keys must be strings, got {type(key).__name__}")
            key = _check_text(str(key), _key_path(path, key), "key")
            out[key] = _freeze(item, _key_path(path, key), depth + 1, max_depth)
        return FrozenMap._adopt(out)
    if isinstance(value, list | tuple):
        return tuple(
            _freeze(item, f"{path}[{i}]", depth + 1, max_depth) for i, item in enumerate(value)
        )
    raise NotJson(path, f"{type(value).__name__} is not a JSON type")


#: Values `thaw` returns as they are, looked up by exact type before the ABC checks.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def thaw(value: Any) -> Any:
    """Return plain `dict`/`list` JSON for a frozen value (for encoders and handlers)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is FrozenMap:
        return {
            key: item if type(item) in _LEAVES else thaw(item) for key, item in value._data.items()
        }
    if kind is tuple:
        return [item if type(item) in _LEAVES else thaw(item) for item in value]
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


def json_size(value: Any) -> int:
    """Bytes of the compact UTF-8 JSON encoding of a (frozen or plain) value."""
    return len(_SIZE_TEXT(thaw(value)).encode("utf-8"))


#: Configured once: `json.dumps` with options builds an encoder per call.
_SIZE_TEXT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
