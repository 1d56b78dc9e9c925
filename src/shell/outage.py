"""Server outages: told once when the server goes, once when it is back.

A worker polls many times a second, and every thread that touches the server
(the claim loop, the heartbeat, the wake-up listener, the presence beat, the cron
ticker, the pruner) fails
on every call while PostgreSQL or Redis is down. Logging each failure with its
traceback buried the one fact that mattered under thousands of lines. So the
threads of one process that talk to one server share a `ConnectionState`: the
first failure that means "unreachable" logs one WARNING line (backend, where,
error, no traceback), later ones log at DEBUG, and the first success after it
logs one INFO line with how long the server was away. While it is away each
worker backs off (`Backoff`, capped) instead of spinning.

At start-up the same idea waits for the server (`until_reachable`) for a bounded
time, then fails with one line that says what to fix (`ServerUnreachable`).

Only errors that mean the server cannot be reached count (`is_outage`), and a server
that is up but refuses every write for want of memory (`refuses_writes`: Redis past
`maxmemory`), which waiting also fixes; a wrong password or a missing database is not
an outage, and any other exception is a bug that keeps its traceback (`Throttle`
limits how often one repeats).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from ..core import WriteRetryPolicy, write_retry_delay_s
from .redact import BackendError, one_line, redact
from .retrying import Retrier, failing_for_s

T = TypeVar("T")

log = logging.getLogger("conveyor.outage")

#: SQLSTATE classes of a connection that failed or a server going away or coming up:
#: 08 connection exception, 57P admin/crash shutdown and "cannot connect now".
_OUTAGE_SQLSTATES = ("08", "57P")
#: Connection failures that waiting will not fix.
_NOT_OUTAGES = ("authentication failed", "does not exist", "no password supplied")


def is_outage(exc: BaseException) -> bool:
    """True when `exc` means the server could not be reached (down, restarting,
    connection dropped or refused), as opposed to bad credentials or a bug.

    Only looks at driver modules already imported: an exception of a driver that
    was never loaded cannot be at hand.
    """
    redis = sys.modules.get("redis.exceptions")
    if redis is not None:
        # Wrong credentials arrive as a ConnectionError too; waiting will not fix them.
        if isinstance(exc, (redis.AuthenticationError, redis.AuthorizationError)):
            return False
        # And what a cluster answers while a master fails over (the adapters retry it).
        failing_over = (redis.ClusterDownError, redis.TryAgainError, redis.SlotNotCoveredError)
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, *failing_over)):
            return True
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)):
            return _driver_outage(exc.orig)
        return False
    return _driver_outage(exc) or isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror))


def refuses_writes(exc: BaseException) -> bool:
    """True when the server is up but refuses writes for want of memory: Redis past
    `maxmemory` under `noeviction` (docs/redis.md), which answers `OOM` to a command,
    and to a script at its first write."""
    redis = sys.modules.get("redis.exceptions")
    if redis is None or not isinstance(exc, redis.ResponseError):
        return False
    return isinstance(exc, redis.OutOfMemoryError) or "OOM command not allowed" in str(exc)


def is_trouble(exc: BaseException) -> bool:
    """An outage, or a server refusing writes: what a worker waits out, quietly."""
    return is_outage(exc) or refuses_writes(exc)


def _driver_outage(exc: BaseException | None) -> bool:
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    if any(phrase in str(exc) for phrase in _NOT_OUTAGES):
        return False
    state = getattr(exc, "sqlstate", None)
    return state is None or str(state).startswith(_OUTAGE_SQLSTATES)


def describe(exc: BaseException) -> str:
    """`Type: message` on one line, URL passwords masked."""
    return one_line(redact(f"{type(exc).__name__}: {exc}"))


#: A failure this soon after the server came back is most likely a pooled connection
#: opened before the outage: it is told only if the server stays away this long.
SETTLE_S = 5.0
#: A success this soon after an outage began is most likely a call sent before it (on
#: another thread) answering late: it does not end the outage.
IN_FLIGHT_S = 1.0


class ConnectionState:
    """Whether one server is reachable, as this process last saw it (thread-safe)."""

    def __init__(self, backend: str, where: str) -> None:
        self.backend, self.where = backend, where
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._failing_before = 0.0
        #: When the server was last seen back after an outage.
        self._back_at: float | None = None
        #: The present outage began while settling, and has not been told yet.
        self._quiet = False
        #: Outage failures noted so far: a round that met one proves nothing back.
        self.failures = 0

    @property
    def down(self) -> bool:
        """True between a failure that meant "unreachable" and the next success."""
        return self._down_since is not None

    def failed(self, exc: BaseException, *, detail: str | None = None) -> bool:
        """Note a failure. An outage is logged once (WARNING, one line) and True is
        returned; any other error is left to the caller (False). `detail` replaces
        the exception's text (when it must not be quoted).

        In the `SETTLE_S` after the server came back, a failure is a stale connection
        of the pool more often than a new outage: it is logged at DEBUG, and told as
        an outage only if the server is still away `SETTLE_S` later."""
        if not is_trouble(exc):
            return False
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            if self._down_since is None:
                # Reckoned from the first failed try of a call retried before it raised.
                self._down_since, self._failing_before = now, failing_for_s(exc)
                settling = self._back_at is not None and now - self._back_at < SETTLE_S
                self._quiet = settling
                tell = not settling
            elif self._quiet and now - self._down_since >= SETTLE_S:
                self._quiet, tell = False, True
            else:
                tell = False
        text = detail or describe(exc)
        if tell:
            what = "refuses writes" if refuses_writes(exc) else "is unreachable"
            log.warning(
                "%s at %s %s (%s); retrying quietly until it is back",
                self.backend,
                self.where,
                what,
                text,
            )
        else:
            log.debug("%s at %s is still unreachable (%s)", self.backend, self.where, text)
        return True

    def met(self, exc: BaseException) -> None:
        """Count a failure that its caller has handled and told itself (a write left to
        its lease): a round around it proves nothing back. The outage, if it lasts, is
        told by the next `failed`."""
        if is_trouble(exc):
            with self._lock:
                self.failures += 1

    def ok(self, failures: int | None = None) -> bool:
        """Note a success: logs once (INFO) that the server is back after an outage.
        `failures` (the count read before a round of several calls): a round during
        which an outage failure was noted, though it ended without raising (a write
        left to its lease), is no success (False)."""
        clean = failures is None or failures == self.failures
        if self._down_since is None:
            return clean
        with self._lock:
            if failures is not None and failures != self.failures:
                return False
            if self._down_since is not None and time.monotonic() - self._down_since < IN_FLIGHT_S:
                return True
            since, before, self._down_since = self._down_since, self._failing_before, None
            quiet, self._quiet = self._quiet, False
            if since is not None:
                self._back_at = time.monotonic()
        if since is not None and not quiet:
            away = time.monotonic() - since + before
            log.info("%s at %s is back after %.1f s", self.backend, self.where, away)
        return True


_STATES: dict[tuple[str, str], ConnectionState] = {}
_STATES_LOCK = threading.Lock()


def for_server(backend: str, where: str) -> ConnectionState:
    """This process's state of the server `backend` at `where` (one per server)."""
    with _STATES_LOCK:
        state = _STATES.get((backend, where))
        if state is None:
            state = _STATES[(backend, where)] = ConnectionState(backend, where)
        return state


