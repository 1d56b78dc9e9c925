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

This module names the whole policy; its parts live in `core.partitions` (what a
partition is), `core.queue_limits` (what a queue declares), `core.buckets` (a rate's
token bucket) and `core.claim_plan` (the plan of one claim).
"""

from __future__ import annotations

from .buckets import Bucket, refill
from .claim_plan import (
    CANDIDATE_SLACK,
    Candidate,
    ClaimPlan,
    bucket_key,
    candidates_per_partition,
    plan_claim,
)
from .partitions import DEFAULT_PARTITION, MAX_PARTITION_CHARS, check_partition, partition_of
from .queue_limits import Cap, QueueLimits, Rate

__all__ = [
    "CANDIDATE_SLACK",
    "DEFAULT_PARTITION",
    "MAX_PARTITION_CHARS",
    "Bucket",
    "Candidate",
    "Cap",
    "ClaimPlan",
    "QueueLimits",
    "Rate",
    "bucket_key",
    "candidates_per_partition",
    "check_partition",
    "partition_of",
    "plan_claim",
    "refill",
]
