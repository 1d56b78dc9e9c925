"""What the scripts are given: times in the forms they compare, and each job's facts.

Times are passed from the caller's clock, never read from the server's TIME inside a
script: the core's decisions, the tests' manual clocks and the lease predicate then
all use one notion of `now`. A job is due exactly when `run_at <= now` (both in µs);
lease scores are milliseconds rounded down, so rounding can make a claim abandoned
late, never early.

Facts are what a script would otherwise have to work out from a job's body: its
partition and job type (for a limited queue's partition index), and for a record the
minute its finish counts in and its finish time in µs. They are computed here from
the core (`core.limits.partition_of`, `core.throughput.counted_minute`), so no
script decodes a body to apply a rule, and no script parses a date.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from returns.result import Success

from ....core import Job, ValidationError
from ....core.limits import DEFAULT_PARTITION, partition_of
from ....core.throughput import counted_minute
from ....core.uniqueness import state_names
from ...codec import decode, encode
from ...ports import BadClaim, Claim

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)


def ms(when: datetime) -> int:
    return (when - EPOCH) // MS


def ms_ceil(when: datetime) -> int:
    return -((EPOCH - when) // MS)


def us(when: datetime) -> int:
    return (when - EPOCH) // US


def us_digits(when: datetime) -> str:
    """µs as the 18-digit string the scripts compare scheduled members against."""
    return str(us(when)).zfill(18)


def now_args(now: datetime) -> list[object]:
    """`now` as the promotion step wants it: ms rounded up (the highest score that can
    be due), ms rounded down (for members written by an earlier version), exact µs."""
    return [ms_ceil(now), ms(now), us_digits(now)]


def cutoff_ms(before: datetime | None) -> object:
    """A fence's "still locked before" instant in ms; "" for none."""
    return "" if before is None else ms(before)


def placement(job: Job, body: str | None = None) -> list[object]:
    """Where and how a job is placed (the prelude's `place`): id, body, queue,
    priority, target ("ready", or "scheduled" when parked), run_at in ms (rounded up)
    and µs, and the job's facts: its partition and job type. `body` is the job's
    encoding when the caller has it already."""
    return [
        str(job.id),
        encode(job) if body is None else body,
        job.queue,
        job.priority.value,
        "scheduled" if job.status.is_parked else "ready",
        ms_ceil(job.run_at),
        us(job.run_at),
        partition_of(job),
        job.job_type,
    ]


def record_args(record: Job) -> list[object]:
    """A record as the store prelude's `record` takes it: id, body, status, queue,
    tenant, and its facts: job type, the minute its finish counts in ("" when it does
    not count) and its finish time in µs ("" when it has none)."""
    return [str(record.id), *record_body(record)]


def record_body(record: Job) -> list[object]:
    """`record_args` after the id."""
    return [
        encode(record),
        record.status.value,
        record.queue,
        record.tenant_id or "",
        *record_facts(record),
    ]


def record_facts(record: Job) -> list[object]:
    """A record's job type, counted minute and finish time in µs (see `record_args`)."""
    finished = None if record.finished_at is None else us(record.finished_at)
    minute = counted_minute(record.status, finished)
    return [record.job_type, minute, "" if finished is None else finished]


def same_job(claim: Claim, record: Job) -> str:
    """The id of the job `claim` holds, which `record` must be a record of."""
    if record.id != claim.job.id:
        raise ValidationError.of("job", f"has id {record.id}, but the claim holds {claim.job.id}")
    return str(record.id)


def finish_args(claim: Claim, record: Job) -> list[object]:
    """A finish script's arguments for one job: its id and token, then `record_args`
    after the id."""
    return [same_job(claim, record), claim.token, *record_body(record)]


def job_id(claim: Claim | BadClaim) -> str:
    return claim.job_id if isinstance(claim, BadClaim) else str(claim.job.id)


def facts_of_body(body: bytes | str) -> tuple[str, str]:
    """The partition and job type of a stored body, for a job placed without its
    facts (by an earlier version, or before its queue's limits were used); a body that
    does not decode belongs to the default partition, with no type."""
    match decode(body):
        case Success(job):
            return partition_of(job), job.job_type
    return DEFAULT_PARTITION, ""


def finished_us_of_body(body: bytes | str) -> str:
    """The finish time in µs of a stored record's body ("" when it has none or does
    not decode), for a record written before records kept it."""
    match decode(body):
        case Success(job) if job.finished_at is not None:
            return str(us(job.finished_at))
    return ""


def unique_args(job: Job, now: datetime | None = None) -> list[str]:
    """A job's unique key as the scripts take it: the key ('' for none), its states,
    its window's end, now (default: the job's creation) and the key's time to live."""
    at = job.created_at if now is None else now
    lock = job.unique
    key = states = expires = ttl = ""
    if lock is not None:
        key, states = lock.key, state_names(lock)
        if lock.expires_at is not None:
            expires = us_digits(lock.expires_at)
            # Only for Redis to forget the key: the verdict reads `expires`.
            ttl = str(max(1, ms_ceil(lock.expires_at) - ms(at)) + 1000)
    return [key, states, expires, us_digits(at), ttl]
