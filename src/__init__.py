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

from .core import (
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
from .shell.pool import WorkerPool
from .shell.ports import is_transactional
from .shell.registry import Permanent, Registry
from .shell.runtime import Runtime, build
from .shell.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ErrorInfo",
    "Job",
    "JobStatus",
    "Permanent",
    "Policies",
    "Priority",
    "Registry",
    "RequeuePolicy",
    "RetryPolicy",
    "Runtime",
    "ValidationError",
    "Worker",
    "WorkerPool",
    "__version__",
    "build",
    "create_job",
    "is_transactional",
    "load_config",
]
