"""When a worker process should make way for a fresh one.

A long-lived Python process can grow: a handler's library caches, fragmentation,
a slow leak. Under `conveyor worker --processes N` a copy that has run
`max_jobs` jobs, or whose resident memory has reached `max_memory_mb`, stops as a
graceful stop does (prefetched claims handed back, running jobs finished) and the
supervisor starts another in its place. The shell measures; this decides.
"""

from __future__ import annotations

import attrs

from .field_checks import integer_at_least, positive_number


@attrs.frozen(slots=True)
class RecyclePolicy:
    """Recycle after `max_jobs` jobs, or at `max_memory_mb` of resident memory;
    None for either means no bound of that kind."""

    max_jobs: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(integer_at_least(1))
    )
    max_memory_mb: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(positive_number)
    )

    @property
    def bounded(self) -> bool:
        return self.max_jobs is not None or self.max_memory_mb is not None


def recycle_reason(policy: RecyclePolicy, jobs_done: int, resident_mb: float | None) -> str | None:
    """Why the process should be recycled now, in words, or None while it may go on.
    `resident_mb` is None where the platform cannot tell. A process that has done
    no job yet is never recycled for its memory: what it holds came with its start,
    and a fresh process would start as big, again and again."""
    if policy.max_jobs is not None and jobs_done >= policy.max_jobs:
        return f"{jobs_done} jobs done (--max-jobs-per-child {policy.max_jobs})"
    if (
        policy.max_memory_mb is not None
        and jobs_done > 0
        and resident_mb is not None
        and resident_mb >= policy.max_memory_mb
    ):
        return f"{resident_mb:.0f} MB resident (--max-memory-per-child {policy.max_memory_mb:g})"
    return None
