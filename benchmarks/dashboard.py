"""How fast each dashboard page answers with many jobs stored. Not part of the test run.

    python -m benchmarks.dashboard                      # SQLite, PostgreSQL and Redis
    python -m benchmarks.dashboard --backend redis --jobs 100000
    python -m benchmarks.dashboard --backend sqlite --requests 20

It stores `--jobs` jobs (by default 100 000: 60 % completed over the last hour,
10 % dead letters, 25 % ready on three queues at mixed priorities, 5 % scheduled),
then requests each page `--requests` times through Starlette's test client (in
process: no network, the page's reads and rendering only) and prints the median
and the slowest time per page.

PostgreSQL and Redis come from `DATABASE_URL` / `REDIS_URL`, or servers the test
helpers start (the dev extras).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import attrs
import conveyor
from conveyor.core import ErrorInfo, Job, JobStatus, create_job
from conveyor.shell.runtime import Runtime

QUEUES = ("default", "mail", "reports")
PRIORITIES = ("critical", "high", "normal", "low")
TYPES = ("send-email", "charge-card", "build-report")
TENANTS = ("acme", "globex", None)
BATCH = 2_000
#: The overview in a dashboard process that has not counted the hour yet (the chart
#: keeps settled minutes between refreshes; this row counts all sixty each time).
FIRST_LOAD = "overview, first load"


def _jobs(count: int, now: Any, rng: random.Random) -> dict[str, list[Job]]:
    """`count` jobs split into the four groups, finished ones spread over the hour."""
    made: dict[str, list[Job]] = {"completed": [], "failed": [], "ready": [], "scheduled": []}
    shares = [("completed", 0.60), ("failed", 0.10), ("ready", 0.25), ("scheduled", 0.05)]
    for group, share in shares:
        for _ in range(int(count * share)):
            job = create_job(
                id=uuid4(),
                job_type=rng.choice(TYPES),
                args={"to": f"user{rng.randrange(10**6)}@example.com", "n": rng.randrange(100)},
                queue=rng.choice(QUEUES),
                priority=rng.choice(PRIORITIES),
                tenant_id=rng.choice(TENANTS),
                now=now - timedelta(minutes=61),
                run_at=now + timedelta(hours=1) if group == "scheduled" else None,
            ).unwrap()
            if group in ("completed", "failed"):
                finished = now - timedelta(seconds=rng.uniform(0, 3600))
                job = attrs.evolve(
                    job,
                    status=JobStatus.COMPLETED if group == "completed" else JobStatus.FAILED,
                    attempt=1,
                    started_at=finished - timedelta(milliseconds=40),
                    finished_at=finished,
                    result={"ok": True} if group == "completed" else None,
                    last_error=None
                    if group == "completed"
                    else ErrorInfo("Permanent", "card declined", False, "Traceback ...\n"),
                )
            made[group].append(job)
    return made


def _record_all(runtime: Runtime, records: Sequence[Job]) -> None:
    """Write finished records in bulk: the store's public `record` is one write each."""
    store: Any = runtime.store
    if hasattr(store, "_db"):
        from conveyor.shell.adapters.sql.store import write_records

        db = store._db
        for start in range(0, len(records), BATCH):
            batch = records[start : start + BATCH]
            db.run(lambda conn, batch=batch: write_records(db, conn, batch))
    elif hasattr(store, "_record"):
        from conveyor.shell.adapters.redis.arguments import record_args

        # Redis: the record script, pipelined (the same script `record` runs).
        for start in range(0, len(records), BATCH):
            pipe = store._client.pipeline(transaction=False)
            for job in records[start : start + BATCH]:
                args = [store.keys.base, *record_args(job)]
                store._record(keys=store._anchor, args=args, client=pipe)
            pipe.execute()
    else:
        for job in records:
            store.record(job)


def _vacuum(runtime: Runtime) -> None:
    """What autovacuum does soon after a bulk load: until then PostgreSQL's index-only
    counts visit every row's heap page as well (the overview took about 270 ms then)."""
    import sqlalchemy as sa

    engine: Any = runtime.queue.engine
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("conveyor_job_queue", "conveyor_job_store"):
            conn.execute(sa.text(f"VACUUM ANALYZE {table}"))


