"""The runtime: everything built from one config.

`build(config)` makes the queue, store and presence for the provider, loads
contributed handlers, and gives back a `Runtime` that enqueues, runs one pool
per configured queue (none on a web node with `workers.count = 0`), drains,
and reports status. Enqueueing on a queue no pool is configured to poll is
reported once, by name, with the config key that fixes it.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import attrs
from returns.result import Failure, Success

from ..core import (
    CancelCounts,
    CancelResult,
    Job,
    JobStatus,
    LeasePolicy,
    Policies,
    Priority,
    ValidationError,
    create_job,
    decide_revive,
    prune_order,
)
from ..core.errors import FieldError
from ..core.limit_report import LimitReport
from ..core.limits import QueueLimits
from ..core.validation import parse_job_id
from . import outage
from .async_enqueue import THREAD, AsyncWriters
from .cancellation import cancel_job, cancel_many
from .config import Config, load_config
from .cron import Cron
from .executor import Executor
from .handlers import contribute
from .hooks import Hooks
from .inline import InlineRunner
from .lease_keeper import check_clock
from .lookup import JobView, find_job, list_jobs, parse_state
from .pool import WorkerPool
from .ports import (
    Clock,
    JobQueue,
    JobStore,
    LimitReportingJobQueue,
    QueueCounts,
    SystemClock,
    is_transactional,
)
from .presence import MAX_BEAT_JOBS, MemoryPresence, Presence, WorkerInfo
from .redact import backend_url
from .registry import Registry
from .retention import Pruner, prune_all
from .tenancy import TenantResolver, TenantScope
from .worker import Worker, WorkerStats

if TYPE_CHECKING:
    from .forced_stop import HandedBack
    from .tracing import JobTracer

log = logging.getLogger("conveyor.runtime")

T = TypeVar("T")

PRESENCE_INTERVAL = timedelta(seconds=5)
PRESENCE_TTL = timedelta(seconds=20)


@attrs.frozen(slots=True)
class QueueStatus:
    """One row of `conveyor status`."""

    queue: str
    ready: int
    scheduled: int
    in_flight: int
    dead: int
    oldest_ready_age_s: float | None
    pollers: tuple[str, ...]
    configured: bool

    @property
    def flagged(self) -> bool:
        """Work is waiting and no live worker polls this queue."""
        return (self.ready + self.scheduled) > 0 and not self.pollers


@attrs.frozen(slots=True)
class Status:
    """What `Runtime.status` reports: a row per queue, and the live workers."""

    queues: tuple[QueueStatus, ...]
    workers: tuple[WorkerInfo, ...]
    #: Each limited queue's shares, caps in use and throttled work (docs/limits.md).
    limits: tuple[LimitReport, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as `conveyor status --json` prints it."""
        return {
            "queues": [
                {**attrs.asdict(q), "pollers": list(q.pollers), "flagged": q.flagged}
                for q in self.queues
            ],
            "workers": [
                {**attrs.asdict(w), "queues": list(w.queues), "last_seen": w.last_seen.isoformat()}
                for w in self.workers
            ],
            "limits": [_limit_dict(report) for report in self.limits],
        }


def _limit_dict(report: LimitReport) -> dict[str, Any]:
    return {
        "queue": report.queue,
        "fair": report.fair,
        "running": report.running,
        "throttled": report.throttled,
        "partitions": [attrs.asdict(p) for p in report.partitions],
        "caps": [{**attrs.asdict(c), "full": c.full} for c in report.caps],
        "rates": [{**attrs.asdict(r), "empty": r.empty} for r in report.rates],
    }


def _job_id(value: UUID | str) -> UUID:
    parsed = parse_job_id(value)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


def _retry_budget_s(config: Config) -> float:
    """How long an adapter may retry one storage call: a quarter of the lease."""
    return config.lease_ms / 4000


