"""The raw limit of each server, from the same client library the systems use.

* Redis (redis-py, one connection): PING and GET round trips/s, and pipelined GETs/s
  (1,000 per pipeline).
* PostgreSQL (psycopg, autocommit, synchronous_commit as the server has it): one-row
  `UPDATE ... RETURNING` commits/s on one connection, and on 4 connections at once.
* SQLite (the sqlite3 module, WAL, synchronous=NORMAL as Conveyor configures it):
  one-row `UPDATE ... RETURNING` commits/s.

A job that costs k round trips (or commits) cannot go faster than limit / k.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .systems import Env, libpq


def _rate(op: Callable[[], None], seconds: float, per_call: int = 1) -> float:
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            op()
        done += 50
        now = time.perf_counter()
        if now >= end:
            return done * per_call / (now - start)


def redis_limits(env: Env, seconds: float) -> dict[str, float]:
    client = env.redis_client(0)
    try:
        client.set("bench:limit", b"x" * 64)
        ping = _rate(client.ping, seconds)
        get = _rate(lambda: client.get("bench:limit"), seconds)
        pipe = client.pipeline(transaction=False)

        def batch() -> None:
            for _ in range(1000):
                pipe.get("bench:limit")
            pipe.execute()

        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            batch()
            n += 1000
        pipelined = n / (time.perf_counter() - start)
        client.delete("bench:limit")
    finally:
        client.close()
    return {"redis_ping_rt": ping, "redis_get_rt": get, "redis_pipelined_get": pipelined}


def _pg_worker(conninfo: str, row: int, seconds: float, out: list[float]) -> None:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        stmt = "UPDATE bench_limit SET n = n + 1 WHERE id = %s RETURNING n"

        def op() -> None:
            conn.execute(stmt, (row,), prepare=True).fetchone()

        out.append(_rate(op, seconds))


class PgLimit:
    """A one-table database for the commit limit."""

    def __init__(self, env: Env) -> None:
        import psycopg

        self.conninfo = libpq(env.pg_database("bench_limit"))
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench_limit (id int PRIMARY KEY, n bigint NOT NULL)")
            conn.execute("INSERT INTO bench_limit SELECT g, 0 FROM generate_series(1, 4) g")
            self.settings = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
            }

    def measure(self, seconds: float) -> dict[str, float]:
        one: list[float] = []
        _pg_worker(self.conninfo, 1, seconds, one)
        many: list[float] = []
        threads = [
            threading.Thread(target=_pg_worker, args=(self.conninfo, row, seconds, many))
            for row in range(1, 5)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"pg_update_commits_1": one[0], "pg_update_commits_4": sum(many)}


def sqlite_limit(folder: Path, seconds: float) -> dict[str, float]:
    path = folder / "limit.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, n INTEGER)")
        conn.execute("INSERT OR IGNORE INTO t VALUES (1, 0)")

        def op() -> None:
            conn.execute("UPDATE t SET n = n + 1 WHERE id = 1 RETURNING n").fetchone()

        return {"sqlite_update_commits": _rate(op, seconds)}
    finally:
        conn.close()


LIMIT_LABELS: dict[str, tuple[str, str]] = {
    "redis_ping_rt": ("Redis PING round trips/s, 1 connection", "ops/s"),
    "redis_get_rt": ("Redis GET round trips/s, 1 connection", "ops/s"),
    "redis_pipelined_get": ("Redis GETs/s pipelined (1,000 per pipeline)", "ops/s"),
    "pg_update_commits_1": (
        "PostgreSQL 1-row UPDATE\u2026RETURNING commits/s, 1 connection",
        "commits/s",
    ),
    "pg_update_commits_4": (
        "PostgreSQL 1-row UPDATE\u2026RETURNING commits/s, 4 connections",
        "commits/s",
    ),
    "sqlite_update_commits": (
        "SQLite 1-row UPDATE\u2026RETURNING commits/s (WAL, NORMAL)",
        "commits/s",
    ),
}


def measure_all(env: Env, pg: PgLimit, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out.update(redis_limits(env, seconds))
    out.update(pg.measure(seconds))
    out.update(sqlite_limit(env.scratch, seconds))
    return out