def _config(backend: str, folder: Path) -> dict[str, Any]:
    if backend == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}"}
    if backend == "postgresql":
        from conveyor.shell.adapters.sql import make_engine
        from conveyor.shell.adapters.sql.migration import create_tables
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix="conveyor_dashboard")
        engine = make_engine(url)
        create_tables(engine)
        engine.dispose()
        return {"provider": "db", "url": url}
    if backend == "redis":
        import redis
        from conveyor.testing.redis_server import redis_url

        url = redis_url(14)
        redis.Redis.from_url(url).flushdb()
        return {"provider": "redis", "redis": {"url": url}}
    raise SystemExit(f"unknown backend {backend!r}")


def _pages(sample: dict[str, Job]) -> list[tuple[str, str]]:
    dead = sample["failed"]
    return [
        ("overview", "/"),
        (FIRST_LOAD, "/"),
        ("overview (live fragment)", "/live/overview"),
        ("jobs", "/jobs"),
        ("jobs, page 5", "/jobs?page=5"),
        ("jobs by queue and state", "/jobs?queue=mail&state=pending"),
        ("jobs completed, by tenant", "/jobs?state=completed&tenant=acme"),
        ("jobs completed, by type", "/jobs?state=completed&type=charge-card"),
        ("jobs completed, by queue", "/jobs?state=completed&queue=reports"),
        ("jobs by type, any state", "/jobs?type=charge-card"),
        ("job", f"/jobs/{dead.id}"),
        ("dead letters", "/dead"),
        ("dead letters by type", "/dead?type=charge-card"),
        ("dead letters by queue and type", "/dead?queue=mail&type=charge-card"),
        ("dead letters by type, page 5", "/dead?type=charge-card&page=5"),
        ("bulk confirmation", "/dead/confirm?action=retry&queue=mail"),
        ("bulk confirmation by type", "/dead/confirm?action=retry&type=charge-card"),
        ("workers", "/workers"),
        ("cron", "/cron"),
        ("healthz", "/healthz"),
    ]


def run(backend: str, jobs: int, requests: int) -> list[tuple[str, float, float]]:
    from conveyor.shell.dashboard.app import Dashboard
    from conveyor.shell.dashboard.rendering import SecurityHeaders
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    folder = Path(tempfile.mkdtemp(prefix="conveyor-dashboard-bench-"))
    config = _config(backend, folder)
    config["cron"] = [{"name": "nightly", "schedule": "30 2 * * *", "job_type": "send-email"}]
    runtime = conveyor.build(config)
    rng = random.Random(17)
    made = _jobs(jobs, runtime.clock.now(), rng)
    began = time.perf_counter()
    for group in ("ready", "scheduled"):
        for start in range(0, len(made[group]), BATCH):
            runtime.queue.enqueue_many(made[group][start : start + BATCH])
    _record_all(runtime, made["completed"] + made["failed"])
    if backend == "postgresql":
        _vacuum(runtime)
    stored = sum(len(v) for v in made.values())
    print(f"{backend}: stored {stored:,} jobs in {time.perf_counter() - began:.1f} s")
    # `create_app`, keeping hold of the dashboard to clear its chart's kept minutes.
    dashboard = Dashboard(runtime)
    client = TestClient(SecurityHeaders(Starlette(routes=dashboard.routes())))
    rows = []
    for name, path in _pages({"failed": made["failed"][0]}):
        client.get(path)  # warm: templates compiled, connections open
        took = []
        for _ in range(requests):
            if name == FIRST_LOAD:
                dashboard.chart.clear()
            start = time.perf_counter()
            answer = client.get(path)
            took.append((time.perf_counter() - start) * 1000)
            if answer.status_code != 200:
                raise SystemExit(f"{path}: HTTP {answer.status_code}")
        rows.append((name, statistics.median(took), max(took)))
    runtime.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument(
        "--backend", action="append", choices=["sqlite", "postgresql", "redis"], default=None
    )
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=10)
    args = p.parse_args(argv)
    show: Callable[[str], None] = print
    for backend in args.backend or ["sqlite", "postgresql", "redis"]:
        rows = run(backend, args.jobs, args.requests)
        show(f"\n{backend}, {args.jobs:,} jobs, median of {args.requests} requests")
        show(f"{'page':<32} {'median ms':>10} {'max ms':>8}")
        for name, median, worst in rows:
            show(f"{name:<32} {median:>10.1f} {worst:>8.1f}")
        show("")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