#: The backend's name by SQLAlchemy dialect (or URL scheme), as messages show it.
DIALECTS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


def for_engine(engine: Any) -> ConnectionState:
    """The state of a SQLAlchemy engine's database server."""
    name = str(engine.dialect.name)
    return for_server(DIALECTS.get(name, name), engine.url.render_as_string(hide_password=True))


@runtime_checkable
class ReportsOutages(Protocol):
    """A queue with a thread of its own on its server (the SQL wake-up listener): it
    tells that thread's failures through the state it is handed."""

    def report_outages_to(self, watch: ConnectionState) -> None:
        """Tell the failures of the queue's own threads through `watch`."""
        ...


def for_queue(queue: object) -> ConnectionState:
    """The state of the server behind a queue (SQL engine, Redis client, or none). A
    queue with a thread of its own on that server (`ReportsOutages`) is handed the
    same state, so an outage is told once for the process."""
    engine = getattr(queue, "engine", None)
    if engine is not None and hasattr(engine, "dialect"):
        state = for_engine(engine)
        if isinstance(queue, ReportsOutages):
            queue.report_outages_to(state)
        return state
    client = getattr(queue, "_client", None)
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kw = pool.connection_kwargs
        where = kw.get("path") or f"{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}"
        return for_server("Redis", f"redis://{where}")
    manager = getattr(client, "nodes_manager", None)  # a Redis Cluster client
    if manager is not None:
        seeds = ",".join(sorted(node.name for node in manager.startup_nodes.values()))
        return for_server("Redis Cluster", f"redis://{seeds}")
    return for_server(type(queue).__name__, "this process")


