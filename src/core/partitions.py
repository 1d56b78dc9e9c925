"""Partitions: the unit fair shares, caps and rates count in (see `core.limits`).

A job's partition is its `partition_key`, else its tenant, else the default
partition `""`.
"""

from __future__ import annotations

from .errors import FieldError
from .job import Job

#: The longest partition key, in characters (it lands in an indexed column).
MAX_PARTITION_CHARS = 200

#: The default partition: jobs without a partition key or tenant.
DEFAULT_PARTITION = ""


def partition_of(job: Job) -> str:
    """The partition `job` is counted and scheduled in: its partition key, else its
    tenant, else `DEFAULT_PARTITION`."""
    if job.partition_key is not None:
        return job.partition_key
    return job.tenant_id if job.tenant_id is not None else DEFAULT_PARTITION


def check_partition(value: object, field: str = "partition") -> FieldError | None:
    """Why `value` is not a partition key (None when it is one)."""
    if not isinstance(value, str):
        return FieldError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        return FieldError(field, "must not be empty")
    if len(value) > MAX_PARTITION_CHARS:
        return FieldError(field, f"must be at most {MAX_PARTITION_CHARS} characters")
    if "\n" in value or "\r" in value:
        return FieldError(field, "must be one line")
    if not value.isprintable():
        # A control character or a lone surrogate: the SQL stores cannot encode the
        # latter, and neither reads back as what an operator types.
        return FieldError(field, "must not hold control characters or lone surrogates")
    return None
