"""The Redis `JobQueue`: the role classes composed into one adapter.

Theory of operation. A job lives in one hash, `{prefix}:job:<id>`, holding its
wire-format body and the few fields the scripts need to find it (`status`, `queue`,
`priority`, claim `token`, `locked_at`). Its id sits in exactly one structure, the
one `status` names: a ready list per (queue, priority), read from the head (FIFO);
the scheduled zset, scored by `run_at`; or the in-flight zset, scored by
`locked_at`. Every change that touches more than one key is one Lua script
(`lua/`), so the hash and the structures never disagree, and a crash of the caller
or of the server (replaying its AOF) finds each job in one place. The scripts hold
no policy: when to retry, reclaim or give up is decided by the core and arrives here
as a finished job, and what a job's partition, type or finish minute is arrives as a
fact computed from the core (`arguments`).

Every script is safe to send twice (see `client` for the retry budget): claims are
idempotent by a token chosen once per call, enqueues by a nonce, and every fenced
write answers a re-send of a write that already landed with the same 1 while
writing nothing more.

Queues with limits (fair shares, caps, rates) are claimed by `dequeue_limited`,
which keeps a per-partition index of their ready jobs; see `limits`.

All keys start with the hash tag `{prefix}`, so one deployment lands in one Redis
Cluster slot and a script may touch every key it derives. See `docs/redis.md`.
"""

from __future__ import annotations

from .cancel import Cancelling
from .claims import Claiming
from .enqueue import Enqueueing
from .holder import Holding
from .progress import ProgressNotes
from .reads import Reading
from .unique import UniqueEnqueueing
from .workflows import Workflows


class RedisJobQueue(
    Enqueueing,
    UniqueEnqueueing,
    Claiming,
    Holding,
    Cancelling,
    Reading,
    ProgressNotes,
    Workflows,
):
    """A `JobQueue` on Redis: ready lists, a scheduled zset and an in-flight zset.

    `client_or_url` is a `redis.Redis` or a `redis.RedisCluster` (see `cluster`;
    with `decode_responses=False`; it stays
    the caller's to close) or a URL for `connect`. `prefix` names the deployment;
    two queues with different prefixes share a server without seeing each other.
    `retry_budget_s` is how long one operation keeps retrying a dropped connection
    (give it a quarter of the lease; 0 = never retry). The server's settings are
    checked at construction and problems logged as warnings on the `conveyor.redis`
    logger.
    """
