"""The dead letter that stands for a payload which is not a job.

A malformed, foreign, forged or pickled payload is claimed like any job, so
exactly one worker deals with it, and dead-lettered as `decode-error` through
the executor like any other decision. Nothing in it is imported or unpickled;
its text is kept, capped, for an operator to inspect.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

from ..core import DeadLetter, Job, JobStatus, Priority, dead_letter, undecodable
from ..core.frozen import FrozenMap
from .ports import BadClaim

#: How much of an undecodable payload the dead letter keeps.
KEPT_PAYLOAD_CHARS = 4096


def placeholder_job(bad_job_id: str, token: str, queue: str, payload: str, now: datetime) -> Job:
    """A running job record standing for an undecodable payload."""
    try:
        job_id = UUID(bad_job_id)
    except ValueError:
        job_id = uuid.uuid5(uuid.NAMESPACE_URL, f"conveyor:undecodable:{token}")
    return Job(
        id=job_id,
        job_type="undecodable",
        # Kept for inspection as valid text: undecodable bytes become "?".
        args=FrozenMap(
            {"raw_payload": payload[:KEPT_PAYLOAD_CHARS].encode("utf-8", "replace").decode()}
        ),
        queue=queue,
        priority=Priority.NORMAL,
        status=JobStatus.RUNNING,
        created_at=now,
        run_at=now,
        max_retries=0,
        attempt=1,
        started_at=now,
    )


def undecodable_dead_letter(
    bad: BadClaim, now: datetime, *, abandoned_before: datetime | None = None
) -> DeadLetter:
    """The `decode-error` dead letter for a `BadClaim`."""
    job = placeholder_job(bad.job_id, bad.token, bad.queue, bad.payload, now)
    return dead_letter(
        job, undecodable(bad.job_id, bad.reason), now, abandoned_before=abandoned_before
    )
