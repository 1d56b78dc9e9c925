"""The memory queue's progress notes: kept on the in-flight entry, so a note goes with
its claim."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ...ports import BadClaim, Claim
from .state import QueueState


class ProgressNotes(QueueState):
    """`extend_with_progress` and `progress_note` (`ProgressJobQueue`)."""

    def extend_with_progress(self, claim: Claim | BadClaim, now: datetime, note: str) -> bool:
        if isinstance(claim, BadClaim):
            return False
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            entry.locked_at, entry.note = now, note
            return True

    def progress_note(self, job_id: UUID) -> str | None:
        with self._lock:
            entry = self._in_flight.get(job_id)
            return None if entry is None else entry.note
