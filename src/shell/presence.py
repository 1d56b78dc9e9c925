"""Worker presence: who is polling which queue, as seen by `conveyor status`.

Each worker process beats every few seconds (id, host, pid, queues, last
seen). A worker not seen for `ttl` is not live. A queue holding work with no
live poller is flagged, so a runtime that boots and processes nothing is
noticed instead of silently piling up jobs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:  # loaded by the SQL presence only: a Redis process never needs it
    import sqlalchemy as sa

#: At most this many running jobs' ids go in one heartbeat, to keep it small.
MAX_BEAT_JOBS = 100


@attrs.frozen(slots=True)
class WorkerInfo:
    """One worker process's last heartbeat."""

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    last_seen: datetime
    #: The ids of the jobs the process was running at that heartbeat.
    jobs: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "worker_id": self.worker_id,
                "host": self.host,
                "pid": self.pid,
                "queues": list(self.queues),
                "last_seen": self.last_seen.isoformat(),
                "jobs": list(self.jobs),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo | None:
        try:
            d = json.loads(text)
            return cls(
                str(d["worker_id"]),
                str(d["host"]),
                int(d["pid"]),
                tuple(str(q) for q in d["queues"]),
                datetime.fromisoformat(d["last_seen"]).astimezone(UTC),
                # A heartbeat from a version that did not send its jobs has none.
                tuple(str(j) for j in d.get("jobs", ())),
            )
        except (ValueError, KeyError, TypeError):
            return None


class Presence(Protocol):
    """Where worker heartbeats are kept (in the same backend as the jobs)."""

    def beat(self, info: WorkerInfo) -> None: ...

    def leave(self, worker_id: str) -> None: ...

    def live(self, now: datetime, ttl: timedelta) -> Sequence[WorkerInfo]: ...

    def forget(self, before: datetime) -> int:
        """Drop the entries last seen before `before` (processes that died without
        leaving); how many went."""
        ...


class MemoryPresence:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, WorkerInfo] = {}

    def beat(self, info: WorkerInfo) -> None:
        with self._lock:
            self._workers[info.worker_id] = info

    def leave(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def live(self, now: datetime, ttl: timedelta) -> Sequence[WorkerInfo]:
        with self._lock:
            return [w for w in self._workers.values() if w.last_seen >= now - ttl]

    def forget(self, before: datetime) -> int:
        with self._lock:
            gone = [k for k, w in self._workers.items() if w.last_seen < before]
            for worker_id in gone:
                del self._workers[worker_id]
            return len(gone)


def __getattr__(name: str) -> Any:
    # `WORKERS`, the heartbeat table (`conveyor_workers`, part of the SQL schema
    # `conveyor migrate` makes), is built on first use, with SQLAlchemy.
    if name == "WORKERS":
        return _workers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _workers() -> sa.Table:
    from .adapters.sql.schema import SCHEMA

    return SCHEMA.workers


def _us(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000)


class SqlPresence:
    """Heartbeats in a `conveyor_workers` table beside the job tables. It runs no DDL:
    the table comes with the schema (`adapters.sql.migration.migrate`)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def _reading(self) -> sa.Connection:
        """A connection for reads only: on SQLite it must not take the write lock, so
        `conveyor status` answers while a writer holds it."""
        from .adapters.sql.engine import SQLITE_BEGIN_OPTION

        conn = self.engine.connect()
        return conn.execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})

    def beat(self, info: WorkerInfo) -> None:
        workers = _workers()
        with self.engine.begin() as conn:
            updated = conn.execute(
                workers.update()
                .where(workers.c.worker_id == info.worker_id)
                .values(last_seen_us=_us(info.last_seen), info=info.to_json())
            )
            if updated.rowcount == 0:
                conn.execute(
                    workers.insert().values(
                        worker_id=info.worker_id,
                        last_seen_us=_us(info.last_seen),
                        info=info.to_json(),
                    )
                )

    def leave(self, worker_id: str) -> None:
        workers = _workers()
        with self.engine.begin() as conn:
            conn.execute(workers.delete().where(workers.c.worker_id == worker_id))

    def live(self, now: datetime, ttl: timedelta) -> Sequence[WorkerInfo]:
        import sqlalchemy as sa

        workers = _workers()
        with self._reading() as conn:
            rows = conn.execute(
                sa.select(workers.c.info).where(workers.c.last_seen_us >= _us(now - ttl))
            ).all()
        return [w for (text,) in rows if (w := WorkerInfo.from_json(text)) is not None]

    def forget(self, before: datetime) -> int:
        workers = _workers()
        with self.engine.begin() as conn:
            gone = conn.execute(workers.delete().where(workers.c.last_seen_us < _us(before)))
            return int(gone.rowcount or 0)


class RedisPresence:
    """Heartbeats in one hash, `<prefix>:workers`, field per worker."""

    def __init__(self, client: Any, prefix: str = "conveyor", *, owns_client: bool = False) -> None:
        """`owns_client`: `close` closes `client` (the runtime's, shared by its queue
        and store, which close only clients they made themselves)."""
        self.client = client
        self.key = f"{{{prefix}}}:workers"
        self._owns_client = owns_client

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def beat(self, info: WorkerInfo) -> None:
        self.client.hset(self.key, info.worker_id, info.to_json())

    def leave(self, worker_id: str) -> None:
        self.client.hdel(self.key, worker_id)

    def live(self, now: datetime, ttl: timedelta) -> Sequence[WorkerInfo]:
        found = []
        for text in self.client.hvals(self.key):
            info = WorkerInfo.from_json(text)
            if info is not None and info.last_seen >= now - ttl:
                found.append(info)
        return found

    def forget(self, before: datetime) -> int:
        gone = []
        for field, text in self.client.hgetall(self.key).items():
            info = WorkerInfo.from_json(text)
            if info is None or info.last_seen < before:
                gone.append(field)
        return int(self.client.hdel(self.key, *gone)) if gone else 0
