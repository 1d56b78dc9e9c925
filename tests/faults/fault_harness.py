"""The fault-test harness: a backend with its ledger, and worker processes to hurt.

The `site` fixture (conftest.py) is parametrized over SQLite, PostgreSQL and
Redis. Servers are real and start themselves (the shared test servers of
`conveyor.testing`); one that cannot start fails the test, never skips it. Each
test gets an empty backend, a fresh ledger file and helpers to enqueue through
the ledger, spawn `fault_worker.py` processes, kill them, drain with a clean
worker and compute the figures.
"""

from __future__ import annotations

import os
import queue as queue_module
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import redis
from conveyor.core import Job, create_job
from conveyor.shell.ports import QueueCounts
from fault_worker import JOB_TYPE, drain_until_empty, open_backend
from ledger import Figures, Ledger, figures

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "fault_worker.py"
BACKENDS = ("sqlite", "postgresql", "redis")
LEASE_MS = 1500
#: A Redis database of the shared test server used by nothing else.
REDIS_FAULT_DB = 11

_pg: dict[str, str] = {}


def postgres_database() -> str:
    """One database for this session's fault tests (emptied before each test)."""
    if "url" not in _pg:
        from conveyor.testing.postgres_server import fresh_database

        _pg["url"] = fresh_database(prefix="conveyor_faults")
    return _pg["url"]


def empty_backend(name: str, folder: Path) -> str:
    """The URL of an empty backend of kind `name`."""
    if name == "sqlite":
        return f"sqlite:///{folder / 'jobs.db'}"
    if name == "postgresql":
        import sqlalchemy as sa
        from conveyor.shell.adapters.sql import make_engine
        from conveyor.shell.adapters.sql.migration import create_tables
        from conveyor.shell.adapters.sql.schema import SCHEMA

        url = postgres_database()
        engine = make_engine(url)
        try:
            create_tables(engine)
            with engine.begin() as conn:
                tables = f"{SCHEMA.job_queue.name}, {SCHEMA.job_store.name}, {SCHEMA.edges.name}"
                conn.execute(sa.text(f"TRUNCATE {tables}"))
        finally:
            engine.dispose()
        return url
    if name == "redis":
        from conveyor.testing.redis_server import redis_url

        url = redis_url(REDIS_FAULT_DB)
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
        return url
    raise ValueError(name)


