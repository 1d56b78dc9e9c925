"""Redis backend: a `JobQueue` and a `JobStore` on redis-py.

Theory of operation. A job lives in one hash, `{prefix}:job:<id>`, holding its
wire-format body and the few fields the scripts need to find it (`status`,
`queue`, `priority`, claim `token`, `locked_at`). Its id sits in exactly one
structure, the one `status` names: a ready list per (queue, priority), read from
the head (FIFO); the scheduled zset, scored by `run_at`; or the in-flight zset,
scored by `locked_at`. Every change that touches more than one key is one Lua
script (the `redis_*.lua` files beside this module), so the hash and the
structures never disagree, and a crash of the caller or of the server (replaying
its AOF) finds each job in one place. The scripts hold no policy: when to retry,
reclaim or give up is decided by the core and arrives here as a finished job.

Times are passed to the scripts as integer milliseconds from the caller's
injected clock, never read from the server's TIME: the core's decisions, the
tests' manual clocks and the lease predicate then all use one notion of `now`.
Scheduled scores round `run_at` up and claim scores round `now` down, so sub-
millisecond rounding can make a job due or a claim abandoned late, never early.

All keys start with the hash tag `{prefix}`, so one deployment lands in one
Redis Cluster slot and a script may touch every key it derives. See `docs/redis.md`.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import attrs
import redis
from returns.result import Failure, Success

from ...core import Job, JobStatus, Priority, ValidationError
from ..codec import decode, encode
from ..ports import BadClaim, Claim, QueueCounts

log = logging.getLogger("conveyor.redis")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)
_PURGE_BATCH = 500

_Script = Callable[..., Any]


def _ms(when: datetime) -> int:
    return (when - _EPOCH) // _MS


def _ms_ceil(when: datetime) -> int:
    return -((_EPOCH - when) // _MS)


def _us(when: datetime) -> int:
    return (when - _EPOCH) // _US


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@attrs.frozen(slots=True)
class RedisKeys:
    """The key names (the Lua scripts derive the same ones; `docs/redis.md` lists them).

    `base` is the hash tag: `prefix` wrapped in braces unless it already has some.
    """

    base: str

    @classmethod
    def for_prefix(cls, prefix: str) -> RedisKeys:
        """Keys for `prefix`; `"conveyor"` gives `{conveyor}:...`."""
        return cls(prefix if "{" in prefix else "{" + prefix + "}")

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{job_id}"

    def ready(self, queue: str, priority: Priority) -> str:
        return f"{self.base}:queue:{queue}:{priority.value}"

    def scheduled(self, queue: str | None = None) -> str:
        return f"{self.base}:scheduled" + (f":{queue}" if queue else "")

    def inflight(self, queue: str | None = None) -> str:
        return f"{self.base}:inflight" + (f":{queue}" if queue else "")

    def ready_at(self, queue: str) -> str:
        return f"{self.base}:ready_at:{queue}"

    def queues(self) -> str:
        return f"{self.base}:queues"

    def wake(self, queue: str) -> str:
        return f"{self.base}:wake:{queue}"

    def store(self, job_id: str) -> str:
        return f"{self.base}:store:{job_id}"

    def dead(self) -> str:
        return f"{self.base}:dead"

    def history(self) -> str:
        return f"{self.base}:history"


def connect(url: str) -> redis.Redis:
    """A client for `redis://` or `rediss://` (TLS) URLs, password and DB included:
    `rediss://:secret@host:6380/0`. Responses stay bytes: see `RedisJobQueue`."""
    return redis.Redis.from_url(url, decode_responses=False)


def check_server(client: redis.Redis) -> list[str]:
    """Warnings about server settings that lose jobs; empty when all is well.

    An evicting `maxmemory-policy` silently deletes job keys under memory
    pressure; without AOF a restart loses every change since the last snapshot.
    """
    try:
        memory = client.info("memory")
        persistence = client.info("persistence")
    except redis.RedisError as exc:
        return [
            f"could not read the Redis server's settings ({exc}); check by hand that "
            "maxmemory-policy is noeviction and AOF is on"
        ]
    warnings: list[str] = []
    policy = memory.get("maxmemory_policy")
    if policy != "noeviction":
        warnings.append(
            f"maxmemory-policy is {policy!r}, not 'noeviction': under memory pressure the "
            "server deletes keys, and an evicted job key is a lost job"
        )
    if not persistence.get("aof_enabled"):
        try:
            save = _text(client.config_get("save").get("save") or b"")
        except redis.RedisError:
            save = None
        if save == "":
            warnings.append("persistence is off (no AOF, no RDB save): a restart loses every job")
        else:
            warnings.append(
                "AOF is off: a crash loses every job changed since the last RDB snapshot; "
                "set appendonly yes (appendfsync everysec or always)"
            )
    return warnings


@functools.cache
def _source(*names: str) -> str:
    here = importlib.resources.files(__package__)
    return "\n".join(here.joinpath(f"redis_{name}.lua").read_text("utf-8") for name in names)


def _register(client: redis.Redis, prelude: str, name: str) -> _Script:
    # redis-py leaves Script.__call__ unannotated; one cast here keeps the rest typed.
    return cast(_Script, client.register_script(_source(prelude, name)))


def _client_for(client_or_url: redis.Redis | str) -> tuple[redis.Redis, bool]:
    if isinstance(client_or_url, str):
        return connect(client_or_url), True
    if client_or_url.get_encoder().decode_responses:
        # A body that is not UTF-8 (a pickle, say) would then blow up inside redis-py
        # instead of coming back as a BadClaim.
        raise ValueError("give RedisJobQueue/RedisJobStore a client with decode_responses=False")
    return client_or_url, False


class RedisJobQueue:
    """A `JobQueue` on Redis: ready lists, a scheduled zset and an in-flight zset.

    `client_or_url` is a `redis.Redis` (with `decode_responses=False`; it stays
    the caller's to close) or a URL for `connect`. `prefix` names the deployment;
    two queues with different prefixes share a server without seeing each other.
    The server's settings are checked at construction and problems logged as
    warnings on the `conveyor.redis` logger.
    """

    def __init__(self, client_or_url: redis.Redis | str, prefix: str = "conveyor") -> None:
        self._client, self._owned = _client_for(client_or_url)
        self.keys = RedisKeys.for_prefix(prefix)
        self._anchor = [self.keys.queues()]
        script = functools.partial(_register, self._client, "common")
        self._enqueue = script("enqueue")
        self._claim = script("claim")
        self._ack = script("ack")
        self._extend = script("extend")
        self._replace = script("replace")
        self._promote = script("promote")
        self._abandoned = script("abandoned")
        self._reclaim = script("reclaim")
        self._counts = script("counts")
        self._claim_many = script("claim_many")
        self._finish = cast(
            _Script,
            self._client.register_script(_source("common", "store_common", "finish")),
        )
        self._finish_many = cast(
            _Script,
            self._client.register_script(_source("common", "store_common", "finish_many")),
        )
        for warning in check_server(self._client):
            log.warning("redis server %s", warning)

    def _run(self, script: _Script, *args: object) -> Any:
        return script(keys=self._anchor, args=[self.keys.base, *args])

    @staticmethod
    def _placement(job: Job) -> list[object]:
        target = "scheduled" if job.status.is_parked else "ready"
        return [
            str(job.id),
            encode(job),
            job.queue,
            job.priority.value,
            target,
            _ms_ceil(job.run_at),
            _us(job.run_at),
        ]

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked: ready list, or the scheduled set when parked."""
        self._run(self._enqueue, *self._placement(job))

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one pipelined round trip (each its own atomic script)."""
        with self._client.pipeline(transaction=False) as pipe:
            for job in jobs:
                self._enqueue(
                    keys=self._anchor, args=[self.keys.base, *self._placement(job)], client=pipe
                )
            pipe.execute()

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` in one round trip, or None.

        A body that does not decode comes back as a `BadClaim` (from `ports`), held
        like a claim so the worker can dead-letter it and then `ack` it.
        """
        token = uuid.uuid4().hex
        reply = self._run(self._claim, queue, token, _ms(now))
        if reply is None:
            return None
        raw_id, body = reply
        return _claim_of(_text(raw_id), body, token, queue, now)

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the job if `claim.token` still holds it."""
        return bool(self._run(self._ack, _job_id(claim), claim.token))

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` if the claim is still held."""
        return bool(self._run(self._extend, _job_id(claim), claim.token, _ms(now)))

    def replace(self, claim: Claim, job: Job) -> bool:
        """Write the successor (ready or parked, unlocked) if the claim is still held."""
        placement = self._placement(job)
        return bool(self._run(self._replace, placement[0], claim.token, *placement[1:]))

    def finishes_with(self, store: object) -> bool:
        """True when `store` lives under this queue's key base on the same server."""
        if not isinstance(store, RedisJobStore) or store.keys.base != self.keys.base:
            return False
        mine = self._client.connection_pool.connection_kwargs
        theirs = store._client.connection_pool.connection_kwargs
        return all(mine.get(k) == theirs.get(k) for k in ("host", "port", "db", "path"))

    def finish(self, claim: Claim, record: Job) -> bool:
        """Record `record` in the store and release the claim in one script, fenced."""
        return bool(self._run(self._finish, *_finish_args(claim, record)))

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one round trip, each under its
        own fresh token."""
        if limit <= 0:
            return []
        base = uuid.uuid4().hex
        reply = self._run(self._claim_many, queue, base, _ms(now), limit)
        claims: list[Claim | BadClaim] = []
        for raw_id, body in zip(reply[::2], reply[1::2], strict=True):
            job_id = _text(raw_id)
            claims.append(_claim_of(job_id, body, f"{base}:{job_id}", queue, now))
        return claims

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one script; one answer per item."""
        if not items:
            return []
        args = [arg for claim, record in items for arg in _finish_args(claim, record)]
        return [bool(x) for x in self._run(self._finish_many, *args)]

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` parked jobs due by `now` to their ready lists (one script)."""
        if limit <= 0:
            return 0  # ZRANGEBYSCORE reads a negative count as "no limit"
        return int(self._run(self._promote, _ms(now), limit))

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim]:
        """In-flight claims locked (or last extended) before `cutoff`, oldest first.

        An expired claim whose body does not decode has no job for the lease keeper to
        decide about; it goes back to ready as it is (fenced like any reclaim), and the
        worker that claims it next gets a `BadClaim` and dead-letters it.
        """
        if limit <= 0:
            return []
        flat = self._run(self._abandoned, _ms(cutoff), limit)
        out: list[Claim] = []
        for i in range(0, len(flat), 5):
            raw_id, body, token, locked_ms, queue = flat[i : i + 5]
            locked_at = _EPOCH + int(float(_text(locked_ms))) * _MS
            claim = _claim_of(_text(raw_id), body, _text(token), _text(queue), locked_at)
            if isinstance(claim, Claim):
                out.append(claim)
                continue
            log.warning("returning undecodable job %s to ready: %s", claim.job_id, claim.reason)
            self._run(self._reclaim, claim.job_id, claim.token, _ms(cutoff), *[""] * 6)
        return out

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned claim to ready as `job`, re-checking (inside the script)
        that `claim.token` still holds it and it is still locked before `cutoff`."""
        placement = self._placement(job)
        return bool(
            self._run(self._reclaim, placement[0], claim.token, _ms(cutoff), *placement[1:])
        )

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight figures per known queue, from one snapshot."""
        out: dict[str, QueueCounts] = {}
        for name, ready, scheduled, in_flight, oldest_us in self._run(self._counts):
            oldest = None if oldest_us is None else _EPOCH + int(float(_text(oldest_us))) * _US
            out[_text(name)] = QueueCounts(
                ready=int(ready),
                scheduled=int(scheduled),
                in_flight=int(in_flight),
                oldest_ready_at=oldest,
            )
        return dict(sorted(out.items()))

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until work may be ready on `queue` (True) or `timeout_s` passes (False).

        Enqueue, promotion, replace and reclaim push a wake token; an idle worker
        wakes on it at once instead of at its next poll. A token may be stale (the
        work already taken), so True means "try a dequeue", not "a job is yours".
        """
        key = self.keys.wake(queue)
        if timeout_s <= 0:
            return self._client.lpop(key) is not None
        try:
            return self._client.blpop([key], timeout=timeout_s) is not None
        except redis.TimeoutError:
            # The client's socket timeout was shorter than ours: nothing arrived.
            return False

    def close(self) -> None:
        """Close the client if this queue made it from a URL."""
        if self._owned:
            self._client.close()


def _finish_args(claim: Claim, record: Job) -> list[object]:
    """The finish scripts' arguments for one job: id, token, body, status, queue, tenant."""
    if record.id != claim.job.id:
        raise ValidationError.of("job", f"has id {record.id}, but the claim holds {claim.job.id}")
    tenant = record.tenant_id or ""
    return [str(record.id), claim.token, encode(record), record.status.value, record.queue, tenant]


def _job_id(claim: Claim | BadClaim) -> str:
    return claim.job_id if isinstance(claim, BadClaim) else str(claim.job.id)


def _claim_of(
    job_id: str, body: bytes | str, token: str, queue: str, locked_at: datetime
) -> Claim | BadClaim:
    match decode(body):
        case Success(job) if str(job.id) == job_id:
            return Claim(job=job, token=token, queue=queue, locked_at=locked_at)
        case Success(job):
            reason = f"body names job {job.id}, but it is stored as {job_id}"
        case Failure(error):
            reason = str(error)
    return BadClaim(
        job_id=job_id,
        token=token,
        queue=queue,
        payload=_text(body),
        reason=reason,
        locked_at=locked_at,
    )


class RedisJobStore:
    """A `JobStore` on Redis: record hashes plus newest-first indexes.

    Records live under the same `{prefix}` hash tag as the queue. Indexes: all
    history, per status (failed ones are the dead letters, `{prefix}:dead`), and
    the same per tenant; dead letters are also counted per queue.
    """

    def __init__(self, client_or_url: redis.Redis | str, prefix: str = "conveyor") -> None:
        self._client, self._owned = _client_for(client_or_url)
        self.keys = RedisKeys.for_prefix(prefix)
        self._anchor = [self.keys.history()]
        script = functools.partial(_register, self._client, "store_common")
        self._record = script("store_record")
        self._list = script("store_list")
        self._purge = script("store_purge")

    def _run(self, script: _Script, *args: object) -> Any:
        return script(keys=self._anchor, args=[self.keys.base, *args])

    def record(self, job: Job) -> None:
        """Upsert the job's latest record; it becomes the newest."""
        self._run(
            self._record,
            str(job.id),
            encode(job),
            job.status.value,
            job.queue,
            job.tenant_id or "",
        )

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None (also when its record does not decode)."""
        body = self._client.hget(self.keys.store(str(job_id)), "body")
        return None if body is None else _decoded(body)

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        """Recorded jobs, newest first, filtered by status and tenant."""
        if limit <= 0:
            return []
        bodies = self._run(self._list, status.value if status else "", tenant_id or "", limit)
        return [job for job in map(_decoded, bodies) if job is not None]

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Dead letters, newest first."""
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        """Dead letters per queue name (kept as counters beside the index)."""
        key = f"{self.keys.base}:dead_counts" + (f":tenant:{tenant_id}" if tenant_id else "")
        counts = self._client.hgetall(key)
        return {_text(queue): int(n) for queue, n in sorted(counts.items())}

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them (in batches). Returns how many went."""
        if job_id is not None:
            return int(self._run(self._purge, str(job_id), 1))
        total = 0
        while purged := int(self._run(self._purge, "", _PURGE_BATCH)):
            total += purged
        return total

    def close(self) -> None:
        """Close the client if this store made it from a URL."""
        if self._owned:
            self._client.close()


def _decoded(body: bytes | str) -> Job | None:
    match decode(body):
        case Success(job):
            return cast(Job, job)
        case Failure(error):
            log.warning("skipping an undecodable job record: %s", error)
    return None


__all__ = [
    "BadClaim",
    "RedisJobQueue",
    "RedisJobStore",
    "RedisKeys",
    "check_server",
    "connect",
]
