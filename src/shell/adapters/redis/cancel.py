"""Cancellation (see `core.cancellation`): a queued job is taken out and recorded
cancelled in one script; an in-flight one is marked cancel-requested, and its holder
records the cancel and releases the claim in one script."""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from ....core import Job
from ...ports import BadClaim, Claim
from .arguments import cutoff_ms, job_id, ms, record_args, record_body, same_job
from .settling import Settling


class Cancelling(Settling):
    """Cancel a queued job, request the cancel of a claimed one, and finish that."""

    def cancel(self, record: Job) -> bool:
        """Take a ready, parked or waiting job out of the queue and record `record`
        (cancelled), settling the jobs waiting for it, in one script, only while no claim
        holds it."""
        args: list[object] = [*record_args(record), uuid.uuid4().hex]
        return bool(self._ending("cancel", self._cancel, args, record))

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        """Mark an in-flight job's hash cancel-requested (one script); False when no
        claim holds it."""
        return bool(self._run(self._request_cancel, str(job_id), ms(now)))

    def cancel_requested(self, job_id: UUID) -> bool:
        """True while the job's hash carries a cancel request (one HEXISTS)."""
        key = self.keys.job(str(job_id))
        return bool(self._retrying(lambda: self._client.hexists(key, "cancel")))

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Record `record` (cancelled) and release the claim, request and all, in one
        script fenced by the token (and `abandoned_before`, as in `finish`)."""
        if isinstance(claim, Claim):
            same_job(claim, record)
        args = [job_id(claim), claim.token, cutoff_ms(abandoned_before), *record_body(record)]
        return bool(
            self._ending("finish", self._finish_cancelled, [*args, uuid.uuid4().hex], record)
        )
