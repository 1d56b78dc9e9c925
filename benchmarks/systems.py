"""The systems under test, seen from the enqueuing side.

A `System` is one product on one backend in one worker configuration
("Huey on Redis, 4 threads"). Systems that differ only in the worker
configuration share their data (`Instance`): the same Redis database, SQLite
file or PostgreSQL database, emptied between measurements. Each system has two
instances: `main` (emptied before every measurement) and `deep` (filled once
with the large backlog for the depth figure, topped up after each round).

An instance enqueues one by one (`enqueue`), in bulk where the product offers a
bulk call (`enqueue_bulk`), empties itself (`reset`), and closes its client
connection (`close`) before server counters are read, so that nothing but the
workers touches the server while they run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from . import workers

Args = tuple[int, float]
CHUNK = 1000


# ---- the servers ---------------------------------------------------------------------


def libpq(url: str) -> str:
    """A libpq conninfo string from a SQLAlchemy URL (`postgresql+psycopg://...`)."""
    from sqlalchemy import make_url

    u = make_url(url)
    parts = [f"dbname={u.database}", f"user={u.username or 'postgres'}"]
    host = u.query.get("host") or u.host
    if host:
        parts.append(f"host={host if isinstance(host, str) else host[0]}")
    if u.port:
        parts.append(f"port={u.port}")
    if u.password:
        parts.append(f"password={u.password}")
    return " ".join(parts)


class Env:
    """The servers of one benchmark run: PostgreSQL, Redis and a scratch folder."""

    def __init__(self) -> None:
        from conveyor.testing.postgres_server import postgres_url
        from conveyor.testing.redis_server import RedisServer

        self.scratch = Path(tempfile.mkdtemp(prefix="conveyor-bench-"))
        self.pg_url = postgres_url()
        self.redis = RedisServer(extra_args=["--databases", "64"]).start()
        self._dbs = iter(range(1, 64))
        self.problems: dict[str, str] = {}

    def redis_url(self) -> tuple[str, int]:
        db = next(self._dbs)
        return f"redis://127.0.0.1:{self.redis.port}/{db}", db

    def redis_client(self, db: int = 0, *, decode: bool = False) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.redis.port, db=db, decode_responses=decode)

    def pg_database(self, prefix: str) -> str:
        from conveyor.testing.postgres_server import fresh_database

        return fresh_database(self.pg_url, prefix=prefix)

    def cleanup(self) -> None:
        self.redis.cleanup()
        shutil.rmtree(self.scratch, ignore_errors=True)


def pg_truncate_all(conninfo: str) -> None:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') "
            # Another session's temporary tables (a COPY's staging) cannot be truncated.
            "AND schemaname NOT LIKE 'pg\\_temp\\_%'"
        ).fetchall()
        if rows:
            conn.execute("TRUNCATE " + ", ".join(r[0] for r in rows) + " RESTART IDENTITY CASCADE")


def pg_snapshot(conninfo: str) -> dict[str, int]:
    """Commits, row changes and total relation size of one database, and the server's
    WAL position (bytes since 0/0), now."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        (wal,) = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
        ).fetchone()  # type: ignore[misc]
        commits, rollbacks = conn.execute(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()  # type: ignore[misc]
        ins, upd, dele, hot, size = conn.execute(
            "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), "
            "coalesce(sum(n_tup_del), 0), coalesce(sum(n_tup_hot_upd), 0), "
            "coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables"
        ).fetchone()  # type: ignore[misc]
    return {
        "commits": int(commits),
        "rollbacks": int(rollbacks),
        "ins": int(ins),
        "upd": int(upd),
        "del": int(dele),
        "hot": int(hot),
        "bytes": int(size),
        "wal": int(wal),
    }


def pg_checkpoint(conninfo: str) -> None:
    """Start the next WAL measurement right after a checkpoint, for every system alike:
    a checkpoint falling inside one measurement would charge it the full-page images of
    every page it touches next."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def pg_wait_idle(conninfo: str, timeout: float = 10.0) -> None:
    """Wait until no other backend is connected to this database (their stats are flushed)."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while time.monotonic() < deadline:
            n = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]  # type: ignore[index]
            if n == 0:
                return
            time.sleep(0.05)


