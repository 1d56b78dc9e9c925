"""What every role of the Redis queue shares: the client, the keys, the scripts, and
the one way a script is run (under the retry budget).

`RedisJobQueue` is composed of role classes over this base (`enqueue`, `unique`,
`claims`, `holder`, `cancel`, `reads`), each a handful of the port's methods.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, check_server, client_for, log, retrying
from .limits import RedisLimitedClaim
from .scripts import CLAIM, QUEUE, QUEUE_AND_STORE, Script, register

_T = TypeVar("_T")


class RedisQueueBase:
    """The client (`decode_responses=False`; a URL makes one this queue closes), the
    keys under `prefix`, the registered scripts and the retry budget."""

    def __init__(
        self,
        client_or_url: redis.Redis | str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
    ) -> None:
        self._client, self._owned = client_for(client_or_url, retry_budget_s)
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        # A claim's receipt must outlive every re-send of it; with no retries there is
        # no re-send, and no receipt is written.
        self._receipt_ms = math.ceil(retry_budget_s * 1000) + 1000 if retry_budget_s else 0
        self._anchor = [self.keys.queues()]
        script = functools.partial(register, self._client, QUEUE)
        self._enqueue = script("enqueue")
        self._enqueue_new = script("enqueue_new")
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
        with_store = functools.partial(register, self._client, QUEUE_AND_STORE)
        self._finish = with_store("finish")
        self._finish_many = with_store("finish_many")
        self._revive = with_store("revive")
        self._cancel = with_store("cancel")
        self._finish_cancelled = with_store("finish_cancelled")
        self._limited = RedisLimitedClaim(
            self._run,
            script("limited_index"),
            script("limited_read"),
            claim("limited_take"),
            script("limited_facts"),
        )
        for warning in check_server(self._client):
            log.warning("redis server %s", warning)

    def _run(self, script: Script, *args: object) -> Any:
        """Run `script` with the key base and `args` as ARGV, retried within the budget
        (every script is safe to send twice)."""
        argv = [self.keys.base, *args]
        return retrying(self.retry_budget_s, lambda: script(keys=self._anchor, args=argv))

    def _retrying(self, call: Callable[[], _T]) -> _T:
        """`call()` (a plain command or a pipeline) retried within the budget."""
        return retrying(self.retry_budget_s, call)

    def close(self) -> None:
        """Close the client if this queue made it from a URL."""
        if self._owned:
            self._client.close()
