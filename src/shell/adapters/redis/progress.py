"""The role of `RedisJobQueue` that keeps a running job's progress: a `progress` field
in the job's hash, written by the lease renewal's own script (`extend.lua`)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ...ports import BadClaim, Claim
from .arguments import job_id, ms
from .base import RedisQueueBase
from .client import text


class ProgressNotes(RedisQueueBase):
    """`extend_with_progress` and `progress_note` (`ProgressJobQueue`)."""

    def extend_with_progress(self, claim: Claim | BadClaim, now: datetime, note: str) -> bool:
        """Renew the lease to `now` and store `note`, in one script fenced by the token."""
        return bool(self._run(self._extend, job_id(claim), claim.token, ms(now), note))

    def progress_note(self, job_id: UUID) -> str | None:
        """The `progress` field of the job's hash (one HGET)."""
        key = self.keys.job(str(job_id))
        found = self._retrying(lambda: self._client.hget(key, "progress"))
        return None if found is None else text(found)
