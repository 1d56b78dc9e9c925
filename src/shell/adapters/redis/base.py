"""What every role of the Redis queue shares: the client, the keys, the scripts, and
the one way a script is run (under the retry budget).

`RedisJobQueue` is composed of role classes over this base (`enqueue`, `unique`,
`claims`, `holder`, `cancel`, `reads`), each a handful of the port's methods.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from redis.exceptions import NoScriptError

from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, check_server, client_for, log, retrying
from .cluster import Client
from .limits import RedisLimitedClaim
from .replicas import NO_WAIT, ReplicaWait, ReplicaWaiter
from .scripts import CLAIM, QUEUE, QUEUE_AND_STORE, SETTLING, Script, register
from .waits import WaitsInFlight

_T = TypeVar("_T")


class RedisQueueBase:
    """The client (`decode_responses=False`; a URL makes one this queue closes), the
    keys under `prefix`, the registered scripts, the retry budget and the replica
    wait of enqueues and outcome writes."""

    def __init__(
        self,
        client_or_url: Client | str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        self._client, self._owned = client_for(client_or_url, retry_budget_s)
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        # A claim's receipt must outlive every re-send of it; with no retries there is
        # no re-send, and no receipt is written.
        self._receipt_ms = math.ceil(retry_budget_s * 1000) + 1000 if retry_budget_s else 0
        self._anchor = [self.keys.queues()]
        self.replicas = ReplicaWaiter(self._client, self._anchor[0], replica_wait)
        #: The idle waits on the server now (`Claiming.end_waits` ends them).
        self._waits = WaitsInFlight()
        script = functools.partial(register, self._client, QUEUE)
        self._enqueue = script("enqueue")
        self._enqueue_new = register(self._client, (*QUEUE, "unique_lock"), "enqueue_new")
        claim = functools.partial(register, self._client, CLAIM)
        self._claim = claim("claim")
        self._ack = script("ack")
        self._extend = script("extend")
        self._replace = script("replace")
        self._promote = script("promote")
        self._abandoned = script("abandoned")
        self._reclaim = script("reclaim")
        self._counts = script("counts")
        self._claim_many = claim("claim_many")
        self._start = script("start")
        self._request_cancel = script("request_cancel")
        self._revive = register(self._client, (*QUEUE_AND_STORE, "unique_lock"), "revive")
        settling = functools.partial(register, self._client, SETTLING)
        self._finish = settling("finish")
        self._finish_many = settling("finish_many")
        self._cancel = settling("cancel")
        self._finish_cancelled = settling("finish_cancelled")
        self._enqueue_graph = register(self._client, (*SETTLING, "unique_lock"), "enqueue_graph")
        self._dependents_read = settling("dependents_read")
        self._limited = RedisLimitedClaim(
            self._run,
            script("limited_index"),
            script("limited_read"),
            claim("limited_take"),
            script("limited_facts"),
        )
        for warning in check_server(self._client, self._anchor[0]):
            log.warning("redis server %s", warning)

    def _run(self, script: Script, *args: object) -> Any:
        """Run `script` with the key base and `args` as ARGV, retried within the budget
        (every script is safe to send twice)."""
        argv = [self.keys.base, *args]
        return retrying(self.retry_budget_s, lambda: script(keys=self._anchor, args=argv))

    def _write(self, what: str, script: Script, *args: object) -> Any:
        """`_run` for an enqueue or an outcome write: with a replica wait, the script
        and a WAIT behind it go to the master on one connection (see `replicas`)."""
        if not self.replicas.wait.on:
            return self._run(script, *args)
        argv = [self.keys.base, *args]
        return self._retrying(lambda: self._waited(what, [argv], script)[0])

    def _waited(self, what: str, argvs: list[list[object]], script: Script) -> list[Any]:
        """One send of `script` per argv in `argvs`, with the replica wait behind them."""

        def queue(pipe: Any) -> None:
            for argv in argvs:
                script(keys=self._anchor, args=argv, client=pipe)

        return self.replicas.send(queue, what)

    def _pipelined(self, script: Script, argvs: list[list[object]]) -> list[Any]:
        """The replies of one send of `script` per argv, in one pipelined round trip.

        A cluster's pipeline sends EVALSHA alone (a plain client's loads its scripts
        first), and a master that lacks the script (restarted, or a replica promoted
        since it was loaded) answers NOSCRIPT without running it. Then the script is
        loaded (on every master) and the sends from the first refused one on go again:
        every script is safe to send twice, and the batch keeps its order."""
        replies = self._send_pipelined(script, argvs)
        refused = [at for at, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if refused:
            self._client.script_load(cast(Any, script).script)
            first = refused[0]
            replies[first:] = self._send_pipelined(script, argvs[first:])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _send_pipelined(self, script: Script, argvs: list[list[object]]) -> list[Any]:
        with self._client.pipeline(transaction=False) as pipe:
            for argv in argvs:
                script(keys=self._anchor, args=argv, client=pipe)
            return list(pipe.execute(raise_on_error=False))

    def _retrying(self, call: Callable[[], _T]) -> _T:
        """`call()` (a plain command or a pipeline) retried within the budget."""
        return retrying(self.retry_budget_s, call)

    def close(self) -> None:
        """Close the client if this queue made it from a URL."""
        if self._owned:
            self._client.close()
