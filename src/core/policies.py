"""The policies: retry backoff, missing-handler requeue, the claim lease, and how
the shell retries a storage write that failed for a passing reason.

All pure. The clock (`now`) and the jitter sample come in as arguments, so
tests can state exact values instead of bounds.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from .field_checks import (
    duration_ms,
    instance_of,
    integer_at_least,
    number_at_least,
    optional_integer_at_least,
    positive_or_infinite,
    switch,
)
from .job import Job
from .results import ResultPolicy

_non_negative = number_at_least(0)


@attrs.frozen(slots=True)
class RetryPolicy:
    """Exponential backoff: `initial_delay_ms * 2**retry_count`, capped, then ±10 % jitter."""

    initial_delay_ms: int = attrs.field(default=1000, validator=duration_ms())
    max_delay_ms: int = attrs.field(default=60_000, validator=duration_ms())
    jitter: bool = attrs.field(default=True, validator=switch)


#: The jitter spread: a sample of 0 gives -10 %, 0.5 gives 0 %, just under 1 gives +10 %.
JITTER_FRACTION = 0.1


def backoff_ms(policy: RetryPolicy, retry_count: int, jitter_sample: float) -> int:
    """Milliseconds to wait before retry number `retry_count + 1`.

    `jitter_sample` is a number in [0, 1) drawn by the caller; it is ignored
    when `policy.jitter` is False. The result never exceeds `max_delay_ms * 1.1`
    rounded to the nearest ms.
    """
    # Cap before exponentiating far: 2**retry_count for a large count is huge but exact.
    exponent = min(max(retry_count, 0), 64)
    # A setting may be fractional (a duration in ms); the delay is whole ms either way.
    base: float = min(policy.initial_delay_ms * (2**exponent), policy.max_delay_ms)
    if not policy.jitter:
        return round(base)
    if not 0.0 <= jitter_sample < 1.0:
        raise ValueError(f"jitter_sample must be in [0, 1), got {jitter_sample}")
    factor = 1.0 - JITTER_FRACTION + 2 * JITTER_FRACTION * jitter_sample
    delay: int = round(base * factor)
    return delay


@attrs.frozen(slots=True)
class RequeuePolicy:
    """What to do with a job no handler here can run (a mixed fleet).

    Park it `requeue_delay_ms` ahead, so this worker does not spin on it and a
    peer with the handler gets a fair poll; give up with `no-handler` once it
    has been continuously unhandled for `max_requeue_age_ms`. Give-up is by wall
    clock, not by count: a busy fleet with many handlerless workers must not
    burn a budget before a slow owner polls. `max_requeues` is a runaway backstop.
    """

    requeue_delay_ms: int = attrs.field(default=1000, validator=duration_ms())
    max_requeue_age_ms: int = attrs.field(default=300_000, validator=duration_ms())
    max_requeues: int = attrs.field(default=10_000, validator=integer_at_least(0))


def unhandled_for_ms(job: Job, now: datetime) -> int:
    """How long `job` has gone without a handler (0 if this is the first miss)."""
    first = job.metadata.first_missing_at
    if first is None:
        return 0
    return max(0, int((now - first) / timedelta(milliseconds=1)))


def should_give_up_unhandled(policy: RequeuePolicy, job: Job, now: datetime) -> bool:
    """True once the job's missing-handler window (or the backstop count) is spent."""
    return (
        unhandled_for_ms(job, now) >= policy.max_requeue_age_ms
        or job.metadata.requeue_count >= policy.max_requeues
    )