def _make_backend(config: Config) -> tuple[JobQueue, JobStore, Presence]:
    if config.provider == "memory":
        from .adapters.memory import MemoryJobQueue, MemoryJobStore

        store = MemoryJobStore()
        return MemoryJobQueue(store), store, MemoryPresence()
    if config.provider == "db":
        from .adapters.sql import SqlJobQueue, SqlJobStore, make_engine
        from .config_paths import sqlite_file
        from .presence import SqlPresence

        url = config.url
        file = sqlite_file(url)
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
        try:
            engine = make_engine(url, pool_size=config.pool_size)
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("psycopg"):
                raise
            # The driver is an extra: say which one, not just what failed to import.
            raise ModuleNotFoundError(
                "PostgreSQL needs the psycopg driver: pip install 'conveyor-jobs[postgres]'",
                name=exc.name,
            ) from None
        # No DDL here: `build` checks the schema mark (or migrates, where configured).
        # The one retry layer: a quarter lease, so a retried write lands while the
        # claim it writes for is still live.
        budget = _retry_budget_s(config)
        queue = SqlJobQueue(engine, lock_retry_s=budget)
        return queue, SqlJobStore(engine, lock_retry_s=budget), SqlPresence(engine)
    if config.provider == "redis":
        try:
            from .adapters.redis import RedisJobQueue, RedisJobStore, connect
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "redis":
                raise
            raise ModuleNotFoundError(
                "the Redis backend needs redis-py: pip install 'conveyor-jobs[redis]'",
                name=exc.name,
            ) from None
        from .presence import RedisPresence

        client = connect(config.redis_url)
        budget = _retry_budget_s(config)
        return (
            RedisJobQueue(client, prefix=config.redis_prefix, retry_budget_s=budget),
            RedisJobStore(client, prefix=config.redis_prefix, retry_budget_s=budget),
            RedisPresence(client, prefix=config.redis_prefix),
        )
    raise ValidationError.of("provider", f"unknown provider {config.provider!r}")


def _make_tenancy(config: Config) -> TenantScope | None:
    t = config.tenancy
    if t is None:
        return None
    from .adapters.sql import make_engine
    from .handlers import import_attr
    from .tenancy import SchemaPerTenant, SharedTables, TableTenantResolver

    # The same engine settings as the job tables (WAL and busy timeout on SQLite).
    engine = make_engine(t.url or config.url)
    resolver: TenantResolver
    if t.resolver == "table":
        resolver = TableTenantResolver(
            engine, table=t.table, id_column=t.id_column, schema_column=t.schema_column
        )
    else:
        found = import_attr(t.resolver, "tenancy.resolver")
        resolver = found if hasattr(found, "resolve") else found(engine)
    strategy = SchemaPerTenant() if t.strategy == "schema" else SharedTables()
    return TenantScope(engine, resolver, strategy)


def _once(options: Mapping[str, Any]) -> bool:
    """True when the enqueue must not write a job that is already there: the caller
    chose its id or gave it a unique key (a fresh random id needs no look)."""
    return options.get("id") is not None or options.get("unique_key") is not None


#: The keyword options every enqueue method takes (`Runtime.enqueue` documents them).
ENQUEUE_OPTIONS = frozenset(
    {"queue", "priority", "max_retries", "run_at", "delay", "tenant_id", "timeout"}
    | {"id", "unique_key", "unique_for", "unique_states", "partition"}
)


#: The options `aenqueue` writes through the asyncio driver: they shape the job only.
_PLAIN_OPTIONS = frozenset(
    {"queue", "priority", "max_retries", "run_at", "delay", "tenant_id", "timeout", "partition"}
)