class WorkerProc:
    """One `fault_worker.py` process. stdout lines arrive on `lines`; stderr goes to
    a file beside the ledger (shown when a test fails)."""

    def __init__(
        self,
        site: Site,
        args: list[str],
        *,
        script: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.site = site
        self.log = site.folder / f"worker-{len(site.procs)}.log"
        self._log_file = self.log.open("wb")
        command = script or [sys.executable, str(WORKER_SCRIPT)]
        self.popen = subprocess.Popen(
            [*command, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.pid = self.popen.pid
        self.lines: queue_module.Queue[str] = queue_module.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        site.procs.append(self)

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout_s: float = 20) -> str:
        """The next stdout line starting with `prefix` (skipping others)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue_module.Empty:
                break
            if line.startswith(prefix):
                return line
        raise AssertionError(f"worker {self.pid} never printed {prefix!r}:\n{self.stderr()}")

    def ready(self) -> WorkerProc:
        self.expect("ready")
        return self

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, and count its claims as left by a dead worker."""
        self.site.dead.add(self.pid)
        if self.alive:
            self.popen.kill()
        self.popen.wait(10)
        self.site.ledger.died(self.pid)

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout_s: float = 30) -> int:
        try:
            code = self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running after {timeout_s}s:\n{self.stderr()}"
            ) from None
        self.site.ledger.died(self.pid)
        if code != 0:
            self.site.dead.add(self.pid)
        return code

    def stderr(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        if self.alive:
            self.popen.kill()
            self.popen.wait(10)
        self._log_file.close()


@dataclass
class Site:
    """A backend under test, its ledger, and the processes started against it."""

    name: str
    url: str
    folder: Path
    queue: Any
    store: Any
    ledger: Ledger
    procs: list[WorkerProc] = field(default_factory=list)
    dead: set[int] = field(default_factory=set)

    # ---- producing ----------------------------------------------------------

    def job(self, *, max_retries: int = 3, now: datetime | None = None, **args: Any) -> Job:
        job_id = uuid4()
        return create_job(
            id=job_id,
            job_type=JOB_TYPE,
            args={"key": str(job_id), **args},
            now=now or datetime.now(UTC),
            max_retries=max_retries,
        ).unwrap()

    def enqueue(self, job: Job, *, tries: int = 1, queue: Any = None) -> bool:
        """Enqueue through the ledger: each attempt is recorded before the call and its
        outcome after. Retries (same id, an upsert) up to `tries` times."""
        target = queue or self.queue
        for attempt in range(1, tries + 1):
            row = self.ledger.enqueue_attempt(str(job.id), attempt)
            try:
                target.enqueue(job)
            except Exception as exc:
                self.ledger.enqueue_outcome(row, exc)
                time.sleep(min(0.05 * attempt, 0.5))
                continue
            self.ledger.enqueue_outcome(row, None)
            return True
        return False

    def produce_in_background(
        self, n: int, *, pause_s: float = 0.005, tries: int = 20, **args: Any
    ) -> threading.Thread:
        """A producer thread enqueueing `n` jobs through the ledger while faults happen;
        each failed attempt is recorded and retried (same id) up to `tries` times."""

        def produce() -> None:
            for _ in range(n):
                self.enqueue(self.job(**args), tries=tries)
                time.sleep(pause_s)

        thread = threading.Thread(target=produce, daemon=True, name="producer")
        thread.start()
        return thread

    def produce(self, n: int, **args: Any) -> list[Job]:
        jobs = [self.job(**args) for _ in range(n)]
        for job in jobs:
            assert self.enqueue(job)
        return jobs

    def scheduled_jobs(self, n: int) -> list[Job]:
        """`n` jobs scheduled one second in the past (due, waiting for promotion)."""
        past = datetime.now(UTC) - timedelta(seconds=60)
        jobs = []
        for _ in range(n):
            job_id = uuid4()
            job = create_job(
                id=job_id,
                job_type=JOB_TYPE,
                args={"key": str(job_id)},
                now=past,
                run_at=past + timedelta(seconds=59),
            ).unwrap()
            jobs.append(job)
        return jobs

    def plant(self, payload: str | bytes) -> UUID:
        """Enqueue a carrier job, then overwrite its stored payload with `payload`, as a
        foreign producer, a corrupted disk or an attacker with write access would."""
        carrier = self.job()
        self.queue.enqueue(carrier)
        return self.overwrite(carrier.id, payload)

    def overwrite(self, job_id: UUID, payload: str | bytes) -> UUID:
        """Replace a queued job's stored payload (the SQL `payload` column, the Redis
        job hash's `body`) with `payload`, bypassing every check."""
        if self.name == "redis":
            from conveyor.shell.adapters.redis_queue import RedisKeys

            client = redis.Redis.from_url(self.url)
            client.hset(RedisKeys.for_prefix("conveyor").job(str(job_id)), "body", payload)
            client.close()
            return job_id
        import sqlalchemy as sa

        value = ":p"
        if isinstance(payload, bytes):
            # Raw bytes into the text column: SQLite takes them as they are; PostgreSQL
            # checks the encoding.
            value = "CAST(:p AS TEXT)" if self.name == "sqlite" else "convert_from(:p, 'UTF8')"
        with self.queue.engine.begin() as conn:
            conn.execute(
                sa.text(f"UPDATE conveyor_job_queue SET payload = {value} WHERE id = :id"),
                {"p": payload, "id": str(job_id)},
            )
        return job_id

    # ---- workers ------------------------------------------------------------

    def spawn(self, *extra: str, threads: int = 2, ready: bool = True, **flags: Any) -> WorkerProc:
        args = [
            "--backend",
            self.url,
            "--ledger",
            str(self.ledger.path),
            "--threads",
            str(threads),
            "--lease-ms",
            str(LEASE_MS),
        ]
        for key, value in flags.items():
            if value is not None:
                args += [f"--{key.replace('_', '-')}", str(value)]
        proc = WorkerProc(self, [*args, *extra])
        return proc.ready() if ready else proc

    def marker(self, name: str) -> str:
        return str(self.folder / f"failpoint-{name}")

    def drain(self, timeout_s: float = 30, **options: Any) -> None:
        """A clean worker (here, in this process) runs until the queue is empty."""
        emptied = drain_until_empty(
            self.queue, self.store, self.ledger, lease_ms=LEASE_MS, timeout_s=timeout_s, **options
        )
        assert emptied, f"the queue did not empty within {timeout_s}s: {self.counts()}"

    # ---- figures ------------------------------------------------------------

    def counts(self, name: str = "default") -> QueueCounts:
        return self.queue.counts(datetime.now(UTC)).get(name, QueueCounts())

    def figures(self, settled: Any = ()) -> Figures:
        result = figures(
            self.ledger, in_flight=self.counts().in_flight, dead_pids=self.dead, settled=settled
        )
        print(f"[{self.name}] {result.line()}")
        return result

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        for part in (self.queue, self.store):
            try:
                part.close()
            except Exception:
                pass


def make_site(name: str, folder: Path, url: str | None = None) -> Site:
    url = url or empty_backend(name, folder)
    queue, store = open_backend(url)
    return Site(name, url, folder, queue, store, Ledger(folder / "ledger.db"))


def wait_until(predicate: Any, *, timeout_s: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def cli_config(site: Site) -> str:
    """A `conveyor.toml` for the real CLI on this site, with the ledger handlers."""
    backend = (
        f'provider = "redis"\n[redis]\nurl = "{site.url}"\n'
        if site.name == "redis"
        else f'provider = "db"\nurl = "{site.url}"\n'
    )
    return (
        f'lease_ms = {LEASE_MS}\nhandlers = ["fault_worker:cli_handlers"]\n'
        "entry_points = false\n"
        f"{backend}"
        "[workers]\ncount = 2\npoll_interval_ms = 50\npromote_interval_ms = 200\n"
    )
