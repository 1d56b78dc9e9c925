"""How many jobs a worker claims at once: the prefetch policy.

Claiming a batch costs one round trip for many jobs, which is most of the speed of
a short job; holding a batch keeps those jobs from every other worker until their
turn comes. So the adaptive policy sizes each batch to take about `budget_ms` to
run, from the mean duration of the jobs this worker ran lately: no-op jobs are
claimed up to `max_batch` at a time, one-second jobs one at a time. A batch that
runs past `hand_back_after_ms` all the same (a slow job among fast ones) gives its
unstarted rest back to the queue for other workers.

A fixed size (`PrefetchPolicy.fixed(n)`) claims `n` every time, as before.
Pure: the worker measures, this module decides.

A prefetched claim's expiry is never charged to its job (the job had not begun),
so a job that kills its worker would come back forever from batch after batch.
Once a job has come back that way (`prefetch_reclaims`), `decide_start` says to
start its claim explicitly (`StartClaim`) before its handler runs: a second crash
is then a started claim's, charged to its reclaim budget.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from .field_checks import integer_at_least, positive_or_infinite, switch
from .job import Job

#: The weight of the newest batch in the running mean of job durations: recent
#: enough to follow a change of workload within a few batches, smooth enough that
#: one odd job does not swing the batch size.
MEAN_WEIGHT = 0.3


_at_least_one = integer_at_least(1)
_positive = positive_or_infinite


@attrs.frozen(slots=True)
class PrefetchPolicy:
    """`adaptive`: batches sized to run in about `budget_ms`, 1 to `max_batch` jobs,
    starting at `first_batch` before any job has been timed. Not adaptive: always
    `max_batch` (see `fixed`). `hand_back_after_ms`: a batch still running after
    this long hands back the jobs it has not started (adaptive only)."""

    adaptive: bool = attrs.field(default=True, validator=switch)
    max_batch: int = attrs.field(default=100, validator=_at_least_one)
    budget_ms: float = attrs.field(default=100.0, validator=_positive)
    first_batch: int = attrs.field(default=1, validator=_at_least_one)
    hand_back_after_ms: float = attrs.field(default=1000.0, validator=_positive)

    @classmethod
    def fixed(cls, size: int) -> PrefetchPolicy:
        """Claim `size` jobs every time (1: one at a time)."""
        return cls(adaptive=False, max_batch=size, first_batch=size)

    @classmethod
    def of(cls, prefetch: int | str | PrefetchPolicy) -> PrefetchPolicy:
        """The policy a worker's `prefetch` setting names: a policy, `"auto"` (adaptive,
        the defaults) or a fixed size of at least 1 (else a `ValueError`)."""
        if isinstance(prefetch, PrefetchPolicy):
            return prefetch
        if prefetch == "auto":
            return cls()
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f'prefetch must be "auto" or >= 1, got {prefetch!r}')
        return cls.fixed(prefetch)


def batch_size(policy: PrefetchPolicy, mean_job_ms: float | None) -> int:
    """How many jobs to claim next, given the running mean duration of a job here
    (None before the first was timed)."""
    if not policy.adaptive:
        return policy.max_batch
    if mean_job_ms is None:
        return min(policy.first_batch, policy.max_batch)
    fits = policy.budget_ms / mean_job_ms if mean_job_ms > 0 else float("inf")
    return policy.max_batch if fits >= policy.max_batch else max(1, int(fits))


def observe(mean_job_ms: float | None, batch_ms: float, jobs: int) -> float | None:
    """The running mean after a batch of `jobs` jobs that took `batch_ms` in all."""
    if jobs <= 0:
        return mean_job_ms
    latest = max(0.0, batch_ms) / jobs
    if mean_job_ms is None:
        return latest
    return mean_job_ms + MEAN_WEIGHT * (latest - mean_job_ms)


def should_hand_back(policy: PrefetchPolicy, elapsed_ms: float, unstarted: int) -> bool:
    """True when a batch running for `elapsed_ms` should give back its `unstarted`
    jobs: only adaptive batches, only past `hand_back_after_ms`."""
    return policy.adaptive and unstarted > 0 and elapsed_ms > policy.hand_back_after_ms


@attrs.frozen(slots=True)
class StartClaim:
    """Mark a prefetched claim of `job` started, as of `at`, before its handler runs:
    its prefetched token is swapped for a plain one and its lease renewed, fenced by
    the old token. One write, and nothing is released: the claim stays held."""

    job: Job
    at: datetime


def decide_start(job: Job, started: bool, now: datetime) -> StartClaim | None:
    """What to do with a claim of `job` before its handler runs (`started`: the claim
    was taken started, not prefetched). A prefetched claim of a job that already came
    back from a dead worker's batch is started first (`StartClaim`); any other runs as
    claimed (None)."""
    if started or job.metadata.prefetch_reclaims <= 0:
        return None
    return StartClaim(job, now)
