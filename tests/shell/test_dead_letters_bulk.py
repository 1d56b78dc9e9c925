"""Dead letters in bulk, on every backend: retry or purge every one that matches a
queue, a job type or a tenant, each once, and count them for the CLI's notes."""

from __future__ import annotations

from typing import Any

from backends import Backend
from conveyor.core import JobStatus
from conveyor.shell.config import load_config
from conveyor.shell.dead_letters import count_dead, dead_filter, purge_matching, retry_matching
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime


def boom(args: Any) -> None:
    raise ValueError("boom")


def runtime_with_dead_letters(backend: Backend) -> Runtime:
    """Dead letters: 3 of queue `a` type `x` (one of tenant `t1`), 2 of `a`/`y`, 2 of `b`/`x`."""
    config = load_config({"provider": "memory", "workers": {"queues": ["a", "b"]}}, env={})
    runtime = Runtime(config, backend.queue, backend.store, Registry({"x": boom, "y": boom}))
    for queue, job_type, tenant in [
        ("a", "x", None),
        ("a", "x", None),
        ("a", "x", "t1"),
        ("a", "y", None),
        ("a", "y", None),
        ("b", "x", None),
        ("b", "x", None),
    ]:
        runtime.enqueue(job_type, {}, queue=queue, max_retries=0, tenant_id=tenant)
    for queue in ("a", "b"):
        runtime.worker(queue).drain()
    assert count_dead(runtime.store, dead_filter()) == 7
    return runtime


def test_retry_all_of_a_queue_and_type_re_enqueues_exactly_those(backend: Backend) -> None:
    runtime = runtime_with_dead_letters(backend)
    assert count_dead(runtime.store, dead_filter(queue="a", job_type="x")) == 3
    assert retry_matching(runtime, dead_filter(queue="a", job_type="x")) == 3
    assert count_dead(runtime.store, dead_filter()) == 4
    assert count_dead(runtime.store, dead_filter(queue="a", job_type="x")) == 0
    counts = runtime.queue.counts(runtime.clock.now())
    assert counts["a"].ready == 3 and ("b" not in counts or counts["b"].ready == 0)
    # A second run finds nothing left to retry.
    assert retry_matching(runtime, dead_filter(queue="a", job_type="x")) == 0


def test_retry_all_of_a_tenant_and_purge_all_of_a_type(backend: Backend) -> None:
    runtime = runtime_with_dead_letters(backend)
    assert retry_matching(runtime, dead_filter(tenant_id="t1")) == 1
    assert count_dead(runtime.store, dead_filter(job_type="y")) == 2
    assert purge_matching(runtime, dead_filter(job_type="y")) == 2
    left = runtime.store.find_history(dead_filter(), limit=100)
    assert sorted((j.queue, j.job_type) for j in left) == [("a", "x")] * 2 + [("b", "x")] * 2
    assert all(j.status is JobStatus.FAILED for j in left)
    assert purge_matching(runtime, dead_filter()) == 4
    assert count_dead(runtime.store, dead_filter()) == 0


def test_a_bulk_action_walks_page_after_page_each_letter_once(
    backend: Backend, monkeypatch: Any
) -> None:
    import conveyor.shell.dead_letters as dead_letters

    monkeypatch.setattr(dead_letters, "PAGE", 2)
    runtime = runtime_with_dead_letters(backend)
    retried: list[str] = []
    real = runtime.retry_dead
    monkeypatch.setattr(runtime, "retry_dead", lambda job_id: retried.append(job_id) or real(job_id))
    assert retry_matching(runtime, dead_filter(job_type="x")) == 5
    assert len(retried) == len(set(retried)) == 5
    assert count_dead(runtime.store, dead_filter()) == 2
