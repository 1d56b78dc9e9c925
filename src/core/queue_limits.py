"""The limits a queue may declare: fair shares with weights, caps on running jobs
and rates of starts (the policy that applies them is `core.claim_plan`; the theory is
in `core.limits`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .field_checks import integer_at_least, optional_name, refuse, switch
from .partitions import DEFAULT_PARTITION, check_partition

#: Weights and rate periods (in seconds: 31 years) stay below this, from Python as
#: from a config file.
MAX_LIMIT_NUMBER = 1e9


def _limit_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value < MAX_LIMIT_NUMBER
    )


def period_problem(value: object) -> str | None:
    """Why `value` is no rate's period in seconds (None when it is one)."""
    if _limit_number(value):
        return None
    return f"must be a number of seconds > 0 and below 1e9 (31 years), got {value!r}"


def weight_problem(value: object) -> str | None:
    """Why `value` is no partition's weight (None when it is one)."""
    return None if _limit_number(value) else f"must be a number > 0 and below 1e9, got {value!r}"


def _period(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (problem := period_problem(value)) is not None:
        refuse(instance, attribute, problem)


@attrs.frozen(slots=True)
class Cap:
    """At most `max_running` running jobs of `job_type` (None: of every type in the
    queue), for each partition on its own when `per_partition`, else in all."""

    max_running: int = attrs.field(validator=integer_at_least(1))
    job_type: str | None = attrs.field(default=None, validator=optional_name)
    per_partition: bool = attrs.field(default=False, validator=switch)

    def applies(self, job_type: str) -> bool:
        """True when a job of `job_type` counts against this cap."""
        return self.job_type is None or self.job_type == job_type


@attrs.frozen(slots=True)
class Rate:
    """At most `starts` claims per `per_seconds` (default 1) of jobs of `job_type`
    (None: every type), per partition when `per_partition`: a token bucket of
    `starts` tokens (the burst), refilled at `starts / per_seconds` tokens a second."""

    starts: int = attrs.field(validator=integer_at_least(1))
    per_seconds: float = attrs.field(default=1.0, validator=_period)
    job_type: str | None = attrs.field(default=None, validator=optional_name)
    per_partition: bool = attrs.field(default=False, validator=switch)

    def applies(self, job_type: str) -> bool:
        """True when a job of `job_type` takes a token of this rate."""
        return self.job_type is None or self.job_type == job_type


def _weights(
    value: Mapping[str, float] | Iterable[tuple[str, float]],
) -> tuple[tuple[str, float], ...]:
    pairs = value.items() if isinstance(value, Mapping) else value
    # One order, so equal limits compare equal whatever order they were written in.
    return tuple(sorted((str(k), v) for k, v in pairs))


def _check_weights(
    instance: object,
    attribute: attrs.Attribute[tuple[tuple[str, float], ...]],
    value: tuple[tuple[str, float], ...],
) -> None:
    for key, weight in value:
        # A key no job's partition can be would weigh nothing, without a word.
        problem = None if key == DEFAULT_PARTITION else check_partition(key)
        if problem is not None:
            refuse(instance, attribute, f"a key {problem.reason}, got {key!r}")
        if (reason := weight_problem(weight)) is not None:
            refuse(instance, attribute, reason, f".{key}")


def _caps(value: Iterable[Cap]) -> tuple[Cap, ...]:
    return tuple(value)


def _rates(value: Iterable[Rate]) -> tuple[Rate, ...]:
    return tuple(value)


def _each_of(kind: type) -> Callable[[object, attrs.Attribute[Any], tuple[object, ...]], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: tuple[object, ...]) -> None:
        for n, item in enumerate(value):
            if not isinstance(item, kind):
                reason = f"must be a {kind.__name__}, got {item!r}"
                refuse(instance, attribute, reason, f"[{n}]")

    return check


@attrs.frozen(slots=True)
class QueueLimits:
    """The limits of one queue: fair shares between partitions (`fair`, `weights`:
    partition -> weight, 1 when absent), a cap on the whole queue (`max_running`),
    `caps` and `rates`. The default limits nothing."""

    fair: bool = attrs.field(default=False, validator=switch)
    weights: tuple[tuple[str, float], ...] = attrs.field(
        default=(), converter=_weights, validator=_check_weights
    )
    max_running: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(integer_at_least(1))
    )
    caps: tuple[Cap, ...] = attrs.field(default=(), converter=_caps, validator=_each_of(Cap))
    rates: tuple[Rate, ...] = attrs.field(default=(), converter=_rates, validator=_each_of(Rate))

    def __attrs_post_init__(self) -> None:
        if self.weights and not self.fair:
            # Only the round robin reads them: without it they would do nothing, unseen.
            reason = "apply only to fair shares: add fair = true, or drop the weights"
            refuse(self, attrs.fields(QueueLimits).weights, reason)

    def weight(self, partition: str) -> float:
        """The weight of `partition` in its queue's round robin."""
        for key, weight in self.weights:
            if key == partition:
                return float(weight)
        return 1.0

    @property
    def holds_back(self) -> bool:
        """Whether a cap or a rate may keep ready jobs from a claim."""
        return bool(self.rates) or bool(self.all_caps)

    @property
    def all_caps(self) -> tuple[Cap, ...]:
        """`caps`, with the whole queue's `max_running` as one more."""
        if self.max_running is None:
            return self.caps
        return (*self.caps, Cap(self.max_running))
