"""The runtime: everything built from one config.

`build(config)` makes the queue, store and presence for the provider, loads
contributed handlers, and gives back a `Runtime` that enqueues, runs one pool
per configured queue (none on a web node with `workers.count = 0`), drains,
and reports status. Enqueueing on a queue no pool is configured to poll is
reported once, by name, with the config key that fixes it.

`Runtime` holds the parts; each of its jobs lives in a module of its own, with
the methods it adds to `Runtime`: building the backend (`backends`), enqueueing
(`enqueueing`, `enqueue_options`), the workers' lifecycle (`worker_lifecycle`)
and presence (`presence_beat`), status (`status`), reads (`reads`), waits for
an outcome (`results`) and the operator's repairs (`operator_actions`). Each
method takes the runtime's parts as they are at the call, so one replaced after
`build` (a tracer, the executor) is the one used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ...core import LeasePolicy, Policies, ResultPolicy, ValidationError
from ...core.limits import QueueLimits
from .. import outage
from ..async_enqueue import AsyncWriters
from ..config import Config, load_config, parse_limits
from ..cron import Cron
from ..executor import Executor
from ..handlers import contribute
from ..hooks import Hooks
from ..ports import Clock, JobQueue, JobStore, SystemClock
from ..presence import MemoryPresence, Presence
from ..registry import Registry
from ..retention import Pruner
from ..worker.inline import InlineRunner
from .backends import open_backend, open_tenancy
from .enqueue_options import ENQUEUE_OPTIONS
from .enqueue_warnings import EnqueueWarnings
from .enqueueing import EnqueueMethods
from .operator_actions import OperatorMethods
from .presence_beat import PRESENCE_INTERVAL, PRESENCE_TTL, PresenceBeat, process_worker_id
from .reads import ReadMethods
from .results import ResultMethods
from .status import QueueStatus, Status, StatusMethods
from .worker_lifecycle import WorkerMethods
from .workflow_methods import WorkflowMethods

if TYPE_CHECKING:
    from ..tenancy import TenantScope
    from ..tracing import JobTracer
    from ..worker import WorkerPool

# Importable from here as they always were.
__all__ = [
    "ENQUEUE_OPTIONS",
    "PRESENCE_INTERVAL",
    "PRESENCE_TTL",
    "QueueStatus",
    "Runtime",
    "Status",
    "build",
]

log = logging.getLogger("conveyor.runtime")


class Runtime(
    EnqueueMethods,
    WorkerMethods,
    StatusMethods,
    ReadMethods,
    ResultMethods,
    OperatorMethods,
    WorkflowMethods,
):
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
        #: Run jobs at enqueue, in the caller's thread (see `conveyor.shell.worker.inline`).
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
        self.policies = Policies(
            retry=config.retry,
            requeue=config.requeue,
            lease=lease,
            result=ResultPolicy(config.max_result_bytes),
        )
        self.executor = Executor(queue, store, clock=self.clock)
        server = outage.for_queue(queue)
        #: Shared by this process's workers: one of them prunes per interval.
        self.pruner = Pruner(self.executor, config.retention, server=server)
        self.worker_id = process_worker_id()
        self.pools: list[WorkerPool] = []
        self._warnings = EnqueueWarnings()
        self._beat = PresenceBeat(self.presence, self.worker_id, self._info, server)
        #: Set by `conveyor.shell.tracing.instrument`: spans for enqueues and attempts.
        self.tracer: JobTracer | None = None
        #: Periodic jobs: the config's `[[cron]]` entries, and `runtime.cron.add(...)`.
        #: Its enqueue is looked up at each slot, so a replaced `enqueue` is the one used.
        self.cron = Cron(
            config.cron,
            enqueue=lambda job_type, args, **options: self.enqueue(job_type, args, **options),
            state_of=self._state_of,
            clock=self.clock,
            server=server,
            retention=config.retention,
            start_workflow=self._start_cron_workflow,
            workflow_state_of=self._workflow_state_of,
            pruned=self._was_pruned,
        )
        #: How `aenqueue` writes: `async_writers.driver` names the path (docs/asyncio.md).
        self.async_writers = AsyncWriters(config, queue)
        #: Each queue's fair shares, caps and rates (`[limits.<queue>]`, or `build`'s
        #: `limits`); its workers claim under them (docs/limits.md).
        self.limits: dict[str, QueueLimits] = dict(config.limits)
        #: The `Tasks` collections `build` bound to this runtime (released by `close`).
        self.bound_collections: list[Any] = []

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
        self.close()

    def close(self) -> None:
        """Release the backend's connections, and the `Tasks` collections bound to this
        runtime (their tasks then raise `TaskNotBound`). Call `stop` first when pools
        are running; `with runtime:` does both. A closed runtime is not to be used
        again: a call may open connections that only another `close` releases."""
        for collection in self.bound_collections:
            collection.release(self)
        # The presence last: on Redis it holds the client the queue and store share.
        for part in (self.queue, self.store, self.presence):
            try:
                close = getattr(part, "close", None)
                if close is not None:
                    close()
            except Exception:
                log.debug("close failed", exc_info=True)


def build(
    config: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    handlers: Mapping[str, Callable[..., Any]] | Registry | None = None,
    registry: Registry | None = None,
    clock: Clock | None = None,
    jitter: Callable[[], float] | None = None,
    env: Mapping[str, str] | None = None,
    tenancy: TenantScope | None = None,
    hooks: Hooks | None = None,
    startup_timeout_s: float | None = None,
    inline: bool | None = None,
    limits: Mapping[str, QueueLimits | Mapping[str, Any]] | None = None,
) -> Runtime:
    """Build a `Runtime` from a config mapping, a TOML file, or the nearest config file.
    `hooks` may be given here or registered later on `runtime.hooks`.

    `inline=True` (default: the config's `inline`) runs each job at enqueue, in the
    caller's thread (see `conveyor.shell.worker.inline`). Every `Tasks` collection among
    `handlers` and the contributed handler mappings is bound to the new runtime: its
    tasks' `enqueue` uses it (see `conveyor.shell.tasks`).

    An unreachable server is waited for, with capped backoff, for `startup_timeout_s`
    (default: the config's `startup_timeout_ms`; 0 tries once), then
    `ServerUnreachable` says so in one line.

    It runs no DDL unless `auto_migrate` says so (by default only on SQLite): on a SQL
    database whose schema is missing or from another version it raises
    `SchemaNotCurrent`, whose one line says to run `conveyor migrate`.

    `limits` (queue name -> `conveyor.core.limits.QueueLimits`, or a mapping read as a
    `[limits.<queue>]` table is) add to or replace the config's tables (docs/limits.md)."""
    cfg = load_config(config, env=env)
    if limits is not None:
        given = dict(parse_limits(limits))
        cfg = attrs.evolve(cfg, limits=tuple({**dict(cfg.limits), **given}.items()))
    registry = registry or Registry()
    if isinstance(handlers, Registry):
        # Its registrations keep their options (timeout, execution="process", ...).
        registry.merge(handlers)
        handlers = None
    if handlers is not None and not isinstance(handlers, Mapping):
        what = type(handlers).__name__
        raise ValidationError.of(
            "handlers",
            f"must be a mapping of job type to handler (or Tasks), or a Registry, got {what}",
        )
    for job_type, handler in (handlers or {}).items():
        registry.register(job_type, handler)
    sources: list[Mapping[str, Callable[..., Any]]] = [handlers or {}]
    contribute(registry, cfg.handlers, entry_points=cfg.entry_points, loaded=sources)
    registry.configure_timeouts(dict(cfg.timeouts_ms))
    waited = cfg.startup_timeout_ms / 1000 if startup_timeout_s is None else startup_timeout_s
    queue, store, presence = open_backend(cfg, waited)
    runtime = Runtime(
        cfg,
        queue,
        store,
        registry,
        presence=presence,
        clock=clock,
        jitter=jitter,
        tenancy=open_tenancy(cfg) if tenancy is None else tenancy,
        hooks=hooks,
        inline=cfg.inline if inline is None else inline,
    )
    from ..tasks import Tasks, bind_collections

    bind_collections(runtime, sources, registry)
    runtime.bound_collections.extend(s for s in sources if isinstance(s, Tasks))
    return runtime