_HARNESS_COMMANDS = frozenset(
    {"info", "flushdb", "flushall", "select", "ping", "config", "client", "hello", "dbsize"}
)


def redis_commands(client: Any) -> dict[str, int]:
    """Calls per command since server start (commands inside scripts included)."""
    stats = client.info("commandstats")
    out: dict[str, int] = {}
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_").lower()
        if name.split("|")[0] not in _HARNESS_COMMANDS:
            out[name] = int(value["calls"])
    return out


# ---- instances ---------------------------------------------------------------------


class Instance:
    """One product's data on one backend (see the module docstring)."""

    backend: str = ""
    redis_db: int | None = None
    conninfo: str | None = None
    bulk_label: str | None = None

    def __init__(self, env: Env, tag: str) -> None:
        self.env, self.tag = env, tag
        self.next_i = 0

    # the spec a worker process builds its worker from (without the worker options)
    def spec(self) -> dict[str, Any]:
        raise NotImplementedError

    def open(self) -> None: ...

    def close(self) -> None: ...

    def reset(self) -> None:
        raise NotImplementedError

    def enqueue(self, i: int, t: float) -> None:
        raise NotImplementedError

    def enqueue_bulk(self, items: Sequence[Args]) -> None:
        raise NotImplementedError

    def enqueue_each(self, items: Sequence[Args]) -> None:
        """Enqueue `items` one by one, each call ended before the next (the enqueue
        one-by-one figure); an async product awaits each on one running loop."""
        for i, t in items:
            self.enqueue(i, t)

    def fill(self, n: int) -> float:
        """Queue `n` more jobs as fast as the product allows; returns the seconds taken."""
        start = time.perf_counter()
        items = [(self.next_i + k, time.time()) for k in range(n)]
        self.next_i += n
        if self.bulk_label:
            for k in range(0, n, CHUNK):
                self.enqueue_bulk(items[k : k + CHUNK])
        else:
            for i, t in items:
                self.enqueue(i, t)
        return time.perf_counter() - start

    def snapshot(self) -> dict[str, int]:
        """Server counters, for the work-per-job figures."""
        if self.redis_db is not None:
            client = self.env.redis_client()
            try:
                cmds = redis_commands(client)
                cmds["__used_memory"] = int(client.info("memory")["used_memory"])
                return cmds
            finally:
                client.close()
        if self.conninfo is not None:
            return pg_snapshot(self.conninfo)
        return {}

    def checkpoint(self) -> None:
        """PostgreSQL: a checkpoint now, before a WAL measurement (see `pg_checkpoint`)."""
        if self.conninfo is not None:
            pg_checkpoint(self.conninfo)

    def settle(self) -> None:
        """After the workers are gone: wait until the server has their counters."""
        if self.conninfo is not None:
            pg_wait_idle(self.conninfo)

    def flush_redis(self) -> None:
        client = self.env.redis_client(self.redis_db or 0)
        try:
            client.flushdb()
        finally:
            client.close()


