"""The role of `SqlJobQueue` that keeps a running job's progress: a `progress` column
on the job's row, written by the lease renewal's own fenced UPDATE."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ...ports import BadClaim, Claim
from .base import SqlQueueBase, held_by
from .engine import to_micros


class ProgressNotes(SqlQueueBase):
    """`extend_with_progress` and `progress_note` (`ProgressJobQueue`)."""

    def extend_with_progress(self, claim: Claim | BadClaim, now: datetime, note: str) -> bool:
        """Renew the lease to `now` and store `note`, in one UPDATE fenced by the token."""
        job_id, token = held_by(claim)
        params = {"job_id": job_id, "token": token, "at": to_micros(now), "note": note}
        stmt = self._db.sql.extend_with_progress
        return self._db.run(lambda conn: conn.execute(stmt, params).rowcount == 1, single=True)

    def progress_note(self, job_id: UUID) -> str | None:
        """The `progress` column of `job_id`'s row (None: no row, or no report)."""
        stmt, params = self._db.sql.progress_note, {"job_id": str(job_id)}
        found = self._db.run(lambda conn: conn.execute(stmt, params).scalar(), write=False)
        return None if found is None else str(found)
