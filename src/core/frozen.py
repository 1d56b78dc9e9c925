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


def freeze(value: Any, *, path: str = "$", depth: int = 0, max_depth: int = 32) -> Any:
    """Return a deeply immutable copy of a JSON value, or raise `NotJson`.

    Only JSON types are accepted: `dict` with `str` keys, `list`/`tuple`, `str`,
    `int`, finite `float`, `bool` and `None`. Anything else (bytes, sets, objects,
    NaN, infinities) is rejected with the path to it, so a payload can never carry
    something that needs code to rebuild.
    """
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
        return freeze(str(value), path=path, depth=depth, max_depth=max_depth)
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
            out[key] = freeze(item, path=_key_path(path, key), depth=depth + 1, max_depth=max_depth)
        return FrozenMap(out)
    if isinstance(value, list | tuple):
        return tuple(
            freeze(item, path=f"{path}[{i}]", depth=depth + 1, max_depth=max_depth)
            for i, item in enumerate(value)
        )
    raise NotJson(path, f"{type(value).__name__} is not a JSON type")


def thaw(value: Any) -> Any:
    """Return plain `dict`/`list` JSON for a frozen value (for encoders and handlers)."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


def json_size(value: Any) -> int:
    """Bytes of the compact UTF-8 JSON encoding of a (frozen or plain) value."""
    text = json.dumps(thaw(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(text.encode("utf-8"))
