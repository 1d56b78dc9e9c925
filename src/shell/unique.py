"""What every adapter's `enqueue_new` shares: the state a stored job is in.

The verdict itself (does a unique key still hold?) is the core's
`core.uniqueness.lock_holds`; the adapters supply the holder's state, read in the
same atomic step as the enqueue.
"""

from __future__ import annotations

import attrs
from returns.result import Success

from ..core import Job, JobStatus, ValidationError
from .codec import decode
from .ports import Place


def queued_state(place: Place, job: Job) -> JobStatus:
    """The state of a job the queue holds: running while claimed, pending when ready,
    and its own parked status (scheduled or retrying) while parked."""
    if place is Place.IN_FLIGHT:
        return JobStatus.RUNNING
    if place is Place.READY:
        return JobStatus.PENDING
    if place is Place.WAITING:
        return JobStatus.WAITING
    return job.status if job.status.is_parked else JobStatus.SCHEDULED


def as_found(job: Job, state: JobStatus) -> Job:
    """`job` showing `state`: a queued payload keeps the status it was written with
    (a claim does not rewrite it), so the caller is told where the job stands now."""
    return job if job.status is state else attrs.evolve(job, status=state)


def found_in_queue(place: Place, job: Job) -> Job:
    """A job the queue holds in `place`, as `enqueue_new` reports it."""
    return as_found(job, queued_state(place, job))


#: Where `enqueue_new` may find a job in the queue, by the adapters' names for it.
PLACE_NAMES = {
    "processing": Place.IN_FLIGHT,
    "ready": Place.READY,
    "scheduled": Place.SCHEDULED,
    "waiting": Place.WAITING,
}


def stored_job(payload: str | bytes, job_id: str) -> Job:
    """The job a stored payload holds. Anything else under a taken id is refused:
    `enqueue_new` never overwrites what it cannot read."""
    match decode(payload):
        case Success(job):
            return job  # type: ignore[no-any-return]
    raise ValidationError.of("id", f"{job_id} is taken by a stored payload that is not a job")
