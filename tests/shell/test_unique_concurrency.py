"""Eight processes enqueue the same unique key, or the same id, at once: exactly one
job is written and every other process gets that job back. Real SQLite,
PostgreSQL and Redis servers; the processes share nothing but the backend. The
memory backend, which serves one process, is raced by eight threads.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conveyor.core import create_job
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

PROCESSES = 8
ROUNDS = 5

SERVER_BACKENDS = ("sqlite", "postgresql", "redis")


def _open_queue(backend: str, url: str, prefix: str) -> Any:
    if backend == "redis":
        from conveyor.shell.adapters.redis_queue import RedisJobQueue

        return RedisJobQueue(url, prefix=prefix)
    from conveyor.shell.adapters.sql import SqlJobQueue, make_engine

    return SqlJobQueue(make_engine(url))


def _enqueuer(
    backend: str,
    url: str,
    prefix: str,
    plan: list[tuple[str, str | None, str | None]],
    barrier: Any,
    results: Any,
) -> None:
    """One process: for each (queue, id, key) of `plan`, wait for the others, then
    enqueue a job of its own and report (its id, the id of the job returned or None)."""
    queue = _open_queue(backend, url, prefix)
    try:
        for queue_name, job_id, key in plan:
            job = create_job(
                id=job_id or uuid.uuid4(),
                job_type="report",
                args={"pid": os.getpid()},
                now=datetime.now(UTC),
                queue=queue_name,
                unique_key=key,
            ).unwrap()
            barrier.wait(timeout=120)
            found = queue.enqueue_new(job)
            answer = None if found is None else (str(found.id), found.args["pid"])
            results.put((queue_name, str(job.id), os.getpid(), answer))
    finally:
        queue.close()


@pytest.fixture(params=SERVER_BACKENDS)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    """(backend, url, redis prefix) of an empty backend reachable from other processes."""
    name = request.param
    prefix = f"uniq{uuid.uuid4().hex[:10]}"
    if name == "redis":
        from conveyor.testing.redis_server import redis_url

        yield name, redis_url(12), prefix
        return
    from conveyor.shell.adapters.sql import make_engine
    from conveyor.shell.adapters.sql.migration import create_tables

    if name == "sqlite":
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='conveyor-unique-')) / 'jobs.db'}"
    else:
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix="conveyor_unique")
    engine = make_engine(url)
    create_tables(engine)
    engine.dispose()
    yield name, url, prefix


def _race(server: tuple[str, str, str], plan: list[tuple[str, str | None, str | None]]) -> list:
    backend, url, prefix = server
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_enqueuer, args=(backend, url, prefix, plan, barrier, results))
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    answers = [results.get(timeout=300) for _ in range(PROCESSES * len(plan))]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return answers


def _check_one_writer(answers: list, backend: str, url: str, prefix: str, plan: list) -> None:
    queue = _open_queue(backend, url, prefix)
    try:
        counts = queue.counts(datetime.now(UTC))
        for queue_name, _, _ in plan:
            mine = [a for a in answers if a[0] == queue_name]
            writers = [a for a in mine if a[3] is None]
            assert len(writers) == 1, f"{len(writers)} processes wrote a job in one round"
            _, written_id, writer_pid, _ = writers[0]
            assert {a[3] for a in mine if a[3] is not None} == {(written_id, writer_pid)}
            assert counts[queue_name].ready == 1, "exactly one job is stored"
    finally:
        queue.close()


def test_eight_processes_enqueueing_one_unique_key_write_one_job(server) -> None:
    plan = [(f"q{n}", None, f"nightly-report:{uuid.uuid4().hex}") for n in range(ROUNDS)]
    _check_one_writer(_race(server, plan), *server, plan)


def test_eight_processes_enqueueing_one_id_write_one_job(server) -> None:
    plan = [(f"q{n}", str(uuid.uuid4()), None) for n in range(ROUNDS)]
    _check_one_writer(_race(server, plan), *server, plan)


def test_eight_threads_enqueueing_one_unique_key_in_memory_write_one_job() -> None:
    # The memory backend serves one process: its enqueuers are threads.
    queue = MemoryJobQueue(MemoryJobStore())
    barrier = threading.Barrier(PROCESSES)
    answers: list = []

    def enqueue() -> None:
        job = create_job(
            id=uuid.uuid4(), job_type="report", now=datetime.now(UTC), unique_key="k"
        ).unwrap()
        barrier.wait(timeout=30)
        answers.append((job.id, queue.enqueue_new(job)))

    threads = [threading.Thread(target=enqueue) for _ in range(PROCESSES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    written = [job_id for job_id, found in answers if found is None]
    assert len(written) == 1
    assert {found.id for _, found in answers if found is not None} == set(written)
