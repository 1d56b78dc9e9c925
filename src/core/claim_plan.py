"""The claim plan of a limited queue: which candidates one claim takes, in order, and
the buckets and passes it stores back (the theory is in `core.limits`).

Pure: no clock, no I/O; `now` comes in as microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .buckets import Bucket, next_token_at, refill
from .queue_limits import Cap, QueueLimits, Rate

#: Candidates read per partition beyond the jobs wanted: the slack that
#: lets a claim pass over a partition's first jobs when caps or rates hold them.
CANDIDATE_SLACK = 10


@attrs.frozen(slots=True)
class Candidate:
    """A ready job a claim may take: its id, priority rank (0 most urgent), FIFO
    `seq`, job type and partition."""

    id: str
    priority: int
    seq: int
    job_type: str
    partition: str


#: A stored bucket is dropped only once it has been full for this long. A claimer may
#: read its clock, then take its turn after one that read a later time; had the bucket
#: been dropped in between, it would find none and start a whole burst on top of the
#: refill. Claimers' readings differ by far less than this (the workers' clocks are
#: checked against the server's to a quarter lease, and a turn takes milliseconds).
KEEP_FULL_US = 60 * 1_000_000


@attrs.frozen(slots=True)
class ClaimPlan:
    """What one claim of a limited queue takes and stores back.

    `take`: candidate ids, in claim order. `buckets`: buckets to store (the ones this
    claim took tokens from); `drop_buckets`: stored buckets that have been full again
    for `KEEP_FULL_US` and need no row. `passes`: every partition's pass to store (replacing the
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
                    at = next_token_at(rate, tokens, self._as_of(key))
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
            if rate is None or refill(rate, bucket, self.now_us - KEEP_FULL_US) >= rate.starts:
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
