"""Claims: one job, a prefetched batch, a batch behind a blocking wait, a batch under a
queue's limits, and the start of a prefetched claim.

Every claim script first promotes its queue's due parked jobs, then pops, in one
step. A claim call's token is chosen here once, so a re-send of the call (its reply
lost to a dropped connection) returns what the first send took: its receipt.

An idle wait is a blocking pop on the server, which no thread of this process can
interrupt; so each wait pops from two lists, the queue's wake list and one of this
queue object's own (`RedisKeys.waits_ended`), and `end_waits` pushes a token onto the
second for each wait in flight here.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from typing import Any, cast

import attrs
import redis

from ....core.limits import QueueLimits
from ...ports import BadClaim, Claim, LimitedClaims, prefetch_token
from .arguments import EPOCH, US, ms, ms_ceil, now_args, us
from .base import RedisQueueBase
from .client import log
from .cluster import socket_timeout
from .replies import batch_claims, single_claim
from .scripts import Script

#: How long tokens that ended no wait stay on the list (a wait that was about to
#: begin when `end_waits` ran takes one): each costs a later wait one early return.
ENDED_TOKENS_KEEP_MS = 5_000


class Claiming(RedisQueueBase):
    """The claim half of the port, plus the idle worker's wait for work."""

    def _wait_keys(self, queue: str) -> list[str]:
        return [self.keys.wake(queue), self.keys.waits_ended(queue, self._waits.name)]

    def end_waits(self) -> None:
        """End every `wait_for_work` and `wait_and_dequeue` of this queue object now
        waiting in this process (see the module docs): each returns as woken. The
        tokens are pushed from a thread of their own, so that a stop never waits on
        the server; if it cannot be reached, the waits end at their timeouts."""
        waiting = self._waits.snapshot()
        if waiting:
            threading.Thread(
                target=self._push_ends, args=(waiting,), name="conveyor-end-waits", daemon=True
            ).start()

    def _push_ends(self, waiting: dict[str, int]) -> None:
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for queue, count in waiting.items():
                    key = self.keys.waits_ended(queue, self._waits.name)
                    # One more than the waits counted: a wait about to begin takes it.
                    pipe.rpush(key, *["end"] * (count + 1))
                    pipe.pexpire(key, ENDED_TOKENS_KEEP_MS)
                pipe.execute()
        except Exception:
            # Best effort, off the stop's thread: a server away, or a client closed
            # meanwhile (a cluster's says so with an exception of its own, no RedisError).
            log.debug("could not end the idle waits; they end at their timeouts", exc_info=True)

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` in one round trip, or None; the queue's
        due parked jobs are promoted in the same script first.

        A body that does not decode comes back as a `BadClaim` (from `ports`), held
        like a claim so the worker can dead-letter it and then `ack` it.
        """
        token = uuid.uuid4().hex
        reply = self._run(self._claim, queue, token, *now_args(now), self._receipt_ms)
        return single_claim(reply, token, queue, now)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one round trip (due parked
        jobs promoted first), each under its own fresh prefetched token."""
        if limit <= 0:
            return []
        base = uuid.uuid4().hex
        reply = self._run(
            self._claim_many,
            queue,
            prefetch_token(base),
            *now_args(now),
            self._receipt_ms,
            limit,
        )
        return batch_claims(reply, base, queue, now)

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs of `queue` as `core.limits.plan_claim` chooses from
        the first ready jobs of each partition, the running counts and the stored
        buckets and passes; prefetched claims as `dequeue_many` gives them, taken only
        while no other limited take of the queue came between the read and the take
        (see `limits`)."""
        base = uuid.uuid4().hex
        claim_args = (prefetch_token(base), ms(now), self._receipt_ms)
        reply, plan = self._limited.claim(
            queue, now_args(now), us(now), max(1, want), limits, claim_args
        )
        claims = batch_claims(reply, base, queue, now)
        if plan is None:
            # Every try met another claimer's take: it is working the queue, so this
            # worker pauses its poll interval rather than waiting for new work.
            return LimitedClaims(claims, None, True)
        wait = plan.wait_until_us
        until = None if wait is None else EPOCH + wait * US
        return LimitedClaims(claims, until, plan.held_back > 0)

    def wait_and_dequeue(
        self, queue: str, now: datetime, limit: int, timeout_s: float
    ) -> list[Claim | BadClaim]:
        """Wait up to `timeout_s` for a wake-up on `queue` (as `wait_for_work`), then
        claim up to `limit` jobs (as `dequeue` for 1, `dequeue_many` for more), all in
        one round trip: the claim is pipelined behind the blocking pop, so the server
        runs it the moment the wait ends, woken or not. `now` is the caller's clock when
        it sends: due parked jobs are promoted as of `now`, and each claim's lease is
        taken at `now + timeout_s`, when the wait is due to end at the latest (so a
        claim taken early in the wait is reclaimed late, not early). Empty when the
        wait ended with nothing to claim.
        """
        wait_s = self._blocking_wait_s(timeout_s)
        if limit <= 0 or wait_s <= 0:
            if limit == 1:
                one = self.dequeue(queue, now)
                return [] if one is None else [one]
            return list(self.dequeue_many(queue, now, limit))
        locked_at = now + timedelta(seconds=wait_s)
        base = uuid.uuid4().hex
        script = self._claim if limit == 1 else self._claim_many
        token = base if limit == 1 else prefetch_token(base)
        args: list[object] = [queue, token, *now_args(now), self._receipt_ms]
        args += [ms_ceil(locked_at)] if limit == 1 else [limit, ms_ceil(locked_at)]
        try:
            reply = self._blocking_claim(queue, wait_s, script, args)
        except (redis.ConnectionError, redis.TimeoutError):
            # The claim may have run with its reply lost: the same call again returns
            # what its token took (the receipt), or claims now.
            reply = self._run(script, *args)
        if limit == 1:
            one = single_claim(reply, base, queue, locked_at)
            return [] if one is None else [one]
        return batch_claims(reply, base, queue, locked_at)

    def _blocking_wait_s(self, timeout_s: float) -> float:
        """`timeout_s`, shortened to half the client's socket timeout if it has one (a
        wait the socket gives up on would lose the claim's reply), and 0 below a
        millisecond (BLPOP reads 0 as "for ever")."""
        socket_s = socket_timeout(self._client, self._anchor[0])
        if socket_s:
            timeout_s = min(timeout_s, float(socket_s) / 2)
        return round(timeout_s, 3) if timeout_s >= 0.001 else 0.0

    def _blocking_claim(self, queue: str, wait_s: float, script: Script, args: list[object]) -> Any:
        """BLPOP on the queue's wake list and the claim script in one pipelined send.
        The script goes by EVALSHA alone (redis-py would first ask SCRIPT EXISTS, a
        round trip of its own); a server that lost it (restarted) gets it loaded by the
        ordinary call instead, with the same token, since it did not run."""
        sha = cast(Any, script).sha
        argv = [self.keys.base, *args]
        with self._waits.one(queue), self._client.pipeline(transaction=False) as pipe:
            pipe.blpop(self._wait_keys(queue), timeout=wait_s)
            cast(Any, pipe).execute_command("EVALSHA", sha, len(self._anchor), *self._anchor, *argv)
            woken, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, redis.exceptions.NoScriptError):
            return self._run(script, *args)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(woken, Exception) and not reply:
            raise woken  # a failed wait is told, unless its claim took jobs to hand over
        return reply

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Swap a prefetched claim's token for a fresh plain one and renew its lease to
        `now`, fenced by the old token."""
        # Fresh per call (not the old token unmarked), so that only a re-send of this
        # very call finds the swap already made.
        started = uuid.uuid4().hex
        done = self._run(self._start, str(claim.job.id), claim.token, started, ms(now))
        return attrs.evolve(claim, token=started, locked_at=now) if done else None

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until work may be ready on `queue` (True) or `timeout_s` passes (False).

        Enqueue, promotion, replace and reclaim push a wake token; an idle worker
        wakes on it at once instead of at its next poll. A token may be stale (the
        work already taken), so True means "try a dequeue", not "a job is yours".
        """
        if timeout_s <= 0:
            return self._client.lpop(self.keys.wake(queue)) is not None
        try:
            with self._waits.one(queue):
                return self._client.blpop(self._wait_keys(queue), timeout=timeout_s) is not None
        except redis.TimeoutError:
            # The client's socket timeout was shorter than ours: nothing arrived.
            return False
