"""What a limited queue's limits are doing now: shares, caps in use, throttled work.

`describe` reads the same inputs a claim plans from (`core.limits.plan_claim`): the
running counts by (job type, partition), the first ready jobs of each partition, the
stored buckets and passes, plus the ready count of each partition, and says, for an
operator, how each cap is used, how many tokens each rate has, each partition's share
of the starts, and which partitions' ready work waits, and for what. Pure, like the
policy it explains: `conveyor status` and the dashboard render its answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from .limits import (
    Bucket,
    Candidate,
    Cap,
    QueueLimits,
    Rate,
    bucket_key,
    refill,
)


def cap_label(cap: Cap, queue_wide: bool = False) -> str:
    """A cap in words: what it counts ("charge-card per partition", "the queue")."""
    if queue_wide:
        return "the queue"
    what = cap.job_type if cap.job_type is not None else "all types"
    return f"{what} per partition" if cap.per_partition else what


def rate_label(rate: Rate) -> str:
    """A rate in words: "charge-card per partition: 20 per 1s"."""
    what = rate.job_type if rate.job_type is not None else "all types"
    scope = f"{what} per partition" if rate.per_partition else what
    return f"{scope}: {rate.starts} per {rate.per_seconds:g}s"


@attrs.frozen(slots=True)
class CapUse:
    """One cap, for one partition (`partition`) when it counts each on its own."""

    label: str
    partition: str | None
    in_use: int
    max_running: int

    @property
    def full(self) -> bool:
        """No job it counts may start until one of its running jobs ends."""
        return self.in_use >= self.max_running


@attrs.frozen(slots=True)
class RateUse:
    """One rate's bucket (of `partition` when per partition): tokens at the moment of
    the report, and how long until the next whole token when there is none."""

    label: str
    partition: str | None
    tokens: float
    starts: int
    next_token_s: float | None

    @property
    def empty(self) -> bool:
        """No job it counts may start until a token comes back."""
        return self.tokens < 1.0


@attrs.frozen(slots=True)
class PartitionShare:
    """One partition of a limited queue: its weight, the share of starts its weight
    gives it among the partitions with ready work (None when the queue is not fair
    or it has none), its ready and running jobs, and why its ready work cannot start
    now (`waits`: the reason its next job waits, when none of the jobs a claim would
    consider can start; None when one can)."""

    partition: str
    weight: float
    share: float | None
    ready: int
    running: int
    waits: str | None

    @property
    def label(self) -> str:
        """The partition's name for a person ("(default)" for the default one)."""
        return self.partition or "(default)"


@attrs.frozen(slots=True)
class LimitReport:
    """A limited queue at one moment: see the module docstring."""

    queue: str
    fair: bool
    partitions: tuple[PartitionShare, ...]
    caps: tuple[CapUse, ...]
    rates: tuple[RateUse, ...]

    @property
    def shown_caps(self) -> tuple[CapUse, ...]:
        """The caps a reader needs: every shared one, and a per-partition one for each
        partition that runs jobs it counts (not one row per partition of the queue)."""
        return tuple(c for c in self.caps if c.partition is None or c.in_use > 0)

    @property
    def shown_rates(self) -> tuple[RateUse, ...]:
        """Every shared rate, and a per-partition one where its bucket is not full (a
        full one says only that the partition has not started such jobs lately)."""
        return tuple(r for r in self.rates if r.partition is None or r.tokens < r.starts)

    @property
    def throttled(self) -> int:
        """Ready jobs in partitions none of whose next jobs can start: each waits for a
        cap or a rate."""
        return sum(p.ready for p in self.partitions if p.waits is not None)

    @property
    def running(self) -> int:
        """Running jobs of the queue."""
        return sum(p.running for p in self.partitions)


def _scopes(per_partition: bool, partitions: Sequence[str]) -> Sequence[str | None]:
    return list(partitions) if per_partition else [None]


def _cap_uses(
    limits: QueueLimits, running: Mapping[tuple[str, str], int], partitions: Sequence[str]
) -> list[tuple[Cap, CapUse]]:
    uses = []
    queue_cap = len(limits.caps)  # all_caps puts the queue's max_running last
    for index, cap in enumerate(limits.all_caps):
        for scope in _scopes(cap.per_partition, partitions):
            in_use = sum(
                count
                for (job_type, partition), count in running.items()
                if cap.applies(job_type) and (scope is None or partition == scope)
            )
            label = cap_label(cap, queue_wide=index == queue_cap)
            uses.append((cap, CapUse(label, scope, in_use, cap.max_running)))
    return uses