class ConveyorInstance(Instance):
    bulk_label = None

    def __init__(
        self,
        env: Env,
        tag: str,
        backend: str,
        handler: Callable[[Any], Any] = workers.conveyor_noop,
        **settings: Any,
    ) -> None:
        """`settings`: more config keys (`sqlite_synchronous="FULL"`)."""
        super().__init__(env, tag)
        self.backend = backend
        self.handler = handler
        self.rt: Any = None
        self.path: Path | None = None
        if backend == "memory":
            self.config: dict[str, Any] = {"provider": "memory"}
        elif backend == "sqlite":
            self.path = env.scratch / f"conveyor-{tag}" / "jobs.db"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.config = {"provider": "db", "url": f"sqlite:///{self.path}"}
        elif backend == "postgresql":
            url = env.pg_database(f"bench_conveyor_{tag}")
            self.conninfo = libpq(url)
            self.config = {"provider": "db", "url": url}
        else:
            url, self.redis_db = env.redis_url()
            self.config = {"provider": "redis", "redis": {"url": url}}
        self.config.update(settings)
        self.config["workers"] = {"queues": [workers.QUEUE]}
        if backend == "postgresql":
            from conveyor.shell.migrate import migrate

            migrate(self.config, env={})  # once per database, as a deploy runs it
        self.open()
        if hasattr(self.rt, "enqueue_many"):
            self.bulk_label = "Runtime.enqueue_many, 1,000 per call"
        elif backend in ("sqlite", "postgresql"):
            self.bulk_label = "Runtime.enqueue_in_tx, 1,000 per transaction"

    def spec(self) -> dict[str, Any]:
        return {"kind": "conveyor", "config": self.config}

    def open(self) -> None:
        if self.rt is None:
            self.rt = workers.conveyor_runtime(self.config, self.handler)

    def close(self) -> None:
        if self.rt is not None:
            self.rt.close()
            self.rt = None

    def reset(self) -> None:
        if self.backend == "memory":
            self.close()
        elif self.backend == "sqlite":
            self.close()
            assert self.path is not None
            shutil.rmtree(self.path.parent, ignore_errors=True)
            self.path.parent.mkdir(parents=True)
        elif self.backend == "postgresql":
            assert self.conninfo is not None
            pg_truncate_all(self.conninfo)
        else:
            self.flush_redis()
        self.open()

    def enqueue(self, i: int, t: float) -> None:
        self.rt.enqueue("noop", {"i": i, "t": t}, queue=workers.QUEUE)

    def enqueue_bulk(self, items: Sequence[Args]) -> None:
        if hasattr(self.rt, "enqueue_many"):
            self.rt.enqueue_many("noop", [{"i": i, "t": t} for i, t in items], queue=workers.QUEUE)
            return
        with self.rt.queue.engine.begin() as conn:
            for i, t in items:
                self.rt.enqueue_in_tx(conn, "noop", {"i": i, "t": t}, queue=workers.QUEUE)


class HueyInstance(Instance):
    def __init__(self, env: Env, tag: str, storage: str, synchronous: str | None = None) -> None:
        """`synchronous`: SQLite's setting where it is not Huey's default (FULL)."""
        super().__init__(env, tag)
        self.backend = storage
        if storage == "redis":
            url, self.redis_db = env.redis_url()
            self.base: dict[str, Any] = {"kind": "huey", "storage": "redis", "url": url}
        else:
            path = env.scratch / f"huey-{tag}.db"
            self.base = {"kind": "huey", "storage": "sqlite", "filename": str(path)}
            if synchronous is not None:
                self.base["synchronous"] = synchronous
        self.huey: Any = None
        self.task: Any = None
        self.open()

    def spec(self) -> dict[str, Any]:
        return dict(self.base)

    def open(self) -> None:
        if self.huey is None:
            self.huey, self.task = workers.make_huey(self.base)

    def close(self) -> None:
        if self.huey is not None:
            self.huey.storage.close()
            self.huey = self.task = None

    def reset(self) -> None:
        self.open()
        self.huey.flush()

    def enqueue(self, i: int, t: float) -> None:
        self.task(i, t)


class DramatiqInstance(Instance):
    backend = "redis"

    def __init__(self, env: Env, tag: str) -> None:
        super().__init__(env, tag)
        url, self.redis_db = env.redis_url()
        self.base = {"kind": "dramatiq", "url": url}
        self.broker: Any = None
        self.actor: Any = None
        self.open()

    def spec(self) -> dict[str, Any]:
        return dict(self.base)

    def open(self) -> None:
        if self.broker is None:
            self.broker, self.actor = workers.make_dramatiq(self.base)

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()
            self.broker.client.close()
            self.broker = self.actor = None

    def reset(self) -> None:
        self.flush_redis()

    def enqueue(self, i: int, t: float) -> None:
        self.actor.send(i, t)


