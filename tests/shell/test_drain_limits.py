"""`Runtime.drain()` and `runtime.worker(queue).drain()` claim under the queue's limits
as the pools do, on every backend: a fair queue lets a small tenant in early, a full
cap holds work back, and a rate spaces the starts."""

from __future__ import annotations

import time
from typing import Any

import pytest
from backends import Backend
from conveyor.core.limits import QueueLimits, Rate
from conveyor.shell.config import load_config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime

pytestmark = pytest.mark.timeout(300)

FLOOD, SMALL = 300, 10


def limited_runtime(backend: Backend, limits: QueueLimits, ran: list[Any]) -> Runtime:
    config = load_config({"provider": "memory", "workers": {"queues": ["default"]}}, env={})
    registry = Registry({"work": lambda args: ran.append((args["tenant"], time.monotonic()))})
    runtime = Runtime(config, backend.queue, backend.store, registry)
    runtime.limits["default"] = limits
    return runtime


def flood_then_small(runtime: Runtime) -> None:
    runtime.enqueue_many("work", [{"tenant": "flood"}] * FLOOD, tenant_id="flood")
    runtime.enqueue_many("work", [{"tenant": "small"}] * SMALL, tenant_id="small")


def last_small_position(ran: list[Any]) -> int:
    return max(n for n, (tenant, _) in enumerate(ran, 1) if tenant == "small")


def test_runtime_drain_lets_the_small_tenant_in_early_on_a_fair_queue(backend: Backend) -> None:
    ran: list[Any] = []
    runtime = limited_runtime(backend, QueueLimits(fair=True), ran)
    flood_then_small(runtime)
    assert runtime.drain(timeout_s=120).completed == FLOOD + SMALL
    # Turn and turn about: the small tenant's tenth job is among the first 2 x 10 + 1.
    assert last_small_position(ran) <= 2 * SMALL + 1, [t for t, _ in ran[:30]]


def test_a_worker_drain_lets_the_small_tenant_in_early_on_a_fair_queue(backend: Backend) -> None:
    ran: list[Any] = []
    runtime = limited_runtime(backend, QueueLimits(fair=True), ran)
    flood_then_small(runtime)
    # Claims, counted: on a slow machine a batch running past its heartbeat hands the
    # rest of its claims back and claims them again, so the count may be higher; each
    # job still runs once.
    assert runtime.worker("default").drain() >= FLOOD + SMALL
    assert len(ran) == FLOOD + SMALL
    assert last_small_position(ran) <= 2 * SMALL + 1, [t for t, _ in ran[:30]]


def test_runtime_drain_keeps_a_cap_another_worker_fills(backend: Backend) -> None:
    ran: list[Any] = []
    limits = QueueLimits(max_running=1)
    runtime = limited_runtime(backend, limits, ran)
    runtime.enqueue_many("work", [{"tenant": "a"}] * 3)
    # Another worker holds the only slot.
    held = backend.queue.dequeue_limited("default", runtime.clock.now(), 1, limits)
    assert len(held.claims) == 1
    stats = runtime.drain(timeout_s=0.5)
    assert stats.completed == 0 and ran == []


def test_runtime_drain_spaces_starts_by_the_rate_and_runs_them_all(backend: Backend) -> None:
    ran: list[Any] = []
    runtime = limited_runtime(backend, QueueLimits(rates=(Rate(starts=4, per_seconds=1.0),)), ran)
    runtime.enqueue_many("work", [{"tenant": "a"}] * 7)
    began = time.monotonic()
    assert runtime.drain(timeout_s=30).completed == 7
    # A burst of 4, then one token every quarter second: the 7th starts >= 0.75 s in.
    assert ran[6][1] - began >= 0.7, [round(t - began, 2) for _, t in ran]


def test_a_worker_drain_stops_where_the_rate_holds_the_rest_back(backend: Backend) -> None:
    ran: list[Any] = []
    runtime = limited_runtime(backend, QueueLimits(rates=(Rate(starts=4, per_seconds=60.0),)), ran)
    runtime.enqueue_many("work", [{"tenant": "a"}] * 7)
    assert runtime.worker("default").drain() == 4
