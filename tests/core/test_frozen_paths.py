"""`freeze` takes a quick walk for plain JSON and a careful one for the rest; both give
the same frozen value, and the same error naming the same path."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from conveyor.core import FrozenMap, freeze, thaw
from conveyor.core.frozen import NotJson, _freeze
from hypothesis import given
from hypothesis import strategies as st

#: JSON-ish values with the awkward cases mixed in: non-ASCII and surrogate text, huge
#: integers, non-finite floats, tuples, frozen maps, non-string keys, foreign objects.
awkward_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**17, max_value=10**19)
    | st.floats()
    | st.text(max_size=6)
    | st.just("\ud800")
    | st.just(b"bytes")
)
awkward = st.recursive(
    awkward_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.just("\udfff"), inner, max_size=3)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3).map(FrozenMap)
        | st.dictionaries(st.integers(0, 3), inner, max_size=2)
    ),
    max_leaves=10,
)


def _careful(value: Any, max_depth: int) -> Any:
    try:
        return ("ok", _freeze(value, "$", 0, max_depth))
    except NotJson as exc:
        return ("error", str(exc))


def _quick(value: Any, max_depth: int) -> Any:
    try:
        return ("ok", freeze(value, max_depth=max_depth))
    except NotJson as exc:
        return ("error", str(exc))


def _shape(value: Any) -> Any:
    # Equality alone would let a list pass for a tuple, or a dict for a FrozenMap.
    if isinstance(value, FrozenMap):
        return ("map", tuple((k, _shape(v)) for k, v in value.items()))
    if isinstance(value, tuple):
        return ("tuple", tuple(_shape(v) for v in value))
    return (type(value), value)


@given(awkward, st.integers(0, 4))
def test_the_quick_walk_freezes_exactly_as_the_careful_one(value: Any, max_depth: int) -> None:
    quick, careful = _quick(value, max_depth), _careful(value, max_depth)
    assert quick[0] == careful[0]
    if quick[0] == "ok":
        assert _shape(quick[1]) == _shape(careful[1])
    else:
        assert quick == careful


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1, {"b": float("nan")}]}, "$.a[1].b"),
        ({"a": {"\ud800": 1}}, "$.a['\\ud800']"),
        ({"n": 10**5000}, "$.n"),
        ({"é": [b"x"]}, "$.é[0]"),
    ],
)
def test_a_value_the_quick_walk_leaves_is_named_by_its_path(value: Any, path: str) -> None:
    with pytest.raises(NotJson) as caught:
        freeze(value)
    assert caught.value.path == path


@given(awkward)
def test_thaw_undoes_freeze(value: Any) -> None:
    try:
        frozen = freeze(value)
    except NotJson:
        return
    assert freeze(thaw(frozen)) == frozen
    assert _shape(freeze(thaw(frozen))) == _shape(frozen)


class _MapThatRaises(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter boom")

    def __len__(self) -> int:
        return 1

    def items(self) -> Any:
        raise RuntimeError("items boom")


class _ListThatRaises(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("list iter boom")


class _TextThatRaises(str):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (_MapThatRaises(), "$"),
        ({"rows": _ListThatRaises([1])}, "$.rows"),
        ([1, _TextThatRaises("x")], "$[1]"),
    ],
)
def test_a_value_that_raises_while_it_is_read_is_not_json_at_its_path(
    value: Any, path: str
) -> None:
    # A handler's object that raises as it is walked is a value with no JSON form,
    # not an error of the caller's: the worker would otherwise never record the job.
    with pytest.raises(NotJson, match="raised RuntimeError") as raised:
        freeze(value)
    assert raised.value.path == path
