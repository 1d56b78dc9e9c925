"""Holds each test to its tier markers while it runs (setup, call and teardown).

A test not marked `server` may not start PostgreSQL or Redis, nor reach one started
before it: the servers this process has cached are hidden from it and `DATABASE_URL`
and `REDIS_URL` are unset, so reaching one means starting one, and starting is
refused. A test not marked `subprocess` may not spawn a process (`fork`, `exec`, a
multiprocessing child), except the server a `server` test starts. A refusal raises
`TierViolation` where the test tried, and is also recorded, so the test fails even if
its code caught the error: the markers of `tiers.py` must then be made to see it.
"""

from __future__ import annotations

import _posixsubprocess
import multiprocessing.process
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from conveyor.testing import postgres_server, redis_server


class TierViolation(Exception):
    """A test started a server or a process that its markers do not allow."""


class Guard:
    """The refusals of one test, and what it is allowed."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.server = item.get_closest_marker("server") is not None
        self.subprocess = item.get_closest_marker("subprocess") is not None
        self.violations: list[str] = []
        self._starting_server = 0  # > 0 while a server test's server starts (it spawns)
        self._lock = threading.Lock()
        self._patches = pytest.MonkeyPatch()

    def start(self) -> None:
        self._patch(self._patches)

    def stop(self) -> None:
        self._patches.undo()

    def refuse(self, what: str) -> TierViolation:
        mark = "server" if "server" in what else "subprocess"
        message = (
            f"{self.item.nodeid} {what}, but is not marked `{mark}`: make tests/tiers.py "
            f"see it (a fixture that does it, or a backend parameter)"
        )
        with self._lock:
            self.violations.append(message)
        return TierViolation(message)

    def check(self) -> None:
        """Fail the current phase if anything was refused in it."""
        with self._lock:
            found, self.violations = self.violations, []
        if found:
            pytest.fail("\n".join(dict.fromkeys(found)), pytrace=False)

    # --- the patched entry points ------------------------------------------------

    def _spawning(self, module: Any, name: str) -> Callable[..., Any]:
        real = getattr(module, name)

        def spawn(*args: Any, **kwargs: Any) -> Any:
            if self._starting_server:
                return real(*args, **kwargs)
            raise self.refuse("spawns a process")

        # Named as what it stands in for, so pickle still finds it (`os.system` in a
        # hostile payload a test builds) and stores the real name.
        spawn.__module__, spawn.__qualname__ = module.__name__, name
        return spawn

    def _server_start(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def start(*args: Any, **kwargs: Any) -> Any:
            if not self.server:
                raise self.refuse("starts a PostgreSQL or Redis server")
            with self._lock:
                self._starting_server += 1
            try:
                return real(*args, **kwargs)
            finally:
                with self._lock:
                    self._starting_server -= 1

        return start

    def _patch(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(postgres_server, "_start", self._server_start(postgres_server._start))
        start = redis_server.RedisServer.start
        mp.setattr(redis_server.RedisServer, "start", self._server_start(start))
        fault_pg = sys.modules.get("fault_pg")  # the fault tests' own PostgreSQL
        if fault_pg is not None:
            mp.setattr(fault_pg.PgCluster, "start", self._server_start(fault_pg.PgCluster.start))
        if not self.server:
            mp.setattr(postgres_server, "_url", None)
            mp.setattr(redis_server, "_server", None)
            backends = sys.modules.get("backends")  # the backend sweep's cached database
            if backends is not None:
                mp.setattr(backends, "_pg", {})
            mp.delenv("DATABASE_URL", raising=False)
            mp.delenv("REDIS_URL", raising=False)
        if not self.subprocess:
            # subprocess keeps its own reference to fork_exec; multiprocessing looks it up.
            patched = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec")]
            spawns = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
            patched += [(os, name) for name in spawns]
            patched += [(multiprocessing.process.BaseProcess, "start")]
            for owner, name in patched:
                mp.setattr(owner, name, self._spawning(owner, name))
