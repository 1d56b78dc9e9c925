"""The one retry helper: waits from the core's policy, the caller's idea of transient."""

import asyncio

import pytest
from conveyor.core import WriteRetryPolicy
from conveyor.shell.retrying import Retrier, retrying


class Flaky:
    """Fails `times` times with `error`, then answers 42."""

    def __init__(self, times: int, error: Exception) -> None:
        self.left, self.error, self.calls = times, error, 0

    def __call__(self) -> int:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return 42


def test_a_transient_failure_is_tried_again_after_the_policys_doubling_waits() -> None:
    waits: list[float] = []
    flaky = Flaky(3, ConnectionError("down"))
    policy = WriteRetryPolicy(initial_s=0.01, max_attempts=5)
    assert retrying(flaky, policy, sleep=waits.append) == 42
    assert flaky.calls == 4
    assert waits == [0.01, 0.02, 0.04]


def test_an_error_the_caller_calls_permanent_propagates_at_once() -> None:
    waits: list[float] = []
    flaky = Flaky(1, ValueError("bad input"))
    transient = Retrier(WriteRetryPolicy(), transient=lambda e: isinstance(e, ConnectionError))
    with pytest.raises(ValueError, match="bad input"):
        transient.call(flaky, waits.append)
    assert flaky.calls == 1 and waits == []


def test_the_last_error_propagates_when_the_attempts_run_out() -> None:
    flaky = Flaky(10, ConnectionError("still down"))
    with pytest.raises(ConnectionError, match="still down"):
        retrying(flaky, WriteRetryPolicy(initial_s=0.001, max_attempts=3), sleep=lambda _: None)
    assert flaky.calls == 3


def test_each_retry_is_told_with_its_error_count_and_wait() -> None:
    told: list[tuple[str, int, float]] = []
    flaky = Flaky(2, ConnectionError("down"))
    retrier = Retrier(
        WriteRetryPolicy(initial_s=0.5, jitter=True),
        on_retry=lambda exc, n, wait: told.append((str(exc), n, wait)),
        jitter=lambda: 0.0,
    )
    retrier.call(flaky, lambda _: None)
    assert told == [("down", 1, 0.25), ("down", 2, 0.5)], "jitter sample 0 halves each wait"


def test_a_time_budget_ends_the_tries_with_one_at_the_deadline() -> None:
    now = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s

    policy = WriteRetryPolicy(
        initial_s=0.4, max_attempts=None, give_up_after_s=1.0, last_try_at_deadline=True
    )
    flaky = Flaky(10, ConnectionError("down"))
    with pytest.raises(ConnectionError):
        Retrier(policy, monotonic=lambda: now[0]).call(flaky, sleep)
    assert waits == [0.4, pytest.approx(0.6)]
    assert flaky.calls == 3


def test_the_asyncio_twin_retries_alike_without_blocking() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    flaky = Flaky(2, ConnectionError("down"))

    async def work() -> int:
        return flaky()

    retrier = Retrier(WriteRetryPolicy(initial_s=0.01))
    assert asyncio.run(retrier.acall(work, sleep)) == 42
    assert waits == [0.01, 0.02]


def test_a_caller_that_answers_by_a_deadline_stops_the_retries_there() -> None:
    # A result wait with a timeout: the store's budget (a quarter lease) would retry
    # long after the caller has to answer.

    from conveyor.shell.retrying import answer_by

    clock = [100.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        clock[0] += s

    flaky = Flaky(50, ConnectionError("down"))
    budget = Retrier(
        WriteRetryPolicy(initial_s=0.1, max_s=1.0, max_attempts=None, give_up_after_s=15.0),
        monotonic=lambda: clock[0],
    )
    with answer_by(clock[0] + 1.0), pytest.raises(ConnectionError, match="down"):
        budget.call(flaky, sleep)
    assert sum(waits) <= 1.0 and flaky.calls == 4, (waits, flaky.calls)  # 0.1, 0.2, 0.4
    flaky = Flaky(3, ConnectionError("down"))
    assert budget.call(flaky, sleep) == 42, "outside the block, the policy alone"
