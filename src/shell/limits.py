"""What the backends share to claim under a queue's limits (see `conveyor.core.limits`).

The policy is `core.limits.plan_claim`; an adapter only reads its inputs (the first
ready jobs of each partition, the running counts, the stored buckets and passes),
calls it inside one atomic step, and writes back what it says. These are the pieces
of that reading and writing that do not depend on where the jobs are kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import attrs

from ..core import Job
from ..core.limits import Bucket, Candidate, ClaimPlan, candidates_per_partition, partition_of


def candidate(job: Job, seq: int) -> Candidate:
    """`job`, waiting at FIFO position `seq`, as a claim candidate."""
    return Candidate(str(job.id), job.priority.rank, seq, job.job_type, partition_of(job))


def first_of_each_partition(
    ready: Iterable[tuple[int, Job]], want: int
) -> dict[str, tuple[Candidate, tuple[int, Job]]]:
    """The candidates of a claim of `want` jobs among `ready` (seq, job) pairs, given in
    claim order: the first `candidates_per_partition(want)` of each partition at each
    priority, by id, each with the pair it came from."""
    per = candidates_per_partition(want)
    seen: Counter[tuple[int, str]] = Counter()
    chosen = {}
    for entry in ready:
        job = entry[1]
        key = (job.priority.rank, partition_of(job))
        if seen[key] < per:
            seen[key] += 1
            found = candidate(job, entry[0])
            chosen[found.id] = (found, entry)
    return chosen


def running_counts(jobs: Iterable[Job]) -> dict[tuple[str, str], int]:
    """Running jobs counted by (job type, partition), as `plan_claim` reads them."""
    return dict(Counter((job.job_type, partition_of(job)) for job in jobs))


def ready_counts(jobs: Iterable[Job]) -> dict[str, int]:
    """Ready jobs counted by partition."""
    return dict(Counter(partition_of(job) for job in jobs))


@attrs.define
class LimitState:
    """One queue's stored buckets and passes, for a backend that keeps them in memory."""

    buckets: dict[str, Bucket] = attrs.field(factory=dict)
    passes: dict[str, float] = attrs.field(factory=dict)

    def apply(self, plan: ClaimPlan) -> None:
        """Store what `plan` says."""
        for key in plan.drop_buckets:
            self.buckets.pop(key, None)
        self.buckets.update(plan.buckets)
        self.passes = dict(plan.passes)

    def view(self) -> tuple[Mapping[str, Bucket], Mapping[str, float]]:
        """Copies of the buckets and passes, to plan from."""
        return dict(self.buckets), dict(self.passes)
