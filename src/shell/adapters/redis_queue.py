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

Times are passed to the scripts from the caller's clock, never read from the
server's TIME inside a script: the core's decisions, the tests' manual clocks and
the lease predicate then all use one notion of `now`. (`server_time` reads TIME for
the worker's start-up check that its clock agrees with the server's.) A job is due
exactly when `run_at <= now` (both in µs); lease scores are milliseconds rounded
down, so rounding can make a claim abandoned late, never early.

Transient failures (a dropped connection, a timeout, a server still loading its
AOF) are retried here and nowhere else: `connect` builds clients with redis-py's
own retries off, and `_run` retries within `retry_budget_s`. Every script is safe
to send twice: claims are idempotent by a token chosen once per call, enqueues by a
nonce, and every fenced write answers a re-send of a write that already landed
with the same 1 while writing nothing more.

Queues with limits (fair shares, caps, rates) are claimed by `dequeue_limited`, which
keeps a per-partition index of their ready jobs; see `redis_limits`.

All keys start with the hash tag `{prefix}`, so one deployment lands in one
Redis Cluster slot and a script may touch every key it derives. See `docs/redis.md`.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from uuid import UUID

import attrs
import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.retry import Retry
from returns.result import Failure, Success

from ...core import (
    PRIORITY_ORDER,
    Job,
    JobStatus,
    Priority,
    PruneOrder,
    ValidationError,
    WriteRetryPolicy,
)
from ...core.limits import QueueLimits
from ...core.uniqueness import state_names
from ..codec import decode, encode
from ..lookup import queued_entry
from ..ports import (
    HISTORY_FILTER_SCAN,
    BadClaim,
    Claim,
    FinishedPerMinute,
    HistoryFilter,
    LimitedClaims,
    LimitUsage,
    Place,
    PriorityCounts,
    QueueCounts,
    QueuedJob,
    prefetch_token,
)
from ..retrying import Retrier
from ..unique import PLACE_NAMES, found_in_queue, stored_job
from .redis_limits import RedisLimitedClaim

log = logging.getLogger("conveyor.redis")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)
_PURGE_BATCH = 500
#: The default for `retry_budget_s`: a quarter of the default 60 s lease, so a claim
#: whose renewal is being retried is still held when the retry lands.
DEFAULT_RETRY_BUDGET_S = 15.0
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
_SCHEDULED_RUN_US = re.compile(rb"^(\d+):")

_Script = Callable[..., Any]
_T = TypeVar("_T")


def _ms(when: datetime) -> int:
    return (when - _EPOCH) // _MS


