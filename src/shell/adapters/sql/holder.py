"""The SQL queue's holder writes: ack, extend, replace, reclaim, finish, finish_many,
and the lease keeper's read of abandoned claims.

Every write of a claim holder is fenced by `id`, `locked_by` and
`status='processing'`, so a stale holder changes nothing; an outcome write is also
refused while a cancel request stands for its job (see `core.cancellation`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Executable, select, update

from ....core import Job
from ...ports import BadClaim, Claim
from .base import SqlQueueBase, as_claim, held_by, same_id
from .engine import from_micros, to_micros
from .schema import PROCESSING
from .store import SqlJobStore, record_values, write_record, write_records

__all__ = ["HolderWrites"]


class HolderWrites(SqlQueueBase):
    """The claim holder's role of `SqlJobQueue`."""

    def _fenced(self, claim: Claim | BadClaim) -> list[ColumnElement[bool]]:
        job_id, token = held_by(claim)
        t = self._t
        # No outcome of a holder is written while its job's cancel request stands.
        held = [t.c.id == job_id, t.c.locked_by == token, t.c.status == PROCESSING]
        return [*held, self._db.sql.no_cancel]

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the row only while `claim.token` still holds it."""
        job_id, token = held_by(claim)
        held = {"job_id": job_id, "token": token}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.release, held).rowcount == 1, single=True
        )

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` while `claim.token` still holds the row."""
        job_id, token = held_by(claim)
        held = {"job_id": job_id, "token": token, "at": to_micros(now)}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.extend, held).rowcount == 1, single=True
        )

    def replace(self, claim: Claim, job: Job) -> bool:
        """Swap the held row for `job` (ready at the tail, or parked), unlocked, while
        `claim.token` still holds it."""
        same_id(claim, job)

        def work(conn: Connection) -> bool:
            stmt = update(self._t).where(*self._fenced(claim)).values(self._placement(conn, job))
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned row to ready as `job` (or park it, by its status), only if
        it is still held by `claim.token` and still locked before `cutoff`: the
        predicate is re-checked inside the write, so a job acked or extended since
        `abandoned()` looked is left alone."""
        same_id(claim, job)
        cut = to_micros(cutoff, "cutoff")

        def work(conn: Connection) -> bool:
            stmt = (
                update(self._t)
                .where(*self._fenced(claim), self._t.c.locked_at < cut)
                .values(self._placement(conn, job))
            )
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def finishes_with(self, store: object) -> bool:
        """True when `store` keeps its table in this queue's database."""
        return (
            isinstance(store, SqlJobStore)
            and store._db.engine.url == self._db.engine.url
            and store._db.schema is self._db.schema
        )

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """One transaction: delete the held row (fenced, and with `abandoned_before`
        also still locked before that instant) and upsert `record` in the store. Both
        commit or neither; a lost claim, or one renewed since, writes nothing.

        A rerun after a dropped connection whose first try committed finds the row gone;
        it answers True when the store holds exactly `record` and the token holds
        nothing, as the first try would have."""
        if isinstance(claim, Claim):
            same_id(claim, record)
        job_id, token = held_by(claim)
        held: dict[str, Any] = {"job_id": job_id, "token": token}
        if abandoned_before is not None:
            held["cut"] = to_micros(abandoned_before, "abandoned_before")
        sql = self._db.sql
        tries = 0
        one = sql.finish if abandoned_before is None else sql.finish_abandoned
        if one is not None:
            params = {**{f"r_{c}": v for c, v in record_values(record).items()}, **held}

            def statement(conn: Connection) -> bool:
                nonlocal tries
                tries += 1
                return conn.execute(one, params).first() is not None

            done = self._db.run(statement, single=True)
        else:
            release = (
                sql.finish_release if abandoned_before is None else sql.finish_release_abandoned
            )

            def work(conn: Connection) -> bool:
                nonlocal tries
                tries += 1
                if conn.execute(release, held).rowcount != 1:
                    return False
                write_record(self._db, conn, record)
                return True

            done = self._db.run(work)
        if done or (tries > 1 and self._finished_before(job_id, token, record)):
            return True
        # Refused: the claim is lost, or jobs wait for this one (the plain statements
        # take no such row). The second is finished with its dependents settled.
        return self._finish_settling(claim, record, abandoned_before)

    def _finish_settling(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None
    ) -> bool:
        """`finish` of a row that jobs wait for (the workflow role has it)."""
        return False

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one transaction; one answer per item. Each
        row is deleted only while its own token holds it, and only those are recorded."""
        if not items:
            return []
        for claim, record in items:
            same_id(claim, record)
        sql = self._db.sql

        def work(conn: Connection) -> list[bool]:
            tokens = {"tokens": [claim.token for claim, _ in items]}
            gone = conn.execute(sql.release_many, tokens)
            released = {(str(r.id), str(r.locked_by)) for r in gone}
            done = [(str(c.job.id), c.token) in released for c, _ in items]
            write_records(self._db, conn, [r for (_, r), ok in zip(items, done, strict=True) if ok])
            return done

        if sql.finish_many is not None:
            done = self._finish_many_in_one(sql.finish_many, items)
        else:
            done = self._db.run(work)
        # A row jobs wait for is not taken by the batch: it is finished on its own.
        return [
            ok or self._finish_settling(c, r, None) for (c, r), ok in zip(items, done, strict=True)
        ]

    def _finish_many_in_one(
        self, statement: Executable, items: Sequence[tuple[Claim, Job]]
    ) -> list[bool]:
        """PostgreSQL's `finish_many`: one statement, in autocommit (see
        `statements._finish_many`). A re-send after a lost answer finds the rows it
        deleted gone and answers False for them, as the transaction path does."""
        rows = []
        for ord_, (claim, record) in enumerate(items):
            row = record_values(record)
            row["token"], row["ord"] = claim.token, ord_
            rows.append(row)
        params = {"rows": json.dumps(rows, ensure_ascii=False)}

        def statement_(conn: Connection) -> set[str]:
            return {str(r[0]) for r in conn.execute(statement, params)}

        recorded = self._db.run(statement_, single=True)
        return [str(claim.job.id) in recorded for claim, _ in items]

    def abandoned(self, cutoff: datetime, limit: int = 100) -> list[Claim | BadClaim]:
        """Claims whose lease was taken or last extended before `cutoff`, oldest first,
        with their tokens as stored (so `started` tells a prefetched claim). Read-only:
        a row whose payload does not decode comes back as a `BadClaim`."""
        t = self._t
        cut = to_micros(cutoff, "cutoff")
        stmt = (
            select(t.c.id, t.c.queue, t.c.locked_by, t.c.locked_at, t.c.payload)
            .where(t.c.status == PROCESSING, t.c.locked_at < cut)
            .order_by(t.c.locked_at)
            .limit(limit)
        )
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        return [
            as_claim(r.id, r.locked_by or "", r.queue, r.payload, from_micros(r.locked_at))
            for r in rows
        ]
