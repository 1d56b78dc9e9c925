"""Each system's worker, built inside a worker process (see `harness`).

`make_runner(spec)` connects, registers the no-op handler under the name
`noop`, and returns a function that runs the system's own worker loop until the
process is told to stop. The handler only calls `counting._hook`; the task and
actor functions live at module level here so that the enqueuing side, which
imports this module too, registers them under the same names.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from .counting import _hook

QUEUE = "bench"


# ---- the no-op handlers, one per calling convention --------------------------------


def conveyor_noop(args: Any) -> None:
    _hook(args["i"], args["t"])


def noop(i: int, t: float) -> None:
    """Huey task and Dramatiq actor body."""
    _hook(i, t)


async def noop_async(i: int, t: float) -> None:
    """Procrastinate task body (async: its best configuration for a no-op)."""
    _hook(i, t)


async def pgqueuer_noop(job: Any) -> None:
    doc = json.loads(job.payload)
    _hook(doc["i"], doc["t"])


# ---- Conveyor ----------------------------------------------------------------------


def conveyor_runtime(config: dict[str, Any], handler: Callable[[Any], Any] = conveyor_noop) -> Any:
    import conveyor

    return conveyor.build(config, handlers={"noop": handler}, env={})


def plain_noop(args: Any) -> None:
    """A handler that does nothing at all (for the in-process profile)."""


def _conveyor(spec: dict[str, Any]) -> Callable[[], None]:
    """Conveyor as `conveyor worker` runs it: `Runtime.start()`, one pool of one worker."""
    config = {**spec["config"], "workers": dict(spec["config"].get("workers", {}))}
    if "prefetch" in spec:
        config["workers"]["prefetch"] = spec["prefetch"]
    if "count" in spec:
        config["workers"]["count"] = spec["count"]
    rt = conveyor_runtime(config)
    prefill = spec.get("prefill", 0)
    for k in range(0, prefill, 1000):
        for i in range(k, min(k + 1000, prefill)):
            rt.enqueue("noop", {"i": i, "t": time.time()}, queue=QUEUE)
    plan = spec.get("inproc_latency")

    def run() -> None:
        if plan:
            # The memory backend lives in this process: enqueue from a second thread.
            def feed() -> None:
                time.sleep(plan["idle_s"])
                for i in range(plan["count"]):
                    rt.enqueue("noop", {"i": i, "t": time.time()}, queue=QUEUE)
                    time.sleep(plan["interval_s"])

            threading.Thread(target=feed, daemon=True).start()
        rt.start()
        threading.Event().wait()

    return run


# ---- Huey --------------------------------------------------------------------------


def make_huey(spec: dict[str, Any]) -> tuple[Any, Any]:
    """A Huey instance for `spec` and its `noop` task."""
    import huey

    if spec["storage"] == "redis":
        h = huey.RedisHuey(QUEUE, url=spec["url"])
    elif "synchronous" in spec:
        storage = _sqlite_storage(spec["synchronous"])
        h = huey.Huey(QUEUE, storage_class=storage, filename=spec["filename"])
    else:
        h = huey.SqliteHuey(QUEUE, filename=spec["filename"])
    return h, h.task(name="noop")(noop)


def _sqlite_storage(synchronous: str) -> Any:
    """Huey's SQLite storage with `PRAGMA synchronous` set on each connection: its own
    `fsync` option gives only FULL (True, and its default) or OFF (False)."""
    from huey.storage import SqliteStorage

    class Storage(SqliteStorage):  # type: ignore[misc]
        def _create_connection(self) -> Any:
            conn = super()._create_connection()
            conn.execute(f"pragma synchronous={synchronous}")
            return conn

    return Storage


def _huey(spec: dict[str, Any]) -> Callable[[], None]:
    h, _ = make_huey(spec)
    consumer = h.create_consumer(workers=spec["threads"], worker_type="thread", periodic=False)
    return consumer.run  # type: ignore[no-any-return]


# ---- Dramatiq ----------------------------------------------------------------------


def make_dramatiq(spec: dict[str, Any]) -> tuple[Any, Any]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=spec["url"])
    dramatiq.set_broker(broker)
    actor = dramatiq.actor(noop, actor_name="noop", queue_name=QUEUE, broker=broker, max_retries=0)
    return broker, actor


def _dramatiq(spec: dict[str, Any]) -> Callable[[], None]:
    import dramatiq

    broker, _ = make_dramatiq(spec)
    worker = dramatiq.Worker(broker, worker_threads=spec["threads"], queues={QUEUE})

    def run() -> None:
        worker.start()
        threading.Event().wait()

    return run


# ---- Procrastinate -----------------------------------------------------------------


def make_procrastinate(spec: dict[str, Any]) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=spec["conninfo"]))
    task = app.task(name="noop", queue=QUEUE)(noop_async)
    return app, task


def _procrastinate(spec: dict[str, Any]) -> Callable[[], None]:
    app, _ = make_procrastinate(spec)

    async def main() -> None:
        async with app.open_async():
            await app.run_worker_async(
                queues=[QUEUE], concurrency=spec["concurrency"], install_signal_handlers=False
            )

    return lambda: asyncio.run(main())


# ---- pgqueuer ----------------------------------------------------------------------


def asyncpg_params(conninfo: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a `key=value ...` libpq conninfo string."""
    names = {"dbname": "database"}
    pairs = (item.split("=", 1) for item in conninfo.split())
    return {names.get(key, key): value for key, value in pairs}


def _pgqueuer(spec: dict[str, Any]) -> Callable[[], None]:
    """pgqueuer as `pgq run module:factory --batch-size N` runs it: a factory that
    connects with asyncpg (its README's driver), its supervisor, and the event loop
    its CLI picks (uvloop when installed)."""
    from contextlib import asynccontextmanager
    from datetime import timedelta

    @asynccontextmanager
    async def factory() -> Any:
        import asyncpg
        from pgqueuer import PgQueuer
        from pgqueuer.db import AsyncpgDriver

        conn = await asyncpg.connect(**asyncpg_params(spec["conninfo"]))
        pgq = PgQueuer(AsyncpgDriver(conn))
        pgq.entrypoint("noop")(pgqueuer_noop)
        try:
            yield pgq
        finally:
            await conn.close()

    def run() -> None:
        from pgqueuer.adapters.cli import supervisor
        from pgqueuer.adapters.cli.cli import asyncio_run

        asyncio_run(
            supervisor.run(
                factory,
                batch_size=spec["batch"],
                dequeue_timeout=timedelta(seconds=30),  # the CLI's default
            )
        )

    return run


_KINDS: dict[str, Callable[[dict[str, Any]], Callable[[], None]]] = {
    "conveyor": _conveyor,
    "huey": _huey,
    "dramatiq": _dramatiq,
    "procrastinate": _procrastinate,
    "pgqueuer": _pgqueuer,
}


def make_runner(spec: dict[str, Any]) -> Callable[[], None]:
    return _KINDS[spec["kind"]](spec)
