"""Prometheus metrics for jobs, built on the lifecycle hooks.

    from conveyor.shell.metrics import instrument, serve

    runtime = conveyor.build(config, handlers=...)
    metrics = instrument(runtime)  # counters on runtime.hooks, depth read on scrape
    serve(metrics, port=9100)  # or expose prometheus_client's default registry yourself

`conveyor worker --metrics-port 9100` does both, and serves the watchdog's
`/healthz` and `/readyz` on the same port (`conveyor.shell.health`). The counters
and the histogram count what this process saw (its enqueues, the attempts its
workers finished); the depth gauges read the queue's shared figures on each
scrape, so every process reports the same depth. This module needs the `metrics` extra
(`prometheus_client`); `import conveyor` never loads it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    make_wsgi_app,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..core import PRIORITY_ORDER, ErrorInfo, Health, Job, JobStatus
from . import outage
from .health import health_app
from .ports import PriorityCounts, QueueCounts
from .retrying import answer_by

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("conveyor.metrics")

#: Job durations run from milliseconds to an hour: the client's default buckets stop at 10 s.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
)  # fmt: skip


#: The label a figure carries when the backend does not split it by priority.
UNSPLIT = ""
#: How long a scrape tries to read the queue counts while the server fails: well
#: inside a scraper's timeout (Prometheus: 10 s), so the counters are still served.
SCRAPE_READ_S = 2.0

_STATES = ("ready", "scheduled", "in_flight")


def _by_priority(counts: QueueCounts, state: str) -> list[tuple[str, int]]:
    """(priority label, figure) pairs for one state of one queue, adding up to its total.

    Each priority gets a series when the backend split this state; whatever it did not
    split (Redis' scheduled and in-flight sets, an adapter that leaves `by_priority`
    empty) goes to one series whose priority is empty.
    """
    total: int = getattr(counts, state)
    split: list[int | None] = [getattr(c, state) for c in counts.by_priority.values()]
    if None in split or (total and not split):
        return [(UNSPLIT, total)]
    zero = PriorityCounts(0, 0, 0)
    pairs = [
        (p.value, int(getattr(counts.by_priority.get(p, zero), state))) for p in PRIORITY_ORDER
    ]
    rest = total - sum(n for _, n in pairs)
    return [*pairs, (UNSPLIT, rest)] if rest else pairs


class _Depth(Collector):
    """Queue depth by priority, in flight and oldest ready age, read at each scrape."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        #: The last scrape could not read the counts for an outage, and said so.
        self._told = False

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "conveyor_queue_depth",
                "Jobs waiting in a queue, per priority: ready (due, unclaimed), scheduled "
                "(parked until due) or waiting (for the jobs it depends on; one series, "
                'priority=""); priority="" where the backend does not split a figure.',
                labels=["queue", "priority", "state"],
            ),
            GaugeMetricFamily(
                "conveyor_jobs_in_flight",
                "Jobs of a queue claimed by a worker and not yet finished, per priority; "
                'priority="" where the backend does not split them.',
                labels=["queue", "priority"],
            ),
            GaugeMetricFamily(
                "conveyor_queue_oldest_ready_age_seconds",
                "How long the oldest ready job of a queue has been due (0 when none is).",
                labels=["queue"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        # Names only: registering must not query the backend.
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        runtime = self._runtime
        now: datetime = runtime.clock.now()
        try:
            with answer_by(time.monotonic() + SCRAPE_READ_S):
                counts = runtime.queue.counts(now)
        except Exception as exc:
            # A scrape during an outage shows no depth rather than a wrong one. The
            # outage is told once (its workers tell it too), not a traceback a scrape;
            # the process's view of the server is the worker loops' to keep.
            if not outage.is_trouble(exc):
                log.warning("could not read queue counts for metrics", exc_info=True)
            elif not self._told:
                log.warning(
                    "could not read queue counts for metrics (%s); depth is left out "
                    "until the server answers", outage.describe(exc)
                )  # fmt: skip
            self._told = True
            return
        self._told = False
        depth, in_flight, oldest = self._families()
        # Configured queues show zeros when empty, so an alert on them has a series.
        for name in sorted(set(counts) | set(runtime.config.workers.queues)):
            c = counts.get(name) or QueueCounts()
            for state in _STATES:
                for priority, n in _by_priority(c, state):
                    if state == "in_flight":
                        in_flight.add_metric([name, priority], n)
                    else:
                        depth.add_metric([name, priority, state], n)
            # Jobs waiting for others have no priority lane: one series per queue.
            depth.add_metric([name, UNSPLIT, "waiting"], c.waiting)
            due = c.oldest_ready_at
            age = (now - due).total_seconds() if due is not None and c.ready else 0.0
            oldest.add_metric([name], max(0.0, age))
        yield from (depth, in_flight, oldest)


class JobMetrics:
    """The counters, histogram and depth gauges of one runtime, in one registry."""

    def __init__(self, runtime: Runtime, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self._clock = runtime.clock
        self.enqueued = Counter(
            "conveyor_jobs_enqueued",
            "Jobs this process enqueued (not those enqueued in a caller's transaction).",
            ["queue", "job_type"],
            registry=registry,
        )
        self.finished = Counter(
            "conveyor_jobs_finished",
            "Outcomes written by this process: succeeded, retried (a failed attempt that "
            "will run again), dead_lettered (any reason) or cancelled.",
            ["queue", "job_type", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "conveyor_job_duration_seconds",
            "How long each attempt this process finished took, from its start to its outcome.",
            ["queue", "job_type"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._depth = _Depth(runtime)
        registry.register(self._depth)
        hooks = runtime.hooks
        hooks.on_enqueued(self._on_enqueued)
        hooks.on_succeeded(self._on_succeeded)
        hooks.on_failed(self._on_failed)
        hooks.on_dead_lettered(self._on_dead_lettered)
        hooks.on_cancelled(self._on_cancelled)

    def _on_enqueued(self, job: Job) -> None:
        self.enqueued.labels(job.queue, job.job_type).inc()

    def _on_succeeded(self, job: Job) -> None:
        self.finished.labels(job.queue, job.job_type, "succeeded").inc()
        self._observe(job)

    def _on_failed(self, job: Job, _exc: BaseException | None) -> None:
        # A failed attempt that ends in a dead letter is counted by the dead-letter hook.
        if job.status is not JobStatus.FAILED:
            self.finished.labels(job.queue, job.job_type, "retried").inc()
        self._observe(job)

    def _on_dead_lettered(self, job: Job, _error: ErrorInfo) -> None:
        self.finished.labels(job.queue, job.job_type, "dead_lettered").inc()

    def _on_cancelled(self, job: Job) -> None:
        self.finished.labels(job.queue, job.job_type, "cancelled").inc()

    def _observe(self, job: Job) -> None:
        # From the record, so nothing is kept per job: a retry has no finished_at yet,
        # and its outcome was written a moment ago.
        if job.started_at is None:
            return
        end = job.finished_at or self._clock.now()
        seconds = max(0.0, (end - job.started_at).total_seconds())
        self.duration.labels(job.queue, job.job_type).observe(seconds)

    def close(self) -> None:
        """Remove these metrics from the registry (the hooks stay, counting unseen)."""
        for collector in (self.enqueued, self.finished, self.duration, self._depth):
            self.registry.unregister(collector)


def instrument(runtime: Runtime, registry: CollectorRegistry = REGISTRY) -> JobMetrics:
    """Count `runtime`'s enqueues and outcomes and report its queues' depth in
    `registry` (prometheus_client's default one unless given). Once per registry."""
    return JobMetrics(runtime, registry)


class MetricsServer:
    """A running `/metrics` endpoint; `close()` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server, self._thread = server, thread

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on (the real port when 0 was asked for)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _Quiet(WSGIRequestHandler):
    """No line on stderr per request: probes and scrapes come every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(
    metrics: JobMetrics,
    port: int,
    addr: str = "0.0.0.0",
    health: Callable[[], Health] | None = None,
) -> MetricsServer:
    """Serve `metrics.registry` at `http://addr:port/metrics` from a daemon thread;
    with `health` (`conveyor.shell.health.ProcessHealth.now`), `/healthz` and
    `/readyz` beside it."""
    if health is None:
        server, thread = start_http_server(port, addr=addr, registry=metrics.registry)
        return MetricsServer(server, thread)

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

    app = health_app(health, make_wsgi_app(metrics.registry))
    httpd = make_server(addr, port, app, Server, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="conveyor-metrics", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
