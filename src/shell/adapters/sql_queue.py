"""The SQL `JobQueue`: work still to do, one `<prefix>_job_queue` row per job.

A row is `ready`, `scheduled` (parked until `run_at`) or `processing` (claimed).
The `payload` column is the authoritative job, `codec.encode(job)`; the other
columns are copies for the indexes.

Claim, in one transaction: the queue's parked rows that are due become ready first
(at most `PROMOTE_PER_CLAIM`, earliest `run_at` first, then enqueue order, each
with a fresh `seq` behind the rows already ready), then the best ready row
(priority, then `seq`) is taken with `UPDATE ... SET status='processing',
locked_by=:token WHERE id=:id AND status='ready'`. The conditional UPDATE is what
makes it safe everywhere; `FOR UPDATE SKIP LOCKED` (rendered on PostgreSQL, absent
on SQLite, where `BEGIN IMMEDIATE` already serialises writers) only keeps
concurrent claimers from queueing behind one row. On PostgreSQL the claim is one
call of a function (`sql_schema.claim_ddl`): one round trip. Every write of a claim
holder — ack, extend, start, replace, reclaim, finish — is fenced by `id`,
`locked_by` and `status='processing'`, so a stale holder changes nothing.

A claim's token is chosen before its first try. Should the connection drop after
the claim committed, the rerun first returns the rows that token already holds:
the caller gets the job it took, never a second one.

Times: every instant written or compared (`locked_at`, `run_at`, cutoffs) is the
`now` or `cutoff` the caller passes in, never the database clock; `server_time`
reports the database's clock so workers can check theirs against it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs
from returns.result import Success
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError

from ...core import Job, JobStatus, Priority, ValidationError
from ...core.limits import ClaimPlan, QueueLimits, partition_of
from ..codec import decode, encode
from ..lookup import queued_entry
from ..ports import (
    PREFETCH_MARK,
    BadClaim,
    Claim,
    LimitedClaims,
    LimitUsage,
    Place,
    PriorityCounts,
    QueueCounts,
    QueuedJob,
    is_prefetched,
    prefetch_token,
)
from ..tokens import fresh_token
from .sql_copy import RowCopier
from .sql_engine import Database, from_micros, to_micros
from .sql_limits import SqlLimitedClaim, held_rows
from .sql_same_db import SameDatabase
from .sql_schema import (
    JOB_COUNTER,
    PROCESSING,
    PROMOTE_PER_CLAIM,
    READY,
    SCHEDULED,
    SCHEMA,
    Schema,
)
from .sql_store import SqlJobStore, record_values, write_record, write_records
from .sql_unique import Found, SqlAdder, rerun_on_contention
from .sql_wakeup import wakeups_for

__all__ = ["SqlJobQueue"]

_log = logging.getLogger(__name__)

#: Claim attempts when the chosen row went to another claimer between select and update.
_CLAIM_ATTEMPTS = 16
#: PostgreSQL's SQLSTATE for a function that does not exist.
_UNDEFINED_FUNCTION = "42883"

#: A claimed row: id, locked_by, payload, priority, seq.
_Taken = Row[str, str, str, int, int]


class SqlJobQueue:
    """A `JobQueue`, `TransactionalJobQueue` and `BatchingJobQueue` in a SQLite or
    PostgreSQL database.

    Create the tables first with `sql_schema.create_tables(engine)`. A SQLite engine
    not built by `make_engine` is configured the same way on first use. Transient
    errors (locks, dropped connections) are retried for up to `lock_retry_s` seconds
    per operation, here and nowhere above.
    """

    def __init__(
        self, engine: Engine, *, schema: Schema = SCHEMA, lock_retry_s: float = 30.0
    ) -> None:
        self._db = Database(engine, schema, lock_retry_s)
        self._t = schema.job_queue
        # Until a database without the claim function (made by an earlier version and
        # not upgraded with create_tables) says otherwise.
        self._claim_function = self._db.sql.claim is not None
        #: Claims of queues with limits, made on first use.
        self._limited: SqlLimitedClaim | None = None
        self._adder = SqlAdder(self._db, self._placement_values)
        self._copier = RowCopier(schema)
        #: Outbox writes go only through connections to this queue's database.
        self._same_database = SameDatabase(engine)

    @property
    def engine(self) -> Engine:
        """The engine this queue writes through."""
        return self._db.engine

    @property
    def lock_retries(self) -> int:
        """How many transactions were rerun after a transient error (for metrics)."""
        return self._db.retries

    # --- placing jobs --------------------------------------------------------------------

    def _placement(self, conn: Connection, job: Job) -> dict[str, Any]:
        """Column values putting `job` where its status says, unlocked."""
        return {**self._placement_values(job), "seq": self._db.next_seq(conn, JOB_COUNTER)}

    @staticmethod
    def _placement_values(job: Job) -> dict[str, Any]:
        """Every placement column but `seq`."""
        return {
            "status": SCHEDULED if job.status.is_parked else READY,
            "run_at": to_micros(job.run_at, "run_at"),
            "locked_by": None,
            "locked_at": None,
            "priority": job.priority.rank,
            "queue": job.queue,
            "tenant_id": job.tenant_id,
            "payload": encode(job),
            "job_type": job.job_type,
            "partition_key": partition_of(job),
        }

    def _enqueue(self, conn: Connection, job: Job) -> None:
        self._db.put(conn, {"id": str(job.id), **self._placement_values(job)}, record=False)

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked: parked jobs wait as `scheduled`, others go to the tail
        of ready; either takes a fresh `seq` (for a parked job, its place among those
        due at the same instant). Re-enqueueing a claimed job takes it from its holder,
        whose ack then finds nothing."""
        # One upsert on PostgreSQL (seq from the sequence); SQLite bumps a counter first.
        self._db.run(lambda conn: self._enqueue(conn, job), single=not self._db.sqlite)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one transaction, in list order: by COPY on PostgreSQL
        (see `sql_copy`), in one statement elsewhere."""
        if jobs:
            self._db.run(lambda conn: self._enqueue_many(conn, jobs))

    def _enqueue_many(self, conn: Connection, jobs: Sequence[Job]) -> None:
        by_id = {job.id: job for job in jobs}  # one row per id: the last one wins
        batch = list(by_id.values())
        if self._copier.usable(conn):
            rows = [{"id": str(job.id), **self._placement_values(job)} for job in batch]
            self._copier.put_many(conn, rows)
            return
        seqs = self._db.next_seqs(conn, JOB_COUNTER, len(batch))
        rows = [
            {"id": str(job.id), **self._placement_values(job), "seq": seq}
            for job, seq in zip(batch, seqs, strict=True)
        ]
        self._db.put_many(conn, rows, record=False)

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` unless its id is queued or recorded, or its unique key is held;
        the job already there, or None when written (see `sql_unique`)."""
        try:
            return rerun_on_contention(lambda: self._db.run(lambda c: self._adder.add(c, job)))
        except Found as found:
            return found.job

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job in one transaction, each in its own savepoint."""
        if not jobs:
            return []
        return rerun_on_contention(lambda: self._db.run(lambda c: [self._add(c, j) for j in jobs]))

    def _add(self, conn: Connection, job: Job) -> Job | None:
        """`enqueue_new` of one job in a savepoint of `conn`'s transaction, which a job
        found after a write rolls back."""
        try:
            with conn.begin_nested():
                return self._adder.add(conn, job)
        except Found as found:
            return found.job

    def enqueue_new_in_tx(self, conn: Any, job: Job) -> Job | None:
        """`enqueue_new` inside the caller's open transaction on `conn` (checked as by
        `enqueue_in_tx`); a job already there leaves the caller's writes as they were."""
        _check_outbox(conn)
        self._same_database.check(conn)
        return rerun_on_contention(lambda: self._add(conn, job))

    def enqueue_in_tx(self, conn: Any, job: Job) -> None:
        """Enqueue inside the caller's open transaction on `conn` (the outbox row): it
        commits or rolls back with the caller's own writes. `conn` must be a SQLAlchemy
        `Connection` to this queue's database with a transaction begun (a connection
        to another database is refused, see `sql_same_db`)."""
        _check_outbox(conn)
        self._same_database.check(conn)
        self._enqueue(conn, job)

    # --- claims --------------------------------------------------------------------------

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` (priority, then FIFO) under a fresh plain
        token, locked at `now`, after promoting the queue's due parked jobs. An
        undecodable payload comes back as a `BadClaim`."""
        taken = self._claim(queue, to_micros(now), 1, fresh_token(), per_job=False)
        if not taken:
            return None
        row = taken[0]
        return _as_claim(str(row.id), str(row.locked_by), queue, str(row.payload), now)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one transaction, after promoting
        the queue's due parked jobs, each under its own prefetched token: a fresh base
        per call joined with the job id (`p-<16 hex>:<id>`, 55 characters)."""
        if limit <= 0:
            return []
        base = prefetch_token(uuid.uuid4().hex[:16] + ":")
        taken = self._claim(queue, to_micros(now), limit, base, per_job=True)
        return [_as_claim(str(r.id), str(r.locked_by), queue, str(r.payload), now) for r in taken]

    def _claim(self, queue: str, at: int, limit: int, token: str, *, per_job: bool) -> list[_Taken]:
        """Promote, then claim up to `limit` rows under `token` (a prefix, with
        `per_job`), in claim order. Every try after the first is a re-send: it first
        returns what `token` already holds."""
        tries = 0
        if self._claim_function:
            call = self._db.sql.claim
            assert call is not None
            params = {"in_queue": queue, "at": at, "limit": limit, "token": token}
            params |= {"per_job": per_job, "promote": PROMOTE_PER_CLAIM}

            def one_call(conn: Connection) -> list[_Taken]:
                nonlocal tries
                tries += 1
                return list(conn.execute(call, {**params, "resend": tries > 1}).all())

            try:
                return _claim_order(self._db.run(one_call, single=True))
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) != _UNDEFINED_FUNCTION:
                    raise
                self._claim_function = False
                _log.warning(
                    "the claim function is missing (tables made by an earlier version); "
                    "claiming in several statements until create_tables adds it"
                )

        def several(conn: Connection) -> list[_Taken]:
            nonlocal tries
            tries += 1
            return self._claim_in(conn, queue, at, limit, token, per_job, resend=tries > 1)

        return _claim_order(self._db.run(several))

    def _claim_in(
        self,
        conn: Connection,
        queue: str,
        at: int,
        limit: int,
        token: str,
        per_job: bool,
        *,
        resend: bool,
    ) -> list[_Taken]:
        sql = self._db.sql
        if resend:
            held = conn.execute(
                sql.held_many if per_job else sql.held_one, {"at": at, "token": token}
            )
            rows = list(held.all())
            if rows:
                return rows
        due = {"in_queue": queue, "at": at, "limit": PROMOTE_PER_CLAIM}
        self._promote(conn, list(conn.execute(sql.due_in_queue, due).scalars()))
        if per_job:
            ids = list(conn.execute(sql.best_many, {"in_queue": queue, "limit": limit}).scalars())
            if not ids:
                return []
            take = {"ids": ids, "base": token, "at": at}
            return list(conn.execute(sql.take_many, take).all())
        for _ in range(_CLAIM_ATTEMPTS):
            job_id = conn.execute(sql.best_one, {"in_queue": queue}).scalar_one_or_none()
            if job_id is None:
                return []
            row = conn.execute(sql.take_one, {"job_id": job_id, "token": token, "at": at}).first()
            if row is not None:
                return [row]
        # Every candidate went to another claimer; they made progress, we poll again.
        return []

    def _promote(self, conn: Connection, ids: list[str]) -> int:
        """Make the parked rows `ids` (in promotion order) ready, each with a fresh seq
        in that order, unless another promoter moved them first. How many moved."""
        if not ids:
            return 0
        seqs = self._db.next_seqs(conn, JOB_COUNTER, len(ids))
        moves = [{"job_id": job_id, "seq": seq} for job_id, seq in zip(ids, seqs, strict=True)]
        return int(conn.execute(self._db.sql.promote_one, moves).rowcount)

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs of `queue` as `core.limits.plan_claim` chooses, in one
        transaction serialised with the queue's other limited claims (see
        `sql_limits`); tokens as `dequeue_many` gives them."""
        if self._limited is None:
            self._limited = SqlLimitedClaim(self._db, self._promote)
        limited = self._limited
        at = to_micros(now)
        base = prefetch_token(uuid.uuid4().hex[:16] + ":")
        tries = 0

        def work(conn: Connection) -> tuple[list[Any], ClaimPlan | None]:
            nonlocal tries
            tries += 1
            if tries > 1:
                # A re-send: its first try may have committed before the answer was lost.
                held = list(conn.execute(self._db.sql.held_many, {"at": at, "token": base}))
                if held:
                    return held_rows(held), None
            return limited.claim(conn, queue, at, max(1, want), limits, base)

        rows, plan = self._db.run(work)
        claims = [_as_claim(str(r.id), str(r.locked_by), queue, str(r.payload), now) for r in rows]
        if plan is None or plan.wait_until_us is None:
            return LimitedClaims(claims, None, plan is not None and plan.held_back > 0)
        return LimitedClaims(claims, from_micros(plan.wait_until_us), plan.held_back > 0)

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits (see `sql_limits`), in one read."""
        if self._limited is None:
            self._limited = SqlLimitedClaim(self._db, self._promote)
        limited = self._limited
        return self._db.run(lambda conn: limited.usage(conn, queue))

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Mark a prefetched claim started: its token loses the prefetch mark and its
        lease is renewed to `now`, fenced by the old token. The started claim, or None
        if the claim was lost (or already started). A rerun after a dropped connection
        also accepts the new token, so a start whose answer was lost still succeeds."""
        plain = claim.token[len(PREFETCH_MARK) :] if is_prefetched(claim.token) else claim.token
        params: dict[str, Any] = {"job_id": str(claim.job.id), "old": claim.token}
        params |= {"new": plain, "at": to_micros(now)}
        sql = self._db.sql
        tries = 0

        def work(conn: Connection) -> bool:
            nonlocal tries
            tries += 1
            stmt = sql.start if tries == 1 else sql.start_again
            return conn.execute(stmt, params).rowcount == 1

        started = self._db.run(work, single=True)
        return attrs.evolve(claim, token=plain, locked_at=now) if started else None

    # --- holders' writes -----------------------------------------------------------------

    def _fenced(self, claim: Claim | BadClaim) -> list[ColumnElement[bool]]:
        job_id, token = _held_by(claim)
        t = self._t
        # No outcome of a holder is written while its job's cancel request stands.
        held = [t.c.id == job_id, t.c.locked_by == token, t.c.status == PROCESSING]
        return [*held, self._db.sql.no_cancel]

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the row only while `claim.token` still holds it."""
        job_id, token = _held_by(claim)
        held = {"job_id": job_id, "token": token}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.release, held).rowcount == 1, single=True
        )

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` while `claim.token` still holds the row."""
        job_id, token = _held_by(claim)
        held = {"job_id": job_id, "token": token, "at": to_micros(now)}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.extend, held).rowcount == 1, single=True
        )

    def replace(self, claim: Claim, job: Job) -> bool:
        """Swap the held row for `job` (ready at the tail, or parked), unlocked, while
        `claim.token` still holds it."""
        _same_id(claim, job)

        def work(conn: Connection) -> bool:
            stmt = update(self._t).where(*self._fenced(claim)).values(self._placement(conn, job))
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned row to ready as `job` (or park it, by its status), only if
        it is still held by `claim.token` and still locked before `cutoff`: the
        predicate is re-checked inside the write, so a job acked or extended since
        `abandoned()` looked is left alone."""
        _same_id(claim, job)
        cut = to_micros(cutoff, "cutoff")

        def work(conn: Connection) -> bool:
            stmt = (
                update(self._t)
                .where(*self._fenced(claim), self._t.c.locked_at < cut)
                .values(self._placement(conn, job))
            )
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def finishes_with(self, store: object) -> bool:
        """True when `store` keeps its table in this queue's database."""
        return (
            isinstance(store, SqlJobStore)
            and store._db.engine.url == self._db.engine.url
            and store._db.schema is self._db.schema
        )

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """One transaction: delete the held row (fenced, and with `abandoned_before`
        also still locked before that instant) and upsert `record` in the store. Both
        commit or neither; a lost claim, or one renewed since, writes nothing.

        A rerun after a dropped connection whose first try committed finds the row gone;
        it answers True when the store holds exactly `record` and the token holds
        nothing, as the first try would have."""
        if isinstance(claim, Claim):
            _same_id(claim, record)
        job_id, token = _held_by(claim)
        held: dict[str, Any] = {"job_id": job_id, "token": token}
        if abandoned_before is not None:
            held["cut"] = to_micros(abandoned_before, "abandoned_before")
        sql = self._db.sql
        tries = 0
        one = sql.finish if abandoned_before is None else sql.finish_abandoned
        if one is not None:
            params = {**{f"r_{c}": v for c, v in record_values(record).items()}, **held}

            def statement(conn: Connection) -> bool:
                nonlocal tries
                tries += 1
                return conn.execute(one, params).first() is not None

            done = self._db.run(statement, single=True)
        else:
            release = (
                sql.finish_release if abandoned_before is None else sql.finish_release_abandoned
            )

            def work(conn: Connection) -> bool:
                nonlocal tries
                tries += 1
                if conn.execute(release, held).rowcount != 1:
                    return False
                write_record(self._db, conn, record)
                return True

            done = self._db.run(work)
        return done or (tries > 1 and self._finished_before(job_id, token, record))

    # --- cancellation (see `core.cancellation`) ------------------------------------------

    def cancel(self, record: Job) -> bool:
        """One transaction: delete the row while it is still ready or scheduled (no claim
        holds it) and record `record` (cancelled). False, writing nothing, otherwise."""
        t = self._t
        gone = delete(t).where(t.c.id == str(record.id), t.c.status.in_((READY, SCHEDULED)))

        def work(conn: Connection) -> bool:
            if conn.execute(gone).rowcount != 1:
                return False
            write_record(self._db, conn, record)
            return True

        return self._db.run(work)

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
            _same_id(claim, record)
        job_id, token = _held_by(claim)
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
            return True

        done = self._db.run(work)
        return done or (tries > 1 and self._finished_before(job_id, token, record))

    def _finished_before(self, job_id: str, token: str, record: Job) -> bool:
        sql = self._db.sql

        def look(conn: Connection) -> bool:
            if conn.execute(sql.held_row, {"job_id": job_id, "token": token}).first():
                return False
            stored = conn.execute(sql.store_payload, {"job_id": str(record.id)}).scalar()
            return stored == encode(record)

        return self._db.run(look, write=False)

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one transaction; one answer per item. Each
        row is deleted only while its own token holds it, and only those are recorded."""
        if not items:
            return []
        for claim, record in items:
            _same_id(claim, record)
        sql = self._db.sql

        def work(conn: Connection) -> list[bool]:
            tokens = {"tokens": [claim.token for claim, _ in items]}
            gone = conn.execute(sql.release_many, tokens)
            released = {(str(r.id), str(r.locked_by)) for r in gone}
            done = [(str(c.job.id), c.token) in released for c, _ in items]
            write_records(self._db, conn, [r for (_, r), ok in zip(items, done, strict=True) if ok])
            return done

        return self._db.run(work)

    def revive(self, dead: Job, fresh: Job) -> bool:
        """An operator's retry of a dead letter, in one transaction: only while the store
        still records `dead.id` as failed (the row is locked while this looks), put
        `fresh` in the queue, ready or parked by its status, and record it. False,
        with nothing written, once it is no longer a dead letter."""
        sql = self._db.sql

        def work(conn: Connection) -> bool:
            status = conn.execute(sql.store_status, {"job_id": str(dead.id)}).scalar()
            if status != JobStatus.FAILED.value:
                return False
            self._enqueue(conn, fresh)
            write_record(self._db, conn, fresh)
            return True

        return self._db.run(work)

    # --- schedule and leases -------------------------------------------------------------

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` scheduled rows with `run_at <= now` to the tail of ready,
        earliest `run_at` first, then in enqueue order, each with a fresh seq in that
        order. Claims promote their own queue's due rows; this is for operators and tests.

        `WHERE status='scheduled'` is re-checked by each UPDATE, so of concurrent
        promoters only one moves each row; `SKIP LOCKED` lets them share the work
        instead of waiting on each other.
        """
        if limit <= 0:
            return 0
        due = {"at": to_micros(now), "limit": limit}

        def work(conn: Connection) -> int:
            return self._promote(conn, list(conn.execute(self._db.sql.due_any, due).scalars()))

        return self._db.run(work)

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked rows, or None."""
        stmt = self._db.sql.next_due
        first = self._db.run(
            lambda conn: conn.execute(stmt, {"in_queue": queue}).scalar(), write=False
        )
        return None if first is None else from_micros(int(first))

    def abandoned(self, cutoff: datetime, limit: int = 100) -> list[Claim | BadClaim]:
        """Claims whose lease was taken or last extended before `cutoff`, oldest first,
        with their tokens as stored (so `started` tells a prefetched claim). Read-only:
        a row whose payload does not decode comes back as a `BadClaim`."""
        t = self._t
        cut = to_micros(cutoff, "cutoff")
        stmt = (
            select(t.c.id, t.c.queue, t.c.locked_by, t.c.locked_at, t.c.payload)
            .where(t.c.status == PROCESSING, t.c.locked_at < cut)
            .order_by(t.c.locked_at)
            .limit(limit)
        )
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        return [
            _as_claim(r.id, r.locked_by or "", r.queue, r.payload, from_micros(r.locked_at))
            for r in rows
        ]

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight rows per queue and priority, and the oldest
        ready `run_at`, folded per queue. A due job counts as scheduled until a claim or
        `promote_due` moves it, so `now` changes nothing here."""
        t = self._t
        # Counted along the claim index (queue, status, priority) without reading the
        # rows, and the oldest ready job per queue along the due index: one pass over
        # the table's rows (payloads and all) would cost far more with many jobs queued.
        split = select(t.c.queue, t.c.priority, t.c.status, func.count()).group_by(
            t.c.queue, t.c.status, t.c.priority
        )

        def read(conn: Connection) -> tuple[Sequence[Any], dict[str, Any]]:
            rows = conn.execute(split).all()
            oldest = {}
            for name in sorted({str(r[0]) for r in rows if r[2] == READY}):
                first = select(func.min(t.c.run_at)).where(t.c.queue == name, t.c.status == READY)
                oldest[name] = conn.execute(first).scalar()
            return rows, oldest

        rows, oldest = self._db.run(read, write=False)
        column = {READY: 0, SCHEDULED: 1, PROCESSING: 2}
        cells: dict[tuple[str, int], list[int]] = {}
        for name, rank, status, n in rows:
            cell = cells.setdefault((str(name), int(rank)), [0, 0, 0])
            if status in column:
                cell[column[status]] += int(n)
        groups: dict[str, list[tuple[Any, ...]]] = {}
        for (name, rank), figures in sorted(cells.items()):
            groups.setdefault(name, []).append((name, rank, *figures, oldest.get(name)))
        return {name: _fold_counts(group) for name, group in groups.items()}

    # --- lookup (read-only, without the write lock) ---------------------------------------

    def _lookup_columns(self) -> list[ColumnElement[Any]]:
        t = self._t
        return [t.c.id, t.c.queue, t.c.status, t.c.locked_by, t.c.locked_at, t.c.payload]

    def find(self, job_id: UUID) -> QueuedJob | None:
        """The job's row, read where it is (ready, scheduled or processing), or None."""
        stmt = select(*self._lookup_columns()).where(self._t.c.id == str(job_id))
        row = self._db.run(lambda conn: conn.execute(stmt).first(), write=False)
        return None if row is None else _queued(row)

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Rows by place, each place in its own order, `batch` rows per read."""
        t = self._t
        order = {
            Place.IN_FLIGHT: (t.c.locked_at, t.c.id),
            Place.READY: (t.c.queue, t.c.priority, t.c.seq, t.c.id),
            Place.SCHEDULED: (t.c.run_at, t.c.seq, t.c.id),
        }
        for where in [place] if place is not None else list(Place):
            filters = [t.c.status == _STATUS_OF[where]]
            if queue is not None:
                filters.append(t.c.queue == queue)
            base = select(*self._lookup_columns()).where(*filters).order_by(*order[where])
            offset = 0
            while True:
                rows = self._page(base.limit(batch).offset(offset))
                yield from map(_queued, rows)
                if len(rows) < batch:
                    break
                offset += batch

    def _page(self, stmt: Any) -> Sequence[Row[Any]]:
        return self._db.run(lambda conn: conn.execute(stmt).all(), write=False)

    def server_time(self) -> datetime | None:
        """PostgreSQL's clock (`clock_timestamp()`), in UTC; None on SQLite, whose clock
        is this host's."""
        stmt = self._db.sql.server_time
        if stmt is None:
            return None
        when = self._db.run(lambda conn: conn.execute(stmt).scalar_one(), write=False)
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(f"clock_timestamp() gave {when!r}, not an aware datetime")
        return when.astimezone(UTC)

    # --- idle workers --------------------------------------------------------------------

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until a job may be ready on `queue` or `timeout_s` passes; True means
        "try a claim". All idle workers of a process share one listener per database,
        outside the pool (see `sql_wakeup`). A parked job is announced when it is
        placed, not when it comes due: ask `next_due` how long to sleep."""
        return wakeups_for(self._db.engine).wait(self, self._db.engine, queue, timeout_s)

    def close(self) -> None:
        """Close pooled connections (the engine reconnects if used again) and stop
        listening for wake-ups on this queue's behalf."""
        wakeups_for(self._db.engine).leave(self)
        self._db.engine.dispose()


