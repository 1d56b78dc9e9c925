"""The SQL queue's claims: dequeue, dequeue_many, start_claim and promotion.

Claim, in one transaction: the queue's parked rows that are due become ready first
(at most `PROMOTE_PER_CLAIM`, earliest `run_at` first, then enqueue order, each
with a fresh `seq` behind the rows already ready), then the best ready row
(priority, then `seq`) is taken with `UPDATE ... SET status='processing',
locked_by=:token WHERE id=:id AND status='ready'`. The conditional UPDATE is what
makes it safe everywhere; `FOR UPDATE SKIP LOCKED` (rendered on PostgreSQL, absent
on SQLite, where `BEGIN IMMEDIATE` already serialises writers) only keeps
concurrent claimers from queueing behind one row. On PostgreSQL the claim is one
call of a function (`postgres_ddl.claim_ddl`): one round trip.

A claim's token is chosen before its first try. Should the connection drop after
the claim committed, the rerun first returns the rows that token already holds:
the caller gets the job it took, never a second one.

Starting a prefetched claim (`start_claim`) is a holder's write, fenced by its old
token like the others.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

import attrs
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ...ports import PREFETCH_MARK, BadClaim, Claim, is_prefetched, prefetch_token
from ...tokens import fresh_token
from .base import SqlQueueBase, Taken, as_claim, claim_order
from .engine import to_micros
from .statements import PROMOTE_PER_CLAIM

__all__ = ["Claiming"]

_log = logging.getLogger(__name__)

#: Claim attempts when the chosen row went to another claimer between select and update.
_CLAIM_ATTEMPTS = 16
#: PostgreSQL's SQLSTATE for a function that does not exist.
_UNDEFINED_FUNCTION = "42883"


class Claiming(SqlQueueBase):
    """The claim role of `SqlJobQueue`."""

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` (priority, then FIFO) under a fresh plain
        token, locked at `now`, after promoting the queue's due parked jobs. An
        undecodable payload comes back as a `BadClaim`."""
        taken = self._claim(queue, to_micros(now), 1, fresh_token(), per_job=False)
        if not taken:
            return None
        row = taken[0]
        return as_claim(str(row.id), str(row.locked_by), queue, str(row.payload), now)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one transaction, after promoting
        the queue's due parked jobs, each under its own prefetched token: a fresh base
        per call joined with the job id (`p-<16 hex>:<id>`, 55 characters)."""
        if limit <= 0:
            return []
        base = prefetch_token(uuid.uuid4().hex[:16] + ":")
        taken = self._claim(queue, to_micros(now), limit, base, per_job=True)
        return [as_claim(str(r.id), str(r.locked_by), queue, str(r.payload), now) for r in taken]

    def _claim(self, queue: str, at: int, limit: int, token: str, *, per_job: bool) -> list[Taken]:
        """Promote, then claim up to `limit` rows under `token` (a prefix, with
        `per_job`), in claim order. Every try after the first is a re-send: it first
        returns what `token` already holds."""
        tries = 0
        if self._claim_function:
            call = self._db.sql.claim
            assert call is not None
            params = {"in_queue": queue, "at": at, "limit": limit, "token": token}
            params |= {"per_job": per_job, "promote": PROMOTE_PER_CLAIM}

            def one_call(conn: Connection) -> list[Taken]:
                nonlocal tries
                tries += 1
                return list(conn.execute(call, {**params, "resend": tries > 1}).all())

            try:
                return claim_order(self._db.run(one_call, single=True))
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) != _UNDEFINED_FUNCTION:
                    raise
                self._claim_function = False
                _log.warning(
                    "the claim function is missing (tables made by an earlier version); "
                    "claiming in several statements until create_tables adds it"
                )

        def several(conn: Connection) -> list[Taken]:
            nonlocal tries
            tries += 1
            return self._claim_in(conn, queue, at, limit, token, per_job, resend=tries > 1)

        return claim_order(self._db.run(several))

    def _claim_in(
        self,
        conn: Connection,
        queue: str,
        at: int,
        limit: int,
        token: str,
        per_job: bool,
        *,
        resend: bool,
    ) -> list[Taken]:
        sql = self._db.sql
        if resend:
            held = conn.execute(
                sql.held_many if per_job else sql.held_one, {"at": at, "token": token}
            )
            rows = list(held.all())
            if rows:
                return rows
        due = {"in_queue": queue, "at": at, "limit": PROMOTE_PER_CLAIM}
        self._promote(conn, list(conn.execute(sql.due_in_queue, due).scalars()))
        if per_job:
            ids = list(conn.execute(sql.best_many, {"in_queue": queue, "limit": limit}).scalars())
            if not ids:
                return []
            take = {"ids": ids, "base": token, "at": at}
            return list(conn.execute(sql.take_many, take).all())
        for _ in range(_CLAIM_ATTEMPTS):
            job_id = conn.execute(sql.best_one, {"in_queue": queue}).scalar_one_or_none()
            if job_id is None:
                return []
            row = conn.execute(sql.take_one, {"job_id": job_id, "token": token, "at": at}).first()
            if row is not None:
                return [row]
        # Every candidate went to another claimer; they made progress, we poll again.
        return []

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Mark a prefetched claim started: its token loses the prefetch mark and its
        lease is renewed to `now`, fenced by the old token. The started claim, or None
        if the claim was lost (or already started). A rerun after a dropped connection
        also accepts the new token, so a start whose answer was lost still succeeds."""
        plain = claim.token[len(PREFETCH_MARK) :] if is_prefetched(claim.token) else claim.token
        params: dict[str, Any] = {"job_id": str(claim.job.id), "old": claim.token}
        params |= {"new": plain, "at": to_micros(now)}
        sql = self._db.sql
        tries = 0

        def work(conn: Connection) -> bool:
            nonlocal tries
            tries += 1
            stmt = sql.start if tries == 1 else sql.start_again
            return conn.execute(stmt, params).rowcount == 1

        started = self._db.run(work, single=True)
        return attrs.evolve(claim, token=plain, locked_at=now) if started else None

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` scheduled rows with `run_at <= now` to the tail of ready,
        earliest `run_at` first, then in enqueue order, each with a fresh seq in that
        order. Claims promote their own queue's due rows; this is for operators and tests.

        `WHERE status='scheduled'` is re-checked by each UPDATE, so of concurrent
        promoters only one moves each row; `SKIP LOCKED` lets them share the work
        instead of waiting on each other.
        """
        if limit <= 0:
            return 0
        due = {"at": to_micros(now), "limit": limit}

        def work(conn: Connection) -> int:
            return self._promote(conn, list(conn.execute(self._db.sql.due_any, due).scalars()))

        return self._db.run(work)