@attrs.frozen(slots=True)
class LeasePolicy:
    """A claim is abandoned once `locked_at + lease_ms < now`.

    A job whose started attempts lose their lease more often than its budget is a
    poison pill (it kills its worker every time) and is dead-lettered with
    `lease-expired`. The budget is `max_reclaims` (3 by default, apart from the
    job's retries: a crash is not a handler's failure); None means the job's own
    `max_retries`. Claims that expired before their job started are never charged.
    """

    lease_ms: int = attrs.field(default=60_000, validator=duration_ms(positive=True))
    max_reclaims: int | None = attrs.field(default=3, validator=optional_integer_at_least(0))

    @property
    def renew_every_ms(self) -> int:
        """How often a holder renews the claims it holds: every third of the lease (at
        least 1 ms), so one renewal can fail and the next still lands in time."""
        return max(self.lease_ms // 3, 1)

    @property
    def reclaim_every_ms(self) -> int:
        """How often a worker looks for abandoned claims: every half lease (at least
        1 ms), so an abandoned claim waits at most one and a half leases."""
        return max(self.lease_ms // 2, 1)

    @property
    def stale_after_ms(self) -> float:
        """A held claim last renewed longer ago than this (half the lease) is renewed,
        and so checked, before its job starts: a reclaimer may be about to take it."""
        return self.lease_ms / 2

    @property
    def max_clock_skew_ms(self) -> float:
        """How far a worker's clock may be off the lease server's (a quarter lease):
        past it, the worker's reclaims would take live claims from their holders."""
        return self.lease_ms / 4


def lease_deadline(locked_at: datetime, lease_ms: int) -> datetime:
    """When a claim taken at `locked_at` stops being live."""
    return locked_at + timedelta(milliseconds=lease_ms)


def is_abandoned(locked_at: datetime, lease_ms: int, now: datetime) -> bool:
    """True when the lease on a claim taken at `locked_at` has run out by `now`."""
    return lease_deadline(locked_at, lease_ms) < now


def needs_renewal(locked_at: datetime, lease_ms: int, now: datetime) -> bool:
    """True once half the lease has passed: a claim waiting its turn (prefetched) must be
    renewed, and so checked, before its job starts, or a reclaimer may take it midway."""
    return now - locked_at > timedelta(milliseconds=LeasePolicy(lease_ms).stale_after_ms)


def reclaim_cutoff(now: datetime, lease_ms: int) -> datetime:
    """Claims locked before this instant are abandoned (the SQL/Redis predicate's bound)."""
    return now - timedelta(milliseconds=lease_ms)


def is_poison_pill(policy: LeasePolicy, job: Job) -> bool:
    """True when one more reclaim would exceed the job's reclaim budget."""
    budget = job.max_retries if policy.max_reclaims is None else policy.max_reclaims
    return job.metadata.reclaim_count + 1 > budget


_positive_seconds = positive_or_infinite


@attrs.frozen(slots=True)
class WriteRetryPolicy:
    """Retrying one storage operation that failed transiently (a lock, a dropped
    connection) — not a job's retry, which is `RetryPolicy`.

    The waits double from `initial_s` up to `max_s`; with `jitter` each is scaled by
    0.5 to 1.5 so contending writers spread out. The shell gives up (and re-raises, or
    leaves the claim to its lease) after `max_attempts` tries, or when the next wait
    would end more than `give_up_after_s` after the first try began; with
    `last_try_at_deadline` that last wait is cut short instead, so one more try happens
    exactly at the deadline (for a budget that is a deadline, as a server outage's is).
    """

    initial_s: float = attrs.field(default=0.05, validator=_positive_seconds)
    max_s: float = attrs.field(default=float("inf"), validator=_positive_seconds)
    jitter: bool = attrs.field(default=False, validator=switch)
    max_attempts: int | None = attrs.field(default=5, validator=optional_integer_at_least(1))
    give_up_after_s: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(number_at_least(0))
    )
    last_try_at_deadline: bool = attrs.field(default=False, validator=switch)


def write_retry_delay_s(
    policy: WriteRetryPolicy,
    failures: int,
    elapsed_s: float,
    jitter_sample: float,
    answer_in_s: float | None = None,
) -> float | None:
    """Seconds to wait before the next try after `failures` (>= 1) failed ones, begun
    `elapsed_s` ago; None means give up. `jitter_sample` is in [0, 1). `answer_in_s`:
    the caller must answer within that many seconds (a wait with a timeout), so no
    wait may end past it, whatever the policy allows."""
    if policy.max_attempts is not None and failures >= policy.max_attempts:
        return None
    wait = min(policy.initial_s * 2.0 ** min(failures - 1, 60), policy.max_s)
    if answer_in_s is not None and wait > answer_in_s:
        return None
    limit = policy.give_up_after_s
    if limit is not None and elapsed_s + wait > limit:
        left = limit - elapsed_s
        if not policy.last_try_at_deadline or left <= 0:
            return None
        return left
    return wait * (0.5 + jitter_sample) if policy.jitter else wait


@attrs.frozen(slots=True)
class Policies:
    """The policies `decide` consults, with their defaults."""

    retry: RetryPolicy = attrs.field(default=RetryPolicy(), validator=instance_of(RetryPolicy))
    requeue: RequeuePolicy = attrs.field(
        default=RequeuePolicy(), validator=instance_of(RequeuePolicy)
    )
    lease: LeasePolicy = attrs.field(default=LeasePolicy(), validator=instance_of(LeasePolicy))
    #: The cap on a result's size (`core.results`).
    result: ResultPolicy = attrs.field(default=ResultPolicy(), validator=instance_of(ResultPolicy))
