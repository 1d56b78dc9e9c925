"""The watchdog in a worker process: `/healthz` and `/readyz` on the metrics port
answer 200 while the worker claims, and 503 with the reason once its server
connection freezes (a TCP proxy in front of a real server stops forwarding); the job
it held then is reclaimed by the lease path and completes elsewhere, once."""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import conveyor
import pytest
from backends import REDIS_TEST_DB
from conveyor.core import JobStatus, StallPolicy
from conveyor.shell.health import ProcessHealth
from conveyor.shell.metrics import instrument, serve
from frozen_proxy import FrozenProxy
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import make_url

pytestmark = pytest.mark.timeout(60)

LEASE_MS = 1000
#: Stalled after two leases without progress.
POLICY = StallPolicy(lease_ms=LEASE_MS, stall_leases=2)


def probe(base: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def wait_for(base: str, path: str, status: int, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        code, body = probe(base, path)
        if code == status:
            return body
        assert time.monotonic() < deadline, f"{path} still {code} {body} after {timeout_s} s"
        time.sleep(0.05)


def _proxied(url: str) -> tuple[FrozenProxy, str]:
    """A proxy in front of the server of `url`, and the URL that goes through it: TCP
    for Redis; for the test PostgreSQL, which listens on a Unix socket only, a socket
    of the proxy's own in a folder of its own."""
    if url.startswith("redis"):
        parts = urlsplit(url)
        proxy = FrozenProxy.tcp(parts.hostname or "127.0.0.1", parts.port or 6379)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return proxy, urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{proxy.port}"))
    made = make_url(url)
    folder, port = str(made.query["host"]), made.port or 5432
    mine = tempfile.mkdtemp(prefix="conveyor-proxy-")
    proxy = FrozenProxy.unix(f"{mine}/.s.PGSQL.{port}", f"{folder}/.s.PGSQL.{port}")
    through = made.update_query_dict({"host": mine}).render_as_string(hide_password=False)
    return proxy, through


class Frozen:
    """A worker runtime whose every server connection goes through `proxy`, with its
    health served beside its metrics; and `direct`, a runtime on the same jobs."""

    def __init__(self, backend: str) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs: list[str] = []
        self._cleanup = None
        if backend == "redis":
            from conveyor.testing.redis_server import redis_url

            url = redis_url(REDIS_TEST_DB)
            where = {"provider": "redis"}
            prefix = f"watchdog-{uuid.uuid4().hex[:8]}"
        else:
            from conveyor.testing.postgres_server import drop_database, fresh_database

            url = fresh_database(prefix="conveyor_watchdog")
            where = {"provider": "db", "auto_migrate": True}
            self._cleanup = lambda: drop_database(url)
        self.proxy, through = _proxied(url)

        def config(server_url: str) -> dict[str, Any]:
            at = (
                {"redis": {"url": server_url, "prefix": prefix}}
                if backend == "redis"
                else {"url": server_url}
            )
            return {
                **where,
                **at,
                "entry_points": False,
                "lease_ms": LEASE_MS,
                "workers": {"count": 1, "queues": ["default"], "poll_interval_ms": 50},
            }

        self.worker = conveyor.build(config(through), handlers={"hold": self.hold})
        self.direct = conveyor.build(config(url), handlers={"hold": self.record})
        self.health = ProcessHealth(self.worker, POLICY)
        metrics = instrument(self.worker, CollectorRegistry())
        self.server = serve(metrics, 0, "127.0.0.1", health=self.health.now)
        host, port = self.server.address
        self.base = f"http://{host}:{port}"

    def hold(self, args: Any, ctx: Any) -> None:
        """The frozen worker's handler: runs until the test lets it go."""
        self.started.set()
        self.release.wait(30)

    def record(self, args: Any, ctx: Any) -> None:
        self.runs.append(str(ctx.job_id))

    def close(self) -> None:
        self.release.set()
        self.proxy.thaw()
        self.worker.stop(2)
        self.server.close()
        self.worker.close()
        self.direct.close()
        self.proxy.close()
        if self._cleanup is not None:
            self._cleanup()


@pytest.fixture(params=["redis", "postgresql"])
def frozen(request: pytest.FixtureRequest) -> Iterator[Frozen]:
    made = Frozen(request.param)
    yield made
    made.close()


def test_health_and_readiness_answer_503_once_the_server_connection_freezes(
    frozen: Frozen,
) -> None:
    # Not started: live (nothing is stuck) but not ready to claim.
    code, body = probe(frozen.base, "/readyz")
    assert (code, body["live"], body["ready"]) == (503, True, False)
    frozen.worker.start()
    wait_for(frozen.base, "/readyz", 200, timeout_s=5)
    assert probe(frozen.base, "/healthz") == (
        200,
        {"live": True, "ready": True, "reason": "claiming"},
    )

    job = frozen.worker.enqueue("hold", {})
    assert frozen.started.wait(5), "the worker took the job"
    # Busy in a handler longer than the limit, its lease kept: live and ready throughout.
    busy_until = time.monotonic() + POLICY.limit_s + 1
    while time.monotonic() < busy_until:
        code, body = probe(frozen.base, "/healthz")
        assert code == 200, body
        time.sleep(0.2)
    assert probe(frozen.base, "/readyz")[0] == 200
    frozen.proxy.freeze()
    frozen_at = time.monotonic()
    body = wait_for(frozen.base, "/healthz", 503, timeout_s=POLICY.limit_s + 4)
    took = time.monotonic() - frozen_at
    # Not before the limit from the last renewal (at most a renewal interval before
    # the freeze), and soon after it.
    assert took >= POLICY.limit_s - LEASE_MS / 3000, took
    assert body["reason"].startswith("stalled: worker loop 0: no progress"), body
    code, ready = probe(frozen.base, "/readyz")
    assert (code, ready["ready"]) == (503, False)

    # The job it held goes back with its lease and completes elsewhere, once.
    deadline = time.monotonic() + 15
    while (view := frozen.direct.get(job.id)) is None or view.state is not JobStatus.COMPLETED:
        frozen.direct.drain(timeout_s=1)
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    assert frozen.runs == [str(job.id)]
