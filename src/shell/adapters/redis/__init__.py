"""Redis backend: a `JobQueue` (`RedisJobQueue`) and a `JobStore` (`RedisJobStore`) on
redis-py, one module per job of the port (see `queue` for how it works):

* `client`: connecting, the key names, the retry budget; `cluster`: Redis Cluster
  (seed nodes, the deployment's master); `replicas`: the replica wait of writes;
  `scripts`: loading the Lua scripts of `lua/`; `arguments`: what the scripts are
  given (times and job facts); `replies`: what they answer, as the ports' values;
* the queue's roles over one shared `base`: `enqueue`, `unique`, `claims`, `holder`
  (the claim holder's writes and the lease keeper's), `cancel`, `reads`;
* `limits` (limited claims), `store` (the `JobStore`), `async_queue` (enqueues for
  asyncio code);
* `sharded`, `sharded_store`, `shard_tags`: a deployment spread over several hash
  tags (`[redis] shards`), each call routed to its queue's shard.
"""

from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, check_server, connect
from .cluster import connect_cluster
from .queue import RedisJobQueue
from .replicas import ReplicaWait
from .store import RedisJobStore

__all__ = [
    "DEFAULT_RETRY_BUDGET_S",
    "RedisJobQueue",
    "RedisJobStore",
    "RedisKeys",
    "ReplicaWait",
    "check_server",
    "connect",
    "connect_cluster",
]
