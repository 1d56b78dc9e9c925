"""A queue's limits refuse, from Python as from a config file, what can never apply:
a weight or a rate period past 1e9, and a weight keyed by what no partition can be
(the default partition `""` may be weighed)."""

from __future__ import annotations

import pytest
from conveyor.core import ValidationError
from conveyor.core.limits import QueueLimits, Rate


@pytest.mark.parametrize("seconds", [1e9, 1e12, float("inf")])
def test_a_rate_period_past_31_years_is_refused_as_in_a_config_file(seconds: float) -> None:
    with pytest.raises(ValidationError) as refused:
        Rate(1, per_seconds=seconds)
    assert "below 1e9 (31 years)" in str(refused.value)
    assert Rate(1, per_seconds=999_999_999).per_seconds == 999_999_999


@pytest.mark.parametrize("weight", [1e9, 1e12])
def test_a_weight_past_1e9_is_refused_as_in_a_config_file(weight: float) -> None:
    with pytest.raises(ValidationError) as refused:
        QueueLimits(fair=True, weights={"a": weight})
    assert refused.value.fields == ("QueueLimits.weights.a",)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("a\tb", "must not hold control characters"),
        ("p" * 201, "must be at most 200 characters"),
        ("two\nlines", "must be one line"),
    ],
)
def test_a_weight_keyed_by_what_no_partition_can_be_is_refused(key: str, reason: str) -> None:
    with pytest.raises(ValidationError) as refused:
        QueueLimits(fair=True, weights={key: 2})
    assert refused.value.fields == ("QueueLimits.weights",)
    assert reason in str(refused.value)


def test_the_default_partition_may_be_weighed() -> None:
    assert QueueLimits(fair=True, weights={"": 2, "acme": 1}).weight("") == 2
