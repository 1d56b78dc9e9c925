"""Retention: how long finished records are kept, as data and pure functions.

The store keeps one record per finished job (completed, or failed = a dead letter).
Without a bound it grows forever, so a `RetentionPolicy` says how long each kind is
kept and, optionally, how many at most. `prune_order(policy, now)` turns it into a
`PruneOrder`: the exact cutoffs and counts one prune may act on. Adapters enforce an
order inside one atomic write each (a record is deleted only while it is still
terminal, still older than its cutoff or beyond its count, and its job is not queued
or in flight); they never compute a cutoff themselves.

Pruning is leader-free: every worker prunes a bounded batch on its own jittered
interval (`next_prune_at`), and two pruners racing for one record delete it once.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import attrs

from .field_checks import duration_ms, integer_at_least
from .job import JobStatus

DAY_MS = 86_400_000
#: Completed records are kept a week by default; dead letters, which an operator may
#: still want to inspect or retry, a month.
DEFAULT_COMPLETED_MS = 7 * DAY_MS
DEFAULT_DEAD_MS = 30 * DAY_MS
#: A pruned record's id is remembered for a day: long enough for a caller that waited
#: on it to be told it was pruned, short enough that the tombstones (an id and a time
#: each) stay a small fraction of the records they stand for.
DEFAULT_REMEMBER_PRUNED_MS = DAY_MS
#: One prune deletes at most this many records, so it holds locks only briefly.
DEFAULT_PRUNE_BATCH = 500
DEFAULT_PRUNE_INTERVAL_MS = 60_000
#: While batches come back full (a backlog), a worker prunes again this soon: fast
#: enough to keep pace with a busy queue (a batch per 50 ms is 10,000 records a second).
BACKLOG_INTERVAL_MS = 50


_count = integer_at_least(0)


@attrs.frozen(slots=True)
class RetentionPolicy:
    """How long and how many finished records the store keeps.

    `completed_ms` / `dead_ms`: age after `finished_at` at which a completed record /
    a dead letter may go (0 = kept forever by age). `max_completed` / `max_dead`: keep
    at most this many of each, the most recently recorded (0 = no count limit).
    `batch`: at most this many records per prune call. `interval_ms`: how often each
    worker prunes (0 = workers never prune; `conveyor prune` still does).
    `remember_pruned_ms`: how long the store remembers the id of a record it pruned
    (a tombstone: the id and when), so that asking for that job's result says
    "pruned" rather than "never existed" (0 = remember none).
    """

    completed_ms: int = attrs.field(default=DEFAULT_COMPLETED_MS, validator=duration_ms())
    dead_ms: int = attrs.field(default=DEFAULT_DEAD_MS, validator=duration_ms())
    max_completed: int = attrs.field(default=0, validator=_count)
    max_dead: int = attrs.field(default=0, validator=_count)
    batch: int = attrs.field(default=DEFAULT_PRUNE_BATCH, validator=_count)
    interval_ms: int = attrs.field(default=DEFAULT_PRUNE_INTERVAL_MS, validator=duration_ms())
    remember_pruned_ms: int = attrs.field(
        default=DEFAULT_REMEMBER_PRUNED_MS, validator=duration_ms()
    )

    @property
    def keeps_everything(self) -> bool:
        """True when no rule ever lets a record go."""
        return not (self.completed_ms or self.dead_ms or self.max_completed or self.max_dead)


@attrs.frozen(slots=True)
class PruneOrder:
    """What one prune may delete: the decision, with the guards the adapter checks
    inside its write.

    A completed record goes when it finished before `completed_before`, or when it
    is older (in recording order) than the newest `keep_completed` completed records;
    likewise dead letters with `dead_before` / `keep_dead`. None disables that rule.
    A record whose job is queued or in flight never goes. At most `limit` records go
    per call, oldest first.

    With `pruned_at`, each record that goes leaves a tombstone (its id, stamped
    `pruned_at`), in the same atomic write; tombstones stamped before
    `forget_before` go in the same prune (Redis lets each expire that long after
    it was written instead). Without `pruned_at`, no tombstone is written.
    """

    completed_before: datetime | None
    dead_before: datetime | None
    keep_completed: int | None
    keep_dead: int | None
    limit: int
    pruned_at: datetime | None = None
    forget_before: datetime | None = None

    @property
    def remember_ms(self) -> int:
        """How long a tombstone of this order is kept, in ms (0: none is written)."""
        if self.pruned_at is None or self.forget_before is None:
            return 0
        return max(0, (self.pruned_at - self.forget_before) // timedelta(milliseconds=1))

    @property
    def is_empty(self) -> bool:
        """True when no rule of the order lets anything go (`limit` aside)."""
        rules = (self.completed_before, self.dead_before, self.keep_completed, self.keep_dead)
        return all(rule is None for rule in rules)

    @property
    def rules(self) -> tuple[tuple[JobStatus, datetime | None, int | None], ...]:
        """(status, finished before, keep newest) for each terminal status. Cancelled
        records follow the completed rules (their count kept apart): both are work
        that is over, where a dead letter may still want an operator."""
        return (
            (JobStatus.COMPLETED, self.completed_before, self.keep_completed),
            (JobStatus.FAILED, self.dead_before, self.keep_dead),
            (JobStatus.CANCELLED, self.completed_before, self.keep_completed),
        )


def prune_order(
    policy: RetentionPolicy,
    now: datetime,
    *,
    older_than_ms: int | None = None,
    limit: int | None = None,
) -> PruneOrder:
    """The order for pruning under `policy` at `now`.

    `older_than_ms` (an operator's override) replaces both ages, and there 0 means
    every record finished before `now`; `limit` replaces the policy's batch size.
    """
    if older_than_ms is None:
        completed_before = _cutoff(now, policy.completed_ms)
        dead_before = _cutoff(now, policy.dead_ms)
    else:
        completed_before = dead_before = now - timedelta(milliseconds=older_than_ms)
    return PruneOrder(
        completed_before=completed_before,
        dead_before=dead_before,
        keep_completed=policy.max_completed or None,
        keep_dead=policy.max_dead or None,
        limit=policy.batch if limit is None else limit,
        pruned_at=now if policy.remember_pruned_ms else None,
        forget_before=now - timedelta(milliseconds=policy.remember_pruned_ms),
    )


def _cutoff(now: datetime, age_ms: int) -> datetime | None:
    return None if age_ms <= 0 else now - timedelta(milliseconds=age_ms)


def next_prune_at(now: datetime, interval_ms: int, sample: float, *, backlog: bool) -> datetime:
    """When a worker that pruned at `now` prunes next.

    Within ±10 % of `interval_ms` by the jitter `sample` in [0, 1), so a fleet
    started together spreads out; after a full batch (`backlog`) within
    `BACKLOG_INTERVAL_MS`, so pruning keeps pace with the jobs finishing.
    """
    base = min(interval_ms, BACKLOG_INTERVAL_MS) if backlog else interval_ms
    return now + timedelta(milliseconds=base * (0.9 + 0.2 * sample))


def first_prune_at(now: datetime, interval_ms: int, sample: float) -> datetime:
    """When a worker starting at `now` prunes first: somewhere in its first interval, so
    workers started together do not all prune at once."""
    return now + timedelta(milliseconds=interval_ms * sample)


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS, "w": 7 * DAY_MS}


def parse_duration_ms(text: str) -> int | None:
    """`"7d"`, `"12h"`, `"30m"`, `"90s"`, `"500ms"`, `"2w"` (or bare seconds) in
    milliseconds; None when it is not one of those."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return int(match[1]) * _UNIT_MS[match[2] or "s"]
