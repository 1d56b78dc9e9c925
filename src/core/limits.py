"""Fair shares, concurrency caps and rate limits of a queue: the claim policy.

Theory of operation. Every job belongs to a *partition*: its `partition_key`, else
its tenant, else the default partition `""` (`partition_of`). A queue may declare
`QueueLimits`:

* `fair`: within one priority, partitions take turns in weighted round robin, by
  stride scheduling. Each partition has a *pass*; the partition with the smallest
  pass gives the next job and its pass grows by `1 / weight`. A partition that had
  no ready work at the previous claim has no pass, and starts at the smallest pass
  of the partitions that do: it cannot bank credit while idle. Priorities still
  come first: a critical job is taken before any normal one.
* caps: at most `max_running` jobs running for the whole queue, or for one job
  type, or (`per_partition`) for each partition on its own. *Running* means a row
  held by a claim (prefetched ones included), counted at claim time from those
  rows: never a counter kept up to date by hand, so a worker that dies frees its
  slots when the lease keeper reclaims its jobs, and nothing can leak.
* rates: at most `starts` claims per `per_seconds`, as a token bucket whose burst is
  `starts`, refilled continuously; again for the queue, a job type, or each
  partition.

`plan_claim` is the whole decision: given the limits, the candidate jobs (the first
few ready jobs of each partition, most urgent first), the running counts, the
buckets and passes as stored, and `now`, it says which jobs to take, in order, and
the state to store back. The adapters serialise the claimers of a limited queue
(one transaction under a lock), read those inputs, call it and write its answer.
Pure: no clock, no I/O; `now` comes in as microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .errors import FieldError
from .field_checks import integer_at_least, optional_name, positive_number, refuse
from .job import Job

#: The longest partition key, in characters (it lands in an indexed column).
MAX_PARTITION_CHARS = 200

#: Candidates read per partition beyond the jobs wanted: the slack that
#: lets a claim pass over a partition's first jobs when caps or rates hold them.
CANDIDATE_SLACK = 10

#: The default partition: jobs without a partition key or tenant.
DEFAULT_PARTITION = ""


def partition_of(job: Job) -> str:
    """The partition `job` is counted and scheduled in: its partition key, else its
    tenant, else `DEFAULT_PARTITION`."""
    if job.partition_key is not None:
        return job.partition_key
    return job.tenant_id if job.tenant_id is not None else DEFAULT_PARTITION


def check_partition(value: object, field: str = "partition") -> FieldError | None:
    """Why `value` is not a partition key (None when it is one)."""
    if not isinstance(value, str):
        return FieldError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        return FieldError(field, "must not be empty")
    if len(value) > MAX_PARTITION_CHARS:
        return FieldError(field, f"must be at most {MAX_PARTITION_CHARS} characters")
    if "\n" in value or "\r" in value:
        return FieldError(field, "must be one line")
    return None


@attrs.frozen(slots=True)
class Cap:
    """At most `max_running` running jobs of `job_type` (None: of every type in the
    queue), for each partition on its own when `per_partition`, else in all."""

    max_running: int = attrs.field(validator=integer_at_least(1))
    job_type: str | None = attrs.field(default=None, validator=optional_name)
    per_partition: bool = False

    def applies(self, job_type: str) -> bool:
        """True when a job of `job_type` counts against this cap."""
        return self.job_type is None or self.job_type == job_type


@attrs.frozen(slots=True)
class Rate:
    """At most `starts` claims per `per_seconds` (default 1) of jobs of `job_type`
    (None: every type), per partition when `per_partition`: a token bucket of
    `starts` tokens (the burst), refilled at `starts / per_seconds` tokens a second."""

    starts: int = attrs.field(validator=integer_at_least(1))
    per_seconds: float = attrs.field(default=1.0, validator=positive_number)
    job_type: str | None = attrs.field(default=None, validator=optional_name)
    per_partition: bool = False

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
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not 0 < weight < math.inf
        ):
            reason = f"must be a finite number > 0, got {weight!r}"
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

    fair: bool = False
    weights: tuple[tuple[str, float], ...] = attrs.field(
        default=(), converter=_weights, validator=_check_weights
    )
    max_running: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(integer_at_least(1))
    )
    caps: tuple[Cap, ...] = attrs.field(default=(), converter=_caps, validator=_each_of(Cap))
    rates: tuple[Rate, ...] = attrs.field(default=(), converter=_rates, validator=_each_of(Rate))

    def weight(self, partition: str) -> float:
        """The weight of `partition` in its queue's round robin."""
        for key, weight in self.weights:
            if key == partition:
                return float(weight)
        return 1.0

    @property
    def all_caps(self) -> tuple[Cap, ...]:
        """`caps`, with the whole queue's `max_running` as one more."""
        if self.max_running is None:
            return self.caps
        return (*self.caps, Cap(self.max_running))


