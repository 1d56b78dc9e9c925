"""Running one attempt: a started job's handler, found, bounded and run where it belongs.

The worker hands over a claimed job already started (its attempt counted). The
runner finds the job's handler (none registered here is a `NoHandler` outcome,
for the core to requeue the job for another node), resolves its tenant, builds
the context the handler may take, and runs it:

* in the worker's own thread, when the attempt has no timeout;
* in a thread of its own, abandoned at the deadline (`conveyor.shell.worker.timeouts`);
* in a child process, killed at the deadline, for a type registered with
  `execution="process"` (`conveyor.shell.worker.process_execution`).

An `async def` handler is not awaited here: its attempt comes back `Awaiting`, for
the worker to start on the event loop. Anything else comes back `Attempted`:
the outcome, the exception behind a failure, and whether the deadline cut it off.
The runner writes nothing: deciding and writing are the core's and the executor's.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from ...core import (
    ErrorInfo,
    Failed,
    Job,
    NoHandler,
    Outcome,
    attempt_deadline,
    tenant_verdict,
    timeout_error,
)
from ...core.frozen import thaw
from ..cancellation import cancel_requested
from ..context import JobContext, check_progress
from ..inputs import NO_INPUTS, Inputs, read_inputs
from ..ports import Claim, JobQueue, JobStore
from ..registry import Registration, Registry, catching, caught, run_handler
from .async_jobs import awaitable_of
from .attempts import Attempted, Awaiting
from .timeouts import AttemptGate, DeadlineRunner

if TYPE_CHECKING:  # SQL only: a Redis-only process never loads SQLAlchemy
    from ..tenancy import Tenant, TenantScope

log = logging.getLogger("conveyor.worker")


class AttemptTracer(Protocol):
    """Runs an attempt inside a trace span (`conveyor.shell.tracing.JobTracer`)."""

    def process(self, job: Job, run: Callable[[Job], Outcome]) -> Outcome:
        """`run(job)`'s outcome, the attempt traced."""
        ...


def _no_inputs() -> Inputs:
    return NO_INPUTS