def _ms_ceil(when: datetime) -> int:
    return -((_EPOCH - when) // _MS)


def _us(when: datetime) -> int:
    return (when - _EPOCH) // _US


def _us_digits(when: datetime) -> str:
    """µs as the 18-digit string the scripts compare scheduled members against."""
    return str(_us(when)).zfill(18)


def _now_args(now: datetime) -> list[object]:
    """`now` as the promotion step wants it: ms rounded up (the highest score that can
    be due), ms rounded down (for members written by an earlier version), exact µs."""
    return [_ms_ceil(now), _ms(now), _us_digits(now)]


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


_NONE_HELD = PriorityCounts(0, 0, 0)

#: The most members a queue's scheduled or in-flight set may hold for `counts` to split
#: it by priority: it reads each member's hash, about 10 ms per 1,000 members, during
#: which Redis serves nobody else.
COUNT_SPLIT_LIMIT = 1_000


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
    `rediss://:secret@host:6380/0`. Responses stay bytes: see `RedisJobQueue`.

    redis-py's own retries are off: the queue and store retry within their budget,
    and two layers of retries would multiply each other's waits past it.
    """
    return redis.Redis.from_url(url, decode_responses=False, retry=Retry(NoBackoff(), 0))


def _retryable(exc: Exception) -> bool:
    # Wrong credentials arrive as a ConnectionError too; waiting will not fix them.
    return not isinstance(exc, (AuthenticationError, AuthorizationError))


def _transient(exc: Exception) -> bool:
    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError)) and _retryable(exc)


def _told(exc: Exception, failures: int, wait: float) -> None:
    # DEBUG: an outage that outlasts the budget is told once by the worker loop.
    log.debug("redis unavailable (%s); retrying in %.2f s", exc, wait)


@functools.lru_cache(maxsize=16)
def retrier(budget_s: float) -> Retrier:
    """Tries a call again after a dropped connection or a timeout, doubling its waits,
    until `budget_s` has passed since the first try; the last error then propagates."""
    policy = WriteRetryPolicy(
        initial_s=_FIRST_BACKOFF_S,
        max_s=_MAX_BACKOFF_S,
        max_attempts=None,
        give_up_after_s=budget_s,
        last_try_at_deadline=True,
    )
    return Retrier(policy, transient=_transient, on_retry=_told)


def _retrying(budget_s: float, call: Callable[[], _T]) -> _T:
    """`call()` under the retry budget `budget_s` (see `retrier`)."""
    return retrier(budget_s).call(call)


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


def _register(client: redis.Redis, *names: str) -> _Script:
    """The script `names[-1]` with the preludes `names[:-1]` before it."""
    # redis-py leaves Script.__call__ unannotated; one cast here keeps the rest typed.
    return cast(_Script, client.register_script(_source(*names)))


def _client_for(
    client_or_url: redis.Redis | str, retry_budget_s: float = 0.0
) -> tuple[redis.Redis, bool]:
    """The client to use and whether this adapter owns (and closes) it; the retry
    budget is checked here, once for the queue and the store alike."""
    if retry_budget_s < 0:
        raise ValueError("retry_budget_s must be >= 0")
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
    `retry_budget_s` is how long one operation keeps retrying a dropped connection
    (give it a quarter of the lease; 0 = never retry). The server's settings are
    checked at construction and problems logged as warnings on the `conveyor.redis`
    logger.
    """

    def __init__(
        self,
        client_or_url: redis.Redis | str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        self._client, self._owned = _client_for(client_or_url, retry_budget_s)
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        # A claim's receipt must outlive every re-send of it; with no retries there is
        # no re-send, and no receipt is written.
        self._receipt_ms = math.ceil(retry_budget_s * 1000) + 1000 if retry_budget_s else 0
        self._anchor = [self.keys.queues()]
        script = functools.partial(_register, self._client, "common")
        self._enqueue = script("enqueue")
        self._enqueue_new = script("enqueue_new")
        self._claim = script("claim")
        self._ack = script("ack")
        self._extend = script("extend")
        self._replace = script("replace")
        self._promote = script("promote")
        self._abandoned = script("abandoned")
        self._reclaim = script("reclaim")
        self._counts = script("counts")
        self._claim_many = script("claim_many")
        self._start = script("start")
        with_store = functools.partial(_register, self._client, "common", "store_common")
        self._finish = with_store("finish")
        self._finish_many = with_store("finish_many")
        self._revive = with_store("revive")
        self._cancel = with_store("cancel")
        self._finish_cancelled = with_store("finish_cancelled")
        self._request_cancel = script("request_cancel")
        self._limited = RedisLimitedClaim(
            self._run, script("limited_index"), script("limited_read"), script("limited_take")
        )
        for warning in check_server(self._client):
            log.warning("redis server %s", warning)

    def _run(self, script: _Script, *args: object) -> Any:
        argv = [self.keys.base, *args]
        return _retrying(self.retry_budget_s, lambda: script(keys=self._anchor, args=argv))

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
        self._run(self._enqueue, *self._placement(job), uuid.uuid4().hex)

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` unless its id is queued or recorded (in the store under this
        prefix), or its unique key is held: one script, so one writer of any number.
        The job already there, or None when written."""
        return _found(self._run(self._enqueue_new, *self._new_args(job, uuid.uuid4().hex)))

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job in one pipelined round trip (each its own script,
        run in list order)."""
        if not jobs:
            return []
        nonce = uuid.uuid4().hex
        argvs = [
            [self.keys.base, *self._new_args(job, f"{nonce}:{n}")] for n, job in enumerate(jobs)
        ]

        def send() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for argv in argvs:
                    self._enqueue_new(keys=self._anchor, args=argv, client=pipe)
                return list(pipe.execute())

        return [_found(reply) for reply in _retrying(self.retry_budget_s, send)]

    def _new_args(self, job: Job, nonce: str) -> list[object]:
        """The `enqueue_new` script's arguments after the key base."""
        lock = job.unique
        key = states = expires = ttl = ""
        if lock is not None:
            key, states = lock.key, state_names(lock)
            if lock.expires_at is not None:
                expires = _us_digits(lock.expires_at)
                # Only for Redis to forget the key: the verdict reads `expires`.
                ttl = str(max(1, _ms_ceil(lock.expires_at) - _ms(job.created_at)) + 1000)
        return [*self._placement(job), nonce, key, states, expires, _us_digits(job.created_at), ttl]

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one pipelined round trip (each its own atomic script)."""
        if not jobs:
            return
        # One nonce per item: a batch may name one id twice, and the later must win.
        nonce = uuid.uuid4().hex
        argvs = [
            [self.keys.base, *self._placement(job), f"{nonce}:{n}"] for n, job in enumerate(jobs)
        ]

        def send() -> None:
            with self._client.pipeline(transaction=False) as pipe:
                for argv in argvs:
                    self._enqueue(keys=self._anchor, args=argv, client=pipe)
                pipe.execute()

        _retrying(self.retry_budget_s, send)

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` in one round trip, or None; the queue's
        due parked jobs are promoted in the same script first.

        A body that does not decode comes back as a `BadClaim` (from `ports`), held
        like a claim so the worker can dead-letter it and then `ack` it.
        """
        token = uuid.uuid4().hex
        reply = self._run(self._claim, queue, token, *_now_args(now), self._receipt_ms)
        return _single_claim(reply, token, queue, now)

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the job if `claim.token` still holds it."""
        return bool(self._run(self._ack, _job_id(claim), claim.token))

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` if the claim is still held."""
        return bool(self._run(self._extend, _job_id(claim), claim.token, _ms(now)))

    def replace(self, claim: Claim, job: Job) -> bool:
        """Write the successor (ready or parked, unlocked) if the claim is still held."""
        placement = self._placement(job)
        return bool(
            self._run(self._replace, placement[0], claim.token, *placement[1:], uuid.uuid4().hex)
        )

    def finishes_with(self, store: object) -> bool:
        """True when `store` lives under this queue's key base on the same server."""
        if not isinstance(store, RedisJobStore) or store.keys.base != self.keys.base:
            return False
        mine = self._client.connection_pool.connection_kwargs
        theirs = store._client.connection_pool.connection_kwargs
        return all(mine.get(k) == theirs.get(k) for k in ("host", "port", "db", "path"))

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Record `record` in the store and release the claim in one script, fenced by
        the token and, with `abandoned_before`, by "still locked before it"."""
        # A BadClaim's record is a placeholder that may carry another id than the
        # payload's; a Claim's record must be its own job's.
        fence_id = _finish_args(claim, record)[0] if isinstance(claim, Claim) else claim.job_id
        cutoff = "" if abandoned_before is None else _ms(abandoned_before)
        return bool(
            self._run(
                self._finish,
                fence_id,
                claim.token,
                cutoff,
                str(record.id),
                encode(record),
                record.status.value,
                record.queue,
                record.tenant_id or "",
                uuid.uuid4().hex,
            )
        )

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one round trip (due parked
        jobs promoted first), each under its own fresh prefetched token."""
        if limit <= 0:
            return []
        base = uuid.uuid4().hex
        reply = self._run(
            self._claim_many,
            queue,
            prefetch_token(base),
            *_now_args(now),
            self._receipt_ms,
            limit,
        )
        return _batch_claims(reply, base, queue, now)

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs of `queue` as `core.limits.plan_claim` chooses from
        the first ready jobs of each partition, the running counts and the stored
        buckets and passes; prefetched claims as `dequeue_many` gives them, taken only
        while no other limited take of the queue came between the read and the take
        (see `redis_limits`)."""
        base = uuid.uuid4().hex
        claim_args = (prefetch_token(base), _ms(now), self._receipt_ms)
        reply, plan = self._limited.claim(
            queue, _now_args(now), _us(now), max(1, want), limits, claim_args
        )
        claims = _batch_claims(reply, base, queue, now)
        if plan is None:
            # Every try met another claimer's take: it is working the queue, so this
            # worker pauses its poll interval rather than waiting for new work.
            return LimitedClaims(claims, None, True)
        wait = plan.wait_until_us
        until = None if wait is None else _EPOCH + wait * _US
        return LimitedClaims(claims, until, plan.held_back > 0)

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits, in one read-only script (due parked
        jobs are not promoted; the only write is the one-time index of a queue whose
        limits were never used)."""
        read = self._limited.read(queue, _now_args(now), 1, claim=False)
        return LimitUsage(
            running=dict(read.running),
            ready=dict(read.ready),
            candidates=read.candidates,
            buckets=dict(read.buckets),
            passes=dict(read.passes),
        )

    def wait_and_dequeue(
        self, queue: str, now: datetime, limit: int, timeout_s: float
    ) -> list[Claim | BadClaim]:
        """Wait up to `timeout_s` for a wake-up on `queue` (as `wait_for_work`), then
        claim up to `limit` jobs (as `dequeue` for 1, `dequeue_many` for more), all in
        one round trip: the claim is pipelined behind the blocking pop, so the server
        runs it the moment the wait ends, woken or not. `now` is the caller's clock when
        it sends: due parked jobs are promoted as of `now`, and each claim's lease is
        taken at `now + timeout_s`, when the wait is due to end at the latest (so a
        claim taken early in the wait is reclaimed late, not early). Empty when the
        wait ended with nothing to claim.
        """
        wait_s = self._blocking_wait_s(timeout_s)
        if limit <= 0 or wait_s <= 0:
            if limit == 1:
                one = self.dequeue(queue, now)
                return [] if one is None else [one]
            return list(self.dequeue_many(queue, now, limit))
        locked_at = now + timedelta(seconds=wait_s)
        base = uuid.uuid4().hex
        script = self._claim if limit == 1 else self._claim_many
        token = base if limit == 1 else prefetch_token(base)
        args: list[object] = [queue, token, *_now_args(now), self._receipt_ms]
        args += [_ms_ceil(locked_at)] if limit == 1 else [limit, _ms_ceil(locked_at)]
        try:
            reply = self._blocking_claim(queue, wait_s, script, args)
        except (redis.ConnectionError, redis.TimeoutError):
            # The claim may have run with its reply lost: the same call again returns
            # what its token took (the receipt), or claims now.
            reply = self._run(script, *args)
        if limit == 1:
            one = _single_claim(reply, base, queue, locked_at)
            return [] if one is None else [one]
        return _batch_claims(reply, base, queue, locked_at)

    def _blocking_wait_s(self, timeout_s: float) -> float:
        """`timeout_s`, shortened to half the client's socket timeout if it has one (a
        wait the socket gives up on would lose the claim's reply), and 0 below a
        millisecond (BLPOP reads 0 as "for ever")."""
        socket_s = self._client.connection_pool.connection_kwargs.get("socket_timeout")
        if socket_s:
            timeout_s = min(timeout_s, float(socket_s) / 2)
        return round(timeout_s, 3) if timeout_s >= 0.001 else 0.0

    def _blocking_claim(
        self, queue: str, wait_s: float, script: _Script, args: list[object]
    ) -> Any:
        """BLPOP on the queue's wake list and the claim script in one pipelined send.
        The script goes by EVALSHA alone (redis-py would first ask SCRIPT EXISTS, a
        round trip of its own); a server that lost it (restarted) gets it loaded by the
        ordinary call instead, with the same token, since it did not run."""
        sha = cast(Any, script).sha
        argv = [self.keys.base, *args]
        with self._client.pipeline(transaction=False) as pipe:
            pipe.blpop([self.keys.wake(queue)], timeout=wait_s)
            cast(Any, pipe).execute_command("EVALSHA", sha, len(self._anchor), *self._anchor, *argv)
            woken, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, redis.exceptions.NoScriptError):
            return self._run(script, *args)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(woken, Exception) and not reply:
            raise woken  # a failed wait is told, unless its claim took jobs to hand over
        return reply

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Swap a prefetched claim's token for a fresh plain one and renew its lease to
        `now`, fenced by the old token."""
        # Fresh per call (not the old token unmarked), so that only a re-send of this
        # very call finds the swap already made.
        started = uuid.uuid4().hex
        done = self._run(self._start, str(claim.job.id), claim.token, started, _ms(now))
        return attrs.evolve(claim, token=started, locked_at=now) if done else None

    def revive(self, dead: Job, fresh: Job) -> bool:
        """Put `fresh` in the queue and record it, in one script, only while the store
        still records `dead.id` as a dead letter."""
        placement = self._placement(fresh)
        return bool(
            self._run(
                self._revive,
                str(dead.id),
                *placement,
                fresh.status.value,
                fresh.tenant_id or "",
                uuid.uuid4().hex,
            )
        )

    # --- cancellation (see `core.cancellation`) ------------------------------------------

    def cancel(self, record: Job) -> bool:
        """Take a ready or parked job out of the queue and record `record` (cancelled),
        in one script, only while no claim holds it."""
        return bool(
            self._run(
                self._cancel,
                str(record.id),
                encode(record),
                record.status.value,
                record.queue,
                record.tenant_id or "",
                uuid.uuid4().hex,
            )
        )

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        """Mark an in-flight job's hash cancel-requested (one script); False when no
        claim holds it."""
        return bool(self._run(self._request_cancel, str(job_id), _ms(now)))

    def cancel_requested(self, job_id: UUID) -> bool:
        """True while the job's hash carries a cancel request (one HEXISTS)."""
        key = self.keys.job(str(job_id))
        return bool(_retrying(self.retry_budget_s, lambda: self._client.hexists(key, "cancel")))

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Record `record` (cancelled) and release the claim, request and all, in one
        script fenced by the token (and `abandoned_before`, as in `finish`)."""
        if isinstance(claim, Claim):
            _finish_args(claim, record)  # the same-id check
        cutoff = "" if abandoned_before is None else _ms(abandoned_before)
        return bool(
            self._run(
                self._finish_cancelled,
                _job_id(claim),
                claim.token,
                cutoff,
                encode(record),
                record.status.value,
                record.queue,
                record.tenant_id or "",
                uuid.uuid4().hex,
            )
        )

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one script; one answer per item."""
        if not items:
            return []
        args: list[object] = [uuid.uuid4().hex]
        for claim, record in items:
            args += [*_finish_args(claim, record), claim.queue]
        return [bool(x) for x in self._run(self._finish_many, *args)]

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` parked jobs due by `now` to their ready lists (one script),
        in promotion order: `run_at`, then enqueue sequence."""
        if limit <= 0:
            return 0  # ZRANGEBYSCORE reads a negative count as "no limit"
        return int(self._run(self._promote, *_now_args(now), limit))

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked jobs, or None."""
        key = self.keys.scheduled(queue)
        first = _retrying(
            self.retry_budget_s, lambda: self._client.zrange(key, 0, 0, withscores=True)
        )
        if not first:
            return None
        member, score = cast(tuple[bytes, float], first[0])
        exact = _SCHEDULED_RUN_US.match(member)
        if exact:
            return _EPOCH + int(exact[1]) * _US
        return _EPOCH + int(score) * _MS  # written by an earlier version: ms only

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim | BadClaim]:
        """In-flight claims locked (or last extended) before `cutoff`, oldest first, each
        with its token as stored (so `started` tells a prefetched one). Read-only: an
        undecodable body comes back as a `BadClaim` for the caller to dead-letter."""
        if limit <= 0:
            return []
        flat = self._run(self._abandoned, _ms(cutoff), limit)
        out: list[Claim | BadClaim] = []
        for i in range(0, len(flat), 5):
            raw_id, body, token, locked_ms, queue = flat[i : i + 5]
            locked_at = _EPOCH + int(float(_text(locked_ms))) * _MS
            out.append(_claim_of(_text(raw_id), body, _text(token), _text(queue), locked_at))
        return out

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned claim to ready as `job`, re-checking (inside the script)
        that `claim.token` still holds it and it is still locked before `cutoff`."""
        placement = self._placement(job)
        nonce = uuid.uuid4().hex
        return bool(
            self._run(self._reclaim, placement[0], claim.token, _ms(cutoff), *placement[1:], nonce)
        )

    def server_time(self) -> datetime:
        """The server's clock (TIME), which every worker's clock is checked against."""
        seconds, micros = _retrying(self.retry_budget_s, self._client.time)
        return _EPOCH + timedelta(seconds=int(seconds), microseconds=int(micros))

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight figures per known queue, from one snapshot,
        each split by priority. Ready lists are per priority; the scheduled and in-flight
        sets are per queue, so their split reads every member's hash, and is left out
        (`None` per priority) for a set above `COUNT_SPLIT_LIMIT` members."""
        out: dict[str, QueueCounts] = {}
        rows = self._run(self._counts, COUNT_SPLIT_LIMIT)
        for name, ready, scheduled, in_flight, oldest_us, lanes, parked, held in rows:
            oldest = None if oldest_us is None else _EPOCH + int(float(_text(oldest_us))) * _US
            split = {
                p: PriorityCounts(
                    int(r),
                    None if parked is None else int(parked[i]),
                    None if held is None else int(held[i]),
                )
                for i, (p, r) in enumerate(zip(PRIORITY_ORDER, lanes, strict=True))
            }
            out[_text(name)] = QueueCounts(
                ready=int(ready),
                scheduled=int(scheduled),
                in_flight=int(in_flight),
                oldest_ready_at=oldest,
                by_priority={p: c for p, c in split.items() if c != _NONE_HELD},
            )
        return dict(sorted(out.items()))

    def find(self, job_id: UUID) -> QueuedJob | None:
        """The job's hash, read in one HMGET: where it is, and its claim if held."""
        key = self.keys.job(str(job_id))
        fields = _retrying(self.retry_budget_s, lambda: self._client.hmget(key, _LOOKUP_FIELDS))
        return _queued(str(job_id), cast(list[bytes | None], fields))

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Ids from the in-flight zset, the ready lists and the scheduled zset, `batch`
        at a time, each page's hashes read in one pipelined round trip. An id whose
        hash has moved elsewhere since its structure was read is left out, and so is a
        second copy of an id in a ready list, or a copy whose job is now in another
        queue (a limited queue's lists may hold ghost copies of jobs placed again: see
        `redis_limits`)."""
        for where in [place] if place is not None else list(Place):
            seen: set[str] = set()
            for ids in self._id_pages(queue, where, max(1, batch)):
                if where is Place.READY:
                    ids = [i for i in dict.fromkeys(ids) if i not in seen]
                    seen.update(ids)
                # A ghost copy left in this queue's list may name a job placed since
                # in another queue: the hash says where the job is.
                yield from (e for e in self._hashes(ids, where) if queue in (None, e.queue))

    def _id_pages(self, queue: str | None, place: Place, batch: int) -> Iterator[list[str]]:
        if place is not Place.READY:
            key = (
                self.keys.inflight(queue)
                if place is Place.IN_FLIGHT
                else self.keys.scheduled(queue)
            )
            yield from self._pages(key, batch, sorted_set=True)
            return
        if queue is not None:
            names = [queue]
        else:
            names = sorted(
                _text(n) for n in self._read(lambda: self._client.smembers(self.keys.queues()))
            )
        for name in names:
            for priority in PRIORITY_ORDER:
                yield from self._pages(self.keys.ready(name, priority), batch, sorted_set=False)

    def _pages(self, key: str, batch: int, *, sorted_set: bool) -> Iterator[list[str]]:
        """The ids in list or zset `key`, `batch` per read."""
        start = 0
        while True:
            page = self._range(key, start, start + batch - 1, sorted_set)
            # A scheduled member is `<run_us>:<seq>:<id>` (or a bare id, from before).
            yield [_text(member).rsplit(":", 1)[-1] for member in page]
            if len(page) < batch:
                return
            start += batch

    def _range(self, key: str, first: int, last: int, sorted_set: bool) -> list[bytes]:
        read = self._client.zrange if sorted_set else self._client.lrange
        return cast(list[bytes], self._read(lambda: read(key, first, last)))

    def _hashes(self, ids: list[str], place: Place) -> list[QueuedJob]:
        if not ids:
            return []

        def read() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hmget(self.keys.job(job_id), _LOOKUP_FIELDS)
                return list(pipe.execute())

        found = (
            _queued(job_id, fields) for job_id, fields in zip(ids, self._read(read), strict=True)
        )
        return [entry for entry in found if entry is not None and entry.place is place]

    def _read(self, call: Callable[[], _T]) -> _T:
        return _retrying(self.retry_budget_s, call)

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


#: The job hash's fields a lookup reads (see the key table in docs/redis.md).
_LOOKUP_FIELDS = ("body", "status", "queue", "token", "locked_at")
_PLACES = {b"ready": Place.READY, b"scheduled": Place.SCHEDULED, b"processing": Place.IN_FLIGHT}


def _queued(job_id: str, fields: Sequence[bytes | None]) -> QueuedJob | None:
    """A `QueuedJob` from a job hash's lookup fields; None when there is no such job."""
    body, status, queue, token, locked_ms = fields
    place = _PLACES.get(status or b"")
    if body is None or place is None:
        return None
    held = place is Place.IN_FLIGHT
    locked_at = None
    if held and locked_ms is not None:
        locked_at = _EPOCH + int(float(_text(locked_ms))) * _MS
    return queued_entry(
        job_id,
        _text(queue or b""),
        place,
        body,
        _text(token or b"") if held else None,
        locked_at,
    )


def _finish_args(claim: Claim, record: Job) -> list[object]:
    """The finish scripts' arguments for one job: id, token, body, status, queue, tenant."""
    if record.id != claim.job.id:
        raise ValidationError.of("job", f"has id {record.id}, but the claim holds {claim.job.id}")
    tenant = record.tenant_id or ""
    return [str(record.id), claim.token, encode(record), record.status.value, record.queue, tenant]


def _single_claim(
    reply: Any, token: str, queue: str, locked_at: datetime
) -> Claim | BadClaim | None:
    """The claim in a claim script's reply ({id, body} or nil)."""
    if reply is None:
        return None
    raw_id, body = reply
    return _claim_of(_text(raw_id), body, token, queue, locked_at)


def _batch_claims(reply: Any, base: str, queue: str, locked_at: datetime) -> list[Claim | BadClaim]:
    """The claims in a claim_many reply ({id, body, id, body, ...}), each under its
    prefetched token built from `base`."""
    claims: list[Claim | BadClaim] = []
    for raw_id, body in zip(reply[::2], reply[1::2], strict=True):
        job_id = _text(raw_id)
        token = prefetch_token(f"{base}:{job_id}")
        claims.append(_claim_of(job_id, body, token, queue, locked_at))
    return claims


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

    def __init__(
        self,
        client_or_url: redis.Redis | str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        self._client, self._owned = _client_for(client_or_url, retry_budget_s)
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        self._anchor = [self.keys.history()]
        script = functools.partial(_register, self._client, "store_common")
        self._record = script("store_record")
        self._list = script("store_list")
        self._purge = script("store_purge")
        self._prune = script("store_prune")
        self._find = script("store_find")

    def _run(self, script: _Script, *args: object) -> Any:
        argv = [self.keys.base, *args]
        return _retrying(self.retry_budget_s, lambda: script(keys=self._anchor, args=argv))

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
        key = self.keys.store(str(job_id))
        body = _retrying(self.retry_budget_s, lambda: self._client.hget(key, "body"))
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
        counts = _retrying(self.retry_budget_s, lambda: self._client.hgetall(key))
        return {_text(queue): int(n) for queue, n in sorted(counts.items())}

    def _find_args(self, where: HistoryFilter) -> list[object]:
        status = "" if where.status is None else where.status.value
        filters = [where.queue or "", where.job_type or "", where.tenant_id or ""]
        return [status, *filters]

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Records matching `where`, newest first, from the `offset`-th, read from the
        per-status queue, type and tenant indexes (see `redis_store_find.lua`)."""
        if limit <= 0:
            return []
        page = [max(offset, 0), limit, "", HISTORY_FILTER_SCAN, *_STATUS_NAMES]
        bodies = self._run(self._find, *self._find_args(where), *page)
        return [job for job in map(_decoded, bodies) if job is not None]

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where` (index sizes; a walk of at most
        `HISTORY_FILTER_SCAN` entries per status for two or more filters)."""
        page = [0, 0, "1", HISTORY_FILTER_SCAN, *_STATUS_NAMES]
        return int(self._run(self._find, *self._find_args(where), *page))

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute, from the per-minute counters the
        record scripts keep (`{prefix}:finished:<minute>`, each expiring two hours
        after its last count)."""
        start = start.replace(second=0, microsecond=0)
        pipe = self._client.pipeline(transaction=False)
        for n in range(max(minutes, 0)):
            minute = (start + timedelta(minutes=n)).astimezone(UTC).strftime("%Y%m%d%H%M")
            pipe.hmget(f"{self.keys.base}:finished:{minute}", "completed", "failed")
        rows = _retrying(self.retry_budget_s, pipe.execute)
        completed = tuple(int(done or 0) for done, _ in rows)
        failed = tuple(int(dead or 0) for _, dead in rows)
        return FinishedPerMinute(start, completed, failed)

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them (in batches). Returns how many went."""
        if job_id is not None:
            return int(self._run(self._purge, str(job_id), 1))
        total = 0
        while purged := int(self._run(self._purge, "", _PURGE_BATCH)):
            total += purged
        return total

    @staticmethod
    def _prune_rules(order: PruneOrder) -> list[tuple[JobStatus, str, str]]:
        return [
            (status, "" if before is None else str(_us(before)), "" if keep is None else str(keep))
            for status, before, keep in order.rules
            if before is not None or keep is not None
        ]

    def prune(self, order: PruneOrder) -> int:
        """Delete up to `order.limit` records the order lets go, oldest recorded first,
        one script per status (each atomic; see `redis_store_prune.lua`)."""
        left = order.limit
        for status, cutoff, keep in self._prune_rules(order):
            if left <= 0:
                break
            gone, _ = self._run(self._prune, status.value, cutoff, keep, left, "", 0)
            left -= int(gone)
        return order.limit - max(left, 0)

    def count_prunable(self, order: PruneOrder) -> int:
        """How many records `prune` would delete, read in pages of `_PURGE_BATCH`."""
        total = 0
        for status, cutoff, keep in self._prune_rules(order):
            offset, done = 0, 0
            while not done:
                found, done = self._run(
                    self._prune, status.value, cutoff, keep, _PURGE_BATCH, "1", offset
                )
                total += int(found)
                offset += _PURGE_BATCH
        return total

    def close(self) -> None:
        """Close the client if this store made it from a URL."""
        if self._owned:
            self._client.close()


#: Every status a record may hold, for a listing not filtered by status.
_STATUS_NAMES = tuple(status.value for status in JobStatus)


def _decoded(body: bytes | str) -> Job | None:
    match decode(body):
        case Success(job):
            return cast(Job, job)
        case Failure(error):
            log.warning("skipping an undecodable job record: %s", error)
    return None


__all__ = [
    "DEFAULT_RETRY_BUDGET_S",
    "BadClaim",
    "RedisJobQueue",
    "RedisJobStore",
    "RedisKeys",
    "check_server",
    "connect",
]


def _found(reply: Any) -> Job | None:
    """An `enqueue_new` script's answer: None when written, else the job there."""
    if int(reply[0]) == 1:
        return None
    where, body = _text(reply[1]), reply[2]
    job = stored_job(body, "the job's id")
    place = PLACE_NAMES.get(where)
    return job if place is None else found_in_queue(place, job)
