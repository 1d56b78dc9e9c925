"""The Redis backend's documented import path. The code lives in the package
`conveyor.shell.adapters.redis`, one module per job of the port; this module
re-exports its public names."""

from ..ports import BadClaim
from .redis import (
    DEFAULT_RETRY_BUDGET_S,
    RedisJobQueue,
    RedisJobStore,
    RedisKeys,
    ReplicaWait,
    check_server,
    connect,
    connect_cluster,
)

__all__ = [
    "DEFAULT_RETRY_BUDGET_S",
    "BadClaim",
    "RedisJobQueue",
    "RedisJobStore",
    "RedisKeys",
    "ReplicaWait",
    "check_server",
    "connect",
    "connect_cluster",
]