class Runtime:
    """A configured Conveyor: enqueue, run workers, drain, report."""

    def __init__(
        self,
        config: Config,
        queue: JobQueue,
        store: JobStore,
        registry: Registry,
        *,
        presence: Presence | None = None,
        clock: Clock | None = None,
        jitter: Callable[[], float] | None = None,
        tenancy: TenantScope | None = None,
        hooks: Hooks | None = None,
        inline: bool = False,
    ) -> None:
        self.config = config
        #: Run jobs at enqueue, in the caller's thread (see `conveyor.shell.inline`).
        self.inline = inline
        # A clock other than the system's is a test clock, often on a fixed date far
        # from a server's: the lease keeper's comparison would only refuse to reclaim.
        self.inline_runner = InlineRunner(
            lambda name: self.worker(name, clock_check=isinstance(self.clock, SystemClock))
        )
        self.tenancy = tenancy
        #: Lifecycle callbacks (`runtime.hooks.on_failed(...)`); see `conveyor.shell.hooks`.
        self.hooks = hooks if hooks is not None else Hooks()
        self.queue, self.store, self.registry = queue, store, registry
        self.presence = presence or MemoryPresence()
        self.clock = clock or SystemClock()
        self.jitter = jitter
        lease = LeasePolicy(lease_ms=config.lease_ms, max_reclaims=config.max_reclaims)
        self.policies = Policies(retry=config.retry, requeue=config.requeue, lease=lease)
        self.executor = Executor(queue, store, clock=self.clock)
        #: Shared by this process's workers: one of them prunes per interval.
        self.pruner = Pruner(self.executor, config.retention, server=outage.for_queue(queue))
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.pools: list[WorkerPool] = []
        self._warned: set[str] = set()
        self._warned_types: set[str] = set()
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        #: Set by `conveyor.shell.tracing.instrument`: spans for enqueues and attempts.
        self.tracer: JobTracer | None = None
        #: Periodic jobs: the config's `[[cron]]` entries, and `runtime.cron.add(...)`.
        self.cron = Cron(self, config.cron)
        #: How `aenqueue` writes: `async_writers.driver` names the path (docs/asyncio.md).
        self.async_writers = AsyncWriters(config, queue)
        #: Each queue's fair shares, caps and rates (`[limits.<queue>]`, or `build`'s
        #: `limits`); its workers claim under them (docs/limits.md).
        self.limits: dict[str, QueueLimits] = dict(config.limits)

    # ---- enqueue ----------------------------------------------------------

    def enqueue(
        self,
        job_type: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        priority: Priority | str = Priority.NORMAL,
        max_retries: int = 3,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        tenant_id: str | None = None,
        timeout: timedelta | float | None = None,
        id: UUID | str | None = None,
        unique_key: str | None = None,
        unique_for: timedelta | float | None = None,
        unique_states: Sequence[JobStatus | str] | None = None,
        partition: str | None = None,
    ) -> Job:
        """Validate and enqueue a job; raises `ValidationError` naming bad fields.
        `delay` may be a timedelta or seconds. `timeout` (a timedelta or seconds)
        bounds each attempt, overriding the job type's; an attempt that runs past it
        is recorded as a retryable `Timeout` failure (see docs/handlers.md).

        `id` (a UUID or its text) names the job: when a job with that id exists, in
        any state, nothing is written and that job is returned, args unchanged.
        `unique_key` makes the job hold that key while it is in one of
        `unique_states` (default: scheduled, pending, running, retrying) and, with
        `unique_for` (a timedelta or seconds), for at most that long: meanwhile an
        enqueue with the same key returns the holder instead of writing a second job.
        Either check is atomic with the write on every backend (docs/unique.md). The
        job returned is the one stored; for a job already there, the `enqueued` hook
        is not called (a tracing `send` span is still recorded).

        `partition` (a one-line string, at most 200 characters) is the job's partition
        for its queue's fair shares, caps and rates; by default its `tenant_id`, else
        the default partition (docs/limits.md)."""
        options = dict(
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            run_at=run_at,
            delay=delay,
            tenant_id=tenant_id,
            timeout=timeout,
            id=id,
            unique_key=unique_key,
            unique_for=unique_for,
            unique_states=unique_states,
            partition=partition,
        )
        job = self._new_job(job_type, args, options)
        self._warn_if_unpolled(job.queue)
        self._warn_if_unknown_type(job.job_type)
        with self._sending([job]) as (job,):
            if _once(options):
                found = self.queue.enqueue_new(job)
                if found is not None:
                    return found  # already there: nothing written, nothing to announce
            else:
                self.queue.enqueue(job)
        self.hooks.enqueued(job)
        self._run_inline([job])
        return job

    def enqueue_many(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        **options: Any,
    ) -> list[Job]:
        """Validate and enqueue one job per args mapping, in one round trip; all are
        checked before any is written. `options` are `enqueue`'s keyword options; with
        `id` or `unique_key`, every job of the list shares it, so the first one written
        holds it and the others come back as that job (one entry per args mapping).
        """
        jobs = [self._new_job(job_type, args, options) for args in args_list]
        stored = jobs
        if jobs:
            self._warn_if_unpolled(jobs[0].queue)
            for job_type in {j.job_type for j in jobs}:
                self._warn_if_unknown_type(job_type)
            with self._sending(jobs) as jobs:
                if _once(options):
                    found = self.queue.enqueue_new_many(jobs)
                    stored = [f or j for f, j in zip(found, jobs, strict=True)]
                    jobs = [j for f, j in zip(found, jobs, strict=True) if f is None]
                else:
                    self.queue.enqueue_many(jobs)
                    stored = jobs
            for job in jobs:
                self.hooks.enqueued(job)
            self._run_inline(jobs)
        return stored

    def _writes_natively(self, options: Mapping[str, Any]) -> bool:
        """Whether `aenqueue` can write these options' job through the asyncio driver:
        a plain upsert. An id, a unique key or inline mode take `enqueue`'s own path,
        in a thread."""
        if self.inline or self.async_writers.driver == THREAD:
            return False
        return all(value is None for key, value in options.items() if key not in _PLAIN_OPTIONS)

    async def aenqueue(
        self, job_type: str, args: Mapping[str, Any] | None = None, **options: Any
    ) -> Job:
        """`enqueue` for asyncio code: the same job, validation and options, written
        without blocking the event loop (see docs/asyncio.md for each backend's path)."""
        if not self._writes_natively(options):
            return await asyncio.to_thread(self.enqueue, job_type, args, **options)
        job = self._new_job(job_type, args, options)
        self._warn_if_unpolled(job.queue)
        self._warn_if_unknown_type(job.job_type)
        with self._sending([job]) as (job,):
            await self.async_writers.current().enqueue(job)
        self.hooks.enqueued(job)
        return job

    async def aenqueue_many(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        **options: Any,
    ) -> list[Job]:
        """`enqueue_many` for asyncio code: all jobs checked before any is written, then
        written in one round trip without blocking the event loop."""
        if not self._writes_natively(options):
            return await asyncio.to_thread(self.enqueue_many, job_type, args_list, **options)
        jobs = [self._new_job(job_type, args, options) for args in args_list]
        if jobs:
            self._warn_if_unpolled(jobs[0].queue)
            for name in {j.job_type for j in jobs}:
                self._warn_if_unknown_type(name)
            with self._sending(jobs) as jobs:
                await self.async_writers.current().enqueue_many(jobs)
            for job in jobs:
                self.hooks.enqueued(job)
        return jobs

    async def aclose(self) -> None:
        """Release the connections `aenqueue` opened on the running event loop; call it
        before that loop ends. `close` releases the rest."""
        await self.async_writers.aclose()

    def enqueue_in_tx(
        self, conn: Any, job_type: str, args: Mapping[str, Any] | None = None, **options: Any
    ) -> Job:
        """Enqueue inside the caller's open transaction on `conn` (SQL provider only), a
        connection to the queue's own database: another database is refused naming
        `conn` (docs/sql.md says how the same database is decided)."""
        if not is_transactional(self.queue):
            raise ValidationError.of(
                "provider",
                f"{self.config.provider!r} cannot enqueue in a transaction; use provider 'db'",
            )
        job = self._new_job(job_type, args, options)
        self._warn_if_unpolled(job.queue)
        self._warn_if_unknown_type(job.job_type)
        with self._sending([job]) as (job,):
            if _once(options):
                found: Job | None = self.queue.enqueue_new_in_tx(conn, job)  # type: ignore[attr-defined]
                return job if found is None else found
            self.queue.enqueue_in_tx(conn, job)  # type: ignore[attr-defined]
        return job

    def _sending(self, jobs: list[Job]) -> AbstractContextManager[list[Job]]:
        """The jobs to write, in a `send` span carrying its context when tracing."""
        if self.tracer is None:
            return nullcontext(jobs)
        return self.tracer.send(jobs)

    def _new_job(
        self, job_type: str, args: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> Job:
        """A validated new job; `options` are `enqueue`'s keyword options (the one
        list of them is `ENQUEUE_OPTIONS`)."""
        unknown = set(options) - ENQUEUE_OPTIONS
        if unknown:
            raise TypeError(f"unexpected options: {sorted(unknown)}")
        chosen = {k: v for k, v in options.items() if k != "id"}
        job_id = options.get("id")
        result = create_job(
            id=uuid.uuid4() if job_id is None else job_id,
            job_type=job_type,
            args=args,
            now=self.clock.now(),
            **chosen,
        )
        match result:
            case Success(job):
                return job  # type: ignore[no-any-return]
            case Failure(error):
                raise error
        raise AssertionError("unreachable")

    def unknown_job_type(self, job_type: str) -> str | None:
        """Why `job_type` looks misspelt (no handler module configured here registers it,
        though some are configured), with the closest registered types; None when it is
        registered, or when this node loads no handlers and so cannot tell."""
        known = self.registry.job_types()
        if not known or job_type in known:
            return None
        close = difflib.get_close_matches(job_type, sorted(known), n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        return (
            f"no configured handler module registers job type {job_type!r}{hint} "
            "(it would wait for a worker that has it, then be dead-lettered as no-handler)"
        )

    def _warn_if_unknown_type(self, job_type: str) -> None:
        if job_type in self._warned_types:
            return
        reason = self.unknown_job_type(job_type)
        if reason is not None:
            self._warned_types.add(job_type)
            log.warning("%s", reason)
        elif self.registry.registration(job_type) is not None:
            # Registered here, so never misspelt: the next enqueue need not ask again.
            self._warned_types.add(job_type)

    def _warn_if_unpolled(self, queue: str) -> None:
        if self.inline or queue in self.config.workers.queues or queue in self._warned:
            return
        self._warned.add(queue)
        log.warning(
            "job enqueued on queue %r, which no worker pool is configured to poll "
            "(workers.queues = %s). It will wait there until a worker polls it: "
            "add %r to workers.queues.",
            queue,
            list(self.config.workers.queues),
            queue,
        )

    # ---- workers ----------------------------------------------------------

    def worker(self, queue_name: str = "default", **options: Any) -> Worker:
        """A worker on `queue_name` with this runtime's settings, to run jobs in the
        calling thread (`worker.drain()`); `start` runs pools of them instead. `options`
        are `Worker` keyword arguments that replace this runtime's."""
        merged = {**self._worker_options(), **options}
        if queue_name in self.limits:
            merged.setdefault("limits", self.limits[queue_name])
        return Worker(self.queue, self.store, self.registry, queue_name=queue_name, **merged)

    def _run_inline(self, jobs: Sequence[Job]) -> None:
        if self.inline and jobs:
            self.inline_runner.run([job.queue for job in jobs])

    def _worker_options(self) -> dict[str, Any]:
        w = self.config.workers
        options: dict[str, Any] = {
            "policies": self.policies,
            "clock": self.clock,
            "poll_interval_ms": w.poll_interval_ms,
            "prefetch": w.prefetch,
            "async_concurrency": w.async_concurrency,
        }
        if self.jitter is not None:
            options["jitter"] = self.jitter
        if self.tenancy is not None:
            options["tenancy"] = self.tenancy
        options["hooks"] = self.hooks
        if self.tracer is not None:
            options["tracer"] = self.tracer
        options["pruner"] = self.pruner
        return options

    def start(self) -> Runtime:
        """Start one pool per configured queue (nothing on a web node)."""
        if self.pools or self.config.workers.count == 0:
            if self.config.workers.count == 0:
                log.info("workers.count = 0: this node enqueues only and processes nothing")
            return self
        # A clock off the lease server's would take live claims: refuse, in one line.
        # This is the first round trip on Redis: wait for a server that is not up yet.
        outage.until_reachable(
            lambda: check_clock(self.queue, self.clock, self.policies.lease.lease_ms),
            state=outage.for_queue(self.queue),
            key=backend_url(self.config)[0],
            timeout_s=self.config.startup_timeout_ms / 1000,
        )
        for name in self.config.workers.queues:
            pool = WorkerPool(
                self.queue,
                self.store,
                self.registry,
                worker_count=self.config.workers.count,
                queue_name=name,
                limits=self.limits.get(name),
                **self._worker_options(),
            )
            pool.start()
            self.pools.append(pool)
        self._beat()
        self._beat_stop.clear()
        self._beat_thread = threading.Thread(
            target=self._beat_loop, daemon=True, name="conveyor-presence"
        )
        self._beat_thread.start()
        # Every worker process ticks; slot ids keep each slot to one job.
        self.cron.start()
        return self

    def _info(self) -> WorkerInfo:
        return WorkerInfo(
            self.worker_id,
            socket.gethostname(),
            os.getpid(),
            tuple(p.queue_name for p in self.pools),
            self.clock.now(),
            tuple(job for p in self.pools for job in p.running())[:MAX_BEAT_JOBS],
        )

    def _beat(self) -> None:
        try:
            self.presence.beat(self._info())
        except Exception as exc:
            # An outage is told once for the process, by whichever thread meets it first.
            if not outage.for_queue(self.queue).failed(exc):
                log.warning("could not record worker heartbeat", exc_info=True)

    def _beat_loop(self) -> None:
        while not self._beat_stop.wait(PRESENCE_INTERVAL.total_seconds()):
            self._beat()

    def stop(self, grace_s: float | None = None) -> bool:
        """Stop every pool, letting in-flight jobs finish within the grace period."""
        grace = self.config.workers.grace_ms / 1000 if grace_s is None else grace_s
        end = time.monotonic() + grace
        clean = all([pool.stop(max(0.0, end - time.monotonic())) for pool in self.pools])
        self.pools = []
        self._leave()
        return clean

    def stop_now(self) -> HandedBack:
        """Stop without waiting for running jobs (a second Ctrl-C): every claim the
        pools hold goes back to ready now instead of after its lease, a running job's
        attempt recorded as interrupted. Handlers still running are abandoned: end the
        process next. Says which jobs went back (see `conveyor.shell.forced_stop`)."""
        from .forced_stop import hand_back_all

        pools, self.pools = self.pools, []
        handed = hand_back_all(worker for pool in pools for worker in pool.workers)
        self._leave()
        return handed

    def _leave(self) -> None:
        """Stop cron and the presence beat, and take this process off the live list."""
        self.cron.stop()
        self._beat_stop.set()
        if self._beat_thread is not None:
            self._beat_thread.join(1)
            self._beat_thread = None
            try:
                self.presence.leave(self.worker_id)
            except Exception as exc:
                if not outage.for_queue(self.queue).failed(exc):
                    log.warning("could not remove worker heartbeat", exc_info=True)

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
        self.close()

    def drain(self, *, timeout_s: float = 60.0, wait_scheduled: bool = False) -> WorkerStats:
        """Process in this thread until no configured queue has work due (and, with
        `wait_scheduled`, until nothing is scheduled either), or `timeout_s` passes.
        Each queue is claimed under its limits, as the pools claim it: fair shares
        take turns, and work a cap or a rate holds back is waited for (the next
        token, or a slot another worker frees) within `timeout_s`."""
        workers = [self.worker(name) for name in self.config.workers.queues]
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            worked = sum(w.drain() for w in workers)
            if worked:
                continue
            waits = [s for s in (w.held_back_for_s() for w in workers) if s is not None]
            if waits:
                time.sleep(max(0.001, min(min(waits), end - time.monotonic())))
                continue
            if not wait_scheduled:
                break
            counts = self.queue.counts(self.clock.now())
            pending = sum(
                c.scheduled + c.ready + c.in_flight
                for name, c in counts.items()
                if name in self.config.workers.queues
            )
            if pending == 0:
                break
            time.sleep(0.02)
        total: dict[str, int] = {}
        for w in workers:
            for key, value in attrs.asdict(w.stats).items():
                total[key] = total.get(key, 0) + value
        return WorkerStats(**total)

    # ---- status and dead letters -----------------------------------------

    def status(self, *, tenant_id: str | None = None) -> Status:
        """Per queue: ready, scheduled, in flight, dead letters (of `tenant_id` only,
        when given), the oldest ready job's age, and the live workers polling it; queues
        that receive work but no configured pool polls are flagged. Reads only."""
        now = self.clock.now()
        return self.status_of(self.queue.counts(now), now, tenant_id=tenant_id)

    def status_of(
        self, counts: Mapping[str, QueueCounts], now: datetime, *, tenant_id: str | None = None
    ) -> Status:
        """`status` from queue counts already read at `now` (`queue.counts(now)`), for a
        caller that shows them too and need not count the queues twice."""
        dead = self.store.count_dead(tenant_id=tenant_id)
        live = tuple(self.presence.live(now, PRESENCE_TTL))
        names = sorted(set(counts) | set(dead) | set(self.config.workers.queues))
        rows = []
        for name in names:
            c = counts.get(name)
            oldest = c.oldest_ready_at if c else None
            rows.append(
                QueueStatus(
                    queue=name,
                    ready=c.ready if c else 0,
                    scheduled=c.scheduled if c else 0,
                    in_flight=c.in_flight if c else 0,
                    dead=dead.get(name, 0),
                    oldest_ready_age_s=(now - oldest).total_seconds() if oldest else None,
                    pollers=tuple(w.worker_id for w in live if name in w.queues),
                    configured=name in self.config.workers.queues,
                )
            )
        return Status(tuple(rows), live, self.limit_reports(now))

    def limit_reports(self, now: datetime) -> tuple[LimitReport, ...]:
        """Each limited queue's shares, caps in use and throttled work at `now` (see
        `conveyor.core.limit_report`); none when the backend claims without limits."""
        if not isinstance(self.queue, LimitReportingJobQueue):
            return ()
        return tuple(
            self.queue.limit_usage(name, now).describe(name, limits, now)
            for name, limits in sorted(self.limits.items())
        )

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Up to `limit` dead letters (jobs in state `failed`), of `tenant_id` only when
        given; each carries its `last_error`, the reason it was given up on."""
        return self.store.list_dead(tenant_id=tenant_id, limit=limit)

    def get(self, job_id: UUID | str) -> JobView | None:
        """The job in whatever state it is in (scheduled, pending, running, retrying,
        completed, failed), or None when no queue or store holds it. A malformed id is
        a `ValidationError`. Reads only; see `conveyor.shell.lookup`."""
        return find_job(self.queue, self.store, _job_id(job_id), self._lease())

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: JobStatus | str | None = None,
        job_type: str | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> list[JobView]:
        """Up to `limit` jobs matching every filter given: queued work (running, pending,
        parked) first, then finished jobs, newest first. `state` may be a `JobStatus`
        or its name (`dead` for `failed`); a bad one is a `ValidationError`.
        `tenant_id` keeps only that tenant's jobs."""
        if isinstance(state, str):
            parsed = parse_state(state)
            if isinstance(parsed, FieldError):
                raise ValidationError((parsed,))
            state = parsed
        return list_jobs(
            self.queue,
            self.store,
            lease=self._lease(),
            queue_name=queue,
            state=state,
            job_type=job_type,
            tenant_id=tenant_id,
            limit=limit,
        )

    def _lease(self) -> timedelta:
        return timedelta(milliseconds=self.policies.lease.lease_ms)

    def cancel(self, job_id: UUID | str) -> CancelResult:
        """Cancel a job. Queued (`pending`, `scheduled`, `retrying`): it leaves the queue
        and is recorded `cancelled` in one atomic step (`CancelResult.CANCELLED`).
        Running: a cancel request is left for its worker (`REQUESTED`); the handler
        can see it through its context, and whatever it returns the job is recorded
        `cancelled`, never completed and never retried. A job already finished is left
        as it is (`FINISHED`); an id nobody knows gives `NOT_FOUND`.

        >>> runtime.cancel(job.id)  # doctest: +SKIP
        <CancelResult.CANCELLED: 'cancelled'>
        """
        return cancel_job(
            self.queue,
            self.store,
            self.executor,
            _job_id(job_id),
            self.clock.now(),
            self.hooks.cancelled,
        )

    def cancel_many(
        self, *, queue: str | None = None, job_type: str | None = None, dry_run: bool = False
    ) -> CancelCounts:
        """Cancel every queued and running job of `queue` and/or `job_type` (at least one
        must be given), each as `cancel` does. Returns how many were cancelled and how
        many running ones were asked to stop; with `dry_run`, how many would be."""
        if queue is None and job_type is None:
            raise ValidationError.of("queue", "give a queue, a job type or both")
        now = self.clock.now()
        return cancel_many(
            self.queue,
            self.store,
            self.executor,
            now,
            queue_name=queue,
            job_type=job_type,
            dry_run=dry_run,
            on_cancelled=self.hooks.cancelled,
        )

    def retry_dead(self, job_id: UUID | str) -> Job:
        """Give a dead letter a fresh start: queued and recorded as pending in one atomic
        step, only while it is still a dead letter (two operators, or an operator and a
        worker, cannot both act on it)."""
        job = self.store.get(_job_id(job_id))
        decision = None if job is None else decide_revive(job, self.clock.now())
        if decision is not None and self.executor.carry_out(None, decision):
            return decision.job
        now = self.store.get(_job_id(job_id))
        if decision is not None and now is not None and now.status is JobStatus.FAILED:
            raise RuntimeError(f"could not revive {job_id}: the store failed (see the log)")
        raise ValidationError.of("job_id", f"{job_id} is not a dead letter")

    def purge_dead(self, job_id: UUID | str | None = None) -> int:
        """Delete one dead letter, or every dead letter when `job_id` is None; returns
        how many were deleted. To delete by age instead, see `prune`."""
        return self.executor.purge_dead(None if job_id is None else _job_id(job_id))

    def prune(self, *, older_than_ms: int | None = None, dry_run: bool = False) -> int:
        """Delete every finished record past the configured retention (batch by batch,
        each one cheap), or with `dry_run` only count them. `older_than_ms` replaces
        both configured ages. Returns how many records went (or would go)."""
        if older_than_ms is not None and older_than_ms < 0:
            raise ValidationError.of("older_than", f"must be >= 0, got {older_than_ms}")
        policy = self.config.retention
        order = prune_order(policy, self.clock.now(), older_than_ms=older_than_ms)
        return self.store.count_prunable(order) if dry_run else prune_all(self.executor, order)

    def close(self) -> None:
        """Release the backend's connections. Call `stop` first when pools are running;
        `with runtime:` does both."""
        for part in (self.queue, self.store):
            try:
                part.close()
            except Exception:
                log.debug("close failed", exc_info=True)


def _reachable(cfg: Config, timeout_s: float, make: Callable[[], T]) -> T:
    """`make()`, whose errors `guarded` rewrites without the password, tried again
    while the server is unreachable for up to `timeout_s`."""
    from .redact import guarded, mask_url

    field, url = backend_url(cfg)
    raw: list[BaseException] = []

    def attempt() -> T:
        raw.clear()
        try:
            return make()
        except Exception as exc:
            raw.append(exc)  # to classify; only the rewritten error is ever shown
            raise

    prefix = f"{field}: could not use {mask_url(url)}: "
    return outage.until_reachable(
        lambda: guarded(field, url, attempt),
        state=outage.for_server(*outage.backend_label(cfg)),
        key=field,
        timeout_s=timeout_s,
        is_down=lambda _: bool(raw) and outage.is_outage(raw[-1]),
        detail=lambda exc: str(exc).removeprefix(prefix),
    )


def build(
    config: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    registry: Registry | None = None,
    clock: Clock | None = None,
    jitter: Callable[[], float] | None = None,
    env: Mapping[str, str] | None = None,
    tenancy: TenantScope | None = None,
    hooks: Hooks | None = None,
    startup_timeout_s: float | None = None,
    inline: bool | None = None,
    limits: Mapping[str, QueueLimits] | None = None,
) -> Runtime:
    """Build a `Runtime` from a config mapping, a TOML file, or the nearest config file.
    `hooks` may be given here or registered later on `runtime.hooks`.

    `inline=True` (default: the config's `inline`) runs each job at enqueue, in the
    caller's thread (see `conveyor.shell.inline`). Every `Tasks` collection among
    `handlers` and the contributed handler mappings is bound to the new runtime: its
    tasks' `enqueue` uses it (see `conveyor.shell.tasks`).

    An unreachable server is waited for, with capped backoff, for `startup_timeout_s`
    (default: the config's `startup_timeout_ms`; 0 tries once), then
    `ServerUnreachable` says so in one line.

    It runs no DDL unless `auto_migrate` says so (by default only on SQLite): on a SQL
    database whose schema is missing or from another version it raises
    `SchemaNotCurrent`, whose one line says to run `conveyor migrate`.

    `limits` (queue name -> `conveyor.core.limits.QueueLimits`) add to or replace the
    config's `[limits.<queue>]` tables (docs/limits.md)."""
    cfg = load_config(config, env=env)
    if limits:
        cfg = attrs.evolve(cfg, limits=tuple({**dict(cfg.limits), **limits}.items()))
    registry = registry or Registry()
    for job_type, handler in (handlers or {}).items():
        registry.register(job_type, handler)
    sources: list[Mapping[str, Callable[..., Any]]] = [handlers or {}]
    contribute(registry, cfg.handlers, entry_points=cfg.entry_points, loaded=sources)
    registry.configure_timeouts(dict(cfg.timeouts_ms))
    from .redact import guarded, tenancy_url

    waited = cfg.startup_timeout_ms / 1000 if startup_timeout_s is None else startup_timeout_s
    deadline = time.monotonic() + waited
    # Drivers quote the URL (or, when its password is malformed, pieces of the password).
    queue, store, presence = _reachable(cfg, waited, lambda: _make_backend(cfg))
    from .migrate import SchemaNotCurrent, prepare_schema

    # Raised outside `guarded`, which would wrap the line in a connection error's words.
    left = max(0.0, deadline - time.monotonic())
    problem = _reachable(cfg, left, lambda: prepare_schema(cfg, queue))
    if problem is not None:
        queue.close()
        store.close()
        raise SchemaNotCurrent(problem)
    if tenancy is None:
        tenancy = guarded(*tenancy_url(cfg), lambda: _make_tenancy(cfg))
    runtime = Runtime(
        cfg,
        queue,
        store,
        registry,
        presence=presence,
        clock=clock,
        jitter=jitter,
        tenancy=tenancy,
        hooks=hooks,
        inline=cfg.inline if inline is None else inline,
    )
    from .tasks import bind_collections

    bind_collections(runtime, sources)
    return runtime
