"""In-memory backend: one process, thread-safe. For tests, scripts and demos.

Ready work is one FIFO per (queue, priority); a counter gives every enqueue its
sequence number, and claims follow the core's `ordering_key`. The scheduled set
is a dict swapped under the lock, so of two concurrent promoters only one moves
each job; due jobs are promoted in the core's `promotion_key` order, by every
claim of their queue. It cannot reclaim across processes (there are none to share with),
but it honours leases within its own process like the other backends.

One module per job of the port, each a part of `MemoryJobQueue` over the shared
state (`state`): adding work (`enqueue`), claiming (`claims`), claiming under limits
(`limited`), the holder's writes (`holder`), cancel and revive (`cancel`), reads for
status and lookup (`reads`); the store is `store`.
"""

from __future__ import annotations

from .queue import MemoryJobQueue
from .state import PROMOTE_PER_CLAIM
from .store import MemoryJobStore

__all__ = ["PROMOTE_PER_CLAIM", "MemoryJobQueue", "MemoryJobStore"]