_STATUS_OF = {Place.IN_FLIGHT: PROCESSING, Place.READY: READY, Place.SCHEDULED: SCHEDULED}
_PLACE_OF = {status: place for place, status in _STATUS_OF.items()}


def _queued(row: Row[Any]) -> QueuedJob:
    place = _PLACE_OF[str(row.status)]
    held = place is Place.IN_FLIGHT
    return queued_entry(
        str(row.id),
        str(row.queue),
        place,
        str(row.payload),
        str(row.locked_by or "") if held else None,
        from_micros(int(row.locked_at)) if held and row.locked_at is not None else None,
    )


def _held_by(claim: Claim | BadClaim) -> tuple[str, str]:
    if isinstance(claim, BadClaim):
        return claim.job_id, claim.token
    return str(claim.job.id), claim.token


def _claim_order(rows: Sequence[_Taken]) -> list[_Taken]:
    # RETURNING gives rows in no particular order.
    return sorted(rows, key=lambda r: (r.priority, r.seq))


def _same_id(claim: Claim, job: Job) -> None:
    if job.id != claim.job.id:
        raise ValidationError.of("job", f"has id {job.id}, but the claim holds {claim.job.id}")


def _as_claim(
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


_BY_RANK = {p.rank: p for p in Priority}
_NONE = PriorityCounts(0, 0, 0)


def _fold_counts(rows: Sequence[tuple[Any, ...]]) -> QueueCounts:
    """One queue's figures from its (queue, priority, ready, scheduled, in flight,
    oldest ready) rows."""
    by_priority: dict[Priority, PriorityCounts] = {}
    oldest: list[int] = []
    for _, rank, ready, scheduled, in_flight, first in rows:
        figures = PriorityCounts(int(ready or 0), int(scheduled or 0), int(in_flight or 0))
        if figures != _NONE:
            by_priority[_BY_RANK[int(rank)]] = figures
        if first is not None:
            oldest.append(int(first))
    split = by_priority.values()
    return QueueCounts(
        ready=sum(c.ready for c in split),
        scheduled=sum(c.scheduled or 0 for c in split),
        in_flight=sum(c.in_flight or 0 for c in split),
        oldest_ready_at=from_micros(min(oldest)) if oldest else None,
        by_priority=by_priority,
    )


def _check_outbox(conn: Any) -> None:
    """Refuse anything but a Connection with a transaction begun: the job would
    otherwise commit apart from the caller's change (the dual-write window)."""
    if not isinstance(conn, Connection):
        raise ValidationError.of(
            "conn",
            f"must be a sqlalchemy Connection with a transaction begun, got "
            f"{type(conn).__name__}; an Engine would commit the job on its own, apart "
            "from your change",
        )
    if not conn.in_transaction():
        raise ValidationError.of(
            "conn",
            "has no transaction begun; use `with engine.begin() as conn` or "
            "conn.begin(), so the job commits together with your change",
        )
    if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        raise ValidationError.of(
            "conn", "is in AUTOCOMMIT mode; the job would commit apart from your change"
        )