def _rate_uses(
    limits: QueueLimits,
    buckets: Mapping[str, Bucket],
    partitions: Sequence[str],
    now_us: int,
) -> list[tuple[Rate, RateUse]]:
    uses = []
    for index, rate in enumerate(limits.rates):
        for scope in _scopes(rate.per_partition, partitions):
            probe = Candidate("", 0, 0, rate.job_type or "", scope or "")
            stored = buckets.get(bucket_key(index, rate, probe))
            # A bucket stored by a claim whose `now` was later than ours is read as of
            # that moment, as the claim would read it.
            as_of = now_us if stored is None else max(now_us, stored.at_us)
            tokens = refill(rate, stored, as_of)
            wait = None
            if tokens < 1.0:
                wait_us = math.ceil((1.0 - tokens) * rate.per_seconds * 1e6 / rate.starts)
                wait = (as_of - now_us + wait_us) / 1e6
            uses.append((rate, RateUse(rate_label(rate), scope, tokens, rate.starts, wait)))
    return uses


def describe(
    queue: str,
    limits: QueueLimits,
    *,
    running: Mapping[tuple[str, str], int],
    ready: Mapping[str, int],
    candidates: Sequence[Candidate],
    buckets: Mapping[str, Bucket],
    now_us: int,
) -> LimitReport:
    """The report of `queue` under `limits` (see the module docstring). `candidates`
    need only hold each partition's first ready job; `ready` counts each partition's
    ready jobs; `now_us` is the moment, in microseconds."""
    running_by_partition: dict[str, int] = {}
    for (_, partition), count in running.items():
        running_by_partition[partition] = running_by_partition.get(partition, 0) + count
    named = sorted(set(running_by_partition) | {p for p, n in ready.items() if n > 0})
    caps = _cap_uses(limits, running, named)
    rates = _rate_uses(limits, buckets, named, now_us)
    lanes: dict[str, list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: (c.priority, c.seq)):
        lanes.setdefault(candidate.partition, []).append(candidate)
    waiting = [p for p in named if ready.get(p, 0) > 0]
    total_weight = sum(limits.weight(p) for p in waiting)
    partitions = []
    for partition in named:
        waits = _lane_waits(lanes.get(partition, []), caps, rates)
        share = None
        if limits.fair and partition in waiting and total_weight > 0:
            share = limits.weight(partition) / total_weight
        partitions.append(
            PartitionShare(
                partition,
                limits.weight(partition),
                share,
                ready.get(partition, 0),
                running_by_partition.get(partition, 0),
                waits,
            )
        )
    return LimitReport(
        queue,
        limits.fair,
        tuple(partitions),
        tuple(use for _, use in caps),
        tuple(use for _, use in rates),
    )


def _lane_waits(
    lane: Sequence[Candidate],
    caps: Sequence[tuple[Cap, CapUse]],
    rates: Sequence[tuple[Rate, RateUse]],
) -> str | None:
    """Why no job of a partition's `lane` (its first ready jobs, in claim order) can
    start now: the reason its first one waits. None when one of them can start (a
    claim passes over the held ones and takes it) or the lane is empty."""
    reasons = [_waits(job, caps, rates) for job in lane]
    if not reasons or None in reasons:
        return None
    return reasons[0]


def _waits(
    head: Candidate,
    caps: Sequence[tuple[Cap, CapUse]],
    rates: Sequence[tuple[Rate, RateUse]],
) -> str | None:
    """Why the job `head` cannot start now: the first full cap or empty rate that
    counts it (None when none does)."""
    for cap, use in caps:
        if use.full and cap.applies(head.job_type) and use.partition in (None, head.partition):
            return f"cap {use.label} full ({use.in_use}/{use.max_running})"
    for rate, bucket in rates:
        if (
            bucket.empty
            and rate.applies(head.job_type)
            and bucket.partition in (None, head.partition)
        ):
            after = bucket.next_token_s or 0.0
            return f"rate {bucket.label}: next start in {after:.1f}s"
    return None
