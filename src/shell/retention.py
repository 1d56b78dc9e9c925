"""Pruning finished records, leader-free.

Every worker owns (or shares, within a process) a `Pruner` and calls `maybe_prune`
from its maintenance step. On its jittered interval it deletes one bounded batch of
records the `RetentionPolicy` lets go; while batches come back full it prunes again
about 50 ms later (an idle worker wakes for it) until the backlog is gone. Many
workers thus share the work without electing anyone, and because each deletion
re-checks its guards inside the store's atomic write, two pruners racing for one
record delete it once.

`prune_all` is what `conveyor prune` runs: batches until none is left.

Both hand each `PruneOrder` (the core's decision) to a `Prunes`: the runtime gives them
its executor, the one place writes happen; a store also qualifies, for tests.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import datetime
from typing import Protocol

from ..core import PruneOrder, RetentionPolicy, first_prune_at, next_prune_at, prune_order
from . import outage
from .ports import Jitter

log = logging.getLogger("conveyor.retention")


class Prunes(Protocol):
    """What carries out a prune order (`Executor.prune`, or a `JobStore` directly)."""

    def prune(self, order: PruneOrder) -> int: ...


class Pruner:
    """Deletes finished records past their retention, one batch per interval."""

    def __init__(
        self,
        executor: Prunes,
        policy: RetentionPolicy,
        *,
        jitter: Jitter = random.random,
        server: outage.ConnectionState | None = None,
    ) -> None:
        """`server` is the state of the store's server, shared with the process's other
        loops: an outage met while pruning is told once through it, not per prune."""
        self.executor = executor
        self.policy = policy
        self.jitter = jitter
        self.server = server
        self._bugs = outage.Throttle()
        self._next: datetime | None = None
        #: The worker that pruned last: the one an idle wait ends for (`next_at`).
        self._by: str | None = None
        # Workers of one process share a pruner: one of them prunes, the others go on.
        self._busy = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False when workers never prune (interval 0, or a policy that keeps all)."""
        return self.policy.interval_ms > 0 and not self.policy.keeps_everything

    def next_at(self, by: str | None = None) -> datetime | None:
        """When `maybe_prune` next prunes, for the worker `by` to wake for it (so a
        backlog goes a batch every 50 ms): the one that pruned last, or any before the
        first prune, so that the others sharing this pruner sleep on. None when it never
        prunes, has not planned its first prune yet, or is pruning now (it plans the
        next), and for every other worker."""
        if not self.enabled or self._busy.locked():
            return None
        if self._by is not None and by != self._by:
            return None
        return self._next

    def maybe_prune(self, now: datetime, by: str | None = None) -> int:
        """Prune one batch if this pruner's interval has come round; never raises (a
        failure is logged and tried again next interval). Returns how many went. `by`
        names the worker calling: the one that prunes is woken for the next batch."""
        if not self.enabled or not self._busy.acquire(blocking=False):
            return 0
        try:
            if self._next is None:
                self._next = first_prune_at(now, self.policy.interval_ms, self.jitter())
            if now < self._next:
                return 0
            self._by = by
            try:
                gone = self.prune_once(now)
            except Exception as exc:
                message = "pruning finished records failed; trying again later"
                outage.report(self.server, self._bugs, exc, log, message)
                gone = 0
            else:
                if self.server is not None:
                    self.server.ok()
            backlog = self.policy.batch > 0 and gone >= self.policy.batch
            self._next = next_prune_at(now, self.policy.interval_ms, self.jitter(), backlog=backlog)
            if gone:
                log.debug("pruned %d finished records", gone)
            return gone
        finally:
            self._busy.release()

    def prune_once(self, now: datetime) -> int:
        """One batch under the policy at `now`. Returns how many records went."""
        order = prune_order(self.policy, now)
        return 0 if order.is_empty else self.executor.prune(order)


def prune_all(executor: Prunes, order: PruneOrder) -> int:
    """Prune batch after batch until one comes back short. Returns how many went."""
    if order.is_empty or order.limit <= 0:
        return 0
    total = 0
    while True:
        gone = executor.prune(order)
        total += gone
        if gone < order.limit:
            return total
