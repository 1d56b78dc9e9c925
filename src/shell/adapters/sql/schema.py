"""The SQL backend's tables, built with SQLAlchemy Core, for SQLite and PostgreSQL.

Two tables hold everything: `<prefix>_job_queue` (work still to do: ready,
scheduled and in-flight rows) and `<prefix>_job_store` (history and dead
letters). The authoritative job is the `payload` column, `codec.encode(job)`;
every other column is a copy kept only so that claims, promotions, reclaims and
listings are index scans.

FIFO order comes from `seq`, which every placement takes afresh, so a replaced,
promoted or reclaimed job goes to the tail like a new one; a parked job's `seq` is
its place among the jobs that come due at the same instant. On a
database with sequences (PostgreSQL) it is a `Sequence`, safe across processes
without a shared hot row. SQLite has no sequences; there a one-row-per-name
counter table is bumped in the same transaction as the placement, which is safe
because SQLite admits one writer at a time.

A third, `<prefix>_workers`, holds the heartbeats `conveyor status` shows.

The rest of the schema lives beside this module: the PostgreSQL functions, trigger
and table settings in `postgres_ddl`, the columns added since the first version in
`upgrade`, the schema as SQL text and its mark in `ddl`, and `migrate` (with the
check every other process makes, `schema_problem`) in `migration`.
"""

from __future__ import annotations

import attrs
from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    MetaData,
    Sequence,
    SmallInteger,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.interfaces import Dialect

from ....core import ValidationError
from ....core.validation import check_name

#: Values of `job_queue.status`. A row is in exactly one of these places.
READY = "ready"
SCHEDULED = "scheduled"
PROCESSING = "processing"
#: A job waiting for others (`core.dependencies`): no claim or promotion reads it.
WAITING = "waiting"

#: Counter names in the counter table (databases without sequences only).
JOB_COUNTER = "job_seq"
STORE_COUNTER = "store_seq"

DEFAULT_PREFIX = "conveyor"


@attrs.frozen
class Schema:
    """The tables and sequences of one Conveyor installation (one table prefix)."""

    metadata: MetaData
    job_queue: Table
    job_store: Table
    counters: Table
    job_seq: Sequence
    store_seq: Sequence
    workers: Table
    cancel_requests: Table
    unique_keys: Table
    limit_state: Table
    pruned: Table
    edges: Table
    workflows: Table

    def tables_for(self, dialect: Dialect) -> list[Table]:
        """The tables this dialect needs: the counter table only where sequences are missing."""
        tables = [self.job_queue, self.job_store, self.workers, self.cancel_requests]
        tables.extend((self.unique_keys, self.limit_state, self.pruned))
        tables.extend((self.edges, self.workflows))
        if not dialect.supports_sequences:
            tables.append(self.counters)
        return tables


