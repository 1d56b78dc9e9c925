"""Conveyor: background jobs you can trust, read and test without a server."""

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

__version__ = "0.1.0"

__all__ = [
    "ErrorInfo",
    "Job",
    "JobStatus",
    "Policies",
    "Priority",
    "RequeuePolicy",
    "RetryPolicy",
    "ValidationError",
    "__version__",
    "create_job",
]
