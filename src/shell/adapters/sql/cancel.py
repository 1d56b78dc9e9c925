"""The SQL queue's cancellation (see `core.cancellation`): cancel a queued job, ask
the holder of a claimed one to stop, and the holder's cancelled finish."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, delete, insert, select

from ....core import Job
from ...ports import BadClaim, Claim
from .base import SqlQueueBase, held_by, same_id
from .engine import to_micros
from .schema import PROCESSING, READY, SCHEDULED, WAITING
from .store import write_record

__all__ = ["Cancelling"]


class Cancelling(SqlQueueBase):
    """The cancellation role of `SqlJobQueue`."""

    def cancel(self, record: Job) -> bool:
        """One transaction: delete the row while it is still ready or scheduled (no claim
        holds it) and record `record` (cancelled). False, writing nothing, otherwise."""
        t = self._t
        queued = (READY, SCHEDULED, WAITING)
        gone = delete(t).where(t.c.id == str(record.id), t.c.status.in_(queued))

        def work(conn: Connection) -> bool:
            if conn.execute(gone).rowcount != 1:
                return False
            write_record(self._db, conn, record)
            self._settle_after(conn, record)
            return True

        return self._db.run(work)

    def _settle_after(self, conn: Connection, record: Job) -> None:
        """Settle the jobs waiting for `record`, just ended (the workflow role does)."""

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        """While the row is processing, add its cancel request, in one transaction.

        On PostgreSQL the row is also rewritten (deleted and inserted unchanged): an
        outcome write that began before this commits and waits on the row then finds
        its row version gone and writes nothing, where the request alone would be
        invisible to its older snapshot. Its holder's next write sees the request."""
        return self._db.run(lambda conn: self._request_cancel_in(conn, job_id, now))

    def _request_cancel_in(self, conn: Connection, job_id: UUID, now: datetime) -> bool:
        """`request_cancel`'s work inside `conn`'s transaction."""
        t, requests = self._t, self._db.schema.cancel_requests
        held = select(t).where(t.c.id == str(job_id), t.c.status == PROCESSING).with_for_update()
        row = conn.execute(held).mappings().first()
        if row is None:
            return False
        if not self._db.sqlite:
            conn.execute(delete(t).where(t.c.id == str(job_id)))
            conn.execute(insert(t).values(dict(row)))
        asked = conn.execute(self._db.sql.cancel_requested, {"job_id": str(job_id)}).first()
        if asked is None:
            mark = {"job_id": str(job_id), "requested_at": to_micros(now)}
            conn.execute(insert(requests).values(mark))
        return True

    def cancel_requested(self, job_id: UUID) -> bool:
        """True while a cancel request stands for `job_id` (one primary-key probe)."""
        stmt, params = self._db.sql.cancel_requested, {"job_id": str(job_id)}
        found = self._db.run(lambda conn: conn.execute(stmt, params).first(), write=False)
        return found is not None

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """One transaction: delete the held row (fenced, and with `abandoned_before` still
        locked before it), record `record` (cancelled) and clear the request."""
        if isinstance(claim, Claim):
            same_id(claim, record)
        job_id, token = held_by(claim)
        held: dict[str, Any] = {"job_id": job_id, "token": token}
        sql = self._db.sql
        release = sql.release
        if abandoned_before is not None:
            held["cut"] = to_micros(abandoned_before, "abandoned_before")
            release = sql.release_abandoned
        tries = 0

        def work(conn: Connection) -> bool:
            nonlocal tries
            tries += 1
            if conn.execute(release, held).rowcount != 1:
                return False
            write_record(self._db, conn, record)
            conn.execute(sql.clear_cancel, {"job_id": job_id})
            self._settle_after(conn, record)
            return True

        done = self._db.run(work)
        return done or (tries > 1 and self._finished_before(job_id, token, record))
