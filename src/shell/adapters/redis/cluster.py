"""Redis Cluster: connecting through seed nodes, and finding the one node that holds a
deployment.

Every key of a deployment carries the hash tag `{prefix}` (see `RedisKeys`), so all of
them live in one slot, served by one master: each script, pipeline and read routes by
its keys to that master, and redis-py's `RedisCluster` follows the slot when a
failover moves it. What needs one node's own connection (the server check, the
socket timeout, WAIT after a write) asks `node_client` for the master of the
deployment's slot. See `docs/redis.md`, "Redis Cluster".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

#: A client of one server or of a cluster: both take the same commands, scripts and
#: pipelines for keys of one slot.
Client = redis.Redis | RedisCluster

#: The most connections a client made here opens to one server: as many as a server
#: accepts by default (`maxclients`). redis-py 8 caps a pool at 100, fewer than one
#: process can hold at once: each idle worker blocks on a connection of its own, as
#: does each thread of a web server that enqueues. A `max_connections` in the URL wins.
MAX_CONNECTIONS = 10_000


def connect_cluster(urls: Sequence[str]) -> RedisCluster:
    """A `RedisCluster` client seeded by `urls` (any nodes of the cluster; the first
    gives the password and TLS for all). Responses stay bytes; redis-py's own retries
    of a failed call are off (see `client.connect`), while it still follows a slot
    that moved."""
    if not urls:
        raise ValueError("a Redis Cluster needs at least one seed URL")
    seeds = []
    for url in urls[1:]:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError(f"a Redis Cluster seed must be redis://host:port, got {url!r}")
        seeds.append(ClusterNode(parts.hostname, parts.port or 6379))  # type: ignore[no-untyped-call]
    return RedisCluster(
        url=urls[0],
        startup_nodes=seeds,
        decode_responses=False,
        retry=Retry(NoBackoff(), 0),
        max_connections=MAX_CONNECTIONS,
    )


def is_cluster(client: object) -> bool:
    """True for a `RedisCluster` client."""
    return isinstance(client, RedisCluster)


def node_client(client: Client, key: str) -> redis.Redis:
    """A plain client of the server that holds `key`: `client` itself, or on a
    cluster, the master of `key`'s slot as this client last learnt it."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return cast(redis.Redis, node.redis_connection)
    return client


def refresh(client: Client) -> None:
    """Learn the cluster's slots again (after a failover moved one); a plain client
    has nothing to learn."""
    if isinstance(client, RedisCluster):
        client.nodes_manager.initialize()


def socket_timeout(client: Client, key: str) -> float | None:
    """The socket timeout of the connections that serve `key`, if any."""
    kwargs = node_client(client, key).connection_pool.connection_kwargs
    found = kwargs.get("socket_timeout")
    return None if found is None else float(found)


def where(client: Client) -> tuple[Any, ...]:
    """What tells two clients of the same data apart: the server's address and
    database, or for a cluster, the set of its nodes' addresses."""
    if isinstance(client, RedisCluster):
        return ("cluster", frozenset(client.nodes_manager.nodes_cache))
    kw = client.connection_pool.connection_kwargs
    return tuple(kw.get(k) for k in ("host", "port", "db", "path"))


def same_data(one: Client, other: Client) -> bool:
    """True when both clients reach the same data: one server and database, or
    clusters that share a node."""
    mine, theirs = where(one), where(other)
    if mine[0] == "cluster" and theirs[0] == "cluster":
        return bool(mine[1] & theirs[1])
    return mine == theirs
