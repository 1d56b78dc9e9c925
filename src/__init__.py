"""Conveyor: background jobs you can trust, read and test without a server.

The names most users need::

    import conveyor
    runtime = conveyor.build({"provider": "db", "url": "sqlite:///jobs.db"},
                             handlers={"send-email": send_email})
    runtime.enqueue("send-email", {"to": "a@example.com"}, priority="high")
    runtime.start()          # or `conveyor worker` from the command line

Pure policies, records and decisions live in `conveyor.core`; ports, adapters,
the executor and workers in `conveyor.shell`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .core import (
        CancelCounts,
        CancelResult,
        CronEntry,
        ErrorInfo,
        Job,
        JobStatus,
        Policies,
        Priority,
        RequeuePolicy,
        RetryPolicy,
        ValidationError,
        create_job,
    )
    from .shell.config import Config, load_config
    from .shell.context import JobContext
    from .shell.hooks import Hooks
    from .shell.ports import is_transactional
    from .shell.registry import Permanent, Registry
    from .shell.result_errors import (
        JobCancelled,
        JobFailed,
        JobNotFound,
        ResultError,
        ResultTimeout,
    )
    from .shell.runtime import Runtime, build
    from .shell.runtime.workflows import Workflow, call, chain, dep, group
    from .shell.tasks import Task, Tasks
    from .shell.worker import WorkerPool
    from .shell.worker.loop import Worker


# Resolved on first access (PEP 562), so `import conveyor.core` or
# `conveyor.testing.clock` does not drag in the shell and SQLAlchemy with it.
_LAZY: dict[str, str] = {
    "CancelCounts": ".core",
    "CancelResult": ".core",
    "ErrorInfo": ".core",
    "Job": ".core",
    "JobStatus": ".core",
    "Policies": ".core",
    "Priority": ".core",
    "RequeuePolicy": ".core",
    "RetryPolicy": ".core",
    "ValidationError": ".core",
    "create_job": ".core",
    "Config": ".shell.config",
    "CronEntry": ".core",
    "load_config": ".shell.config",
    "JobContext": ".shell.context",
    "WorkerPool": ".shell.worker",
    "is_transactional": ".shell.ports",
    "Hooks": ".shell.hooks",
    "Permanent": ".shell.registry",
    "Registry": ".shell.registry",
    "JobCancelled": ".shell.result_errors",
    "JobFailed": ".shell.result_errors",
    "JobNotFound": ".shell.result_errors",
    "ResultError": ".shell.result_errors",
    "ResultTimeout": ".shell.result_errors",
    "Runtime": ".shell.runtime",
    "build": ".shell.runtime",
    "Task": ".shell.tasks",
    "Tasks": ".shell.tasks",
    "Worker": ".shell.worker",
    "Workflow": ".shell.runtime.workflows",
    "call": ".shell.runtime.workflows",
    "chain": ".shell.runtime.workflows",
    "dep": ".shell.runtime.workflows",
    "group": ".shell.runtime.workflows",
}

__all__ = [
    "CancelCounts",
    "CancelResult",
    "Config",
    "CronEntry",
    "ErrorInfo",
    "Hooks",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "JobStatus",
    "Permanent",
    "Policies",
    "Priority",
    "Registry",
    "RequeuePolicy",
    "ResultError",
    "ResultTimeout",
    "RetryPolicy",
    "Runtime",
    "Task",
    "Tasks",
    "ValidationError",
    "Worker",
    "WorkerPool",
    "Workflow",
    "__version__",
    "build",
    "call",
    "chain",
    "create_job",
    "dep",
    "group",
    "is_transactional",
    "load_config",
]


# Hidden from type checkers, which then see only the imports above and still
# flag a misspelt `conveyor.biuld`.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in ("core", "shell"):
            # `import conveyor` used to load both, so `conveyor.shell.x` keeps working.
            return importlib.import_module(f".{name}", __name__)
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        # Cached, so later lookups skip this hook.
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
