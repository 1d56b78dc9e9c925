"""Opening a sharded deployment: the cluster's slot map read as facts, the tags
`core.shards.choose_tags` picks from them, and those tags kept in the deployment's
first shard so that every process, now and after a reshard of the cluster, uses the
tags the first one chose.

The tags are kept as a JSON list at `{prefix}:shards`, written only when absent
(SET NX): of processes starting together, the first write wins and every process
reads back the same list. A deployment opened with another number of shards than it
was laid out with is refused: its queued jobs would be looked for in other slots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from ....core import ValidationError
from ....core.shards import ShardMap, SlotRange, choose_tags, stranded_by_sharding
from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, retrying, text
from .cluster import Client, is_cluster
from .queue import RedisJobQueue
from .replicas import NO_WAIT, ReplicaWait
from .sharded import ShardedJobQueue
from .sharded_store import ShardedJobStore
from .store import RedisJobStore


def slot_ranges(client: Client) -> list[SlotRange]:
    """Which master serves which slots (`CLUSTER SLOTS`), or nothing on one server."""
    if not is_cluster(client):
        return []
    found: Mapping[tuple[int, int], Mapping[str, Any]] = cast(Any, client).cluster_slots()
    ranges = []
    for (first, last), served in found.items():
        host, port = served["primary"][0], served["primary"][1]
        ranges.append(SlotRange(int(first), int(last), f"{text(host)}:{port}"))
    return ranges


def layout_key(prefix: str) -> str:
    """Where the tags of `prefix`'s shards are kept (in shard 0)."""
    return f"{RedisKeys.for_prefix(prefix).base}:shards"


def shard_tags(
    client: Client, prefix: str, count: int, retry_budget_s: float = DEFAULT_RETRY_BUDGET_S
) -> tuple[str, ...]:
    """The hash tags (without braces) of `prefix`'s `count` shards: those kept, else
    those chosen now from the slot map (and kept). One shard is `prefix` alone, as
    without sharding, and nothing is kept for it."""
    if count <= 1:
        return (prefix,)
    key = layout_key(prefix)
    chosen = json.dumps(list(choose_tags(prefix, count, slot_ranges(client))))
    retrying(retry_budget_s, lambda: client.set(key, chosen, nx=True))
    kept = retrying(retry_budget_s, lambda: client.get(key))
    tags = tuple(json.loads(text(kept or b"[]")))
    if len(tags) != count:
        raise ValidationError.of(
            "redis.shards",
            f"prefix {prefix!r} was laid out in {len(tags)} shards, not {count}: its queued "
            f"jobs would be looked for in other slots (drain every queue, then delete {key})",
        )
    return tags


def refuse_other_layout(
    client: Client, prefix: str, retry_budget_s: float = DEFAULT_RETRY_BUDGET_S
) -> None:
    """Refuse to open `prefix` as one shard when it was laid out in several: the jobs
    of every shard but the first would be out of sight."""
    kept = retrying(retry_budget_s, lambda: client.get(layout_key(prefix)))
    count = 1 if kept is None else len(json.loads(text(kept)))
    if count != 1:
        raise ValidationError.of(
            "redis.shards",
            f"prefix {prefix!r} was laid out in {count} shards, not 1: its queued jobs "
            f"would be looked for in other slots (set redis.shards = {count}, or drain "
            f"every queue, then delete {layout_key(prefix)})",
        )


def open_shards(
    client: Client,
    prefix: str,
    shard_map: ShardMap,
    *,
    retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    replica_wait: ReplicaWait = NO_WAIT,
) -> tuple[ShardedJobQueue, ShardedJobStore]:
    """The queue and store of `prefix`'s shards on `client` (which stays the caller's)."""
    if "{" in prefix or "}" in prefix:
        raise ValidationError.of("redis.prefix", "a sharded prefix takes no braces")
    if not retrying(retry_budget_s, lambda: client.exists(layout_key(prefix))):
        # Not laid out in shards yet: maybe used as one shard, which shard 0 carries on.
        first = RedisJobQueue(client, prefix=prefix, retry_budget_s=retry_budget_s)
        queued = {
            name: c.ready + c.scheduled + c.in_flight + c.waiting
            for name, c in first.counts(datetime.now(UTC)).items()
        }
        stranded = stranded_by_sharding(shard_map, queued)
        if stranded is not None:
            raise ValidationError.of("redis.shards", stranded)
    tags = shard_tags(client, prefix, shard_map.count, retry_budget_s)
    bases = ["{" + tag + "}" for tag in tags]
    queues = [
        RedisJobQueue(client, base, retry_budget_s=retry_budget_s, replica_wait=replica_wait)
        for base in bases
    ]
    stores = [
        RedisJobStore(client, base, retry_budget_s=retry_budget_s, replica_wait=replica_wait)
        for base in bases
    ]
    return ShardedJobQueue(queues, shard_map), ShardedJobStore(stores, shard_map)
