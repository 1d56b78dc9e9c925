"""An idle worker told to stop leaves its wait for work at once, instead of when the
wait times out (the poll interval), on every backend (`InterruptibleWaitsJobQueue`):
in-process on memory, SQLite and PostgreSQL; on Redis, where the wait is a blocking
pop on the server, by a token pushed onto a list of the process's own that the pop
also waits on."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import conveyor
import pytest
from backends import Backend
from conveyor.shell.ports import InterruptibleWaitsJobQueue

#: A wait that is not ended would last this long; the tests allow a tenth of it.
LONG_WAIT_S = 30.0
ENDED_WITHIN_S = 3.0


def test_ending_the_waits_ends_an_idle_wait_for_work_with_try_a_claim(backend: Backend) -> None:
    queue: Any = backend.queue
    assert isinstance(queue, InterruptibleWaitsJobQueue)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(queue.wait_for_work("default", LONG_WAIT_S)))
    began = time.monotonic()
    waiter.start()
    # Asked again until it ends: a wait that had not begun at the first ask is asked again.
    while waiter.is_alive() and time.monotonic() - began < ENDED_WITHIN_S:
        queue.end_waits()
        waiter.join(0.05)
    assert not waiter.is_alive(), f"the wait did not end within {ENDED_WITHIN_S} s"
    assert got == [True]


def _config(name: str, tmp_path: Path) -> dict[str, Any]:
    if name == "memory":
        return {"provider": "memory"}
    if name == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    if name == "redis":
        from backends import REDIS_TEST_DB
        from conveyor.testing.redis_server import redis_url

        prefix = f"idle-stop-{uuid.uuid4().hex[:8]}"
        return {"provider": "redis", "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix}}
    from conveyor.testing.postgres_server import fresh_database

    return {"provider": "db", "url": fresh_database(prefix="conveyor_idle_stop")}


@pytest.mark.parametrize("name", ["memory", "sqlite", "postgresql", "redis"])
def test_an_idle_worker_stops_at_once_not_at_the_end_of_its_poll_interval(
    name: str, tmp_path: Path
) -> None:
    ran = threading.Event()
    config = {
        **_config(name, tmp_path),
        "auto_migrate": True,
        "entry_points": False,
        "workers": {"queues": ["default"], "count": 2, "poll_interval_ms": 30_000},
    }
    rt = conveyor.build(config, handlers={"mark": lambda args: ran.set()}, env={})
    try:
        rt.start()
        rt.enqueue("mark", {})
        assert ran.wait(10), "the worker never ran the job"
        time.sleep(0.3)  # both workers are back in their idle waits
        began = time.monotonic()
        clean = rt.stop(grace_s=10)
        took = time.monotonic() - began
    finally:
        rt.close()
    assert clean
    assert took < ENDED_WITHIN_S, f"the stop took {took:.1f} s: it waited out an idle wait"
