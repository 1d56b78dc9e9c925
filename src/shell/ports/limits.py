"""Claiming under a queue's fair shares, caps and rates, and reporting what they hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import attrs

from ...core.limit_report import LimitReport, describe
from ...core.limits import Bucket, Candidate, QueueLimits
from .claims import BadClaim, Claim
from .queue import BatchingJobQueue


@attrs.frozen(slots=True)
class LimitedClaims:
    """What one claim of a limited queue took (`claims`, prefetched tokens, in claim
    order) and, when ready jobs were held back only by rate limits, the instant the
    first of them may start (`wait_until`; None otherwise)."""

    claims: Sequence[Claim | BadClaim]
    wait_until: datetime | None = None
    #: True when caps or rates held back some ready job: waiting for new work would
    #: wake at once, so a worker that took nothing sleeps instead.
    held_back: bool = False


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@attrs.frozen(slots=True)
class LimitUsage:
    """What a limited queue holds now, read in one consistent step: the inputs a claim
    would plan from, for `conveyor status` and the dashboard
    (`core.limit_report.describe`).

    `running`: claimed jobs (prefetched ones included) by (job type, partition).
    `ready`: ready jobs by partition. `candidates`: the first ready jobs of each
    partition, most urgent first (as a claim of one job reads them). `buckets` and
    `passes`: the stored limit state."""

    running: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    ready: Mapping[str, int] = attrs.field(factory=dict)
    candidates: Sequence[Candidate] = ()
    buckets: Mapping[str, Bucket] = attrs.field(factory=dict)
    passes: Mapping[str, float] = attrs.field(factory=dict)

    def describe(self, queue: str, limits: QueueLimits, now: datetime) -> LimitReport:
        """This usage of `queue` under `limits` at `now`, for a person
        (`core.limit_report.describe`)."""
        return describe(
            queue,
            limits,
            running=self.running,
            ready=self.ready,
            candidates=self.candidates,
            buckets=self.buckets,
            now_us=(now - _EPOCH) // timedelta(microseconds=1),
        )


@runtime_checkable
class LimitedJobQueue(BatchingJobQueue, Protocol):
    """A queue that claims under a queue's fair shares, caps and rates (see
    `conveyor.core.limits`), atomically across every worker that shares it."""

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """`dequeue_many` of up to `want` jobs, chosen by `core.limits.plan_claim` from
        the queue's ready jobs, running counts and stored limit state, all in one
        atomic step serialised with the other claimers of `queue`; the state the plan
        says is stored in the same step."""


@runtime_checkable
class LimitReportingJobQueue(LimitedJobQueue, Protocol):
    """A limited queue that also says what its limits hold now, for `conveyor
    status` and the dashboard (a queue without it still claims under limits)."""

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits (see `LimitUsage`); due parked jobs
        are counted where they are, not promoted. It changes no job; on Redis, the
        first read of a queue indexes its ready jobs, as its first limited claim
        would (docs/limits.md)."""