class AttemptRunner:
    """Runs the attempts of one worker's claimed jobs."""

    def __init__(
        self,
        queue: JobQueue,
        registry: Registry,
        *,
        tenancy: TenantScope | None = None,
        tracer: AttemptTracer | None = None,
        overruns: DeadlineRunner | None = None,
        progress: Callable[[UUID, object, object], None] | None = None,
        store: JobStore | None = None,
    ) -> None:
        """`overruns` runs the attempts that have a timeout and keeps count of those
        abandoned at their deadline; `queue` answers the handlers' cancel checks;
        `progress(job_id, fraction, value)` takes the handlers' progress reports."""
        self._queue, self._registry = queue, registry
        self._progress = progress
        #: Where the results of the jobs a dependent waited for are read.
        self._store = store
        self._tenancy, self._tracer = tenancy, tracer
        self.overruns = overruns if overruns is not None else DeadlineRunner()

    def context(self, job: Job, deadline: datetime | None, gate: AttemptGate) -> JobContext:
        """The context a handler of `job` is given: the one place it is built."""
        queue = self._queue
        return JobContext(
            job_id=job.id,
            job_type=job.job_type,
            attempt=job.attempt,
            queue=job.queue,
            tenant_id=job.tenant_id,
            deadline=deadline,
            cancel_check=lambda: cancel_requested(queue, job.id),
            timeout_check=lambda: gate.abandoned,
            progress_sink=(
                check_progress
                if self._progress is None
                else functools.partial(self._progress, job.id)
            ),
            inputs_reader=(
                _no_inputs
                if self._store is None
                else functools.partial(read_inputs, queue, self._store, job.id)
            ),
        )

    def run_attempt(self, claim: Claim, job: Job, now: datetime) -> Attempted | Awaiting:
        """Run the handler of `job` (started at `now`, held by `claim`)."""
        timeout_ms = self._registry.timeout_ms(job.job_type, job.timeout_ms)
        # Who has the last word on the attempt; abandoned once it ran out of time.
        gate = AttemptGate()
        context = self.context(job, attempt_deadline(now, timeout_ms), gate)
        with catching() as found:
            if self._tracer is None:
                outcome = self._attempt(job, context, gate, timeout_ms)
            else:
                outcome = self._tracer.process(
                    job, lambda job: self._attempt(job, context, gate, timeout_ms)
                )
        pending = awaitable_of(outcome)
        if pending is not None:  # an async handler: decided once it finishes on the loop
            return Awaiting(claim, job, pending, timeout_ms)
        return Attempted(claim, job, outcome, found.exception, gate.abandoned)

    def _attempt(
        self, job: Job, context: JobContext, gate: AttemptGate, timeout_ms: int | None
    ) -> Outcome:
        entry = self._registry.registration(job.job_type)
        if (
            timeout_ms is None
            or entry is None
            # A child process is killed at the deadline, and a coroutine is bounded on
            # the event loop: neither leaves a thread to abandon.
            or entry.execution == "process"
            or inspect.iscoroutinefunction(entry.handler)
        ):
            return self._outcome(job, entry, context, gate, timeout_ms)
        return self._bounded(job, entry, context, gate, timeout_ms)

    def _bounded(
        self,
        job: Job,
        entry: Registration,
        context: JobContext,
        gate: AttemptGate,
        timeout_ms: int,
    ) -> Outcome:
        """The attempt's outcome, or a `Timeout` failure once it runs past `timeout_ms`
        (its thread is then abandoned, and `gate` says so)."""
        outcome = self.overruns.run(
            lambda: self._outcome(job, entry, context, gate),
            timeout_ms / 1000,
            gate,
            name=f"conveyor-attempt-{job.id}",
        )
        if outcome is not None:
            return outcome
        error = timeout_error(timeout_ms)
        log.warning(
            "job %s (%s) %s: recorded as a Timeout failure; "
            "its handler's thread is abandoned (%d abandoned still running)",
            job.id,
            job.job_type,
            error.message,
            self.overruns.still_running,
        )
        return Failed(error)

    def _outcome(
        self,
        job: Job,
        entry: Registration | None,
        context: JobContext,
        gate: AttemptGate,
        timeout_ms: int | None = None,
    ) -> Outcome:
        """Run the job's handler (in a child process, for that execution, stopped after
        `timeout_ms`) and say how it went."""
        if entry is None:
            return NoHandler()
        tenancy = self._tenancy
        tenant: Tenant | None = None
        exists = True
        if job.tenant_id is not None and tenancy is not None:
            try:
                tenant = tenancy.resolve(job.tenant_id)
            except Exception as exc:
                caught(exc)
                return Failed(ErrorInfo("tenant-resolver-error", str(exc)[:500], retryable=True))
            exists = tenant is not None
        verdict = tenant_verdict(job, tenant_scoped=entry.tenant_scoped, tenant_exists=exists)
        if verdict is not None:
            return verdict
        if entry.tenant_scoped:
            if tenancy is None or tenant is None:
                message = "a tenant-scoped handler needs tenancy configured on the worker"
                return Failed(ErrorInfo("tenancy-not-configured", message, retryable=False))
            return tenancy.run(entry.handler, thaw(job.args), tenant, job=context, gate=gate)
        # A plain copy: handlers may json.dumps or mutate it without touching the record.
        arguments = entry.arguments(thaw(job.args), context)
        if entry.execution == "process":
            return self._in_process(job, entry.handler, arguments, context, gate, timeout_ms)
        return run_handler(entry.handler, *arguments)

    def _in_process(
        self,
        job: Job,
        handler: Any,
        arguments: tuple[Any, ...],
        context: JobContext,
        gate: AttemptGate,
        timeout_ms: int | None,
    ) -> Outcome:
        # Imported on first use: most workers never start a child process.
        from .process_execution import run_in_process

        timeout_s = None if timeout_ms is None else timeout_ms / 1000
        outcome = run_in_process(
            handler,
            arguments,
            timeout_s,
            name=f"conveyor-job-{job.id}",
            stop=context.cancel_requested,
        )
        if outcome is not None:
            return outcome
        assert timeout_ms is not None  # only a deadline stops a child early
        gate.abandon()  # the child was killed at its deadline: the attempt timed out
        error = timeout_error(timeout_ms)
        log.warning(
            "job %s (%s) %s: its process was killed and the attempt recorded as a "
            "Timeout failure",
            job.id,
            job.job_type,
            error.message,
        )
        return Failed(error)
