"""Wake-ups for idle SQL workers: one listener per process and database.

An idle worker asks `wait_for_work(queue, timeout_s)` and sleeps until a job may be
ready. A connection per waiting thread would starve the pool (enqueues and claims
would time out waiting for one), so each process keeps one listener per database
URL, on a connection beside the engine's pool, and fans what it hears out to every
waiting thread through a `threading.Condition`.

* PostgreSQL: the listener `LISTEN`s on `NOTIFY_CHANNEL`, where a trigger announces
  every row that becomes ready with its queue name; a waiter wakes only for its own
  queue.
* SQLite has no notifications: while anyone waits, the listener reads
  `PRAGMA data_version` when the kernel reports a write to the database's files
  (`file_changes`, Linux) and at least every `SQLITE_WATCH_S`; it changes when another
  connection commits, and reading it touches no table. Any commit wakes every waiter.

The same listener wakes the callers that wait for a job's outcome
(`Runtime.result`, through `watch_finished`): on PostgreSQL a trigger on the store
announces each finished record's id on `FINISHED_CHANNEL`, with the record when it
fits in a notification, and only that job's watchers wake. On SQLite, after each
commit, the listener reads the finished records of every watched job in one query
(`SQLITE_FINISHED_CHUNK` ids at a time) and hands each watcher its record, instead of
waking every watcher to read its own.

Each waiting thread remembers the last announcement it saw, so one that came while
it was busy (between its empty claim and its wait) wakes it at once. The listener
ends, closing its connection, once no queue that waited through it is alive or open;
the next wait starts another.

The listener's failures are told through the process's view of the server when one is
given (`report_outages_to`); this module imports nothing of the layers above.

`sql.waiting.WaitingForWork` is the role of `SqlJobQueue` that waits here.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ....core import JobStatus
from ..finish_signals import FinishSignals, FinishWatch
from .file_changes import FileChanges
from .postgres_ddl import FINISHED_CHANNEL, NOTIFY_CHANNEL

__all__ = [
    "SQLITE_FINISHED_CHUNK",
    "SQLITE_WATCH_S",
    "ServerWatch",
    "Wakeups",
    "wakeups_for",
]

_log = logging.getLogger(__name__)

#: How often the SQLite listener looks for another connection's commit while anyone
#: waits, at the latest: where the kernel reports writes to the database's files
#: (`file_changes`), it looks as soon as one lands.
SQLITE_WATCH_S = 0.002
#: After a write whose commit `data_version` did not show yet (the WAL index is updated
#: just after the frames are written), the listener looks again this many times before
#: it goes back to waiting for the next write.
SQLITE_LOOKS_AFTER_WRITE = 4
#: The least time between two looks: on a database written thousands of times a
#: second, the looks (and the read of watched results each commit brings) stay at
#: 2,000 a second at most.
SQLITE_LOOK_GAP_S = 0.0005
#: How long the listener blocks before it looks whether anyone still uses it; shorter
#: on PostgreSQL, where it blocks on the server's socket and a closing user cannot wake
#: it: the close of its last user waits for it to end (its session gone on return).
_CHECK_S, _LISTEN_CHECK_S = 1.0, 0.1
#: How long the first wait or watch of a process waits for the listener it starts
#: to hear (LISTEN sent, SQLite's first look taken): a commit before that is missed.
READY_WAIT_S = 2.0
#: Waits between attempts to reconnect a listener whose connection broke.
_RECONNECT_S = (0.05, 5.0)
#: The announcement key under which SQLite's "something committed" is counted.
_ANY = ""
#: How many watched ids one read of finished records names (SQLite before 3.32 takes
#: at most 999 parameters in a statement).
SQLITE_FINISHED_CHUNK = 500
_FINAL = tuple(status.value for status in JobStatus if status.is_terminal)


class ServerWatch(Protocol):
    """The process's view of one server (`outage.ConnectionState` is one): `failed(exc)`
    notes a failure, tells it once if it means the server is unreachable, and says so."""

    def failed(self, exc: BaseException) -> bool:
        """True when `exc` was an outage, now told; False leaves the error to the caller."""
        ...


class Wakeups:
    """The wake-up listener of one database in this process (see the module docs)."""

    def __init__(self, sqlite: bool) -> None:
        self._sqlite = sqlite
        #: Where the listener's failures are told (None: it logs them itself).
        self._watch: ServerWatch | None = None
        self._cond = threading.Condition()
        self._heard: dict[str, int] = {}  # announcements per queue name (_ANY on SQLite)
        self._epoch = 0  # bumped when announcements may have been missed (reconnect)
        self._waiting = 0
        self._users: weakref.WeakSet[object] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._local = threading.local()
        #: The callers waiting for a job's outcome, by job id.
        self.finishes = FinishSignals()
        #: The store tables those callers' jobs are recorded in (SQLite reads them).
        self._store_tables: set[str] = set()

    def _mark(self, key: str) -> tuple[int, int]:
        return self._heard.get(key, 0), self._epoch

    def wait(self, user: object, engine: Engine, queue: str, timeout_s: float) -> bool:
        """Block until `queue` may have a ready job or `timeout_s` passes. True means
        "try a claim"; False that nothing was heard. `user` (the queue object) keeps
        the listener alive until it is closed or collected."""
        key = _ANY if self._sqlite else queue
        seen: dict[str, tuple[int, int]] = self._local.__dict__.setdefault("seen", {})
        with self._cond:
            self._users.add(user)
            self._start(engine)
            last = seen.get(key)
            current = self._mark(key)
            if last is not None and last != current:
                seen[key] = current
                return True
            self._waiting += 1
            self._cond.notify_all()  # a SQLite listener idles until someone waits
            try:
                woke = self._cond.wait_for(lambda: self._mark(key) != current, timeout_s)
            finally:
                self._waiting -= 1
            seen[key] = self._mark(key)
            return bool(woke)

    def watch_finished(
        self, user: object, engine: Engine, job_id: UUID, store_table: str
    ) -> FinishWatch:
        """A watch woken when `job_id`'s record may have been written in `store_table`
        (see the module docs); `user` (the store) keeps the listener alive as `wait`'s
        does."""
        with self._cond:
            self._store_tables.add(store_table)
            self._users.add(user)
            self._start(engine)
            watch = self.finishes.watch(job_id)
            self._cond.notify_all()  # a SQLite listener idles until someone waits
        return watch

    def _anyone_waits(self) -> bool:
        return bool(self._waiting) or self.finishes.watching

    def report_to(self, watch: ServerWatch) -> None:
        """Tell the listener's failures through `watch` from now on."""
        with self._cond:
            self._watch = watch

    def end_waits(self) -> None:
        """End every wait for work now waiting on this database in this process, as a
        missed announcement does: each returns True, "try a claim"."""
        self._announce(None)

    def leave(self, user: object) -> None:
        """`user` waits no more (its queue is closing). When it was the last, the
        listener ends before this returns, closing its connection."""
        with self._cond:
            self._users.discard(user)
            self._cond.notify_all()
            thread = self._thread if self._unused() else None
        if thread is not None and thread is not threading.current_thread():
            thread.join(_LISTEN_CHECK_S * 5)

    @property
    def listening(self) -> bool:
        """True while the listener thread runs (for tests and diagnostics)."""
        with self._cond:
            return self._thread is not None

    def _start(self, engine: Engine) -> None:
        if self._thread is not None:
            return
        run = self._watch_sqlite if self._sqlite else self._listen_postgres
        self._ready = ready = threading.Event()
        self._thread = threading.Thread(
            target=run, args=(engine,), name="conveyor-sql-wakeups", daemon=True
        )
        self._thread.start()
        # Under the lock, which the wait gives up: the listener takes it once ready.
        self._cond.wait_for(ready.is_set, READY_WAIT_S)

    def _heard_from(self) -> None:
        """The listener hears from now on, or has failed: a waiting start goes on."""
        with self._cond:
            self._ready.set()
            self._cond.notify_all()

    def _unused(self) -> bool:
        """Under the lock: no queue or store uses the listener, and nobody waits."""
        return not (self._users or self._anyone_waits())

    def _in_use(self) -> bool:
        """Under the lock: whether to keep going; if not, the thread is about to end."""
        if not self._unused():
            return True
        self._thread = None
        return False

    def _announce(self, keys: list[str] | None) -> None:
        with self._cond:
            if keys is None:
                self._epoch += 1
            else:
                for key in keys:
                    self._heard[key] = self._heard.get(key, 0) + 1
            self._cond.notify_all()

    def _watch_sqlite(self, engine: Engine) -> None:
        raw: PoolProxiedConnection | None = None
        pool = engine.pool.recreate()  # beside the engine's pool, configured the same
        changes = FileChanges.open(engine.url.database or "")
        try:
            raw = pool.connect()
            cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
            version = cursor.execute("PRAGMA data_version").fetchone()[0]
            self._heard_from()
            looks_left = 0  # quick looks after a write whose commit was not yet visible
            looked = 0.0
            while True:
                with self._cond:
                    while not self._anyone_waits():
                        if not self._in_use():
                            return
                        self._cond.wait(_CHECK_S)
                if changes is None:
                    time.sleep(SQLITE_WATCH_S)
                elif looks_left:
                    changes.written()
                    looks_left -= 1
                elif changes.wait(SQLITE_WATCH_S):
                    looks_left = SQLITE_LOOKS_AFTER_WRITE
                rest = SQLITE_LOOK_GAP_S - (time.monotonic() - looked)
                if rest > 0:
                    time.sleep(rest)
                looked = time.monotonic()
                now = cursor.execute("PRAGMA data_version").fetchone()[0]
                if now != version:
                    version, looks_left = now, 0
                    self._announce([_ANY])
                    self._announce_finished(cursor)
        except Exception:
            # Waiters fall back to their timeouts (polling); the next wait tries again.
            _log.warning("the SQLite wake-up watcher failed; idle workers poll", exc_info=True)
            self._heard_from()
            with self._cond:
                self._thread = None
        finally:
            if changes is not None:
                changes.close()
            if raw is not None:
                raw.invalidate()
            pool.dispose()

    def _announce_finished(self, cursor: Any) -> None:
        """After a commit on SQLite: hand each watcher whose job is now recorded
        finished its record, read with every other watched job's in one query."""
        watched = [str(job_id) for job_id in self.finishes.watched()]
        if not watched:
            return
        with self._cond:
            tables = sorted(self._store_tables)
        try:
            found = []
            for table in tables:
                for at in range(0, len(watched), SQLITE_FINISHED_CHUNK):
                    ids = watched[at : at + SQLITE_FINISHED_CHUNK]
                    found += cursor.execute(
                        f"SELECT id, payload FROM {table} WHERE status IN ({_marks(_FINAL)})"
                        f" AND id IN ({_marks(ids)})",
                        (*_FINAL, *ids),
                    ).fetchall()
        except Exception:
            # The records could not be read here: every watcher reads its own.
            _log.debug("reading the watched jobs' records failed", exc_info=True)
            self.finishes.announce_all()
            return
        for job_id, payload in found:
            self.finishes.announce(job_id, payload)

    def _listen_postgres(self, engine: Engine) -> None:
        try:
            self._listen_postgres_until_unused(engine)
        except Exception:
            # Failed outside a connection's life (which reconnects on its own): waiters
            # fall back to their timeouts, and the next wait starts a new listener.
            _log.warning(
                "the PostgreSQL wake-up listener stopped; the next wait starts it again",
                exc_info=True,
            )
            with self._cond:
                self._thread = None

    def _listen_postgres_until_unused(self, engine: Engine) -> None:
        pause = _RECONNECT_S[0]
        failing = False
        while True:
            pool = engine.pool.recreate()
            raw: PoolProxiedConnection | None = None
            # A listening session that ended (terminated, a pooler's recycling) is told
            # only if listening again fails too: the server may well be up.
            listening = False
            try:
                raw = pool.connect()
                listener: Any = raw.driver_connection
                listener.autocommit = True
                listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                listener.execute(f"LISTEN {FINISHED_CHANNEL}")
                self._heard_from()
                # Whatever was announced while nobody listened is lost: wake everyone.
                self._announce(None)
                self.finishes.announce_all()
                pause, failing, listening = _RECONNECT_S[0], False, True
                while True:
                    with self._cond:
                        if not self._in_use():
                            return
                    for note in listener.notifies(timeout=_LISTEN_CHECK_S):
                        if note.channel == FINISHED_CHANNEL:
                            self.finishes.announce_message(str(note.payload))
                        else:
                            self._announce([str(note.payload)])
            except Exception as exc:
                # Waiters fall back to their timeouts (polling) until the listener is back.
                # A server outage is told once for the process (with the workers' own
                # failures); anything else once per run of failures, with its traceback.
                with self._cond:
                    watch = self._watch
                self._heard_from()  # not ready, but a start waits no longer
                if listening:
                    _log.debug("the PostgreSQL wake-up listener's session ended", exc_info=True)
                else:
                    if watch is None or not watch.failed(exc):
                        _log.log(
                            logging.DEBUG if failing else logging.WARNING,
                            "the PostgreSQL wake-up listener failed; reconnecting",
                            exc_info=not failing,
                        )
                    failing = True
            finally:
                if raw is not None:
                    raw.invalidate()
                pool.dispose()
            with self._cond:
                # Until the reconnect, or until its last user leaves (whose close waits).
                self._cond.wait_for(self._unused, _RECONNECT_S[0] if listening else pause)
                if not self._in_use():
                    return
            if not listening:
                pause = min(pause * 2, _RECONNECT_S[1])


def _marks(values: Sequence[str]) -> str:
    return ", ".join("?" * len(values))


_REGISTRY: dict[str, Wakeups] = {}
_REGISTRY_LOCK = threading.Lock()


def wakeups_for(engine: Engine) -> Wakeups:
    """This process's listener for `engine`'s database (one per URL)."""
    url = engine.url.render_as_string(hide_password=False)
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(url)
        if found is None:
            found = _REGISTRY[url] = Wakeups(engine.dialect.name == "sqlite")
        return found