class ProcrastinateInstance(Instance):
    backend = "postgresql"
    bulk_label = "batch_defer, 1,000 per call"

    def __init__(self, env: Env, tag: str) -> None:
        super().__init__(env, tag)
        self.conninfo = libpq(env.pg_database(f"bench_procrastinate_{tag}"))
        self.base = {"kind": "procrastinate", "conninfo": self.conninfo}
        self.app: Any = None
        self.task: Any = None
        self.open()
        self.app.schema_manager.apply_schema()

    def spec(self) -> dict[str, Any]:
        return dict(self.base)

    def open(self) -> None:
        if self.app is None:
            self.app, self.task = workers.make_procrastinate(self.base)
            self.app.open()

    def close(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = self.task = None

    def reset(self) -> None:
        assert self.conninfo is not None
        pg_truncate_all(self.conninfo)

    def enqueue(self, i: int, t: float) -> None:
        self.task.defer(i=i, t=t)

    def enqueue_bulk(self, items: Sequence[Args]) -> None:
        self.task.batch_defer(*({"i": i, "t": t} for i, t in items))


class PgqueuerInstance(Instance):
    backend = "postgresql"
    bulk_label = "enqueue(lists), 1,000 per call"

    def __init__(self, env: Env, tag: str) -> None:
        super().__init__(env, tag)
        self.conninfo = libpq(env.pg_database(f"bench_pgqueuer_{tag}"))
        self.base = {"kind": "pgqueuer", "conninfo": self.conninfo}
        asyncio.run(self._install())
        self.conn: Any = None
        self.queries: Any = None
        self.open()

    async def _install(self) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        assert self.conninfo is not None
        conn = await asyncpg.connect(**workers.asyncpg_params(self.conninfo))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    def spec(self) -> dict[str, Any]:
        return dict(self.base)

    def open(self) -> None:
        # Enqueues go through asyncpg, the driver of pgqueuer's README (its worker's
        # too), on one event loop kept open: each call runs its coroutine to the end,
        # as an awaiting caller would.
        if self.conn is None:
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            assert self.conninfo is not None
            self.loop = asyncio.new_event_loop()
            params = workers.asyncpg_params(self.conninfo)
            self.conn = self.loop.run_until_complete(asyncpg.connect(**params))
            self.queries = Queries(AsyncpgDriver(self.conn))

    def close(self) -> None:
        if self.conn is not None:
            self.loop.run_until_complete(self.conn.close())
            self.loop.close()
            self.conn = self.queries = None

    def reset(self) -> None:
        assert self.conninfo is not None
        pg_truncate_all(self.conninfo)

    def enqueue(self, i: int, t: float) -> None:
        payload = json.dumps({"i": i, "t": t}).encode()
        self.loop.run_until_complete(self.queries.enqueue("noop", payload, 0))

    def enqueue_bulk(self, items: Sequence[Args]) -> None:
        n = len(items)
        payloads = [json.dumps({"i": i, "t": t}).encode() for i, t in items]
        self.loop.run_until_complete(self.queries.enqueue(["noop"] * n, payloads, [0] * n))

    def enqueue_each(self, items: Sequence[Args]) -> None:
        async def each() -> None:
            for i, t in items:
                await self.queries.enqueue("noop", json.dumps({"i": i, "t": t}).encode(), 0)

        self.loop.run_until_complete(each())


# ---- systems -----------------------------------------------------------------------


@attrs.define
class System:
    """One product on one backend in one worker configuration."""

    name: str
    product: str
    backend: str
    variant: str
    group: str  # systems of one group share their instances
    make: Callable[[Env, str], Instance]
    options: dict[str, Any] = attrs.field(factory=dict)  # worker options for the spec
    phases: frozenset[str] = frozenset({"throughput", "latency", "depth"})
    main: Instance | None = None
    deep: Instance | None = None

    @property
    def is_conveyor(self) -> bool:
        return self.product == "Conveyor"

    def spec(self, instance: Instance, **extra: Any) -> dict[str, Any]:
        return {"system": self.name, **instance.spec(), **self.options, **extra}


#: The batched-claim setting (`workers.prefetch`) of Conveyor's tuned variants.
PREFETCH = 100
ALL_PHASES = frozenset({"throughput", "latency", "depth"})
THROUGHPUT_ONLY = frozenset({"throughput"})


def catalogue() -> list[System]:
    """Every system, Conveyor first. Variants beyond the default run in the throughput
    phase only (each peer's best configuration there)."""

    def conveyor(backend: str) -> Callable[[Env, str], Instance]:
        return lambda env, tag: ConveyorInstance(env, tag, backend)

    def huey(storage: str) -> Callable[[Env, str], Instance]:
        return lambda env, tag: HueyInstance(env, tag, storage)

    # SQLite at the faster durability setting: both products default to FULL (an
    # fsync per commit); NORMAL loses the last commits to a power loss.
    out_sqlite = [
        System(
            "conveyor-sqlite-normal",
            "Conveyor",
            "sqlite",
            "synchronous NORMAL",
            "conveyor-sqlite-normal",
            lambda env, tag: ConveyorInstance(env, tag, "sqlite", sqlite_synchronous="NORMAL"),
            {},
            THROUGHPUT_ONLY,
        ),
        System(
            "huey-sqlite-normal",
            "Huey",
            "sqlite",
            "1 thread, synchronous NORMAL",
            "huey-sqlite-normal",
            lambda env, tag: HueyInstance(env, tag, "sqlite", synchronous="NORMAL"),
            {"threads": 1},
            THROUGHPUT_ONLY,
        ),
    ]

    out = []
    for b in ("memory", "sqlite", "postgresql", "redis"):
        out.append(System(f"conveyor-{b}", "Conveyor", b, "default", f"conveyor-{b}", conveyor(b)))
        out.append(
            System(
                f"conveyor-{b}-prefetch{PREFETCH}",
                "Conveyor",
                b,
                f"prefetch {PREFETCH}",
                f"conveyor-{b}",
                conveyor(b),
                {"prefetch": PREFETCH},
                THROUGHPUT_ONLY,
            )
        )
    # The default before PostgreSQL's became two worker threads, for comparison.
    out.append(
        System(
            "conveyor-postgresql-1thread",
            "Conveyor",
            "postgresql",
            "1 thread",
            "conveyor-postgresql",
            conveyor("postgresql"),
            {"count": 1},
            THROUGHPUT_ONLY,
        )
    )
    out += [
        System(
            "huey-redis", "Huey", "redis", "1 thread", "huey-redis", huey("redis"), {"threads": 1}
        ),
        System(
            "huey-redis-4t",
            "Huey",
            "redis",
            "4 threads",
            "huey-redis",
            huey("redis"),
            {"threads": 4},
            THROUGHPUT_ONLY,
        ),
        System(
            "huey-sqlite",
            "Huey",
            "sqlite",
            "1 thread",
            "huey-sqlite",
            huey("sqlite"),
            {"threads": 1},
        ),
        System(
            "huey-sqlite-4t",
            "Huey",
            "sqlite",
            "4 threads",
            "huey-sqlite",
            huey("sqlite"),
            {"threads": 4},
            THROUGHPUT_ONLY,
        ),
        System(
            "dramatiq-redis",
            "Dramatiq",
            "redis",
            "8 threads, default",
            "dramatiq",
            lambda env, tag: DramatiqInstance(env, tag),
            {"threads": 8},
        ),
        System(
            "procrastinate-postgresql",
            "Procrastinate",
            "postgresql",
            "concurrency 1",
            "procrastinate",
            lambda env, tag: ProcrastinateInstance(env, tag),
            {"concurrency": 1},
        ),
        System(
            "procrastinate-postgresql-c10",
            "Procrastinate",
            "postgresql",
            "concurrency 10",
            "procrastinate",
            lambda env, tag: ProcrastinateInstance(env, tag),
            {"concurrency": 10},
            THROUGHPUT_ONLY,
        ),
        System(
            "pgqueuer-postgresql",
            "pgqueuer",
            "postgresql",
            "batch 10, default",
            "pgqueuer",
            lambda env, tag: PgqueuerInstance(env, tag),
            {"batch": 10},
        ),
        System(
            "pgqueuer-postgresql-b100",
            "pgqueuer",
            "postgresql",
            "batch 100",
            "pgqueuer",
            lambda env, tag: PgqueuerInstance(env, tag),
            {"batch": 100},
            THROUGHPUT_ONLY,
        ),
    ]
    return out + out_sqlite


def prepare(systems: list[System], env: Env, with_deep: bool) -> list[System]:
    """Create the instances; a system whose product cannot be set up is reported in
    `env.problems` and left out of the run, by name and with its error."""
    shared: dict[str, tuple[Instance, Instance | None]] = {}
    ready = []
    for s in systems:
        try:
            if s.group not in shared:
                main = s.make(env, "main")
                deep = s.make(env, "deep") if with_deep and "depth" in s.phases else None
                shared[s.group] = (main, deep)
            s.main, s.deep = shared[s.group]
        except Exception as exc:
            env.problems[s.name] = f"{type(exc).__name__}: {exc}"
            continue
        ready.append(s)
    return ready
