"""Claiming from a memory queue under its limits: fair shares, caps and rates.

The plan is the core's (`core.limits.plan_claim`); the queue's lock serialises the
claimers, and the buckets and passes a plan stores back stay in memory.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ....core import PRIORITY_ORDER
from ....core.limits import QueueLimits, plan_claim
from ...limits import LimitState, first_of_each_partition, ready_counts, running_counts
from ...ports import BadClaim, Claim, LimitedClaims, LimitUsage, prefetch_token
from ...tokens import fresh_token
from .state import EPOCH, PROMOTE_PER_CLAIM, InFlight, QueueState, us


class LimitedClaiming(QueueState):
    """`dequeue_limited` and `limit_usage`."""

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs as `core.limits.plan_claim` chooses, under the lock."""
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            lanes = self._ready.get(queue, {})
            ready = [entry for p in PRIORITY_ORDER for entry in lanes.get(p, ())]
            held = (e.job for e in self._in_flight.values() if e.job.queue == queue)
            state = self._limit_state.setdefault(queue, LimitState())
            found = first_of_each_partition(ready, want)
            candidates = [c for c, _ in found.values()]
            plan = plan_claim(
                limits, candidates, running_counts(held), *state.view(), us(now), want
            )
            state.apply(plan)
            claims: list[Claim | BadClaim] = []
            for job_id in plan.take:
                seq, job = found[job_id][1]
                self._lanes(queue)[job.priority].remove((seq, job))
                del self._ready_ids[job.id]
                token = prefetch_token(fresh_token())
                self._in_flight[job.id] = InFlight(job, token, now)
                claims.append(Claim(job=job, token=token, queue=queue, locked_at=now))
        wait = plan.wait_until_us
        until = None if wait is None else EPOCH + timedelta(microseconds=wait)
        return LimitedClaims(claims, until, plan.held_back > 0)

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits, read under the lock."""
        with self._lock:
            lanes = self._ready.get(queue, {})
            ready = [entry for p in PRIORITY_ORDER for entry in lanes.get(p, ())]
            held = (e.job for e in self._in_flight.values() if e.job.queue == queue)
            buckets, passes = self._limit_state.get(queue, LimitState()).view()
            return LimitUsage(
                running=running_counts(held),
                ready=ready_counts(job for _, job in ready),
                candidates=[c for c, _ in first_of_each_partition(ready, 1).values()],
                buckets=buckets,
                passes=passes,
            )
