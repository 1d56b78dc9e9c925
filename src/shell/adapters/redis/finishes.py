"""Waking the callers that wait for a job's outcome, on Redis: every script that writes
a record publishes its job's id and the record on `RedisKeys.finished()`, and one
subscriber per store in this process hands what it hears to the store's
`FinishSignals`, so a waiter settles without reading the record back.

The subscriber runs only while someone waits. Publishing costs the server nothing
per finish while nobody subscribes, and a message never lingers in the keyspace.
What is published while the subscriber is (re)connecting is lost, so each time its
subscription is confirmed it wakes every waiter to read its job again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any
from uuid import UUID

from ..finish_signals import FinishSignals, FinishWatch
from .client import log, text
from .cluster import Client

#: The largest message (id, newline, record) a finish publishes with its record: a
#: larger record is announced by its id alone, and its waiter reads it. Every process
#: that waits for any result hears every finish, so this bounds what one finish sends
#: to each of them.
CARRIED_MAX_BYTES = 65_536
#: How long the subscriber blocks before it looks whether anyone still waits.
_CHECK_S = 1.0
#: Waits between attempts to subscribe again after a failure.
_RECONNECT_S = (0.05, 5.0)


class FinishListener:
    """The subscriber of one store (see the module docs)."""

    def __init__(self, client: Client, *channels: str) -> None:
        # Several channels for a store of several shards: one subscriber hears them all.
        self._client, self._channels = client, channels
        self.signals = FinishSignals()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, job_id: UUID) -> FinishWatch:
        """A watch on `job_id`; starts the subscriber if it is not running."""
        watch = self.signals.watch(job_id)
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._listen, name="conveyor-redis-finishes", daemon=True
                )
                self._thread.start()
        return watch

    def close(self) -> None:
        """Stop the subscriber (within `_CHECK_S`)."""
        with self._lock:
            self._closed = True

    def _done(self) -> bool:
        """Under no lock: whether to stop; if so, the thread is about to end."""
        with self._lock:
            if self._closed or not self.signals.watching:
                self._thread = None
                return True
            return False

    def _listen(self) -> None:
        pause = _RECONNECT_S[0]
        while not self._done():
            pubsub: Any = None
            try:
                pubsub = self._client.pubsub()
                pubsub.subscribe(*self._channels)
                while True:
                    message = pubsub.get_message(timeout=_CHECK_S)
                    if message is None:
                        if self._done():
                            return
                        continue
                    if message["type"] == "subscribe":
                        # Subscribed: whatever was published before is lost to us.
                        self.signals.announce_all()
                        pause = _RECONNECT_S[0]
                    elif message["type"] == "message":
                        self.signals.announce_message(text(message["data"]))
            except Exception:
                # Waiters fall back to their bounded polls until the subscriber is back.
                log.debug("the Redis finish subscriber failed; resubscribing", exc_info=True)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
            time.sleep(pause)
            pause = min(pause * 2, _RECONNECT_S[1])
