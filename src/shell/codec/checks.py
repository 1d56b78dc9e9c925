"""Checks of a decoded job against what the core ever writes (see `codec`): names
that pass the name rules, counters that are not negative, bounded attempts and trace
context. A document that breaks one was not written by Conveyor: it is forged or
corrupt, and decodes to a `DecodeError`."""

from __future__ import annotations

from ...core import MAX_ATTEMPTS_KEPT, MAX_WORKER_CHARS, FrozenMap, Job
from ...core.timeouts import MAX_TIMEOUT_MS
from ...core.validation import Limits, check_name

_LIMITS = Limits()


def forged_field(job: Job) -> str | None:
    """Which field of a decoded `job` the core could not have written, and why (None
    when every field is one it could have)."""
    for field, name in (("job_type", job.job_type), ("queue", job.queue)):
        problem = check_name(field, name, _LIMITS)
        if problem is not None:
            return str(problem)
    if job.tenant_id is not None and check_name("tenant_id", job.tenant_id) is not None:
        return "tenant_id: not a valid name"
    if job.max_retries < 0 or job.retry_count < 0 or job.attempt < 0:
        for field in ("max_retries", "retry_count", "attempt"):
            if getattr(job, field) < 0:
                return f"{field}: must be >= 0"
    if job.metadata.requeue_count < 0 or job.metadata.reclaim_count < 0:
        return "metadata: counters must be >= 0"
    if job.timeout_ms is not None and not 0 < job.timeout_ms <= MAX_TIMEOUT_MS:
        return f"timeout_ms: must be between 1 and {MAX_TIMEOUT_MS}"
    return _check_attempts(job) or _check_trace_context(job.trace_context)


def _check_attempts(job: Job) -> str | None:
    # The core never writes more than these bounds; a document that does was not
    # written by it. (A traceback needs no check: `ErrorInfo` cuts it to its end.)
    if len(job.attempts) > MAX_ATTEMPTS_KEPT:
        return f"attempts: more than {MAX_ATTEMPTS_KEPT}"
    workers = [job.worker]
    for attempt in job.attempts:
        if attempt.number < 0:
            return "attempts: number must be >= 0"
        workers.append(attempt.worker)
    if any(worker is not None and len(worker) > MAX_WORKER_CHARS for worker in workers):
        return f"worker: longer than {MAX_WORKER_CHARS} characters"
    return None


#: Bounds on a carried trace context: W3C `traceparent` is 55 characters and
#: `tracestate` at most 32 entries of a few hundred; a propagator may add a few more.
MAX_TRACE_HEADERS = 8
MAX_TRACE_VALUE = 1024


def _check_trace_context(context: FrozenMap | None) -> str | None:
    # The worker hands these to a propagator as HTTP-like headers: strings only, bounded.
    if context is None:
        return None
    if len(context) > MAX_TRACE_HEADERS:
        return f"trace_context: more than {MAX_TRACE_HEADERS} headers"
    for key, value in context.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > MAX_TRACE_VALUE:
            return "trace_context: headers must be short strings"
    return None
