"""Enqueueing: the path every enqueue entry point takes, and the runtime's methods.

Every entry point (`EnqueueMethods`, mixed into `Runtime`) makes one
`EnqueueOptions` (`conveyor.shell.runtime.enqueue_options`) and hands it to an
`Enqueuer`, which builds the jobs and writes them: a plain upsert, or, for a job
with an id or a unique key, `enqueue_new`, which writes nothing when the job is
already there. Around the write: a tracing `send` span when tracing is on, the
`enqueued` hook for each job written, and, in inline mode, the run of the jobs'
queue.

Two warnings are given once per process (`enqueue_warnings`): a job on a queue no
pool of this config polls, and a job type no configured handler module registers
(likely misspelt).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

import attrs

from ...core import Job, JobStatus, Priority, ValidationError
from ..async_enqueue import THREAD, AsyncWriter, AsyncWriters
from ..hooks import Hooks
from ..ports import Clock, JobQueue, JobStore, PruneRememberingStore, is_transactional
from ..registry import Registry
from .enqueue_options import EnqueueOptions, args_list_of
from .enqueue_warnings import EnqueueWarnings, unknown_job_type
from .workflow_writes import WorkflowWrites

if TYPE_CHECKING:
    from ..config import Config
    from ..worker.inline import InlineRunner
    from .workflows import AfterEntry

log = logging.getLogger("conveyor.runtime")


class SendSpans(Protocol):
    """Makes the tracing `send` span around a write (`conveyor.shell.tracing.JobTracer`)."""

    def send(self, jobs: Sequence[Job]) -> AbstractContextManager[list[Job]]: ...


@attrs.frozen(slots=True)
class Enqueuer:
    """What one enqueue call writes through, read from its runtime at the call.

    `polled` are the queues the config's pools poll (None in inline mode, which
    warns of no queue); `run_inline` runs the given queues' jobs now (inline mode
    only); `tracer` makes the `send` spans when tracing is on."""

    queue: JobQueue
    clock: Clock
    hooks: Hooks
    registry: Registry
    warnings: EnqueueWarnings
    polled: Sequence[str] | None
    tracer: SendSpans | None = None
    run_inline: Callable[[list[str]], object] | None = None

    def new_jobs(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        options: EnqueueOptions,
        *,
        listed: bool = False,
    ) -> list[Job]:
        """One validated job per args mapping, all checked before any is written (the
        options once; `listed`: see `EnqueueOptions.jobs`), all made at one instant; the
        once-per-process warnings given for them."""
        jobs = options.jobs(job_type, args_list, self.clock.now(), listed=listed)
        self.warn_for(jobs)
        return jobs

    def warn_for(self, jobs: Sequence[Job]) -> None:
        """The once-per-process warnings for `jobs`, about to be written."""
        for queue in dict.fromkeys(j.queue for j in jobs):
            if self.polled is not None:
                self.warnings.unpolled(queue, self.polled)
        for name in dict.fromkeys(j.job_type for j in jobs):
            self.warnings.unknown_type(self.registry, name)

    def _sending(self, jobs: list[Job]) -> AbstractContextManager[list[Job]]:
        """The jobs to write, in a `send` span carrying its context when tracing."""
        if self.tracer is None:
            return nullcontext(jobs)
        return self.tracer.send(jobs)

    def _written(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self.hooks.enqueued(job)
        if self.run_inline is not None and jobs:
            self.run_inline([job.queue for job in jobs])

    def enqueue(
        self, job_type: str, args: Mapping[str, Any] | None, options: EnqueueOptions
    ) -> Job:
        """Write one job; the job already there instead when `options.once` finds one
        (then nothing is written and no hook is called)."""
        with self._sending(self.new_jobs(job_type, [args], options)) as (job,):
            if options.once:
                found = self.queue.enqueue_new(job)
                if found is not None:
                    return found  # already there: nothing written, nothing to announce
            else:
                self.queue.enqueue(job)
        self._written([job])
        return job

    def enqueue_many(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        options: EnqueueOptions,
    ) -> list[Job]:
        """Write one job per args mapping in one round trip; one entry per mapping, the
        job already there for those `options.once` found."""
        jobs = self.new_jobs(job_type, args_list, options, listed=True)
        if not jobs:
            return jobs
        with self._sending(jobs) as jobs:
            if options.once:
                found = self.queue.enqueue_new_many(jobs)
                stored = [f or j for f, j in zip(found, jobs, strict=True)]
                jobs = [j for f, j in zip(found, jobs, strict=True) if f is None]
            else:
                self.queue.enqueue_many(jobs)
                stored = jobs
        self._written(jobs)
        return stored

    def enqueue_in_tx(
        self,
        conn: Any,
        job_type: str,
        args: Mapping[str, Any] | None,
        options: EnqueueOptions,
        *,
        provider: str,
    ) -> Job:
        """Write one job in the caller's open transaction on `conn` (a SQL queue only;
        `provider` names the backend that cannot). Never runs inline, calls no hook:
        the job exists only once the caller commits."""
        if not is_transactional(self.queue):
            raise ValidationError.of(
                "provider",
                f"{provider!r} cannot enqueue in a transaction; use provider 'db'",
            )
        with self._sending(self.new_jobs(job_type, [args], options)) as (job,):
            if options.once:
                found: Job | None = self.queue.enqueue_new_in_tx(conn, job)  # type: ignore[attr-defined]
                return job if found is None else found
            self.queue.enqueue_in_tx(conn, job)  # type: ignore[attr-defined]
        return job

    async def aenqueue(
        self,
        writer: AsyncWriter,
        job_type: str,
        args: Mapping[str, Any] | None,
        options: EnqueueOptions,
    ) -> Job:
        """Write one job through an asyncio driver's `writer`, without blocking the loop
        (plain options only, never inline)."""
        with self._sending(self.new_jobs(job_type, [args], options)) as (job,):
            await writer.enqueue(job)
        self.hooks.enqueued(job)
        return job

    async def aenqueue_many(
        self,
        writer: AsyncWriter,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        options: EnqueueOptions,
    ) -> list[Job]:
        """`aenqueue` for one job per args mapping, in one round trip."""
        jobs = self.new_jobs(job_type, args_list, options, listed=True)
        if jobs:
            with self._sending(jobs) as jobs:
                await writer.enqueue_many(jobs)
            for job in jobs:
                self.hooks.enqueued(job)
        return jobs


class EnqueueMethods:
    """`Runtime`'s enqueue methods (mixed into it): each makes one `EnqueueOptions`
    and an `Enqueuer` over the runtime's parts as they are at the call."""

    config: Config
    inline: bool
    inline_runner: InlineRunner
    queue: JobQueue
    store: JobStore
    clock: Clock
    hooks: Hooks
    registry: Registry
    tracer: SendSpans | None
    async_writers: AsyncWriters
    _warnings: EnqueueWarnings

    def _enqueuer(self) -> Enqueuer:
        polled = None if self.inline else self.config.workers.queues
        run = self.inline_runner.run if self.inline else None
        warnings = self._warnings
        return Enqueuer(
            self.queue, self.clock, self.hooks, self.registry, warnings, polled, self.tracer, run
        )

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
        after: Iterable[AfterEntry] | None = None,
    ) -> Job:
        """Validate and enqueue a job; raises `ValidationError` naming bad fields.
        `delay` may be a timedelta or seconds. `timeout` (a timedelta or seconds)
        bounds each attempt, overriding the job type's; an attempt that runs past it
        is recorded as a retryable `Timeout` failure (see docs/handlers.md).

        `id` (a UUID or its text) names the job: when a job with that id exists, in
        any state, nothing is written and that job is returned, args unchanged.
        `unique_key` makes the job hold that key while it is in one of
        `unique_states` (default: the unfinished states, waiting included) and, with
        `unique_for` (a timedelta or seconds), for at most that long: meanwhile an
        enqueue with the same key returns the holder instead of writing a second job.
        Either check is atomic with the write on every backend (docs/unique.md). The
        job returned is the one stored; for a job already there, the `enqueued` hook
        is not called (a tracing `send` span is still recorded).

        `partition` (a one-line printable string, at most 200 characters) is the job's
        partition for its queue's fair shares, caps and rates; by default its `tenant_id`, else
        the default partition (docs/limits.md).

        `after` (handles, jobs or job ids, each bare or wrapped in `dep`) makes the job
        wait, never claimed, until they finish (docs/workflows.md); `enqueue(workflow)`
        is `enqueue_workflow(workflow)`, which returns the workflow's id."""
        if not isinstance(job_type, str):
            if not callable(getattr(job_type, "graph", None)):
                # Neither a job type nor a workflow: say so, not an AttributeError.
                what = type(job_type).__name__
                raise ValidationError.of("job_type", f"must be a string or a workflow, got {what}")
            return self._workflows().enqueue_workflow(job_type)
        options = EnqueueOptions(
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
        if after is not None:
            return self._workflows().enqueue_after(job_type, args, options, after)
        return self._enqueuer().enqueue(job_type, args, options)

    def _workflows(self) -> WorkflowWrites:
        store = self.store
        pruned_at = store.pruned_at if isinstance(store, PruneRememberingStore) else None
        return WorkflowWrites(self._enqueuer(), self.config.provider, pruned_at)

    def enqueue_many(
        self, job_type: str, args_list: Sequence[Mapping[str, Any] | None], **options: Any
    ) -> list[Job]:
        """Validate and enqueue one job per args mapping, in one round trip; all are
        checked before any is written. `options` are `enqueue`'s keyword options; with
        `id` or `unique_key`, every job of the list shares it, so the first one written
        holds it and the others come back as that job (one entry per args mapping).
        """
        after = options.pop("after", None)
        chosen = EnqueueOptions.of(options)
        args_list = args_list_of(args_list)
        if after is not None:
            return self._workflows().enqueue_many_after(job_type, args_list, chosen, after)
        return self._enqueuer().enqueue_many(job_type, args_list, chosen)

    def _native(self, options: EnqueueOptions) -> bool:
        """Whether `aenqueue` writes through the asyncio driver: a plain upsert. An id, a
        unique key or inline mode take `enqueue`'s own path, in a thread."""
        return not self.inline and options.plain and self.async_writers.driver != THREAD

    async def aenqueue(
        self, job_type: str, args: Mapping[str, Any] | None = None, **options: Any
    ) -> Job:
        """`enqueue` for asyncio code: the same job, validation and options, written
        without blocking the event loop (see docs/asyncio.md for each backend's path).
        A workflow, or a job `after` others, is written by `enqueue` in a thread."""
        if not isinstance(job_type, str) or "after" in options:
            call = functools.partial(self.enqueue, job_type, args, **options)
            return await asyncio.to_thread(call)
        chosen, enqueuer = EnqueueOptions.of(options), self._enqueuer()
        if not self._native(chosen):
            return await asyncio.to_thread(enqueuer.enqueue, job_type, args, chosen)
        writer = self.async_writers.current()
        return await enqueuer.aenqueue(writer, job_type, args, chosen)

    async def aenqueue_many(
        self, job_type: str, args_list: Sequence[Mapping[str, Any] | None], **options: Any
    ) -> list[Job]:
        """`enqueue_many` for asyncio code: all jobs checked before any is written, then
        written in one round trip without blocking the event loop."""
        args_list = args_list_of(args_list)
        if "after" in options:
            call = functools.partial(self.enqueue_many, job_type, args_list, **options)
            return await asyncio.to_thread(call)
        chosen, enqueuer = EnqueueOptions.of(options), self._enqueuer()
        if not self._native(chosen):
            return await asyncio.to_thread(enqueuer.enqueue_many, job_type, args_list, chosen)
        writer = self.async_writers.current()
        return await enqueuer.aenqueue_many(writer, job_type, args_list, chosen)

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
        if "after" in options:
            # `enqueue(after=...)` writes the job and its edges: a workflow's write.
            raise ValidationError.of(
                "after",
                "is not taken in a transaction; use enqueue_workflow_in_tx(conn, ...) "
                "for jobs that wait for others (docs/workflows.md)",
            )
        chosen, provider = EnqueueOptions.of(options), self.config.provider
        return self._enqueuer().enqueue_in_tx(conn, job_type, args, chosen, provider=provider)

    def unknown_job_type(self, job_type: str) -> str | None:
        """Why `job_type` looks misspelt (no handler module configured here registers it,
        though some are configured), with the closest registered types; None when it is
        registered, or when this node loads no handlers and so cannot tell."""
        return unknown_job_type(self.registry, job_type)
