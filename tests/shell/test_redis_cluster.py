"""The Redis Cluster the tests start (`conveyor.testing.redis_cluster`): three
masters with a replica each, every slot served, and the Redis backend on it."""

from __future__ import annotations

import redis
from conveyor.testing.redis_cluster import SLOTS, redis_cluster


def test_the_test_cluster_has_three_masters_each_with_a_replica() -> None:
    cluster = redis_cluster()
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        shards = client.cluster_slots()  # {(first, last): {"primary": ..., "replicas": [...]}}
        assert len(shards) == 3
        assert sum(last - first + 1 for first, last in shards) == SLOTS
        assert all(len(shard["replicas"]) == 1 for shard in shards.values())
        ports = {shard["primary"][1] for shard in shards.values()}
        ports |= {replica[1] for shard in shards.values() for replica in shard["replicas"]}
        assert ports == {server.port for server in cluster.servers}
    finally:
        client.close()
