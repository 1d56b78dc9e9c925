"""OpenTelemetry spans: `send <queue>` at enqueue, `process <queue>` per attempt,
linked by the trace context the job carries through SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from backends import Backend, make_backend
from conveyor.shell.config import load_config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.shell.tracing import instrument
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

SERVERS = ("sqlite", "postgresql", "redis")


@pytest.fixture(params=SERVERS)
def server_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_backend(request.param)
    yield made
    made.cleanup()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _runtime(backend: Backend, handlers: dict[str, Any], exporter: InMemorySpanExporter | None):
    config = load_config(
        {
            "provider": "memory",
            "entry_points": False,
            "retry": {"initial_delay_ms": 1, "max_delay_ms": 5, "jitter": False},
        },
        env={},
    )
    registry = Registry()
    for job_type, handler in handlers.items():
        registry.register(job_type, handler)
    runtime = Runtime(config, backend.queue, backend.store, registry)
    if exporter is not None:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrument(runtime, provider)
    return runtime


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _fail_once() -> Any:
    calls: list[int] = []

    def handler(args: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("upstream down")
        return "ok"

    return handler


def test_an_enqueue_is_a_producer_send_span_with_messaging_attributes(
    server_backend, exporter
) -> None:
    runtime = _runtime(server_backend, {}, exporter)
    job = runtime.enqueue("ship", queue="mail")
    (send,) = _spans(exporter, "send mail")
    assert send.kind is SpanKind.PRODUCER
    assert dict(send.attributes or {}) == {
        "messaging.system": "conveyor",
        "messaging.destination.name": "mail",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.message.id": str(job.id),
        "conveyor.job.type": "ship",
    }


def test_the_stored_job_carries_the_send_span_context(server_backend, exporter) -> None:
    runtime = _runtime(server_backend, {}, exporter)
    runtime.enqueue("ship")
    (send,) = _spans(exporter, "send default")
    peer_queue, _ = server_backend.peer()
    claim = peer_queue.dequeue("default", runtime.clock.now())
    assert claim is not None and claim.job.trace_context is not None
    ctx = send.get_span_context()
    assert claim.job.trace_context["traceparent"].startswith(
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"
    )


def test_an_attempt_is_a_consumer_process_span_child_of_and_linked_to_the_send_span(
    server_backend, exporter
) -> None:
    runtime = _runtime(server_backend, {"ship": lambda a: "ok"}, exporter)
    job = runtime.enqueue("ship")
    runtime.drain(timeout_s=30)
    (send,) = _spans(exporter, "send default")
    (process,) = _spans(exporter, "process default")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id
    assert process.context.trace_id == send.get_span_context().trace_id
    assert [link.context.span_id for link in process.links] == [send.get_span_context().span_id]
    assert dict(process.attributes or {}) == {
        "messaging.system": "conveyor",
        "messaging.destination.name": "default",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": str(job.id),
        "conveyor.job.type": "ship",
        "conveyor.job.attempt": 1,
    }
    assert process.status.status_code is StatusCode.UNSET


def test_every_retry_continues_the_trace_of_its_enqueue(server_backend, exporter) -> None:
    runtime = _runtime(server_backend, {"flaky": _fail_once()}, exporter)
    runtime.enqueue("flaky")
    runtime.drain(wait_scheduled=True, timeout_s=30)
    (send,) = _spans(exporter, "send default")
    attempts = _spans(exporter, "process default")
    assert [a.attributes["conveyor.job.attempt"] for a in attempts] == [1, 2]
    assert {a.parent.span_id for a in attempts} == {send.get_span_context().span_id}


def test_a_failed_attempt_marks_its_span_an_error_with_the_exception(
    server_backend, exporter
) -> None:
    runtime = _runtime(server_backend, {"flaky": _fail_once()}, exporter)
    runtime.enqueue("flaky")
    runtime.drain(wait_scheduled=True, timeout_s=30)
    failed, succeeded = _spans(exporter, "process default")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ConnectionError: upstream down"
    assert failed.attributes["error.type"] == "ConnectionError"
    (event,) = failed.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "ConnectionError"
    assert succeeded.status.status_code is StatusCode.UNSET


def test_tracing_leaves_the_failure_record_and_hooks_unchanged(server_backend, exporter) -> None:
    runtime = _runtime(server_backend, {"flaky": _fail_once()}, exporter)
    heard: list[BaseException | None] = []
    runtime.hooks.on_failed(lambda job, exc: heard.append(exc))
    job = runtime.enqueue("flaky")
    runtime.drain(wait_scheduled=True, timeout_s=30)
    assert [type(e) for e in heard] == [ConnectionError]
    done = runtime.store.get(job.id)
    assert done is not None and done.attempt == 2


def test_the_handler_runs_inside_the_process_span(server_backend, exporter) -> None:
    seen: list[int] = []
    runtime = _runtime(
        server_backend,
        {"ship": lambda a: seen.append(trace.get_current_span().get_span_context().span_id)},
        exporter,
    )
    runtime.enqueue("ship")
    runtime.drain(timeout_s=30)
    (process,) = _spans(exporter, "process default")
    assert seen == [process.get_span_context().span_id]


def test_a_batch_enqueue_is_one_send_span_whose_context_every_job_carries(
    server_backend, exporter
) -> None:
    runtime = _runtime(server_backend, {"ship": lambda a: "ok"}, exporter)
    runtime.enqueue_many("ship", [{"n": 1}, {"n": 2}])
    runtime.drain(timeout_s=30)
    (send,) = _spans(exporter, "send default")
    assert send.attributes["messaging.batch.message_count"] == 2
    assert "messaging.message.id" not in send.attributes
    processed = _spans(exporter, "process default")
    assert len(processed) == 2
    assert {p.parent.span_id for p in processed} == {send.get_span_context().span_id}


def test_a_job_enqueued_without_tracing_is_processed_in_a_new_trace(
    server_backend, exporter
) -> None:
    producer = _runtime(server_backend, {}, None)
    job = producer.enqueue("ship")
    assert job.trace_context is None
    worker = _runtime(server_backend, {"ship": lambda a: "ok"}, exporter)
    worker.drain(timeout_s=30)
    (process,) = _spans(exporter, "process default")
    assert process.parent is None
    assert process.links == ()


def test_without_tracing_a_job_carries_no_trace_context(server_backend) -> None:
    runtime = _runtime(server_backend, {}, None)
    runtime.enqueue("ship")
    claim = server_backend.queue.dequeue("default", runtime.clock.now())
    assert claim is not None and claim.job.trace_context is None


def test_a_non_recording_tracer_puts_nothing_in_the_job(server_backend) -> None:
    # The API without an SDK: spans are no-ops, so there is no context to carry.
    runtime = _runtime(server_backend, {}, None)
    instrument(runtime, trace.NoOpTracerProvider())
    job = runtime.enqueue("ship")
    assert job.trace_context is None


def test_the_trace_context_survives_a_dead_letter_and_its_revival(server_backend) -> None:
    exporter = InMemorySpanExporter()
    runtime = _runtime(server_backend, {"flaky": _fail_once()}, exporter)
    job = runtime.enqueue("flaky", max_retries=0)
    runtime.drain(timeout_s=30)
    dead = runtime.store.get(job.id)
    assert dead is not None and dead.trace_context == job.trace_context
    revived = runtime.retry_dead(job.id)
    assert revived.trace_context == job.trace_context


def test_the_memory_backend_links_the_spans_too() -> None:
    # The memory backend passes records by reference: the same spans, without a codec.
    exporter = InMemorySpanExporter()
    backend = make_backend("memory")
    runtime = _runtime(backend, {"ship": lambda a: "ok"}, exporter)
    runtime.enqueue("ship")
    runtime.drain(timeout_s=30)
    (send,) = _spans(exporter, "send default")
    (process,) = _spans(exporter, "process default")
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id


def test_an_async_handler_runs_to_its_end_inside_the_process_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inner = provider.get_tracer("test")

    async def ship(args: Any) -> str:
        await asyncio.sleep(0)  # across a suspension: the span is still current after it
        with inner.start_as_current_span("inner"):
            await asyncio.sleep(0.01)
        return "ok"

    async def broken(args: Any) -> str:
        await asyncio.sleep(0)
        raise ConnectionError("upstream down")

    runtime = _runtime(make_backend("memory"), {"ship": ship, "broken": broken}, None)
    instrument(runtime, provider)
    runtime.enqueue("ship", queue="fast")
    runtime.enqueue("broken", queue="slow", max_retries=0)
    runtime.worker("fast").drain()
    runtime.worker("slow").drain()
    (process,) = _spans(exporter, "process fast")
    (nested,) = _spans(exporter, "inner")
    assert nested.parent is not None
    assert nested.parent.span_id == process.get_span_context().span_id
    assert process.end_time >= nested.end_time, "the span ended before the handler did"
    (failed,) = _spans(exporter, "process slow")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ConnectionError: upstream down"
    assert [e.attributes["exception.type"] for e in failed.events] == ["ConnectionError"]
    runtime.close()


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_a_transactional_enqueue_is_a_send_span_whose_context_the_job_carries(name) -> None:
    exporter = InMemorySpanExporter()
    backend = make_backend(name)
    try:
        runtime = _runtime(backend, {"ship": lambda a: "ok"}, exporter)
        with backend.queue._db.engine.begin() as conn:
            runtime.enqueue_in_tx(conn, "ship")
        runtime.drain(timeout_s=30)
    finally:
        backend.cleanup()
    (send,) = _spans(exporter, "send default")
    (process,) = _spans(exporter, "process default")
    assert process.parent is not None
    assert process.parent.span_id == send.get_span_context().span_id
