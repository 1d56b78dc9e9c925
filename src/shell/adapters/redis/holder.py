"""The claim holder's writes: ack, extend, replace, finish (one or a batch), and the
lease keeper's reads and writes of abandoned claims (abandoned, reclaim).

Every write is fenced by the claim's token (and, for the lease keeper's, by "still
locked before the cutoff") inside its script, and is safe to send twice: a re-send of
a write that already landed answers 1 again while writing nothing more.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from ....core import Job
from ...ports import BadClaim, Claim
from .arguments import cutoff_ms, finish_args, job_id, ms, placement, record_args, same_job
from .client import text
from .cluster import same_data
from .replies import claim_of, locked_at_of
from .settling import SETTLE, Settling
from .store import RedisJobStore


class Holding(Settling):
    """Writes of a claim's holder and of the lease keeper."""

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the job if `claim.token` still holds it."""
        return bool(self._write("ack", self._ack, job_id(claim), claim.token))

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` if the claim is still held."""
        return bool(self._run(self._extend, job_id(claim), claim.token, ms(now)))

    def replace(self, claim: Claim, job: Job) -> bool:
        """Write the successor (ready or parked, unlocked) if the claim is still held."""
        return bool(
            self._write("replace", self._replace, claim.token, *placement(job), uuid.uuid4().hex)
        )

    def finishes_with(self, store: object) -> bool:
        """True when `store` lives under this queue's key base on the same server (or
        the same cluster)."""
        if not isinstance(store, RedisJobStore) or store.keys.base != self.keys.base:
            return False
        return same_data(self._client, store._client)

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Record `record` in the store and release the claim in one script, fenced by
        the token and, with `abandoned_before`, by "still locked before it"."""
        # A BadClaim's record is a placeholder that may carry another id than the
        # payload's; a Claim's record must be its own job's.
        fence_id = same_job(claim, record) if isinstance(claim, Claim) else claim.job_id
        args = [fence_id, claim.token, cutoff_ms(abandoned_before), *record_args(record)]
        return bool(self._ending("finish", self._finish, [*args, uuid.uuid4().hex], record))

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one script; one answer per item."""
        if not items:
            return []
        args: list[object] = [uuid.uuid4().hex]
        for claim, record in items:
            args += finish_args(claim, record)
            args.append(claim.queue)
        replies = self._write("finish", self._finish_many, *args)
        # A job others wait for is left to a finish of its own, which settles them.
        return [
            self.finish(claim, record) if int(x) == SETTLE else bool(x)
            for (claim, record), x in zip(items, replies, strict=True)
        ]

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim | BadClaim]:
        """In-flight claims locked (or last extended) before `cutoff`, oldest first, each
        with its token as stored (so `started` tells a prefetched one). Read-only: an
        undecodable body comes back as a `BadClaim` for the caller to dead-letter."""
        if limit <= 0:
            return []
        flat = self._run(self._abandoned, ms(cutoff), limit)
        out: list[Claim | BadClaim] = []
        for i in range(0, len(flat), 5):
            raw_id, body, token, locked_ms, queue = flat[i : i + 5]
            locked_at = locked_at_of(locked_ms)
            out.append(claim_of(text(raw_id), body, text(token), text(queue), locked_at))
        return out

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned claim to ready as `job`, re-checking (inside the script)
        that `claim.token` still holds it and it is still locked before `cutoff`."""
        nonce = uuid.uuid4().hex
        return bool(
            self._write("reclaim", self._reclaim, claim.token, ms(cutoff), *placement(job), nonce)
        )
