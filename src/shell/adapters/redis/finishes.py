"""Waking the callers that wait for a job's outcome, on Redis.

A process that waits for a job (`Runtime.result`, once a first read found it
unfinished) registers the name of its inbox in `{base}:waiters:<id>`, then reads the
job again. Every script that writes a
record pushes the job's id and the record onto each inbox registered for that id
(`{base}:inbox:<name>`; `tell_waiters` in `lua/store_common.lua`). One thread per
store (per shard of a sharded one) blocks on the process's inbox with `BLPOP`, as an
idle worker blocks on its wake list, and hands what it pops to the store's
`FinishSignals`: a waiter settles without reading the record back.

Why a list rather than pub/sub: the server answers a blocked pop ahead of the
writer's own reply, so the waiting process hears of the finish as soon as the worker
that wrote it (a subscriber heard it 0.4 to 0.6 ms after the worker, in
`benchmarks.result_wait`); a record goes only to the processes that wait for it, not
to every process that waits for anything; and a message waits in the list while the
listener reconnects.

Registrations live as long as the waits. The listener renews those of every watched
id each `RENEW_S`; a final record takes its id's registrations with it; one a wait
left behind (it timed out, its process died) expires `WAITER_KEEP_MS` after its last
renewal, and an inbox nobody pops `INBOX_KEEP_MS` after its newest message. When a
registration could not be written, or the server may have lost some (a call failed:
it may have restarted), the listener writes every watched one again and then wakes
every waiter once to read its job.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from uuid import UUID

from ...outage import Backoff
from ..finish_signals import FinishSignals, FinishWatch
from .client import RedisKeys, log, text
from .cluster import Client, socket_timeout

#: The largest message (id, newline, record) that carries its record: a larger record
#: is announced by its id alone, and its waiter reads it. A message lives in the
#: server's memory until its listener pops it.
CARRIED_MAX_BYTES = 65_536
#: How long a registration outlives its last renewal, and how often a listener renews
#: the registrations of the ids its process still waits for.
WAITER_KEEP_MS = 60_000
RENEW_S = 20.0
#: How long an inbox outlives its newest message (its process stopped popping it).
INBOX_KEEP_MS = 60_000
#: How long a listener blocks before it looks whether anyone still waits.
_CHECK_S = 1.0
#: Registrations written per round trip.
_CHUNK = 1000
#: Waits between attempts after a failure: 0.05 s doubling to 1 s (`outage.Backoff`,
#: reckoned by the core), as a waiter's own reads pause.
_RECONNECT_S = (0.05, 1.0)


class FinishListener:
    """The inbox of one store in this process, and its listeners (see the module docs).

    `keys` are the store's, or each shard's for a sharded store: a job's id does not
    say which shard records it, so each wait is registered with every shard.
    """

    def __init__(self, client: Client, *keys: RedisKeys) -> None:
        self._client, self._keys = client, keys
        #: This inbox's name, fresh per listener; a store makes a listener per process
        #: (`pid`): a forked child has none of its parent's threads.
        self.name = uuid.uuid4().hex
        self.pid = os.getpid()
        self.signals = FinishSignals()
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._closed = False
        #: Registrations may be missing on the server: write them all again, then wake
        #: every waiter to read its job.
        self._lost = False
        self._renewed = time.monotonic()

    def watch(self, job_id: UUID) -> FinishWatch:
        """A watch on `job_id`, registered with the server before it is returned (so
        a record written after the caller's next read of the job reaches it); starts the
        listeners if they are not running. A registration that fails is left to the
        listeners: the caller reads and polls meanwhile, as through any outage."""
        watch = self.signals.watch(job_id)
        try:
            self._register([job_id])
        except Exception:
            log.debug("could not register a wait for job %s; retrying", job_id, exc_info=True)
            with self._lock:
                self._lost = True
        with self._lock:
            for keys in () if self._closed else self._keys:
                if keys.base not in self._threads:
                    thread = threading.Thread(
                        target=self._listen,
                        args=(keys,),
                        name="conveyor-redis-finishes",
                        daemon=True,
                    )
                    self._threads[keys.base] = thread
                    thread.start()
        return watch

    def close(self) -> None:
        """Stop the listeners (within `_CHECK_S`)."""
        with self._lock:
            self._closed = True

    def _register(self, job_ids: Sequence[UUID]) -> None:
        for at in range(0, len(job_ids), _CHUNK):
            with self._client.pipeline(transaction=False) as pipe:
                for keys in self._keys:
                    for job_id in job_ids[at : at + _CHUNK]:
                        waiters = keys.waiters(str(job_id))
                        pipe.sadd(waiters, self.name)
                        pipe.pexpire(waiters, WAITER_KEEP_MS)
                pipe.execute()

    def _done(self, keys: RedisKeys) -> bool:
        """Under no lock: whether the listener of `keys` is to stop; if so, it is
        forgotten (the next watch starts another, which pops what came meanwhile)."""
        with self._lock:
            if self._closed or not self.signals.watching:
                self._threads.pop(keys.base, None)
                return True
            return False

    def _keep_registered(self) -> None:
        """Renew the watched ids' registrations when due, or write them again when some
        may be lost (then every waiter reads its job once)."""
        with self._lock:
            lost = self._lost
            if not lost and time.monotonic() - self._renewed < RENEW_S:
                return
            self._lost, self._renewed = False, time.monotonic()
        try:
            self._register(self.signals.watched())
        except Exception:
            with self._lock:
                self._lost = True
            raise
        if lost:
            self.signals.announce_all()

    def _listen(self, keys: RedisKeys) -> None:
        inbox = keys.inbox(self.name)
        wait_s = _CHECK_S
        socket_s = socket_timeout(self._client, inbox)
        if socket_s:  # a pop the socket gives up on would drop its message
            wait_s = min(wait_s, socket_s / 2)
        away = Backoff(*_RECONNECT_S)
        while not self._done(keys):
            try:
                self._keep_registered()
                popped = self._client.blpop([inbox], timeout=wait_s)
                # One message a pop: the waiter woken runs at once, while this thread
                # blocks again (taking more in the same call would keep it busy).
                if popped is not None:
                    self.signals.announce_message(text(popped[1]))
                away.reset()
            except Exception:
                # Waiters fall back to their bounded polls until the listener is back.
                log.debug("the Redis finish listener failed; trying again", exc_info=True)
                with self._lock:
                    self._lost = True
                time.sleep(away.next())
