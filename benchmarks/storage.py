"""Storage under retention: how big the store gets after many jobs, and after a prune.
Not part of the test run.

    python -m benchmarks.storage --backend sqlite                 # 100 000 jobs
    python -m benchmarks.storage --backend postgresql --jobs 20000
    python -m benchmarks.storage --backend postgresql --autovacuum-naptime 5
    python -m benchmarks.storage --backend redis --retention-ms 2000

It runs `--jobs` no-op jobs (enqueued `--batch` at a time, then drained) through a
fresh store with a short retention (`--retention-ms` for completed and dead records,
workers pruning every `--interval-ms`), and prints the storage before the run, every tenth
of the way, after it (workers pruned as they went) and after a final `Runtime.prune`:

* SQLite: the file size, and the bytes in use (pages minus the freelist; deleted
  rows leave free pages that later writes reuse, so the file itself shrinks only on
  VACUUM);
* PostgreSQL: `pg_total_relation_size` of the store and queue tables (dead tuples
  are reused after autovacuum; the size shrinks only on VACUUM FULL);
* Redis: `INFO memory` used_memory and DBSIZE.

PostgreSQL and Redis come from `DATABASE_URL` / `REDIS_URL`, or servers the test
helpers start (the dev extras).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor import build

Measure = Callable[[], dict[str, int]]


def _sqlite(folder: Path) -> tuple[dict[str, Any], Measure]:
    path = folder / "jobs.db"

    def measure() -> dict[str, int]:
        import sqlite3

        files = [path, path.with_name("jobs.db-wal")]
        size = sum(f.stat().st_size for f in files if f.exists())
        with sqlite3.connect(path) as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        return {"file_bytes": size, "used_bytes": (pages - free) * page_size}

    return {"provider": "db", "url": f"sqlite:///{path}"}, measure


def _postgresql(naptime_s: int | None) -> tuple[dict[str, Any], Measure]:
    import sqlalchemy as sa
    from conveyor.shell.adapters.sql.migration import create_tables
    from conveyor.testing.postgres_server import fresh_database

    url = fresh_database(prefix="conveyor_storage")
    engine = sa.create_engine(url)
    create_tables(engine)
    with engine.connect() as conn:
        if naptime_s is not None:  # a server-wide setting: needs a superuser
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(f"ALTER SYSTEM SET autovacuum_naptime = '{naptime_s}s'")
            conn.exec_driver_sql("SELECT pg_reload_conf()")
            time.sleep(0.5)
        naptime = conn.exec_driver_sql("SHOW autovacuum_naptime").scalar()
    print(f"  autovacuum_naptime = {naptime}")

    def measure() -> dict[str, int]:
        out = {}
        with engine.connect() as conn:
            for table in ("conveyor_job_store", "conveyor_job_queue"):
                size = conn.execute(
                    sa.text("SELECT pg_total_relation_size(to_regclass(:t))"), {"t": table}
                ).scalar()
                out[f"{table}_bytes"] = int(size or 0)
        return out

    return {"provider": "db", "url": url}, measure


def _redis() -> tuple[dict[str, Any], Measure]:
    import redis
    from conveyor.testing.redis_server import redis_url

    url = redis_url(14)
    client = redis.Redis.from_url(url)
    client.flushdb()

    def measure() -> dict[str, int]:
        return {
            "used_memory": int(client.info("memory")["used_memory"]),
            "dbsize": int(client.dbsize()),
        }

    return {"provider": "redis", "redis": {"url": url}}, measure


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["sqlite", "postgresql", "redis"], default="sqlite")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--retention-ms", type=int, default=1000)
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument(
        "--autovacuum-naptime",
        type=int,
        default=None,
        metavar="S",
        help="PostgreSQL: set the server's autovacuum_naptime (seconds) first",
    )
    args = p.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="conveyor-storage-"))
    try:
        if args.backend == "sqlite":
            backend, measure = _sqlite(folder)
        elif args.backend == "postgresql":
            backend, measure = _postgresql(args.autovacuum_naptime)
        else:
            backend, measure = _redis()
        config = {
            **backend,
            "entry_points": False,
            "workers": {"prefetch": 50},
            "retention": {
                "completed_ms": args.retention_ms,
                "dead_ms": args.retention_ms,
                "prune_interval_ms": args.interval_ms,
            },
        }
        runtime = build(config, handlers={"noop": lambda _: None})
        try:
            print(f"{args.backend}: {args.jobs} jobs, retention {args.retention_ms} ms")
            print(f"  before:        {measure()}")
            began = time.monotonic()
            # Ten readings along the way: flat means the later ones stop growing.
            every = max(args.batch, args.jobs // 10)
            for start in range(0, args.jobs, args.batch):
                count = min(args.batch, args.jobs - start)
                runtime.enqueue_many("noop", [{"i": start + i} for i in range(count)])
                runtime.drain()
                done = start + count
                if done % every == 0 and done < args.jobs:
                    print(f"  after {done:>7} jobs: {measure()}")
            print(f"  after the run: {measure()}  ({time.monotonic() - began:.1f} s)")
            time.sleep(args.retention_ms / 1000)
            gone = runtime.prune()
            print(f"  after prune:   {measure()}  ({gone} records pruned at the end)")
        finally:
            runtime.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
