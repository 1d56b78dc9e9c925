"""What every role of the SQL queue shares: its database, its table, how a job is
placed in a row, and how a claimed row becomes a `Claim`.

`SqlJobQueue` is composed of roles (enqueue, claims, limits, holder writes, cancel,
reads, wake-ups), each a class over `SqlQueueBase` in a module of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from returns.result import Success
from sqlalchemy import Connection, Engine, Row

from ....core import Job, ValidationError
from ....core.limits import partition_of
from ...codec import decode, encode, encode_many
from ...ports import BadClaim, Claim
from .bulk_copy import RowCopier
from .database import Database
from .engine import to_micros
from .outbox import check_outbox, parameters_hidden
from .same_database import SameDatabase
from .schema import JOB_COUNTER, READY, SCHEDULED, SCHEMA, Schema
from .single_put import SinglePut
from .statements import JOB_COLUMNS
from .unique import SqlAdder

__all__ = ["SqlQueueBase", "Taken", "as_claim", "claim_order", "held_by", "same_id"]

#: The placement columns after `id` (`JOB_COLUMNS` order).
_PLACED = JOB_COLUMNS[1:]

#: A claimed row: id, locked_by, payload, priority, seq.
Taken = Row[str, str, str, int, int]


class SqlQueueBase:
    """The state the roles of `SqlJobQueue` share (see the module docs)."""

    def __init__(
        self, engine: Engine, *, schema: Schema = SCHEMA, lock_retry_s: float = 30.0
    ) -> None:
        self._db = Database(engine, schema, lock_retry_s)
        self._t = schema.job_queue
        # Until a database without the claim function (made by an earlier version and
        # not upgraded with create_tables) says otherwise.
        self._claim_function = self._db.sql.claim is not None
        self._adder = SqlAdder(self._db, self._placement_values)
        self._copier = RowCopier(schema)
        self._single = SinglePut(self._db) if SinglePut.usable(self._db) else None
        #: Outbox writes go only through connections to this queue's database.
        self._same_database = SameDatabase(engine, schema.job_queue.name)

    @property
    def engine(self) -> Engine:
        """The engine this queue writes through."""
        return self._db.engine

    @contextlib.contextmanager
    def _in_callers_tx(self, conn: Any) -> Iterator[None]:
        """Around a write in the caller's open transaction on `conn`: refuse a `conn`
        that would commit the job apart from the caller's change, or put it where no
        worker of this queue looks (another database, another schema, a lost SQLite
        file), before anything is written; then tell a driver error of the write
        without the job's args."""
        check_outbox(conn)
        self._same_database.check(conn)
        self._db.refuse_lost_file()
        with parameters_hidden():
            yield

    @property
    def lock_retries(self) -> int:
        """How many transactions were rerun after a transient error (for metrics)."""
        return self._db.retries

    def _placement(self, conn: Connection, job: Job) -> dict[str, Any]:
        """Column values putting `job` where its status says, unlocked."""
        return {**self._placement_values(job), "seq": self._db.next_seq(conn, JOB_COUNTER)}

    @staticmethod
    def _placement_row(job: Job, payload: str | None = None) -> tuple[Any, ...]:
        """Every placement column but `seq`, in `JOB_COLUMNS` order (`id` first);
        `payload` is the job's encoding when the caller has it already."""
        return (
            str(job.id),
            SCHEDULED if job.status.is_parked else READY,
            to_micros(job.run_at, "run_at"),
            None,
            None,
            job.priority.rank,
            job.queue,
            job.tenant_id,
            encode(job) if payload is None else payload,
            job.job_type,
            partition_of(job),
        )

    @classmethod
    def _placement_dicts(cls, jobs: Sequence[Job]) -> list[dict[str, Any]]:
        """`_placement_row` of each job as a dict by column, the jobs encoded together."""
        payloads = encode_many(jobs)
        return [
            dict(zip(JOB_COLUMNS, cls._placement_row(job, payload), strict=True))
            for job, payload in zip(jobs, payloads, strict=True)
        ]

    @staticmethod
    def _placement_values(job: Job) -> dict[str, Any]:
        """Every placement column but `seq` and `id`."""
        return dict(zip(_PLACED, SqlQueueBase._placement_row(job)[1:], strict=True))

    def _enqueue(self, conn: Connection, job: Job) -> None:
        """Upsert `job`'s row inside `conn`'s transaction (see `enqueue`)."""
        self._db.put(conn, {"id": str(job.id), **self._placement_values(job)}, record=False)

    def _promote(self, conn: Connection, ids: list[str]) -> int:
        """Make the parked rows `ids` (in promotion order) ready, each with a fresh seq
        in that order, unless another promoter moved them first. How many moved."""
        if not ids:
            return 0
        seqs = self._db.next_seqs(conn, JOB_COUNTER, len(ids))
        moves = [{"job_id": job_id, "seq": seq} for job_id, seq in zip(ids, seqs, strict=True)]
        return int(conn.execute(self._db.sql.promote_one, moves).rowcount)

    def _finished_before(self, job_id: str, token: str, record: Job) -> bool:
        """A rerun's look at what its first try left: True when the token holds nothing
        and the store holds exactly `record` (the first try committed)."""
        sql = self._db.sql

        def look(conn: Connection) -> bool:
            if conn.execute(sql.held_row, {"job_id": job_id, "token": token}).first():
                return False
            stored = conn.execute(sql.store_payload, {"job_id": str(record.id)}).scalar()
            return stored == encode(record)

        return self._db.run(look, write=False)


def held_by(claim: Claim | BadClaim) -> tuple[str, str]:
    """The (job id, token) a holder's write is fenced by."""
    if isinstance(claim, BadClaim):
        return claim.job_id, claim.token
    return str(claim.job.id), claim.token


def claim_order(rows: Sequence[Taken]) -> list[Taken]:
    """Claimed rows in claim order (priority, then seq): RETURNING gives them in none."""
    return sorted(rows, key=lambda r: (r.priority, r.seq))


def same_id(claim: Claim, job: Job) -> None:
    """Refuse a write of `job` through a claim on another job."""
    if job.id != claim.job.id:
        raise ValidationError.of("job", f"has id {job.id}, but the claim holds {claim.job.id}")


def as_claim(
    job_id: str, token: str, queue: str, payload: str, locked_at: datetime
) -> Claim | BadClaim:
    """A claim on a decoded job, or a `BadClaim` saying why the payload is not one."""
    decoded = decode(payload)
    if not isinstance(decoded, Success):
        return BadClaim(job_id, token, queue, payload, str(decoded.failure()), locked_at)
    job = decoded.unwrap()
    if str(job.id) != job_id:
        # A payload naming another job would make every fenced write miss this row.
        reason = f"payload names job {job.id}, but the row is {job_id}"
        return BadClaim(job_id, token, queue, payload, reason, locked_at)
    return Claim(job=job, token=token, queue=queue, locked_at=locked_at)
