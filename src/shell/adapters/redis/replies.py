"""The scripts' and reads' replies as the ports' values: claims, queued jobs, the job
an `enqueue_new` found. Bodies are decoded here; one that does not decode is a
`BadClaim` (or a `QueuedJob` that says why), never an exception."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from returns.result import Failure, Success

from ....core import Job
from ...codec import decode
from ...lookup import queued_entry
from ...ports import BadClaim, Claim, Place, QueuedJob, prefetch_token
from ...unique import PLACE_NAMES, found_in_queue, stored_job
from .arguments import EPOCH, MS
from .client import text

#: The job hash's fields a lookup reads (see the key table in docs/redis.md).
LOOKUP_FIELDS = ("body", "status", "queue", "token", "locked_at")
_PLACES = {
    b"ready": Place.READY,
    b"scheduled": Place.SCHEDULED,
    b"processing": Place.IN_FLIGHT,
    b"waiting": Place.WAITING,
}


def locked_at_of(locked_ms: bytes | str) -> datetime:
    """A stored lock time (ms, maybe written as a float) as a datetime."""
    return EPOCH + int(float(text(locked_ms))) * MS


def queued(job_id: str, fields: Sequence[bytes | None]) -> QueuedJob | None:
    """A `QueuedJob` from a job hash's lookup fields; None when there is no such job."""
    body, status, queue, token, locked_ms = fields
    place = _PLACES.get(status or b"")
    if body is None or place is None:
        return None
    held = place is Place.IN_FLIGHT
    locked_at = locked_at_of(locked_ms) if held and locked_ms is not None else None
    return queued_entry(
        job_id,
        text(queue or b""),
        place,
        body,
        text(token or b"") if held else None,
        locked_at,
    )


def claim_of(
    job_id: str, body: bytes | str, token: str, queue: str, locked_at: datetime
) -> Claim | BadClaim:
    """The claim of a held job's body, or a `BadClaim` saying why it is not a job."""
    match decode(body):
        case Success(job) if str(job.id) == job_id:
            return Claim(job=job, token=token, queue=queue, locked_at=locked_at)
        case Success(job):
            reason = f"body names job {job.id}, but it is stored as {job_id}"
        case Failure(error):
            reason = str(error)
    return BadClaim(
        job_id=job_id,
        token=token,
        queue=queue,
        payload=text(body),
        reason=reason,
        locked_at=locked_at,
    )


def single_claim(
    reply: Any, token: str, queue: str, locked_at: datetime
) -> Claim | BadClaim | None:
    """The claim in a claim script's reply ({id, body} or nil)."""
    if reply is None:
        return None
    raw_id, body = reply
    return claim_of(text(raw_id), body, token, queue, locked_at)


def batch_claims(reply: Any, base: str, queue: str, locked_at: datetime) -> list[Claim | BadClaim]:
    """The claims in a claim_many reply ({id, body, id, body, ...}), each under its
    prefetched token built from `base`."""
    claims: list[Claim | BadClaim] = []
    for raw_id, body in zip(reply[::2], reply[1::2], strict=True):
        job_id = text(raw_id)
        token = prefetch_token(f"{base}:{job_id}")
        claims.append(claim_of(job_id, body, token, queue, locked_at))
    return claims


def found(reply: Any) -> Job | None:
    """An `enqueue_new` script's answer: None when written, else the job there."""
    if int(reply[0]) == 1:
        return None
    where, body = text(reply[1]), reply[2]
    job = stored_job(body, "the job's id")
    place = PLACE_NAMES.get(where)
    return job if place is None else found_in_queue(place, job)
