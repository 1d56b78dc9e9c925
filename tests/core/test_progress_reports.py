"""The checks on a progress report (`core.progress`): refused where it is made, naming
the field."""

from __future__ import annotations

from typing import Any

import pytest
from conveyor.core import MAX_PROGRESS_BYTES, FieldError, FrozenMap, Progress, make_progress
from core_support import NOW


def test_a_progress_report_keeps_a_fraction_and_a_frozen_value() -> None:
    made = make_progress(0.25, {"stage": "upload", "rows": [1, 2]}, NOW)
    assert made == Progress(0.25, FrozenMap({"stage": "upload", "rows": (1, 2)}), NOW)
    assert isinstance(made, Progress) and isinstance(made.fraction, float)


@pytest.mark.parametrize("fraction", [0, 1, 0.5, 1.0])
def test_a_fraction_from_zero_to_one_is_accepted(fraction: float) -> None:
    made = make_progress(fraction, None, NOW)
    assert isinstance(made, Progress) and made.fraction == fraction and made.value is None


@pytest.mark.parametrize(
    ("fraction", "why"),
    [
        (-0.01, "from 0 to 1"),
        (1.5, "from 0 to 1"),
        (float("nan"), "from 0 to 1, got nan"),
        (float("inf"), "from 0 to 1, got inf"),
        (1e300, "from 0 to 1, got 1e+300"),
        # Past any float: an OverflowError, then (past 4,300 digits) a ValueError.
        pytest.param(10**400, "from 0 to 1, got an integer past 2**64", id="10**400"),
        pytest.param(-(10**5000), "from 0 to 1, got an integer past 2**64", id="-10**5000"),
        (True, "a number"),
        ("0.5", "a number"),
    ],
)
def test_a_bad_fraction_is_refused_naming_the_field(fraction: object, why: str) -> None:
    made = make_progress(fraction, None, NOW)
    assert isinstance(made, FieldError)
    assert made.field == "fraction" and why in made.reason


def test_a_value_that_is_not_json_is_refused_with_its_path() -> None:
    made = make_progress(None, {"when": object()}, NOW)
    assert isinstance(made, FieldError)
    assert made.field == "value" and "value.when" in made.reason


class _RaisesWhenRead(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("boom")


def test_a_value_that_raises_while_it_is_read_is_refused_as_not_json() -> None:
    made = make_progress(None, {"rows": _RaisesWhenRead(a=1)}, NOW)
    assert isinstance(made, FieldError)
    assert made.field == "value" and "value.rows" in made.reason and "raised" in made.reason


def test_a_value_over_the_progress_limit_is_refused_with_its_size() -> None:
    made = make_progress(None, "x" * MAX_PROGRESS_BYTES, NOW)
    assert isinstance(made, FieldError)
    assert made.field == "value" and f"limit is {MAX_PROGRESS_BYTES} bytes" in made.reason


def test_a_report_with_neither_fraction_nor_value_is_refused() -> None:
    made = make_progress(None, None, NOW)
    assert isinstance(made, FieldError) and made.field == "progress"
