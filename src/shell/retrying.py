"""The one way a storage call that failed transiently is tried again.

Every adapter and the executor go through `retrying` (or its asyncio twin
`aretrying`): the waits come from the core's `WriteRetryPolicy` (doubling, capped,
jittered where asked, bounded by attempts or a time budget), the caller says which
errors are worth another try, and the last error propagates when the policy gives
up. Keeping this in one place keeps SQL and Redis alike in an outage, and keeps
retries from stacking: a caller that retries must not be called by another that
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from ..core import WriteRetryPolicy, write_retry_delay_s

T = TypeVar("T")

#: Told of each failed try that will be tried again: the error, how many tries have
#: failed so far, and the wait before the next one.
OnRetry = Callable[[Exception, int, float], None]


def _always(_: Exception) -> bool:
    return True


#: A moment (`time.monotonic()`) after which no call is tried again, whatever the
#: policy allows: set by a caller that must answer by then (a wait for a result with a
#: timeout), which the adapters' own retry budgets know nothing of.
_ANSWER_BY: ContextVar[float | None] = ContextVar("conveyor_answer_by", default=None)


@contextlib.contextmanager
def answer_by(deadline: float | None) -> Iterator[None]:
    """Within the block (and the threads it starts with its context), a call that
    fails is not tried again past `deadline` (None: as the policy says)."""
    token = _ANSWER_BY.set(deadline)
    try:
        yield
    finally:
        _ANSWER_BY.reset(token)


#: Set on the error a call gives up with: how long its tries had been failing, so an
#: outage told from it is reckoned from the first failed try, not from the give-up.
FAILING_FOR = "conveyor_failing_for_s"


def failing_for_s(exc: BaseException) -> float:
    """How long the tries of the call that raised `exc` had been failing (0 when it
    was not retried)."""
    value = getattr(exc, FAILING_FOR, 0.0)
    return value if isinstance(value, float) else 0.0


def _given_up(exc: Exception, first_failed: float, now: float) -> None:
    with contextlib.suppress(AttributeError, TypeError):  # an error that takes no attribute
        setattr(exc, FAILING_FOR, max(0.0, now - first_failed))


class Retrier:
    """A policy with the caller's notion of a transient error, ready to wrap calls."""

    def __init__(
        self,
        policy: WriteRetryPolicy,
        *,
        transient: Callable[[Exception], bool] = _always,
        on_retry: OnRetry | None = None,
        jitter: Callable[[], float] = random.random,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.transient = transient
        self.on_retry = on_retry
        self.jitter = jitter
        self.monotonic = monotonic

    def wait_after(self, exc: Exception, failures: int, began: float) -> float | None:
        """Seconds to wait before trying again after `exc`, the `failures`-th failed
        try of a call begun at `began`; None when it must propagate."""
        if not self.transient(exc):
            return None
        now, deadline = self.monotonic(), _ANSWER_BY.get()
        left = None if deadline is None else deadline - now
        wait = write_retry_delay_s(self.policy, failures, now - began, self.jitter(), left)
        if wait is not None and self.on_retry is not None:
            self.on_retry(exc, failures, wait)
        return wait

    def call(self, work: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
        """`work()`, tried again after each transient failure while the policy allows."""
        began = self.monotonic()
        failures, first_failed = 0, began
        while True:
            try:
                return work()
            except Exception as exc:
                failures += 1
                first_failed = self.monotonic() if failures == 1 else first_failed
                wait = self.wait_after(exc, failures, began)
                if wait is None:
                    _given_up(exc, first_failed, self.monotonic())
                    raise
            sleep(wait)

    async def acall(
        self,
        work: Callable[[], Awaitable[T]],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> T:
        """The asyncio twin of `call`: awaits `work()` and waits without blocking."""
        began = self.monotonic()
        failures, first_failed = 0, began
        while True:
            try:
                return await work()
            except Exception as exc:
                failures += 1
                first_failed = self.monotonic() if failures == 1 else first_failed
                wait = self.wait_after(exc, failures, began)
                if wait is None:
                    _given_up(exc, first_failed, self.monotonic())
                    raise
            await sleep(wait)


def retrying(
    work: Callable[[], T],
    policy: WriteRetryPolicy,
    *,
    transient: Callable[[Exception], bool] = _always,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`work()` under `policy`, once; see `Retrier` to wrap many calls alike."""
    return Retrier(policy, transient=transient, on_retry=on_retry).call(work, sleep)