@attrs.frozen(slots=True)
class Candidate:
    """A ready job a claim may take: its id, priority rank (0 most urgent), FIFO
    `seq`, job type and partition."""

    id: str
    priority: int
    seq: int
    job_type: str
    partition: str


@attrs.frozen(slots=True)
class Bucket:
    """A rate's token bucket as stored: `tokens` left at `at_us` (microseconds)."""

    tokens: float
    at_us: int


@attrs.frozen(slots=True)
class ClaimPlan:
    """What one claim of a limited queue takes and stores back.

    `take`: candidate ids, in claim order. `buckets`: buckets to store (the ones this
    claim took tokens from); `drop_buckets`: stored buckets that have refilled to
    full and need no row. `passes`: every partition's pass to store (replacing the
    stored ones). `wait_until_us`: when some candidate was held only by rates, the
    first instant one of them has its tokens (None otherwise): a worker that took
    nothing may sleep until then."""

    take: tuple[str, ...]
    buckets: Mapping[str, Bucket] = attrs.field(factory=dict)
    drop_buckets: frozenset[str] = frozenset()
    passes: Mapping[str, float] = attrs.field(factory=dict)
    wait_until_us: int | None = None
    #: How many candidates caps or rates held back.
    held_back: int = 0


def bucket_key(index: int, rate: Rate, candidate: Candidate) -> str:
    """The stored name of the bucket of `rate` (the `index`th of its queue) that
    `candidate` takes from."""
    kind = rate.job_type or "*"
    return f"{index}:{kind}:{candidate.partition if rate.per_partition else '*'}"


def refill(rate: Rate, bucket: Bucket | None, now_us: int) -> float:
    """The tokens of `bucket` at `now_us` (a full bucket when there is none)."""
    if bucket is None:
        return float(rate.starts)
    gained = max(0, now_us - bucket.at_us) * rate.starts / (rate.per_seconds * 1_000_000)
    return min(float(rate.starts), bucket.tokens + gained)


def _ready_at(rate: Rate, tokens: float, now_us: int) -> int:
    """When a bucket holding `tokens` at `now_us` next holds one whole token."""
    missing = max(0.0, 1.0 - tokens)
    return now_us + math.ceil(missing * rate.per_seconds * 1_000_000 / rate.starts)


def candidates_per_partition(want: int) -> int:
    """How many ready jobs of each partition (most urgent first) a claim of `want`
    jobs reads as candidates."""
    return max(1, want) + CANDIDATE_SLACK