@attrs.frozen(slots=True)
class Endpoint:
    """A backend's server as messages name it: `backend` ("PostgreSQL"), `where` (its
    URL, password masked), the config `key` that sets it, and the `secrets` to keep
    out of a driver's text (`conveyor.shell.endpoints.endpoint` reads one from a config)."""

    backend: str
    where: str
    key: str
    secrets: frozenset[str] = frozenset()


class ServerUnreachable(BackendError):
    """The queue's server could not be reached (within the start-up timeout, if one
    was given). The message is one line, names the config key, and holds no password."""

    def __init__(
        self, backend: str, where: str, key: str, detail: str, waited_s: float = 0.0
    ) -> None:
        waited = (
            f"; gave up after waiting {waited_s:.1f} s (startup_timeout_ms, or "
            "--startup-timeout, sets how long)"
            if waited_s > 0
            else ""
        )
        # A TLS handshake with a server that does not speak TLS hangs, then times out.
        tls = (
            " (it asks for TLS: a server without TLS never answers it; redis:// does not)"
            if where.startswith("rediss://")
            else ""
        )
        super().__init__(
            f"{backend} at {where} is unreachable ({detail}){waited}: start the server, "
            f"or fix `{key}` if it points at the wrong place{tls}"
        )

    @classmethod
    def of(cls, endpoint: Endpoint, exc: BaseException) -> ServerUnreachable:
        """The error for `exc`, an outage met while using the server at `endpoint`."""
        detail = one_line(redact(describe(exc), endpoint.secrets))
        return cls(endpoint.backend, endpoint.where, endpoint.key, detail)


class Backoff:
    """Capped exponential pauses: `first`, twice that, ... up to `cap` seconds, as the
    core's `write_retry_delay_s` reckons them (never giving up: a server that is away
    is waited for)."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.policy = WriteRetryPolicy(initial_s=first, max_s=cap, max_attempts=None)
        self._failures = 0

    def next(self) -> float:
        """The pause to take now; the following one is twice as long (capped)."""
        self._failures += 1
        pause = write_retry_delay_s(self.policy, self._failures, 0.0, 0.0)
        assert pause is not None  # no attempt limit, no deadline
        return pause

    def reset(self) -> None:
        self._failures = 0


def until_reachable(
    call: Callable[[], T],
    *,
    state: ConnectionState,
    key: str,
    timeout_s: float,
    is_down: Callable[[BaseException], bool] = is_outage,
    detail: Callable[[BaseException], str] = describe,
) -> T:
    """`call()`, tried again with capped backoff while it fails because the server is
    unreachable, for up to `timeout_s`; then `ServerUnreachable` naming `key`.
    `is_down` and `detail` classify and describe a failure (for a `call` whose
    errors were already rewritten to keep a password out)."""

    def told(exc: Exception, _: int, __: float) -> None:
        state.failed(_Outage(), detail=detail(exc))

    policy = WriteRetryPolicy(
        initial_s=0.1,
        max_s=5.0,
        max_attempts=None,
        give_up_after_s=timeout_s,
        last_try_at_deadline=True,
    )
    try:
        result = Retrier(policy, transient=is_down, on_retry=told).call(call)
    except Exception as exc:
        if not is_down(exc):
            raise
        error = ServerUnreachable(state.backend, state.where, key, detail(exc), timeout_s)
    else:
        state.ok()
        return result
    # Raised here, not in the handler, so the driver's message is not chained to it.
    raise error


class _Outage(ConnectionError):
    """Stands for a failure already classified as an outage."""


class Throttle:
    """Lets each distinct error through once per `interval_s` (per instance)."""

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._last: dict[tuple[str, str], float] = {}

    def first(self, exc: BaseException) -> bool:
        """True when `exc` (by type and message) was not let through in the interval."""
        key = (type(exc).__name__, str(exc))
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) > 100:
            self._last.clear()  # a bounded memory of errors; at worst one repeats early
        self._last[key] = now
        return True


def report(
    state: ConnectionState | None,
    bugs: Throttle,
    exc: BaseException,
    logger: logging.Logger,
    message: str,
    *args: object,
) -> None:
    """A background loop's failed round (a cron tick, a prune, a heartbeat): an outage
    is told once for the process through `state`, as the worker's claim loop tells
    it; any other error is logged with its traceback, once per `bugs` interval.
    Without a `state` (a store whose server is unknown) every error is the latter."""
    if state is not None and state.failed(exc):
        return
    if bugs.first(exc):
        logger.warning(message, *args, exc_info=exc)
    else:
        logger.debug(message + " (again: %r)", *args, exc)