def make_schema(prefix: str = DEFAULT_PREFIX) -> Schema:
    """Build the schema with table, index and sequence names starting with `prefix`."""
    problem = check_name("prefix", prefix)
    if problem is not None or "." in prefix or "-" in prefix:
        # The prefix lands unquoted in DDL someone may paste into a migration.
        raise ValidationError.of("prefix", "may hold only ASCII letters, digits and '_'")
    md = MetaData()
    job_seq = Sequence(f"{prefix}_job_seq", metadata=md)
    store_seq = Sequence(f"{prefix}_store_seq", metadata=md)
    job_queue = Table(
        f"{prefix}_job_queue",
        md,
        Column("id", String(36), primary_key=True),
        Column("queue", String(128), nullable=False),
        Column("status", String(16), nullable=False),
        Column("priority", SmallInteger, nullable=False),
        # Ready: the FIFO position. Parked: the enqueue order among jobs due at the same
        # instant (NULL in rows parked by versions that gave parked jobs no seq).
        Column("seq", BigInteger, nullable=True),
        Column("run_at", BigInteger, nullable=False),
        Column("locked_by", String(64), nullable=True),
        Column("locked_at", BigInteger, nullable=True),
        Column("tenant_id", String(128), nullable=True),
        Column("payload", Text, nullable=False),
        # Copies for the claims of queues with limits (see `core.limits`): the job type
        # and the job's partition. NULL only in rows written before they existed, until
        # `migrate` fills them in.
        Column("job_type", String(128), nullable=True),
        Column("partition_key", String(200), nullable=True),
        # The newest progress report of the running attempt, written with its lease
        # renewal (`conveyor.shell.progress_notes`); NULL when none was made.
        Column("progress", Text, nullable=True),
        # 1 when jobs wait for this one (`edges`): its finish then settles them in the
        # same transaction; NULL, the plain finish, otherwise.
        Column("dependents", SmallInteger, nullable=True),
    )
    # On PostgreSQL the next four indexes are partial, each holding the rows of the one
    # status its readers ask for: a row version enters the one that matches its status
    # instead of all four, three index entries (and their WAL) fewer per placement and
    # per claim (see `partial_index_ddl`).
    Index(
        f"{prefix}_job_queue_claim",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.priority,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == READY,
    )
    Index(
        f"{prefix}_job_queue_due",
        job_queue.c.status,
        job_queue.c.run_at,
        postgresql_where=job_queue.c.status == SCHEDULED,
    )
    # A claim promotes its own queue's due jobs first: that probe must not read the
    # parked jobs of other queues, nor those not yet due.
    Index(
        f"{prefix}_job_queue_due_by_queue",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.run_at,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == SCHEDULED,
    )
    Index(
        f"{prefix}_job_queue_lease",
        job_queue.c.status,
        job_queue.c.locked_at,
        postgresql_where=job_queue.c.status == PROCESSING,
    )
    # A limited claim reads the first ready jobs of each partition of its queue (partial
    # on PostgreSQL like the claim index: only ready rows are ever read through it).
    Index(
        f"{prefix}_job_queue_partition",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.partition_key,
        job_queue.c.priority,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == READY,
    )
    job_store = Table(
        f"{prefix}_job_store",
        md,
        Column("id", String(36), primary_key=True),
        Column("queue", String(128), nullable=False),
        Column("job_type", String(128), nullable=False),
        Column("status", String(16), nullable=False),
        Column("tenant_id", String(128), nullable=True),
        Column("finished_at", BigInteger, nullable=True),
        # Newest first is by the order of recording, not by a clock that may step back.
        Column("recorded_seq", BigInteger, nullable=False),
        Column("payload", Text, nullable=False),
    )
    Index(
        f"{prefix}_job_store_status",
        job_store.c.status,
        job_store.c.tenant_id,
        job_store.c.recorded_seq,
    )
    Index(f"{prefix}_job_store_dead", job_store.c.status, job_store.c.recorded_seq)
    Index(f"{prefix}_job_store_recorded", job_store.c.recorded_seq)
    # Pruning by age deletes the oldest finished records of one status first.
    Index(f"{prefix}_job_store_finished", job_store.c.status, job_store.c.finished_at)
    # Listings of one status by queue or by job type, newest first (the dashboard's).
    Index(
        f"{prefix}_job_store_queue",
        job_store.c.status,
        job_store.c.queue,
        job_store.c.recorded_seq,
    )
    Index(
        f"{prefix}_job_store_type",
        job_store.c.status,
        job_store.c.job_type,
        job_store.c.recorded_seq,
    )
    counters = Table(
        f"{prefix}_counters",
        md,
        Column("name", String(32), primary_key=True),
        Column("value", BigInteger, nullable=False),
    )
    # Worker heartbeats (`presence.SqlPresence`): who polls which queue.
    workers = Table(
        f"{prefix}_workers",
        md,
        Column("worker_id", String(200), primary_key=True),
        Column("last_seen_us", BigInteger, nullable=False),
        Column("info", Text, nullable=False),
    )
    # Cancel requests of claimed jobs (see `core.cancellation`): a row per job whose
    # holder must record it cancelled; every outcome write of a holder checks it.
    cancel_requests = Table(
        f"{prefix}_cancel_requests",
        md,
        Column("job_id", String(36), primary_key=True),
        Column("requested_at", BigInteger, nullable=False),
    )
    # Unique keys (see `core.uniqueness`): which job holds each key, in which of its
    # states and until when (µs; NULL = no limit). A row whose holder has left those
    # states is stale: the next enqueue with the key takes it over.
    unique_keys = Table(
        f"{prefix}_unique",
        md,
        Column("key", String(200), primary_key=True),
        Column("job_id", String(36), nullable=False),
        Column("states", String(100), nullable=False),
        Column("expires_at", BigInteger, nullable=True),
    )
    # The stored state of queues with limits: rate buckets (kind "bucket": tokens in
    # `value` at `at_us`) and fair-share passes (kind "pass"), written by their claims.
    limit_state = Table(
        f"{prefix}_limit_state",
        md,
        Column("queue", String(128), primary_key=True),
        Column("kind", String(8), primary_key=True),
        Column("key", String(400), primary_key=True),
        Column("value", Float(precision=53), nullable=False),
        Column("at_us", BigInteger, nullable=True),
    )
    # Tombstones of the records retention pruned (id, when, µs), kept for
    # `retention.remember_pruned_ms`: `Runtime.result` tells "pruned" from "unknown".
    pruned = Table(
        f"{prefix}_pruned",
        md,
        Column("id", String(36), primary_key=True),
        Column("pruned_at", BigInteger, nullable=False),
    )
    Index(f"{prefix}_pruned_at", pruned.c.pruned_at)
    # Jobs that wait for other jobs (`core.dependencies.Edge`): one row per edge, read
    # by the dependency when it ends and by the dependent to decide.
    edges = Table(
        f"{prefix}_edges",
        md,
        Column("dependency_id", String(36), primary_key=True),
        Column("dependent_id", String(36), primary_key=True),
        Column("position", SmallInteger, nullable=False),
        Column("on_failure", String(8), nullable=False),
        Column("name", String(200), nullable=True),
    )
    Index(f"{prefix}_edges_dependent", edges.c.dependent_id, edges.c.position)
    # The members of each workflow, by name, in the order they were added.
    workflows = Table(
        f"{prefix}_workflows",
        md,
        Column("workflow_id", String(36), primary_key=True),
        Column("position", BigInteger, primary_key=True),
        Column("name", String(200), nullable=False),
        Column("job_id", String(36), nullable=False),
    )
    # A job's workflow, for the pages that link a job back to it.
    Index(f"{prefix}_workflows_job", workflows.c.job_id)
    return Schema(
        md,
        job_queue,
        job_store,
        counters,
        job_seq,
        store_seq,
        workers,
        cancel_requests=cancel_requests,
        unique_keys=unique_keys,
        limit_state=limit_state,
        pruned=pruned,
        edges=edges,
        workflows=workflows,
    )


#: The default schema (`conveyor_job_queue`, `conveyor_job_store`, ...).
SCHEMA = make_schema()
#: The default schema's `MetaData`, for Alembic's `target_metadata`.
metadata = SCHEMA.metadata


_DIALECTS = {"postgresql": postgresql.dialect, "sqlite": sqlite.dialect}


def dialect_of(dialect: str | Dialect) -> Dialect:
    """`dialect` itself, or the SQLAlchemy dialect named by it ("postgresql", "sqlite")."""
    if isinstance(dialect, Dialect):
        return dialect
    factory = _DIALECTS.get(dialect)
    if factory is None:
        known = ", ".join(sorted(_DIALECTS))
        raise ValidationError.of("dialect", f"unknown dialect {dialect!r}; use one of {known}")
    made: Dialect = factory()
    return made