class _Planner:
    """The mutable working state of one `plan_claim` call (never leaves it)."""

    def __init__(
        self,
        limits: QueueLimits,
        running: Mapping[tuple[str, str], int],
        buckets: Mapping[str, Bucket],
        now_us: int,
    ) -> None:
        self.limits = limits
        self.caps = limits.all_caps
        self.running = running
        self.stored = buckets
        self.now_us = now_us
        self.tokens: dict[str, float] = {}
        self.used: dict[tuple[int, str], int] = {}
        self.wait_until: int | None = None
        self.consumed: set[str] = set()
        self.held = 0

    def _in_use(self, index: int, cap: Cap, candidate: Candidate) -> int:
        scope = candidate.partition if cap.per_partition else ""
        key = (index, scope)
        if key not in self.used:
            self.used[key] = sum(
                count
                for (job_type, partition), count in self.running.items()
                if cap.applies(job_type) and (not cap.per_partition or partition == scope)
            )
        return self.used[key]

    def capped(self, candidate: Candidate) -> bool:
        return any(
            cap.applies(candidate.job_type) and self._in_use(i, cap, candidate) >= cap.max_running
            for i, cap in enumerate(self.caps)
        )

    def _tokens(self, index: int, rate: Rate, candidate: Candidate) -> tuple[str, float]:
        key = bucket_key(index, rate, candidate)
        if key not in self.tokens:
            self.tokens[key] = refill(rate, self.stored.get(key), self.now_us)
        return key, self.tokens[key]

    def throttled(self, candidate: Candidate) -> bool:
        """True when a rate has no token for `candidate`; notes when it will."""
        ready_at = None
        for i, rate in enumerate(self.limits.rates):
            if rate.applies(candidate.job_type):
                key, tokens = self._tokens(i, rate, candidate)
                if tokens < 1.0:
                    at = _ready_at(rate, tokens, self._as_of(key))
                    ready_at = at if ready_at is None else max(ready_at, at)
        if ready_at is None:
            return False
        self.wait_until = ready_at if self.wait_until is None else min(self.wait_until, ready_at)
        return True

    def take(self, candidate: Candidate) -> None:
        for i, cap in enumerate(self.caps):
            if cap.applies(candidate.job_type):
                key = (i, candidate.partition if cap.per_partition else "")
                self.used[key] = self._in_use(i, cap, candidate) + 1
        for i, rate in enumerate(self.limits.rates):
            if rate.applies(candidate.job_type):
                name, tokens = self._tokens(i, rate, candidate)
                self.tokens[name] = tokens - 1.0
                self.consumed.add(name)

    def new_buckets(self) -> tuple[dict[str, Bucket], frozenset[str]]:
        """The buckets this claim took from, and the stored ones that are full again
        (or belong to a rate no longer declared): those need no row."""
        changed = {key: Bucket(self.tokens[key], self._as_of(key)) for key in self.consumed}
        dropped = set()
        for key, bucket in self.stored.items():
            if key in self.consumed:
                continue
            rate = self._rate(key)
            if rate is None or refill(rate, bucket, self.now_us) >= rate.starts:
                dropped.add(key)
        return changed, frozenset(dropped)

    def _as_of(self, key: str) -> int:
        # A claimer whose `now` was read before it waited its turn may come after one
        # with a later `now`: the bucket's time never goes back, or the refill between
        # the two would be counted twice.
        stored = self.stored.get(key)
        return self.now_us if stored is None else max(self.now_us, stored.at_us)

    def _rate(self, key: str) -> Rate | None:
        index = key.split(":", 1)[0]
        rates = self.limits.rates
        return rates[int(index)] if index.isdigit() and int(index) < len(rates) else None


def plan_claim(
    limits: QueueLimits,
    candidates: Sequence[Candidate],
    running: Mapping[tuple[str, str], int],
    buckets: Mapping[str, Bucket],
    passes: Mapping[str, float],
    now_us: int,
    want: int,
) -> ClaimPlan:
    """Which of `candidates` one claim of up to `want` jobs takes, in order.

    `running` counts the queue's running jobs by (job type, partition); `buckets`
    and `passes` are the stored state (see `ClaimPlan`). Priorities are taken most
    urgent first; within one, partitions in stride order when `limits.fair`, else
    the oldest job first; within a partition, oldest first. A candidate whose cap is
    full or whose rate has no token is passed over (later ones may still go).
    """
    planner = _Planner(limits, running, buckets, now_us)
    by_priority: dict[int, dict[str, list[Candidate]]] = {}
    for candidate in sorted(candidates, key=lambda c: (c.priority, c.seq)):
        by_priority.setdefault(candidate.priority, {}).setdefault(candidate.partition, []).append(
            candidate
        )
    active = {c.partition for c in candidates}
    known = [passes[p] for p in active if p in passes]
    floor = min(known, default=0.0)
    pass_of = {p: max(passes.get(p, floor), floor) for p in active}
    taken: list[str] = []
    for priority in sorted(by_priority):
        queues = by_priority[priority]
        while len(taken) < want and queues:
            if limits.fair:
                partition = min(queues, key=lambda p: (pass_of[p], queues[p][0].seq))
            else:
                partition = min(queues, key=lambda p: queues[p][0].seq)
            lane = queues[partition]
            chosen = None
            while lane:
                head = lane.pop(0)
                if not planner.capped(head) and not planner.throttled(head):
                    chosen = head
                    break
                planner.held += 1
            if not lane:
                del queues[partition]
            if chosen is None:
                continue
            planner.take(chosen)
            taken.append(chosen.id)
            pass_of[partition] += 1.0 / limits.weight(partition)
    changed, dropped = planner.new_buckets()
    new_passes: dict[str, float] = {}
    if limits.fair and pass_of:
        # Shifted so the smallest is 0: the values stay small however long it runs.
        base = min(pass_of.values())
        new_passes = {p: value - base for p, value in sorted(pass_of.items())}
    return ClaimPlan(
        take=tuple(taken),
        buckets=changed,
        drop_buckets=dropped,
        passes=new_passes,
        wait_until_us=planner.wait_until,
        held_back=planner.held,
    )
