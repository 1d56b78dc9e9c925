"""Shards: which hash tag a queue's keys live under, and which tags a deployment uses.

Theory of operation. On Redis Cluster a script may touch only keys of one slot, and
a slot is served by one master. A deployment with one shard keeps every key under
the hash tag `{prefix}` (one slot, one master). With `shards = N` it keeps N full
copies of that layout, each under a tag of its own: shard 0 keeps `{prefix}`, shard
k >= 1 uses the first of its candidate tags (`prefix:k`, then `prefix:k.1`,
`prefix:k.2`, ...) whose slot falls on the master serving the fewest shards so far.
So the shards spread over the masters as evenly as the cluster allows, and on a
single server (no slot map) shard k is simply `prefix:k`.

Every queue lives wholly in one shard (`ShardMap.shard_of`): a pin first, else a
stable hash of its name. A job, its record, its edges and its unique key are written
in its queue's shard, so each script still touches one slot.

Nothing here reads a cluster: the slot map arrives as facts (`SlotRange`s), and the
shell keeps the tags it chose once, so a later reshard of the cluster cannot move a
deployment's keys under its feet.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import attrs

from .frozen import FrozenMap

#: Slots of a Redis Cluster.
SLOTS = 16384
#: How many candidate tags a shard tries before it takes the least loaded one seen.
MAX_CANDIDATES = 4096


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (polynomial 0x1021, initial 0): the checksum Redis Cluster
    hashes keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: str) -> int:
    """The cluster slot of `key`, as `CLUSTER KEYSLOT` answers: only the part inside
    the first `{...}` is hashed, when that part is not empty."""
    raw = key.encode("utf-8")
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc16(raw) % SLOTS


def tag_slot(tag: str) -> int:
    """The slot of every key under the hash tag `{tag}`."""
    return crc16(tag.encode("utf-8")) % SLOTS


@attrs.frozen(slots=True)
class SlotRange:
    """Slots `first..last` (inclusive), served by the master named `master`."""

    first: int
    last: int
    master: str


def candidate_tags(prefix: str, shard: int) -> Iterator[str]:
    """The tags shard `shard` may take, in the order it tries them."""
    if shard == 0:
        yield prefix
        return
    yield f"{prefix}:{shard}"
    for n in range(1, MAX_CANDIDATES):
        yield f"{prefix}:{shard}.{n}"


def _master_of(slot: int, ranges: Sequence[SlotRange]) -> str | None:
    for found in ranges:
        if found.first <= slot <= found.last:
            return found.master
    return None


def choose_tags(prefix: str, shards: int, ranges: Sequence[SlotRange] = ()) -> tuple[str, ...]:
    """The hash tags (without braces) of a deployment's `shards` shards, shard 0's
    first: each shard after the first takes the first candidate whose master serves
    the fewest shards so far. With no `ranges` (one server) each takes its first."""
    masters = sorted({found.master for found in ranges})
    load = dict.fromkeys(masters, 0)
    tags: list[str] = []
    for shard in range(max(shards, 1)):
        candidates = list(candidate_tags(prefix, shard))
        chosen = candidates[0]
        if load and shard > 0:
            fewest = min(load.values())
            for tag in candidates:
                if load.get(_master_of(tag_slot(tag), ranges) or "", fewest + 1) == fewest:
                    chosen = tag
                    break
        owner = _master_of(tag_slot(chosen), ranges)
        if owner is not None:
            load[owner] += 1
        tags.append(chosen)
    return tuple(tags)


def _frozen_pins(pins: Mapping[str, int]) -> FrozenMap:
    return pins if isinstance(pins, FrozenMap) else FrozenMap(pins)


@attrs.frozen(slots=True)
class ShardMap:
    """How many shards a deployment has, and the queues pinned to one of them.

    `shard_of(queue)` is the pin when there is one, else a stable hash of the name
    (the same in every process and every release)."""

    count: int = 1
    pins: Mapping[str, int] = attrs.field(factory=FrozenMap, converter=_frozen_pins)

    def shard_of(self, queue: str) -> int:
        """The shard holding `queue`'s jobs."""
        if self.count <= 1:
            return 0
        pinned = self.pins.get(queue)
        if pinned is not None:
            return int(pinned)
        return crc16(queue.encode("utf-8")) % self.count

    def problems(self) -> list[tuple[str, str]]:
        """What is wrong with this map, as (field, reason) pairs: no shard, or a pin
        to a shard that does not exist."""
        found: list[tuple[str, str]] = []
        if self.count < 1:
            found.append(("redis.shards", f"must be at least 1, got {self.count}"))
        for queue, shard in sorted(self.pins.items()):
            if isinstance(shard, bool) or not isinstance(shard, int):
                found.append((f"redis.queue_shards.{queue}", "must be a shard index"))
            elif not 0 <= shard < max(self.count, 1):
                reason = f"pins to shard {shard}, but shards run 0..{max(self.count, 1) - 1}"
                found.append((f"redis.queue_shards.{queue}", reason))
        return found


@attrs.frozen(slots=True)
class Placed:
    """One job of a graph (new, or already stored and waited on), the shard it lives
    in, and the field to name if it is in the wrong one."""

    shard: int
    field: str
    what: str


def cross_shard(placed: Sequence[Placed]) -> tuple[str, str] | None:
    """(field, reason) for the first job of a graph outside the first job's shard, or
    None when all share one: a graph is written and settled by scripts that see one
    slot, so its jobs and the jobs it waits on must share a shard."""
    if not placed:
        return None
    home = placed[0]
    for other in placed[1:]:
        if other.shard != home.shard:
            reason = (
                f"{other.what} is in shard {other.shard} but {home.what} is in shard "
                f"{home.shard}: a workflow's jobs, and the jobs they wait on, must share a "
                "shard (pin their queues to one with redis.queue_shards)"
            )
            return other.field, reason
    return None


def stranded_by_sharding(shard_map: ShardMap, queued: Mapping[str, int]) -> str | None:
    """Why a deployment laid out as one shard, whose queues hold `queued` jobs (queued,
    scheduled, in flight or waiting, by queue), cannot open in `shard_map`'s shards;
    None when it can. Shard 0 keeps the one shard's keys, so only the queues the map
    places in another shard lose their jobs: they would be looked for there."""
    moved = sorted(q for q, n in queued.items() if n > 0 and shard_map.shard_of(q) != 0)
    if not moved:
        return None
    listed = ", ".join(f"queue {q} ({queued[q]})" for q in moved)
    return (
        f"this prefix was laid out as one shard, and its jobs queued for {listed} would "
        f"be looked for in another of the {shard_map.count} shards: drain those queues "
        "first, or pin them to shard 0 in redis.queue_shards"
    )
