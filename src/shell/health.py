"""The worker process's health: the watchdog's answer, served and acted on.

`ProcessHealth` reads the marks of the process's worker loops
(`conveyor.shell.worker.watch`) and asks the core's rule
(`conveyor.core.watchdog`) whether the process is live and whether it is ready to
claim. Nothing here waits on the job server, so the answer comes at once even while
a server connection hangs, which is the case it is for.

The answer is given three ways:

* `/healthz` and `/readyz` on the worker's metrics port (`conveyor worker
  --metrics-port P`, see `conveyor.shell.metrics.serve`): 200 or 503, with the
  reason as JSON, for Kubernetes' probes;
* the liveness mark a copy under `conveyor worker --processes N` keeps for its
  supervisor (`conveyor.shell.liveness`), which replaces a stalled copy;
* one WARNING in the log when the process stalls.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core import Health, StallPolicy, assess
from . import outage
from .liveness import LivenessMark

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("conveyor.worker")

#: The two paths, and whether each asks for liveness (else readiness).
PATHS = {"/healthz": True, "/readyz": False}
#: How often the watchdog's thread looks at the loops.
TICK_S = 0.2


class ProcessHealth:
    """The health of the worker loops of one runtime."""

    def __init__(
        self, runtime: Runtime, policy: StallPolicy, mark: LivenessMark | None = None
    ) -> None:
        self._runtime, self.policy, self._mark = runtime, policy, mark
        self._server = outage.for_queue(runtime.queue)
        self._told: str | None = None

    def now(self) -> Health:
        """The answer at this moment, from the loops' marks alone."""
        loops = [
            worker.watch.marks(stopping=worker.stopping)
            for pool in self._runtime.pools
            for worker in pool.workers
        ]
        return assess(self.policy, loops, time.monotonic(), server_down=self._server.down)

    def start(self) -> None:
        """Look every `TICK_S` from a daemon thread of its own, until the process
        exits: neither a main thread held up (a slow start, a long stop) nor a
        stalled loop keeps it from looking, and a stopped process stops it too."""
        self.tick()  # before the first claim: a supervisor's mark is made now

        def watch() -> None:
            while True:
                time.sleep(TICK_S)
                try:
                    self.tick()
                except Exception:
                    log.warning("the watchdog could not look at the workers", exc_info=True)

        threading.Thread(target=watch, name="conveyor-watchdog", daemon=True).start()

    def tick(self) -> Health:
        """Look once: keep the liveness mark fresh while live, report a stall to it
        and to the log once."""
        health = self.now()
        if health.live:
            if self._mark is not None:
                self._mark.touch()
            if self._told is not None:
                log.info("worker progresses again after: %s", self._told)
                self._told = None
            return health
        if self._told is None:
            self._told = health.reason
            log.warning(
                "worker %s %s; its claims return to the queue with their leases",
                self._runtime.worker_id,
                health.reason,
            )
        if self._mark is not None:
            self._mark.report(health.reason)
        return health


def health_app(
    health: Callable[[], Health], fallback: Callable[..., Iterable[bytes]]
) -> Callable[..., Iterable[bytes]]:
    """A WSGI app answering `/healthz` (live) and `/readyz` (ready to claim) from
    `health`, each 200 or 503 with `{"live", "ready", "reason"}` as JSON, and any
    other path from `fallback` (the metrics)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in PATHS:
            return fallback(environ, start_response)
        answer = health()
        ok = answer.live if PATHS[path] else answer.ready
        body = json.dumps(
            {"live": answer.live, "ready": answer.ready, "reason": answer.reason}
        ).encode()
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [body]

    return app
