"""OpenTelemetry spans for jobs, following the messaging semantic conventions.

    from conveyor.shell.tracing import instrument

    runtime = conveyor.build(config, handlers=...)
    instrument(runtime)  # before enqueueing or starting workers

Each enqueue is a `send <queue>` span (kind PRODUCER). Its context is injected
into the job (`Job.trace_context`: the W3C `traceparent` / `tracestate`
headers, through the global propagator) and stored with it, so it survives
retries, reclaims and restarts. Each attempt a worker runs is a
`process <queue>` span (kind CONSUMER) whose parent is that send span, with a
link to it as well: the handler's own spans nest under it, and a trace shows
the enqueue, every attempt and what each attempt did. A job enqueued without
tracing is processed in a new trace.

Spans go to the tracer provider you configure (the global one by default); with
none configured the OpenTelemetry API records nothing. This module needs the
`tracing` extra (`opentelemetry-api`); `import conveyor` never loads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import attrs
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ..core import Failed, FrozenMap, Job, Outcome, Succeeded
from ..version import __version__
from .registry import catching, caught, error_from_exception, outcome_of
from .worker.async_jobs import awaitable_of

#: `messaging.system`: the semantic conventions name known brokers; a job queue
#: library names itself.
SYSTEM = "conveyor"


class JobTracer:
    """Makes the `send` and `process` spans; the runtime and its workers call it."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("conveyor", __version__, tracer_provider=tracer_provider)

    @contextmanager
    def send(self, jobs: Sequence[Job]) -> Iterator[list[Job]]:
        """A `send <queue>` span around writing `jobs` (all for one queue); gives the
        jobs to write, each carrying the span's context. A batch is one span."""
        queue = jobs[0].queue if jobs else ""
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": queue,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(jobs) == 1:
            attributes["messaging.message.id"] = str(jobs[0].id)
            attributes["conveyor.job.type"] = jobs[0].job_type
        else:
            attributes["messaging.batch.message_count"] = len(jobs)
        with self._tracer.start_as_current_span(
            f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            headers: dict[str, str] = {}
            propagate.inject(headers)
            # An unsampled or no-op span injects nothing: then the job carries nothing.
            carried = FrozenMap(headers) if headers else None
            yield [attrs.evolve(job, trace_context=carried) for job in jobs]

    def process(self, job: Job, run: Callable[[Job], Outcome]) -> Outcome:
        """Run one attempt (`run(job)`, the handler) inside a `process <queue>` span
        that continues the job's carried trace; a failed attempt marks it an error."""
        parent = None
        links: list[Link] = []
        if job.trace_context:
            parent = propagate.extract(dict(job.trace_context))
            sent = trace.get_current_span(parent).get_span_context()
            if sent.is_valid:
                links.append(Link(sent))
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.queue,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": str(job.id),
            "conveyor.job.type": job.job_type,
            "conveyor.job.attempt": job.attempt,
        }
        span = self._tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        with trace.use_span(span, end_on_exit=False), catching() as found:
            outcome = run(job)
        pending = awaitable_of(outcome)
        if pending is not None:
            # An async handler's attempt ends on the event loop, not here: the span goes
            # with it and ends when it does.
            return Succeeded(_traced(span, pending))
        if found.exception is not None:
            # Pass it on to the worker's own `catching()`, for the failure log and hooks.
            caught(found.exception)
        _settle(span, outcome, found.exception)
        span.end()
        return outcome


class Traced(Protocol):
    """What `instrument` traces: a `Runtime`, whose enqueues and workers read `tracer`."""

    tracer: JobTracer | None


def instrument(runtime: Traced, tracer_provider: trace.TracerProvider | None = None) -> JobTracer:
    """Trace `runtime`'s enqueues and the workers it starts from now on (call it
    before `start()`); `tracer_provider` defaults to the global one."""
    tracer = JobTracer(tracer_provider)
    runtime.tracer = tracer
    return tracer


def _settle(span: Span, outcome: Outcome, exception: BaseException | None) -> None:
    """Mark the span of a failed attempt an error, with its exception when there is one."""
    if not isinstance(outcome, Failed):
        return
    span.set_attribute("error.type", outcome.error.type)
    if exception is not None:
        span.record_exception(exception)
    span.set_status(Status(StatusCode.ERROR, f"{outcome.error.type}: {outcome.error.message}"))


async def _traced(span: Span, pending: Awaitable[Any]) -> Any:
    """Await an async handler inside its attempt's span, then settle and end the span.
    What the handler returns or raises passes through unchanged."""
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            returned = await pending
        except BaseException as exc:
            _settle(span, Failed(error_from_exception(exc)), exc)
            raise
        _settle(span, outcome_of(returned), None)
        return returned
