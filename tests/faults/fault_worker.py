"""A worker process for fault tests, and the pieces the tests reuse in-process.

    python tests/faults/fault_worker.py --backend URL --ledger PATH [options]

`URL` is a SQLAlchemy URL (`sqlite:///...`, `postgresql+psycopg://...`) or a
Redis URL (`redis://...`). The process builds a `WorkerPool` on it with a short
lease, handlers that write to the ledger, and the queue and store wrapped in a
proxy that records every claim and fenced write in the ledger and can crash the
process (`os._exit(9)`) once at a chosen failpoint. Production code is not
touched: the proxy only sits between the worker and the adapters.

Failpoints (each fires once per marker file, so a restarted process runs clean):

* `after-claim`       dequeue returned a claim; the job never reaches its handler
* `before-outcome`    the handler ran (its effect is committed); before the outcome
                      write: `queue.finish` (record + release in one atomic step, on
                      SQL and Redis), `store.record` or `queue.replace`
* `before-ack`        an outcome was written apart from the release (a retry's
                      `replace`, a dead letter's `store.record`); before `queue.ack`
* `after-finish`      the atomic finish returned; before anything else
* `before-reclaim`    the lease keeper read an abandoned claim; before `queue.reclaim`

Modes: `run` (until SIGTERM, then stop with `--grace`, exit 0 if clean else 3),
`drain` (until the queue is empty, exit 0; 1 on timeout) and `promote-loop`
(call `promote_due` in small batches until nothing is due, printing progress).

It prints `ready <pid>` as its workers start. `cli_handlers` gives the
same handlers to the real `conveyor worker` CLI (ledger path in
`CONVEYOR_FAULT_LEDGER`).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conveyor.core import LeasePolicy, Policies, RequeuePolicy, RetryPolicy
from conveyor.shell.ports import BadClaim, Claim
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker, WorkerPool
from ledger import Ledger

FAILPOINTS = (
    "after-claim",
    "before-outcome",
    "before-ack",
    "after-finish",
    "before-reclaim",
    "before-bad-finish",
    "after-bad-finish",
)
JOB_TYPE = "work"

log = logging.getLogger("fault_worker")


# ---- backends -------------------------------------------------------------------


#: The fault tests' spelling of a Redis Cluster: `redis+cluster://h:p,h:p/?replica_wait=N`
#: (the seed nodes, and the replicas each enqueue and outcome write waits for).
CLUSTER_SCHEME = "redis+cluster://"


def cluster_url(seeds: list[str], replica_wait: int = 0) -> str:
    """The `CLUSTER_SCHEME` URL of a cluster seeded by `seeds` (redis://host:port)."""
    nodes = ",".join(seed.removeprefix("redis://").rstrip("/") for seed in seeds)
    return f"{CLUSTER_SCHEME}{nodes}/?replica_wait={replica_wait}"


def open_backend(url: str) -> tuple[Any, Any]:
    """A (queue, store) pair for `url`: Redis for redis:// URLs, a Redis Cluster for
    `CLUSTER_SCHEME` ones, else the SQL backend (tables created if missing)."""
    if url.startswith(CLUSTER_SCHEME):
        from urllib.parse import parse_qs

        from conveyor.shell.adapters.redis_queue import (
            RedisJobQueue,
            RedisJobStore,
            ReplicaWait,
            connect_cluster,
        )

        nodes, _, query = url.removeprefix(CLUSTER_SCHEME).partition("/?")
        replicas = int(parse_qs(query).get("replica_wait", ["0"])[0])
        # Long enough to ride out a failover, short enough to tell a stuck one.
        wait = ReplicaWait(replicas=replicas, timeout_ms=2000)
        client = connect_cluster([f"redis://{node}" for node in nodes.split(",")])
        return (
            RedisJobQueue(client, replica_wait=wait),
            RedisJobStore(client, replica_wait=wait),
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        import redis
        from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore

        client = redis.Redis.from_url(url, decode_responses=False)
        return RedisJobQueue(client), RedisJobStore(client)
    from conveyor.shell.adapters.sql import SqlJobQueue, SqlJobStore, make_engine
    from conveyor.shell.adapters.sql.migration import create_tables

    engine = make_engine(url)
    create_tables(engine)
    return SqlJobQueue(engine), SqlJobStore(engine)


# ---- the proxy --------------------------------------------------------------------


class Failpoint:
    """Crash the process at `name`, once: the marker file is created atomically first,
    and a process that finds it already there carries on."""

    def __init__(self, name: str | None, marker: str | None) -> None:
        if name is not None and name not in FAILPOINTS:
            raise SystemExit(f"unknown failpoint {name!r}; use one of {FAILPOINTS}")
        if name is not None and marker is None:
            raise SystemExit("--failpoint needs --marker")
        self.name, self.marker = name, marker

    def hit(self, point: str) -> None:
        if point != self.name or self.marker is None:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{point} pid={os.getpid()} at={time.time()}\n".encode())
        os.close(fd)
        os._exit(9)


#: job id -> the token of the latest claim this process was handed (handlers read it).
TOKENS: dict[str, str] = {}


def _ids(claim: Claim | BadClaim) -> tuple[str, str]:
    job_id = claim.job_id if isinstance(claim, BadClaim) else str(claim.job.id)
    return claim.token, job_id


def _unwrapped(store: Any) -> Any:
    return store._inner if isinstance(store, FaultStore) else store


class FaultQueue:
    """A `JobQueue` proxy: records claims and fenced writes, fires failpoints. It
    offers exactly what the wrapped queue offers (atomic and batched finish
    included), so the worker takes the same path it would take without it."""

    def __init__(self, inner: Any, ledger: Ledger, failpoint: Failpoint) -> None:
        self._inner, self._ledger, self._fp = inner, ledger, failpoint
        if hasattr(inner, "wait_and_dequeue"):  # a claim taken with the wake-up, recorded
            self.wait_and_dequeue = self._wait_and_dequeue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _claimed(self, claim: Claim | BadClaim) -> None:
        token, job_id = _ids(claim)
        TOKENS[job_id] = token
        self._ledger.wrote(token, job_id, "claim", True)

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        claim = self._inner.dequeue(queue, now)
        if claim is not None:
            self._claimed(claim)
            self._fp.hit("after-claim")
        return claim

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> Any:
        claims = self._inner.dequeue_many(queue, now, limit)
        for claim in claims:
            self._claimed(claim)
        if claims:
            self._fp.hit("after-claim")
        return claims

    def _wait_and_dequeue(self, queue: str, now: datetime, limit: int, timeout_s: float) -> Any:
        claims = self._inner.wait_and_dequeue(queue, now, limit, timeout_s)
        for claim in claims:
            self._claimed(claim)
        if claims:
            self._fp.hit("after-claim")
        return claims

    def _fenced(self, op: str, claim: Claim | BadClaim, call: Callable[[], bool]) -> bool:
        try:
            ok = bool(call())
        except Exception:
            # Not a refusal: the backend could not be reached. Recorded apart ("ack!").
            self._ledger.wrote(*_ids(claim), op + "!", False)
            raise
        self._ledger.wrote(*_ids(claim), op, ok)
        return ok

    def finishes_with(self, store: Any) -> bool:
        return bool(self._inner.finishes_with(_unwrapped(store)))

    def finish(self, claim: Claim | BadClaim, record: Any, abandoned_before: Any = None) -> bool:
        self._fp.hit("before-outcome")
        if isinstance(claim, BadClaim):
            self._fp.hit("before-bad-finish")
        ok = self._fenced(
            "finish", claim, lambda: self._inner.finish(claim, record, abandoned_before)
        )
        self._fp.hit("after-finish")
        if isinstance(claim, BadClaim):
            self._fp.hit("after-bad-finish")
        return ok

    def start_claim(self, claim: Claim, now: datetime) -> Any:
        begun = self._inner.start_claim(claim, now)
        self._ledger.wrote(*_ids(claim), "start", begun is not None)
        if begun is not None:
            self._claimed(begun)
        return begun

    def finish_many(self, items: Any) -> Any:
        self._fp.hit("before-outcome")
        try:
            results = self._inner.finish_many(items)
        except Exception:
            for claim, _ in items:
                self._ledger.wrote(*_ids(claim), "finish!", False)
            raise
        for (claim, _), ok in zip(items, results, strict=True):
            self._ledger.wrote(*_ids(claim), "finish", bool(ok))
        self._fp.hit("after-finish")
        return results

    def ack(self, claim: Claim | BadClaim) -> bool:
        self._fp.hit("before-ack")
        return self._fenced("ack", claim, lambda: self._inner.ack(claim))

    def extend(self, claim: Claim, now: datetime) -> bool:
        return self._fenced("extend", claim, lambda: self._inner.extend(claim, now))

    def replace(self, claim: Claim, job: Any) -> bool:
        self._fp.hit("before-outcome")
        return self._fenced("replace", claim, lambda: self._inner.replace(claim, job))

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Any:
        found = self._inner.abandoned(cutoff, limit)
        self._ledger.wrote("", "", "scan", bool(found))
        return found

    def reclaim(self, claim: Claim, job: Any, cutoff: datetime) -> bool:
        self._fp.hit("before-reclaim")
        return self._fenced("reclaim", claim, lambda: self._inner.reclaim(claim, job, cutoff))


class FaultStore:
    """A `JobStore` proxy: fires `before-outcome` before a record is written."""

    def __init__(self, inner: Any, failpoint: Failpoint) -> None:
        self._inner, self._fp = inner, failpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record(self, job: Any) -> None:
        self._fp.hit("before-outcome")
        self._inner.record(job)


# ---- handlers ---------------------------------------------------------------------


def make_handlers(ledger: Ledger) -> dict[str, Callable[[Mapping[str, Any]], Any]]:
    """The `work` handler. Args: `key` (the job id, as the producer put it), and
    optionally `sleep_ms`, `slow_first` (sleep only on the first execution),
    `fail_first` (raise on the first execution), `poison` (kill the process, every
    time, right after recording the start)."""

    def work(args: Mapping[str, Any]) -> Any:
        key = str(args["key"])
        token = TOKENS.get(key, "")
        run = ledger.started(key, token)
        failed = False
        try:
            if args.get("poison"):
                os._exit(9)
            first = ledger.executions_of(key) == 1
            sleep_ms = int(args.get("sleep_ms", 0))
            if sleep_ms and (first or not args.get("slow_first")):
                time.sleep(sleep_ms / 1000)
            if args.get("fail_first") and first:
                failed = True
                raise RuntimeError("the first execution of this job fails")
            ledger.effect(key, token)
            return {"token": token, "pid": os.getpid()}
        finally:
            ledger.ended(run, failed=failed)

    return {JOB_TYPE: work}


def cli_handlers() -> dict[str, Callable[[Mapping[str, Any]], Any]]:
    """For `conveyor worker` (config `handlers = ["fault_worker:cli_handlers"]`)."""
    return make_handlers(Ledger(os.environ["CONVEYOR_FAULT_LEDGER"]))


# ---- building and draining --------------------------------------------------------


def policies(lease_ms: int, max_reclaims: int | None = None) -> Policies:
    return Policies(
        retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000),
        requeue=RequeuePolicy(requeue_delay_ms=100),
        lease=LeasePolicy(lease_ms=lease_ms, max_reclaims=max_reclaims),
    )


def worker_options(
    lease_ms: int,
    *,
    heartbeat_ms: int | None = None,
    max_reclaims: int | None = None,
    poll_ms: int = 50,
    promote_ms: int = 200,
    reclaim_ms: int | None = None,
    prefetch: int = 1,
) -> dict[str, Any]:
    return {
        "prefetch": prefetch,
        "policies": policies(lease_ms, max_reclaims),
        "poll_interval_ms": poll_ms,
        "promote_interval_ms": promote_ms,
        "reclaim_interval_ms": reclaim_ms,
        "heartbeat_interval_ms": heartbeat_ms,
    }


def pending(queue: Any, name: str = "default") -> int:
    """Ready + scheduled + in flight on queue `name`."""
    c = queue.counts(datetime.now(UTC)).get(name)
    return 0 if c is None else c.ready + c.scheduled + c.in_flight


def drain_until_empty(
    queue: Any,
    store: Any,
    ledger: Ledger,
    *,
    lease_ms: int,
    timeout_s: float,
    queue_name: str = "default",
    **options: Any,
) -> bool:
    """Run clean workers here (`threads` of them) until nothing is ready, scheduled or
    in flight, reclaiming what dead workers left once their leases run out. True if
    the queue emptied within `timeout_s`."""
    threads = int(options.pop("threads", 1))
    registry = Registry(make_handlers(ledger))
    proxy = FaultQueue(queue, ledger, Failpoint(None, None))
    deadline = time.monotonic() + timeout_s
    emptied = threading.Event()

    def loop() -> None:
        worker = Worker(
            proxy, store, registry, queue_name=queue_name, **worker_options(lease_ms, **options)
        )
        while time.monotonic() < deadline and not emptied.is_set():
            try:
                if worker.run_once():
                    continue
                if pending(queue, queue_name) == 0:
                    emptied.set()
                    return
            except Exception:
                log.warning("drain round failed; carrying on", exc_info=True)
            time.sleep(0.05)

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    return emptied.is_set()


# ---- the process ------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, help="SQLAlchemy or Redis URL")
    p.add_argument("--ledger", required=True)
    p.add_argument("--mode", choices=["run", "drain", "promote-loop"], default="run")
    p.add_argument("--queue", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lease-ms", type=int, default=1500)
    p.add_argument("--heartbeat-ms", type=int, default=None, help="huge = no heartbeats")
    p.add_argument("--max-reclaims", type=int, default=None)
    p.add_argument("--poll-ms", type=int, default=50)
    p.add_argument("--promote-ms", type=int, default=200)
    p.add_argument("--reclaim-ms", type=int, default=None)
    p.add_argument("--prefetch", type=int, default=1, help="claims per round trip")
    p.add_argument("--failpoint", choices=FAILPOINTS, default=None)
    p.add_argument("--marker", default=None, help="file that makes the failpoint fire once")
    p.add_argument("--grace", type=float, default=1.0, help="seconds, on SIGTERM")
    p.add_argument("--timeout", type=float, default=60.0, help="drain mode: give up after")
    p.add_argument("--promote-batch", type=int, default=10)
    p.add_argument("--log-level", default="WARNING")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=a.log_level.upper(), format=f"%(asctime)s {os.getpid()} %(levelname)s %(message)s"
    )

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1` dumps every thread's stack
    ledger = Ledger(a.ledger)
    inner_queue, inner_store = open_backend(a.backend)
    fp = Failpoint(a.failpoint, a.marker)
    queue, store = FaultQueue(inner_queue, ledger, fp), FaultStore(inner_store, fp)
    options = worker_options(
        a.lease_ms,
        heartbeat_ms=a.heartbeat_ms,
        max_reclaims=a.max_reclaims,
        poll_ms=a.poll_ms,
        promote_ms=a.promote_ms,
        reclaim_ms=a.reclaim_ms,
        prefetch=a.prefetch,
    )

    if a.mode == "promote-loop":
        print(f"ready {os.getpid()}", flush=True)
        total = 0
        while moved := inner_queue.promote_due(datetime.now(UTC), limit=a.promote_batch):
            total += moved
            print(f"promoted {total}", flush=True)
        print(f"done {total}", flush=True)
        return 0

    if a.mode == "drain":
        print(f"ready {os.getpid()}", flush=True)
        emptied = drain_until_empty(
            inner_queue,
            inner_store,
            ledger,
            lease_ms=a.lease_ms,
            timeout_s=a.timeout,
            queue_name=a.queue,
        )
        return 0 if emptied else 1

    pool = WorkerPool(
        queue,
        store,
        Registry(make_handlers(ledger)),
        worker_count=a.threads,
        queue_name=a.queue,
        **options,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # Ready before the workers start: a failpoint at the first claim may end the
    # process before this thread would print it after them (seen once under load).
    print(f"ready {os.getpid()}", flush=True)
    pool.start()
    while not stop.wait(0.1):
        pass
    clean = pool.stop(a.grace)
    return 0 if clean else 3


if __name__ == "__main__":
    sys.exit(main())
